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
from pyexecutorch.backends.xnnpack.compiled_nodes import MAKERS, Maker, shared
from pyexecutorch.backends.xnnpack.nodes import bounds
from pyexecutorch.backends.xnnpack.nodes_quantized import (
    add_parameters,
    channel_scales,
    lookup_table,
)
from pyexecutorch.backends.xnnpack.quant_arithmetic import qbounds
from pyexecutorch.jit.variants import can_thread, choose
from pyexecutorch.kernels.conv.nhwc import Window
from pyexecutorch.kernels.quantized import compiled_int8_simd as iv
from pyexecutorch.kernels.quantized import compiled_linear as ql
from pyexecutorch.kernels.quantized import compiled_static as qs
from pyexecutorch.runtime.whole_method import Step, view_copy_step

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


def _dynamic_convert(b: StepBuilder, k: int) -> int:
    u = b.graph.nodes[k].xnode_union
    qo = b.value(u.output_id).quant
    if qo is None or qo.kind != "token" or b.value(u.input_id).quant is not None:
        return 0
    if b.value(u.input_id).dtype != _F32 or b.is_external(u.output_id):
        return 0
    readers = b.readers.get(u.output_id, set())
    for r in readers:
        ru = b.graph.nodes[r].xnode_union
        if getattr(ru, "input1_id", None) != u.output_id:
            return 0
        if (
            _dynamic_linear(b, r) is None
            and _dynamic_conv_operands(b, r, b.shape(u.input_id)) is None
        ):
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


def _int8_product(b: StepBuilder, key: Any, q: np.ndarray, work: int) -> tuple[Any, np.ndarray]:
    """(the int8 product's compiled form, the rows it reads) for int8 rows ``q`` (M, K):
    seven a pass on rows flipped once (the first product reading ``key``'s rows adds the
    flip step) where :data:`~.compiled_linear.SEVEN_ROWS` and M >= 7, else four a pass
    on ``q`` as int32 quads."""
    if not ql.SEVEN_ROWS or q.shape[0] < 7:
        return choose(ql.INT8_LINEAR, work), q.view(np.int32)
    flipped = getattr(b, "flipped_rows_of", None)
    if flipped is None:
        flipped = b.flipped_rows_of = {}
    u = flipped.get(key)
    if u is None:
        u = flipped[key] = np.empty_like(q)
        b.add(Step(ql.flip_rows, (q, u)))
    return choose(ql.INT8_LINEAR_FLIPPED, work), u


