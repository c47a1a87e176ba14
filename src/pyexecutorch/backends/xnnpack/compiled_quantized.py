"""Quantized XNNPACK nodes as compiled steps (the compiled tier).

Each maker here goes in front of the float maker of its node type
(:data:`~pyexecutorch.backends.xnnpack.compiled_nodes.MAKERS`) and takes the node when
its operands are quantized and a compiled kernel computes it; otherwise the node goes
on to the float maker, which declines quantized values, and then to its numpy builder
(:mod:`.nodes_quantized`).

* A ``Convert`` of float rows into dynamically quantized int8 (``qdint8``) whose
  every reader is a fully connected layer taken here: :func:`quantize_rows`, the
  rows' zero points and scales kept for the readers (numpy's readers would look for
  the numpy ``DynamicRows`` instead: hence all or none).
* A fully connected layer on such rows, against constant int8 per-channel or 4-bit
  blockwise weights: :mod:`pyexecutorch.kernels.quantized.compiled_linear`, weights
  packed at load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack.compiled_nodes import MAKERS, Maker
from pyexecutorch.backends.xnnpack.nodes import bounds
from pyexecutorch.kernels.quantized import compiled_linear as ql
from pyexecutorch.runtime.compiled import choose
from pyexecutorch.runtime.whole_method import Step

if TYPE_CHECKING:
    from pyexecutorch.backends.xnnpack.compiled import StepBuilder

_F32 = np.dtype(np.float32)


@dataclass
class Rows:
    """Rows quantized at run time by a compiled Convert: their int8 values and parameters."""

    q: np.ndarray  # (rows, row) int8
    zero_points: np.ndarray  # (rows,) int32
    scales: np.ndarray  # (rows,) float32


def _rows(b: StepBuilder) -> dict[int, Rows]:
    found = getattr(b, "compiled_rows", None)
    if found is None:
        found = b.compiled_rows = {}
    return found


def _in_front_of(name: str, quantized: Maker) -> None:
    fallback = MAKERS.get(name)

    def make(b: StepBuilder, k: int) -> int:
        taken = quantized(b, k)
        if taken or fallback is None:
            return taken
        return fallback(b, k)

    MAKERS[name] = make


# ------------------------------------------------------------------ dynamic linears


def _row_split(shape: tuple[int, ...], q: Any) -> tuple[int, int]:
    """(rows, row) of a value quantized per token (as the numpy Convert splits it)."""
    row = math.prod(shape[len(shape) - q.channel_dim :]) if q.channel_dim else shape[-1]
    return math.prod(shape) // max(row, 1), row


@dataclass
class _Linear:
    """A dynamic fully connected layer the compiled kernels take: its weights and options."""

    kind: str  # "int8" or "int4"
    w: np.ndarray  # (units, k) int8
    scales: np.ndarray  # (units,) or (units, blocks) float32
    bias: np.ndarray | None
    low: float
    high: float


def _dynamic_linear(b: StepBuilder, k: int) -> _Linear | None:
    """Node ``k`` as a dynamic linear the kernels take, or None."""
    node = b.graph.nodes[k]
    u = node.xnode_union
    if type(u).__name__ != "XNNFullyConnected":
        return None
    xq, wq = b.value(u.input1_id).quant, b.value(u.filter_id).quant
    if xq is None or xq.kind != "token" or wq is None or b.value(u.output_id).dtype != _F32:
        return None
    if b.value(u.output_id).quant is not None:
        return None
    w = b.const(u.filter_id)
    has_bias = u.bias_id != S.INVALID_ID
    bias = b.const(u.bias_id) if has_bias else None
    if w is None or w.ndim != 2 or (has_bias and (bias is None or b.value(u.bias_id).quant)):
        return None
    if u.flags & S.FLAG_TRANSPOSE_WEIGHTS:
        w = w.T
    units, inputs = w.shape
    low, high = bounds(node)
    if math.isnan(low) or math.isnan(high):
        return None
    fbias = None if bias is None else np.asarray(bias, _F32).reshape(-1)
    if fbias is not None and fbias.size != units:
        return None
    if wq.kind == "group":
        blocks = wq.scale.shape[1]
        if w.min(initial=0) < -8 or w.max(initial=0) > 7 or inputs % blocks:
            return None
        if (inputs // blocks) % 8:
            return None
        return _Linear("int4", w, np.asarray(wq.scale, _F32), fbias, low, high)
    if wq.kind in ("channel", "tensor") and inputs % 4 == 0:
        s = np.asarray(wq.scale, _F32).reshape(-1)
        if s.size == 1:
            s = np.full(units, s[0], _F32)
        if s.size != units:
            return None
        return _Linear("int8", w, s, fbias, low, high)
    return None


def _convert(b: StepBuilder, k: int) -> int:
    u = b.graph.nodes[k].xnode_union
    qo = b.value(u.output_id).quant
    if qo is None or qo.kind != "token" or b.value(u.input_id).quant is not None:
        return 0
    if b.value(u.input_id).dtype != _F32 or b.is_external(u.output_id):
        return 0
    readers = b.readers.get(u.output_id, set())
    for r in readers:
        ru = b.graph.nodes[r].xnode_union
        if getattr(ru, "input1_id", None) != u.output_id or _dynamic_linear(b, r) is None:
            return 0
    shape = b.shape(u.input_id)
    rows, row = _row_split(shape, qo)
    x = b.array(u.input_id)
    if not x.flags.c_contiguous or rows * row != x.size:
        return 0
    q = b.new(u.output_id, shape)
    found = Rows(q.reshape(rows, row), np.zeros(rows, np.int32), np.ones(rows, _F32))
    b.commit(u.output_id, q)
    _rows(b)[u.output_id] = found
    b.add(Step(ql.quantize_rows, (x.reshape(rows, row), found.q, found.zero_points, found.scales)))
    return 1


def _fully_connected(b: StepBuilder, k: int) -> int:
    u = b.graph.nodes[k].xnode_union
    rows = _rows(b).get(u.input1_id)
    if rows is None:
        return 0
    linear = _dynamic_linear(b, k)
    if linear is None:  # (the Convert checked its readers: not reached)
        return 0
    m, inputs = rows.q.shape
    units = linear.w.shape[0]
    if linear.w.shape[1] != inputs:
        return 0
    xs = b.shape(u.input1_id)
    out = b.new(u.output_id, xs[:-1] + (units,))
    o2 = out.reshape(m, units)
    q32 = rows.q.view(np.int32)
    low, high = float(linear.low), float(linear.high)
    if linear.kind == "int4":
        packed, block_scales, column = ql.pack_int4(linear.w, linear.scales)
        tiles = packed.shape[0]
        bias = ql.padded(linear.bias, tiles * ql.L)
        scratch = np.empty((m, block_scales.shape[1]), np.int32)
        args = (rows.q, q32, rows.zero_points, rows.scales, packed, block_scales, column,
                bias, low, high, o2, scratch)  # fmt: skip
        function = choose(ql.INT4_LINEAR, m * units * inputs // 4)
    else:
        packed, sums = ql.pack_int8(linear.w)
        tiles = packed.shape[0]
        args = (q32, rows.zero_points, rows.scales, packed, sums,
                ql.padded(linear.scales, tiles * ql.L), ql.padded(linear.bias, tiles * ql.L),
                low, high, o2)  # fmt: skip
        function = choose(ql.INT8_LINEAR, m * units * inputs // 4)
    b.commit(u.output_id, out)
    b.add(Step(function, args))
    return 1


_in_front_of("XNNConvert", _convert)
_in_front_of("XNNFullyConnected", _fully_connected)