def _dynamic_fully_connected(b: StepBuilder, k: int) -> int:
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
        packed, block_scales, column = shared(
            b, ("int4", u.filter_id), lambda: ql.pack_int4(linear.w, linear.scales)
        )
        tiles = packed.shape[0]
        bias = shared(b, ("int4 bias", u.filter_id), lambda: ql.padded(linear.bias, tiles * ql.L))
        scratch = ql.int4_scratch(m, inputs, block_scales.shape[1])
        args = (rows.q, q32, rows.zero_points, rows.scales, packed, block_scales, column,
                bias, low, high, o2, scratch, np.zeros(1, np.int64))  # fmt: skip
        function = choose(ql.INT4_LINEAR, m * units * inputs // 4)
    else:
        packed, sums = shared(b, ("int8", u.filter_id), lambda: ql.pack_int8(linear.w))
        tiles = packed.shape[0]
        scales, bias = shared(
            b,
            ("int8 scales", u.filter_id, u.bias_id),
            lambda: (ql.padded(linear.scales, tiles * ql.L), ql.padded(linear.bias, tiles * ql.L)),
        )
        function, a = _int8_product(b, u.input1_id, rows.q, m * units * inputs // 4)
        args = (a, rows.zero_points, rows.scales, packed, sums, scales, bias,
                low, high, o2, np.zeros(1, np.int64))  # fmt: skip
    b.commit(u.output_id, out)
    b.add(Step(function, args))
    return 1


@dataclass
class _DynamicConv:
    """A dense convolution on int8 images quantized per image at run time, float out."""

    u: Any
    w: np.ndarray  # (cout, kh * kw * cin) int8, taps in the filter's (kh, kw, cin) order
    scales: np.ndarray  # (cout,) float32
    bias: np.ndarray | None
    low: float
    high: float


def _dynamic_conv_operands(b: StepBuilder, k: int, shape: tuple[int, ...]) -> _DynamicConv | None:
    """Node ``k`` as a dynamic convolution the compiled product takes (int8 per-channel
    constant weights, one group, float32 bias and output) on images of ``shape`` (its
    Convert's, which asks before the images are written), or None."""
    node = b.graph.nodes[k]
    u = node.xnode_union
    if type(u).__name__ != "XNNConv2d" or (u.groups or 1) != 1:
        return None
    if u.flags & S.FLAG_TENSORFLOW_SAME_PADDING:
        return None
    xq, wq = b.value(u.input1_id).quant, b.value(u.filter_id).quant
    if xq is None or xq.kind != "token" or wq is None or wq.kind not in ("channel", "tensor"):
        return None
    if len(shape) != 4 or _row_split(shape, xq)[0] != shape[0]:
        return None  # (quantized per image only)
    if b.value(u.output_id).dtype != _F32 or b.value(u.output_id).quant is not None:
        return None
    w = b.const(u.filter_id)
    has_bias = u.bias_id != S.INVALID_ID
    bias = b.const(u.bias_id) if has_bias else None
    if w is None or w.ndim != 4 or w.dtype != np.int8 or w.shape[3] != shape[3]:
        return None
    if has_bias and (bias is None or b.value(u.bias_id).quant is not None):
        return None
    cout = w.shape[0]
    scales = np.asarray(wq.scale, _F32).reshape(-1)
    if scales.size == 1:
        scales = np.full(cout, scales[0], _F32)
    fbias = None if bias is None else np.asarray(bias, _F32).reshape(-1)
    if scales.size != cout or (fbias is not None and fbias.size != cout):
        return None
    low, high = bounds(node)
    if math.isnan(low) or math.isnan(high):
        return None
    return _DynamicConv(u, w.reshape(cout, -1), scales, fbias, low, high)


def _dynamic_conv(b: StepBuilder, k: int) -> int:
    """A dynamic convolution as its windows' rows (:func:`~.compiled_linear.dynamic_im2col`)
    times the weights in the dynamic linear's product: the same exact int32 sums and
    epilogue, ``fma(float(acc) * x_scale, w_scale, bias)``, as XNNPACK's x86 kernels."""
    u = b.graph.nodes[k].xnode_union
    images = _rows(b).get(u.input1_id)
    if images is None:
        return 0
    conv = _dynamic_conv_operands(b, k, b.shape(u.input1_id))
    if conv is None:  # (the Convert checked its readers: not reached)
        return 0
    x = b.array(u.input1_id)
    nb, _, _, c = x.shape
    kh, kw = u.kernel_height, u.kernel_width
    sh, sw = u.subsampling_height or 1, u.subsampling_width or 1
    dh, dw = u.dilation_height or 1, u.dilation_width or 1
    oh, ow = _output_size(x.shape, u, kh, kw, sh, sw, dh, dw)
    cout, depth = conv.w.shape
    width = -(-depth // 4) * 4
    rows = nb * oh * ow
    cols = np.empty((rows, width), np.int8)
    row_zps, row_scales = np.empty(rows, np.int32), np.empty(rows, _F32)
    b.add(Step(ql.dynamic_im2col, (x, images.zero_points, images.scales, cols, row_zps,
               row_scales, oh, ow, kh, kw, sh, sw, dh, dw, u.padding_top, u.padding_left)))  # fmt: skip

    def pack() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        full = np.zeros((cout, width), np.int8)
        full[:, :depth] = conv.w
        packed, sums = ql.pack_int8(full)
        size = packed.shape[0] * ql.L
        return packed, sums, ql.padded(conv.scales, size), ql.padded(conv.bias, size)

    packed, sums, scales, bias = shared(b, ("dynamic conv", u.filter_id, u.bias_id), pack)
    out = b.new(u.output_id, (nb, oh, ow, cout))
    function, a = _int8_product(b, ("windows", k), cols, rows * cout * width // 4)
    args = (a, row_zps, row_scales, packed, sums, scales, bias,
            float(conv.low), float(conv.high), out.reshape(rows, cout), np.zeros(1, np.int64))  # fmt: skip
    b.commit(u.output_id, out)
    b.add(Step(function, args))
    return 1


# ------------------------------------------------------------------ static int8


def _tensor_quant(b: StepBuilder, *vids: int) -> bool:
    """Whether every value is int8 quantized per tensor."""
    for v in vids:
        q = b.value(v).quant
        if q is None or q.kind != "tensor" or b.value(v).dtype != np.int8:
            return False
    return True


def _int8_array(b: StepBuilder, vid: int) -> np.ndarray | None:
    a = b.array(vid)
    return a if a.dtype == np.int8 and a.flags.c_contiguous else None


def _requant(b: StepBuilder, node: Any, yq: Any) -> tuple[float, float, float]:
    """(zy, lo - zy, hi - zy) as the kernels take them."""
    lo, hi = qbounds(node, yq)
    zy = yq.zero_point
    return float(zy), float(lo - zy), float(hi - zy)


def _fused_output(b: StepBuilder, k: int) -> tuple[int, tuple[float, float, float], int]:
    """(the value node ``k`` writes, its requantization as :func:`_requant`, nodes taken):
    a clamp that is the only reader of node ``k``'s int8 output, on the same quantization
    (a ReLU/ReLU6 after a convolution), joins its bounds to the node's (two clamps of
    integers are one: exact) and its output becomes the node's; XNNPACK fuses them so."""
    node = b.graph.nodes[k]
    vid = node.xnode_union.output_id
    yq = b.value(vid).quant
    own = _requant(b, node, yq)
    nodes = b.graph.nodes
    if k + 1 >= len(nodes) or b.is_external(vid) or b.readers.get(vid) != {k + 1}:
        return vid, own, 1
    clamp = nodes[k + 1]
    u = clamp.xnode_union
    if type(u).__name__ != "XNNClamp" or u.input_id != vid or not _tensor_quant(b, u.output_id):
        return vid, own, 1
    cq = b.value(u.output_id).quant
    if (cq.scale, cq.zero_point) != (yq.scale, yq.zero_point):
        return vid, own, 1
    zy, lo, hi = own
    clo, chi = qbounds(clamp, cq)
    lo, hi = max(lo, float(clo - cq.zero_point)), min(hi, float(chi - cq.zero_point))
    if lo > hi:  # (disjoint ranges: the clamp's bound alone; left to the two steps)
        return vid, own, 1
    return u.output_id, (zy, lo, hi), 2


# the rows of a static product: int8, or uint8 widened to int16 (compiled_int8_simd.WIDE_ROWS)
_ROWS = np.dtype(np.int16 if iv.WIDE_ROWS else np.int8)


def _rows_step(b: StepBuilder, a: np.ndarray) -> np.ndarray:
    """Rows (M, K) int8 as :func:`~pyexecutorch.kernels.quantized.compiled_static.gemm`
    reads them: sign-flipped, K padded to a multiple of 4 (a step that lays them out)."""
    m, k = a.shape
    rows = np.empty((m, -(-k // 4) * 4), _ROWS)
    if k % 4:
        b.add(Step(qs.im2col, (a.reshape(1, m, 1, k), rows, m, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0)))
    else:
        b.add(_shared_step(qs.flip, qs.FLIP_SHARED, a.size, (a.reshape(-1), rows.reshape(-1))))
    return rows


# Work (multiply-adds, or elements) from which a static int8 step is shared over the threads
# in force: its threads' ranges are the same part of the image in every step, so each
# reads what it wrote (a serial step between two shared ones left its output in one
# core's cache; int8 MobileNetV2 at 2 threads lost 50 us on a 56x56 block's expansion).
_SHARED_MACS = 1 << 16
_SHARED_ELEMENTS = 1 << 14


def _choose(forms: tuple[Any, Any], macs: int) -> Any:
    """The serial or parallel form of a static product of ``macs`` multiply-adds."""
    return forms[1] if macs >= _SHARED_MACS and can_thread() else forms[0]


def _shared_step(serial: Any, shared: Any, elements: int, args: tuple) -> Step:
    """An element step: ``shared(*args, job words)`` from :data:`_SHARED_ELEMENTS`
    elements where numba can thread, else ``serial(*args)``."""
    if elements >= _SHARED_ELEMENTS and can_thread():
        return Step(shared, (*args, qs.job_words()))
    return Step(serial, args)


# (the bases and taps of a product whose rows lie one after another)
_NO_GEOMETRY = np.zeros(0, np.int64)


def _gemm_step(b: StepBuilder, rows: np.ndarray, w: np.ndarray, bias: Any, xq: Any, wq: Any,
               yq: Any, requant: tuple, out: np.ndarray,
               geometry: tuple[np.ndarray, np.ndarray] | None = None) -> None:  # fmt: skip
    """``out (M, N) int8 = requantized(x @ w (N, K).T + bias)``, ``rows`` the inputs ``x``
    laid out by :func:`_rows_step` or ``im2col``, or the padded input of an implicit
    convolution with its ``geometry`` (bases, taps); ``requant`` as :func:`_requant`."""
    m = out.shape[0]
    units, k = w.shape
    packed, folded = qs.pack_weights(w, bias, xq.zero_point)
    scales = qs.padded(channel_scales(xq, wq, yq, units), folded.size, np.float32)
    args = (rows.reshape(-1), packed, folded, scales, *requant, out, qs.job_words(),
            *(geometry or (_NO_GEOMETRY, _NO_GEOMETRY)))  # fmt: skip
    b.add(Step(_choose(qs.GEMM, m * units * k), args))


def _static_fully_connected(b: StepBuilder, k: int) -> int:
    node = b.graph.nodes[k]
    u = node.xnode_union
    if not _tensor_quant(b, u.input1_id, u.output_id):
        return 0
    wq = b.value(u.filter_id).quant
    w = b.const(u.filter_id)
    has_bias = u.bias_id != S.INVALID_ID
    bias = b.const(u.bias_id) if has_bias else None
    if wq is None or wq.kind not in ("channel", "tensor") or w is None or w.ndim != 2:
        return 0
    if has_bias and (bias is None or bias.dtype != np.int32):
        return 0
    if u.flags & S.FLAG_TRANSPOSE_WEIGHTS:
        w = w.T
    x = _int8_array(b, u.input1_id)
    if x is None or w.dtype != np.int8:
        return 0
    units, inputs = w.shape
    xs = b.shape(u.input1_id)
    vid, requant, taken = _fused_output(b, k)
    out = b.new(vid, xs[:-1] + (units,))
    m = x.size // inputs
    xq, yq = b.value(u.input1_id).quant, b.value(u.output_id).quant
    b.commit(vid, out)
    rows = _rows_step(b, x.reshape(m, inputs))
    _gemm_step(b, rows, w, bias, xq, wq, yq, requant, out.reshape(m, units))
    return taken


def _output_size(
    shape: tuple[int, ...], u: Any, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int
) -> tuple[int, int]:
    """(oh, ow) of node ``u``'s window over an NHWC input of ``shape`` (its padding)."""
    pads = (u.padding_top, u.padding_right, u.padding_bottom, u.padding_left)
    win = Window(*shape, pads, kh, kw, sh, sw, dh, dw)
    return win.oh, win.ow


def _conv_operands(b: StepBuilder, k: int) -> tuple[Any, bool, Any, Any, Any] | None:
    """(its union, whether depthwise, weights' quantization, weights, bias) of convolution
    node ``k`` where the static kernels take it as far as its operands tell, else None."""
    u = b.graph.nodes[k].xnode_union
    depthwise = type(u).__name__ == "XNNDepthwiseConv2d"
    if not _tensor_quant(b, u.input1_id, u.output_id) or u.flags & S.FLAG_TENSORFLOW_SAME_PADDING:
        return None
    wq = b.value(u.filter_id).quant
    w = b.const(u.filter_id)
    has_bias = u.bias_id != S.INVALID_ID
    bias = b.const(u.bias_id) if has_bias else None
    if wq is None or wq.kind not in ("channel", "tensor") or w is None or w.dtype != np.int8:
        return None
    if has_bias and (bias is None or bias.dtype != np.int32):
        return None
    if not depthwise and (u.groups or 1) != 1:
        return None  # (grouped convolutions: numpy's)
    return u, depthwise, wq, w, bias


def _pointwise(u: Any) -> bool:
    """Whether convolution ``u`` is 1x1, stride 1, unpadded: it reads its input as rows."""
    pads = (u.padding_top, u.padding_left, u.padding_bottom, u.padding_right)
    one = u.kernel_height == u.kernel_width == 1
    return one and (u.subsampling_height or 1) == (u.subsampling_width or 1) == 1 and not any(pads)


def _flipped(b: StepBuilder) -> set[int]:
    """Values whose int8 array holds each byte sign-flipped (the rows a product reads)."""
    found = getattr(b, "flipped_rows", None)
    if found is None:
        found = b.flipped_rows = set()
    return found


def _stores_flipped(b: StepBuilder, vid: int, channels: int) -> bool:
    """Whether the convolution writing ``vid`` should store it sign-flipped: its one reader
    is a pointwise product that takes it as rows (the bytes the rows' flip would write;
    a MobileNet block's depthwise output, its projection's input, then needs no flip)."""
    if iv.WIDE_ROWS or channels % 4 or b.is_external(vid):
        return False  # (uint16 rows; rows of padded quads)
    readers = b.readers.get(vid, set())
    if len(readers) != 1:
        return False
    (r,) = readers
    if type(b.graph.nodes[r].xnode_union).__name__ != "XNNConv2d":
        return False
    found = _conv_operands(b, r)
    return found is not None and found[0].input1_id == vid and _pointwise(found[0])


def _static_conv(b: StepBuilder, k: int) -> int:
    found = _conv_operands(b, k)
    if found is None:
        return 0
    u, depthwise, wq, w, bias = found
    x = _int8_array(b, u.input1_id)
    if x is None or x.ndim != 4:
        return 0
    nb, h, wd, c = x.shape
    kh, kw = u.kernel_height, u.kernel_width
    sh, sw = u.subsampling_height or 1, u.subsampling_width or 1
    dh, dw = u.dilation_height or 1, u.dilation_width or 1
    pt, pl = u.padding_top, u.padding_left
    oh, ow = _output_size(x.shape, u, kh, kw, sh, sw, dh, dw)
    cout = w.shape[3] if depthwise else w.shape[0]
    xq, yq = b.value(u.input1_id).quant, b.value(u.output_id).quant
    if depthwise and cout != c:
        return 0  # (a depth multiplier: numpy's)
    vid, requant, taken = _fused_output(b, k)
    if _stores_flipped(b, vid, cout):  # (zy + 128: each byte stored is the value's, flipped)
        requant = (requant[0] + 128, *requant[1:])
        _flipped(b).add(vid)
    out = b.new(vid, (nb, oh, ow, cout))
    b.commit(vid, out)
    if depthwise and qs.QUADS and c % qs.Q == 0:  # (channels in whole quads' blocks)
        scales = channel_scales(xq, wq, yq, c).astype(np.float32)
        packed = qs.pack_depthwise_quads(w.reshape(kh * kw, c), bias, scales, xq.zero_point)
        args = (x, *packed, *requant, out, kh, kw, sh, sw, dh, dw, pt, pl, qs.job_words())
        b.add(Step(_choose(qs.DEPTHWISE_QUADS, out.size * kh * kw), args))
        return taken
    if depthwise:
        width = -(-c // qs.L) * qs.L
        taps = np.zeros((kh * kw, width), np.int32)
        taps[:, :c] = w.reshape(kh * kw, c)
        bias32 = qs.padded(np.zeros(c, np.int32) if bias is None else bias, width, np.int32)
        scales = qs.padded(channel_scales(xq, wq, yq, c), width, np.float32)
        args = (x, taps, bias32, scales, -xq.zero_point, *requant, out,
                kh, kw, sh, sw, dh, dw, pt, pl, qs.job_words())  # fmt: skip
        b.add(Step(_choose(qs.DEPTHWISE, out.size * kh * kw), args))
        return taken
    rows = nb * oh * ow
    depth = kh * kw * c
    pads = (pt, pl, u.padding_bottom, u.padding_right)
    geometry, wmat = None, w.reshape(cout, depth)
    if _pointwise(u) and u.input1_id in _flipped(b):
        a = x.reshape(rows, c)  # (stored flipped by the convolution before)
    elif _pointwise(u) and u.input1_id in _flipped_copies(b):
        a = _flipped_copies(b)[u.input1_id].reshape(rows, c)  # (the addition's copy)
    elif _pointwise(u):
        a = _rows_step(b, x.reshape(rows, c))  # (a 1x1 convolution reads its input as rows)
    elif (implicit := qs.conv_geometry(x.shape, oh, ow, kh, kw, sh, sw, dh, dw, pads)) is not None:
        shape, bases, taps, span = implicit  # (the product reads the padded input in place)
        a = qs.padded_input(shape, xq.zero_point, _ROWS)
        b.add(
            _shared_step(
                qs.pad_flip, qs.PAD_FLIP_SHARED, x.size, (x, a, shape[1], shape[2], pt, pl)
            )
        )
        geometry, wmat = (bases, taps), qs.implicit_weights(w, span)
    else:
        a = np.empty((rows, -(-depth // 4) * 4), _ROWS)
        b.add(Step(qs.im2col, (x, a, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, xq.zero_point)))
    _gemm_step(b, a, wmat, bias, xq, wq, yq, requant, out.reshape(rows, cout), geometry)
    return taken


def _static_add(b: StepBuilder, k: int, sign: int = 1) -> int:
    node = b.graph.nodes[k]
    u = node.xnode_union
    if not _tensor_quant(b, u.input1_id, u.input2_id, u.output_id):
        return 0
    if b.shape(u.input1_id) != b.shape(u.input2_id):
        return 0  # (broadcasting: numpy's)
    x, y = _int8_array(b, u.input1_id), _int8_array(b, u.input2_id)
    if x is None or y is None:
        return 0
    q = [b.value(v).quant for v in (u.input1_id, u.input2_id, u.output_id)]
    am, bm, bias, shift = add_parameters(b.where, *q, sign)
    vid, (zy, lo, hi), taken = _fused_output(b, k)
    out = b.new(vid, x.shape)
    b.commit(vid, out)
    parameters = (am, bm, bias, shift, q[2].zero_point, int(lo + zy), int(hi + zy))
    if _rows_reader(b, vid, x.shape[-1]):  # (the rows of a 1x1 convolution written too)
        rows = _flipped_copies(b)[vid] = np.empty(out.shape, np.int8)
        flat = (x.reshape(-1), y.reshape(-1), out.reshape(-1), rows.reshape(-1))
        b.add(_shared_step(qs.add_flip, qs.ADD_FLIP_SHARED, out.size, (*flat, *parameters)))
        return taken
    args = (x.reshape(-1), y.reshape(-1), out.reshape(-1), *parameters)
    b.add(_shared_step(qs.add, qs.ADD_SHARED, out.size, args))
    return taken


def _flipped_copies(b: StepBuilder) -> dict[int, np.ndarray]:
    """Values an addition also wrote sign-flipped (by value id): a 1x1 convolution's rows."""
    found = getattr(b, "flipped_copies", None)
    if found is None:
        found = b.flipped_copies = {}
    return found


def _rows_reader(b: StepBuilder, vid: int, channels: int) -> bool:
    """Whether a reader of ``vid`` is a pointwise product taking it as rows that it would
    flip in a step of its own (int8 rows, whole quads of channels)."""
    if iv.WIDE_ROWS or channels % 4:
        return False
    for r in b.readers.get(vid, set()):
        if type(b.graph.nodes[r].xnode_union).__name__ != "XNNConv2d":
            continue
        found = _conv_operands(b, r)
        if found is not None and found[0].input1_id == vid and _pointwise(found[0]):
            return True
    return False


def _static_max_pool(b: StepBuilder, k: int) -> int:
    node = b.graph.nodes[k]
    u = node.xnode_union
    if not _tensor_quant(b, u.input_id, u.output_id) or u.flags & S.FLAG_TENSORFLOW_SAME_PADDING:
        return 0
    x = _int8_array(b, u.input_id)
    if x is None or x.ndim != 4:
        return 0
    nb, h, w, c = x.shape
    kh, kw = u.pooling_height, u.pooling_width
    sh, sw = u.stride_height or 1, u.stride_width or 1
    dh, dw = u.dilation_height or 1, u.dilation_width or 1
    pt, pl = u.padding_top, u.padding_left
    oh, ow = _output_size(x.shape, u, kh, kw, sh, sw, dh, dw)
    lo, hi = qbounds(node, b.value(u.output_id).quant)
    out = b.new(u.output_id, (nb, oh, ow, c))
    b.commit(u.output_id, out)
    b.add(Step(qs.max_pool, (x, out, kh, kw, sh, sw, dh, dw, pt, pl, lo, hi)))
    return 1


def _static_global_avg_pool(b: StepBuilder, k: int) -> int:
    node = b.graph.nodes[k]
    u = node.xnode_union
    if not _tensor_quant(b, u.input_id, u.output_id):
        return 0
    x = _int8_array(b, u.input_id)
    if x is None or x.ndim != 4:
        return 0
    nb, h, w, c = x.shape
    xq, yq = b.value(u.input_id).quant, b.value(u.output_id).quant
    declared = b.value(u.output_id).dims
    keep = bool(u.flags & S.FLAG_KEEP_DIMS) or len(declared) == 4
    out = b.new(u.output_id, (nb, 1, 1, c) if keep else (nb, c))
    b.commit(u.output_id, out)
    area = h * w
    scale = np.float32(xq.scale) / (np.float32(yq.scale) * np.float32(area))
    lo, hi = qbounds(node, yq)
    args = (x.reshape(nb, area, c), out.reshape(nb, c), np.zeros(c, np.int64),
            area * xq.zero_point, scale, yq.zero_point, lo, hi)  # fmt: skip
    b.add(Step(qs.mean_hw, args))
    return 1


def _same_quantization(b: StepBuilder, a: int, c: int) -> bool:
    """Whether int8 values ``a`` and ``c`` are quantized per tensor alike: moving the
    bytes moves the values (as the numpy builders of data movement do)."""
    if not _tensor_quant(b, a, c):
        return False
    qa, qc = b.value(a).quant, b.value(c).quant
    return (qa.scale, qa.zero_point) == (qc.scale, qc.zero_point)


def _transposed_to_nhwc(b: StepBuilder, k: int) -> int | None:
    """The output of an NCHW-to-NHWC transpose at ``k + 1`` that alone reads the output of
    Convert ``k`` (on its quantization), or None."""
    vid = b.graph.nodes[k].xnode_union.output_id
    if k + 1 >= len(b.graph.nodes) or b.is_external(vid) or b.readers.get(vid) != {k + 1}:
        return None
    u = b.graph.nodes[k + 1].xnode_union
    if type(u).__name__ != "XNNStaticTranspose" or u.input_id != vid:
        return None
    if tuple(u.perm) != (0, 2, 3, 1) or not _same_quantization(b, vid, u.output_id):
        return None
    return u.output_id


def _static_transpose(b: StepBuilder, k: int) -> int:
    """A transpose of int8 values on one quantization: their bytes moved, by a compiled
    copy (or none, where the transposed view is C-contiguous)."""
    u = b.graph.nodes[k].xnode_union
    if not _same_quantization(b, u.input_id, u.output_id):
        return 0
    view = b.array(u.input_id).transpose(tuple(int(p) for p in u.perm))
    if view.flags.c_contiguous:
        b.commit(u.output_id, view)
        return 1
    out = b.new(u.output_id, view.shape)
    step = view_copy_step(view, out)
    if step is None:
        return 0
    b.commit(u.output_id, out)
    b.add(step)
    return 1


def _static_convert(b: StepBuilder, k: int) -> int:
    u = b.graph.nodes[k].xnode_union
    qi, qo = b.value(u.input_id).quant, b.value(u.output_id).quant
    x = b.array(u.input_id)
    if not x.flags.c_contiguous:
        return 0
    if qi is None and _tensor_quant(b, u.output_id) and x.dtype == _F32:
        moved = _transposed_to_nhwc(b, k) if x.ndim == 4 else None
        if moved is not None:  # (quantized straight into the transpose's NHWC output)
            out = b.new(moved, tuple(x.shape[p] for p in (0, 2, 3, 1)))
            b.commit(moved, out)
            inv = np.float32(1.0) / np.float32(qo.scale)
            b.add(
                _shared_step(
                    qs.quantize_to_nhwc,
                    qs.QUANTIZE_TO_NHWC_SHARED,
                    x.size,
                    (x, out, inv, qo.zero_point),
                )
            )
            return 2
        out = b.new(u.output_id, x.shape)
        inv = np.float32(1.0) / np.float32(qo.scale)
        args = (x.reshape(-1), out.reshape(-1), inv, qo.zero_point)
        function = qs.quantize
    elif qo is None and _tensor_quant(b, u.input_id) and b.value(u.output_id).dtype == _F32:
        out = b.new(u.output_id, x.shape)
        args = (x.reshape(-1), out.reshape(-1), np.float32(qi.scale), qi.zero_point)
        function = qs.dequantize
    else:
        return 0
    b.commit(u.output_id, out)
    b.add(Step(function, args))
    return 1


def _static_clamp(b: StepBuilder, k: int) -> int:
    """A clamp of int8 values: bounds in the output's domain, or across differing
    parameters the numpy builder's table of the 256 codes."""
    node = b.graph.nodes[k]
    u = node.xnode_union
    if not _tensor_quant(b, u.input_id, u.output_id):
        return 0
    x = _int8_array(b, u.input_id)
    if x is None:
        return 0
    qi, qo = b.value(u.input_id).quant, b.value(u.output_id).quant
    out = b.new(u.output_id, x.shape)
    b.commit(u.output_id, out)
    if (qi.scale, qi.zero_point) == (qo.scale, qo.zero_point):
        lo, hi = qbounds(node, qo)
        b.add(Step(qs.clamp, (x.reshape(-1), out.reshape(-1), lo, hi)))
    else:
        flo, fhi = (np.float32(v) for v in bounds(node))
        table = lookup_table(qi, qo, lambda v: np.clip(v, flo, fhi))
        # (indexed by the code + 128: the numpy builder's table is indexed by its byte)
        ordered = np.concatenate([table[128:], table[:128]])
        b.add(Step(qs.lookup, (x.reshape(-1), out.reshape(-1), ordered)))
    return 1


def _first(*makers: Maker) -> Maker:
    def make(b: StepBuilder, k: int) -> int:
        for m in makers:
            taken = m(b, k)
            if taken:
                return taken
        return 0

    return make


_in_front_of("XNNConvert", _first(_dynamic_convert, _static_convert))
_in_front_of("XNNFullyConnected", _first(_dynamic_fully_connected, _static_fully_connected))
_in_front_of("XNNConv2d", _first(_dynamic_conv, _static_conv))
_in_front_of("XNNDepthwiseConv2d", _static_conv)
_in_front_of("XNNAdd", _static_add)
_in_front_of("XNNSubtract", lambda b, k: _static_add(b, k, -1))
_in_front_of("XNNMaxPooling2d", _static_max_pool)
_in_front_of("XNNClamp", _static_clamp)
_in_front_of("XNNGlobalAvgPooling2d", _static_global_avg_pool)
_in_front_of("XNNStaticTranspose", _static_transpose)
