"""The node types of an XNNPACK graph as compiled steps (the compiled tier).

A maker reads the node at index ``k`` of the graph (and, where it fuses, the nodes
after it) from a :class:`~pyexecutorch.backends.xnnpack.compiled.StepBuilder`, makes
its output arrays and adds :class:`~pyexecutorch.runtime.whole_method.Step` calls on
them, and returns how many nodes it consumed; 0 declines the node, which then runs on
its numpy builder (:mod:`.nodes`) over the same arrays. Makers run after the numpy
plan of the same shapes was built, which checked the graph: they only decline what
they do not compute (other dtypes, quantized values, options without a kernel).

What each node type becomes:

* elementwise nodes (binary with broadcasting, unary, clamp): runs of consecutive ones
  of one output shape become one generated loop from the scalar formulas
  (:data:`pyexecutorch.kernels.elementwise.formulas.FORMULAS`), a member's result kept
  in a register when only later members read it, each fused output clamp applied in
  the loop; broadcast dimensions are merged so that a loop is as flat as its operands
  allow;
* convolutions (dense and depthwise) on the channels-last kernels
  (:func:`pyexecutorch.kernels.conv.compiled_nhwc.channels_last_conv_step`), filters
  repacked OIHW at load; an addition of another tensor right after a convolution that
  only it reads becomes the kernel's residual (its clamp the kernel's); a transpose of
  an NCHW value into NHWC that only convolutions read is no copy (the kernels read NCHW);
* max and average pooling, the global average pool: :mod:`pyexecutorch.kernels.pool.compiled_nhwc`;
* fully connected layers and batched products: the linalg compiled forms' whole-method
  steps (a loop or numpy's BLAS; the bias added in the same call); a fully connected
  layer on one row (a decoded token) the one-row kernel, in XNNPACK's order of sums
  (:mod:`pyexecutorch.kernels.linalg.compiled_one_row`);
* softmax: the reduce family's compiled form;
* transposes, slices, concatenations, constant pads: compiled copies, or no step at all
  where the result is a view of the input's memory in its own order (a reshape, a
  transpose moving dimensions of size 1, a leading slice).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack.nodes import bounds
from pyexecutorch.kernels.elementwise.formulas import FORMULAS
from pyexecutorch.runtime.whole_method import Step, view_copy_step

if TYPE_CHECKING:
    from pyexecutorch.backends.xnnpack.compiled import StepBuilder

F32 = np.dtype(np.float32)
_INF = math.inf

Maker = Callable[["StepBuilder", int], int]
MAKERS: dict[str, Maker] = {}


def maker(*names: str) -> Callable[[Maker], Maker]:
    def register(fn: Maker) -> Maker:
        for name in names:
            MAKERS[name] = fn
        return fn

    return register


def _float32(b: StepBuilder, *vids: int) -> bool:
    """Whether every value is a plain (not quantized) float32 tensor."""
    for v in vids:
        value = b.value(v)
        if value.dtype != F32 or value.quant is not None:
            return False
    return True


def movable(b: StepBuilder, *vids: int) -> bool:
    """Whether compiled copies can move these values: not quantized (their numpy builders
    apply zero points), not float16 (which numba does not type)."""
    for v in vids:
        value = b.value(v)
        if value.quant is not None or value.dtype == np.float16:
            return False
    return True


def _view(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``a`` reshaped as a view (what a step binds must be the value's memory), or None."""
    return a.reshape(shape) if a.flags.c_contiguous else None


def _step(pair: Any) -> Step | None:
    """A kernel's ``(function, args)`` (or a compiled form's ``.step``) as a Step."""
    if pair is None:
        return None
    function, args = pair
    return Step(function, tuple(args))


def _literal(value: float) -> str:
    if math.isinf(value):
        return "T(math.inf)" if value > 0 else "T(-math.inf)"
    return f"T({float(value)!r})"


def clamp_expression(expr: str, low: float, high: float) -> str:
    """``expr`` clamped to [low, high] as numpy's maximum/minimum clamp (NaN kept)."""
    if low != -_INF:
        expr = f"np.maximum({expr}, {_literal(low)})"
    if high != _INF:
        expr = f"np.minimum({expr}, {_literal(high)})"
    return expr


# ------------------------------------------------------------------ elementwise


def _formula(name: str, constants: dict[int, Any] | None = None) -> str:
    expr = FORMULAS[name].expression(constants or {})
    assert expr is not None, name
    return expr


# Each node type's element formula over its operands {0} (and {1}), in the loop's dtype,
# computing what its numpy builder computes (``nodes._BINARY`` / ``nodes._UNARY``).
_BINARY: dict[str, str] = {
    "XNNAdd": _formula("aten::add.out", {2: 1}),
    "XNNSubtract": _formula("aten::sub.out", {2: 1}),
    "XNNMultiply": _formula("aten::mul.out"),
    "XNNDiv": _formula("aten::div.out"),
    "XNNMinimum": _formula("aten::minimum.out"),
    "XNNMaximum": _formula("aten::maximum.out"),
    # min(x, 0) * slope + max(x, 0), the numpy builder's order
    "XNNPReLU": "T(np.maximum({0}, T(0)) + T(np.minimum({0}, T(0)) * {1}))",
}
_UNARY: dict[str, str] = {
    # XNNPACK's own float32 approximations, as the numpy builders compute them (exact_math)
    "XNNSigmoid": "XSIGMOID({0})",
    "XNNTanh": _formula("aten::tanh.out"),
    "XNNGelu": _formula("aten::gelu.out", {1: "none"}),
    "XNNFloor": _formula("aten::floor.out"),
    "XNNCeiling": _formula("aten::ceil.out"),
    "XNNSquareRoot": _formula("aten::sqrt.out"),
    "XNNReciprocalSquareRoot": "XRSQRT({0})",
    "XNNSquare": "{0} * {0}",
    "XNNNegate": _formula("aten::neg.out"),
    "XNNAbs": _formula("aten::abs.out"),
    "XNNExp": _formula("aten::exp.out"),
    "XNNLog": _formula("aten::log.out"),
    "XNNSin": "XSIN({0})",
    "XNNCos": "XCOS({0})",
    # (x + 3) clipped to [0, 6], times x, times 1/6, each rounded as numpy rounds it
    "XNNHardswish": "T(T(np.minimum(np.maximum(T({0} + T(3.0)), T(0.0)), T(6.0)) * {0}) "
    "* T(1.0 / 6.0))",
    "XNNClamp": "{0}",  # the bounds: see _elementwise
}


def _unary_expression(u: Any) -> str | None:
    name = type(u).__name__
    if name == "XNNELU":
        return _formula("aten::elu.out", {1: float(u.alpha), 2: 1.0, 3: 1.0})
    if name == "XNNLeakyReLU":
        slope = float(u.negative_slope)
        return _formula("aten::leaky_relu.out").replace("{1}", _literal(slope))
    return _UNARY.get(name)


class Elementwise:
    """One elementwise node: its operands, output and formula (with its clamp)."""

    def __init__(self, operands: tuple[int, ...], output: int, expression: str) -> None:
        self.operands = operands
        self.output = output
        self.expression = expression


def elementwise(b: StepBuilder, k: int) -> Elementwise | None:
    """Node ``k`` as an :class:`Elementwise`, or None when it is not one (on float32)."""
    node = b.graph.nodes[k]
    u = node.xnode_union
    name = type(u).__name__
    if name in _BINARY:
        operands, expr = (u.input1_id, u.input2_id), _BINARY[name]
    else:
        expr = _unary_expression(u)
        if expr is None:
            return None
        operands = (u.input_id,)
    if not _float32(b, *operands, u.output_id):
        return None
    low, high = bounds(node)
    if math.isnan(low) or math.isnan(high):
        return None
    return Elementwise(operands, u.output_id, clamp_expression(f"T({expr})", low, high))


def _merged_dims(
    shape: tuple[int, ...], operand_shapes: list[tuple[int, ...]]
) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The loop's shape and each operand's shape with the output's dimensions of size 1
    dropped and neighbours merged where every operand broadcasts both or neither."""
    rank = len(shape)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in operand_shapes]
    kept = [d for d in range(rank) if shape[d] != 1]
    groups: list[list[int]] = []
    for d in kept:
        pattern = [p[d] == 1 for p in padded]
        if groups and [p[groups[-1][-1]] == 1 for p in padded] == pattern:
            groups[-1].append(d)
        else:
            groups.append([d])
    if not groups:
        return (1,), [(1,) for _ in operand_shapes]
    loop = tuple(math.prod(shape[d] for d in g) for g in groups)
    shapes = [tuple(math.prod(p[d] for d in g) for g in groups) for p in padded]
    return loop, shapes


def _run(b: StepBuilder, k: int) -> list[Elementwise]:
    """The elementwise nodes from ``k`` on that one loop computes: consecutive, one
    output shape."""
    run: list[Elementwise] = []
    shape = None
    produced: dict[int, tuple[int, ...]] = {}
    for j in range(k, len(b.graph.nodes)):
        e = elementwise(b, j)
        if e is None:
            break
        shapes = [produced[v] if v in produced else b.shape(v) for v in e.operands]
        try:
            out_shape = tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            break
        if shape is None:
            shape = out_shape
        elif out_shape != shape:
            break
        produced[e.output] = out_shape
        run.append(e)
    return run


@maker(*_BINARY, *_UNARY, "XNNELU", "XNNLeakyReLU")
def _elementwise_run(b: StepBuilder, k: int) -> int:
    from pyexecutorch.runtime.fusion import FusedCall, parallel_level  # noqa: PLC0415

    run = _run(b, k)
    if not run:
        return 0
    members = set(range(k, k + len(run)))
    shape = tuple(np.broadcast_shapes(*(b.shape(v) for v in run[0].operands)))
    names: dict[int, str] = {}  # value -> its name in the loop
    load_values: list[int] = []
    body: list[str] = []
    stored: list[int] = []
    for m, e in enumerate(run):
        for v in e.operands:
            if v not in names:
                names[v] = f"x{len(load_values)}"
                load_values.append(v)
        expr = e.expression.format(*(names[v] for v in e.operands))
        body.append(f"t{m} = {expr}")
        names[e.output] = f"t{m}"
        readers = b.readers.get(e.output, set())
        if not readers or readers - members or b.is_external(e.output):
            stored.append(m)
    loads = [b.array(v) for v in load_values]
    if not all(a.flags.c_contiguous for a in loads):
        return 0
    loop, load_shapes = _merged_dims(shape, [a.shape for a in loads])
    flat = len(loop) == 1 and all(s == loop for s in load_shapes)
    rank = len(loop)
    at = []
    for j, s in enumerate(load_shapes):
        index = ", ".join("0" if n == 1 and loop[d] != 1 else f"i{d}" for d, n in enumerate(s))
        at.append((f"x{j}", index, j))
    call = FusedCall(
        list(members),
        list(range(len(loads))),
        list(range(len(stored))),
        F32,
        rank,
        at,
        body,
        [f"t{m}" for m in stored],
        flat,
        [],
        parallel=parallel_level(loop, flat),
    )
    arrays = [a.reshape(s) for a, s in zip(loads, load_shapes, strict=True)]
    for m in stored:
        e = run[m]
        out = b.out(e.output, shape)
        arrays.append(out.reshape(loop))
    b.add(Step(call.lazy_function(flat), tuple(arrays)))
    return len(run)


def clamp_in_place(b: StepBuilder, out: np.ndarray, low: float, high: float) -> None:
    """A loop clamping ``out`` in place (nothing when both bounds are infinite)."""
    from pyexecutorch.runtime.fusion import FusedCall  # noqa: PLC0415

    if low == -_INF and high == _INF:
        return
    expr = clamp_expression("x0", low, high)
    call = FusedCall([0], [0], [0], F32, 1, [("x0", "i", 0)], [f"t0 = {expr}"], ["t0"], True, [])
    b.add(Step(call.lazy_function(True, {0: 0}), (out.reshape(-1),)))


# ------------------------------------------------------------------ convolutions


def _symmetric(u: Any) -> tuple[int, int] | None:
    if u.padding_top != u.padding_bottom or u.padding_left != u.padding_right:
        return None
    return int(u.padding_top), int(u.padding_left)


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=F32).copy()
    a.flags.writeable = False
    return a


def shared(b: StepBuilder, key: Any, make: Callable[[], Any]) -> Any:
    """``make()``, made once per delegate graph under ``key``: a dynamic-length method has
    a plan per input length, and each copied every weight it laid out (an LLM's prefill
    and decode plans held two copies of every linear's weights)."""
    found = b.graph.derived.get(key)
    if found is None:
        found = b.graph.derived[key] = make()
    return found


def _residual_add(b: StepBuilder, k: int, conv_out: int) -> tuple[Any, int, float, float] | None:
    """(the other operand, the add's output, its bounds) of an XNNAdd at ``k + 1`` that
    adds ``conv_out`` (read by nothing else) to a tensor of its shape."""
    if k + 1 >= len(b.graph.nodes) or b.readers.get(conv_out) != {k + 1}:
        return None
    if b.is_external(conv_out):
        return None
    node = b.graph.nodes[k + 1]
    u = node.xnode_union
    if type(u).__name__ != "XNNAdd" or not _float32(b, u.input1_id, u.input2_id, u.output_id):
        return None
    if u.input1_id == u.input2_id:
        return None
    other = u.input2_id if u.input1_id == conv_out else u.input1_id
    low, high = bounds(node)
    if math.isnan(low) or math.isnan(high):
        return None
    return other, u.output_id, low, high


def _silu_after(b: StepBuilder, k: int, conv_out: int) -> int | None:
    """The output of ``conv_out * sigmoid(conv_out)`` computed by an XNNSigmoid at ``k + 1``
    and an XNNMultiply at ``k + 2`` (a SiLU as exported), where nothing else reads
    ``conv_out`` or the sigmoid and neither node clamps; else None."""
    nodes = b.graph.nodes
    if k + 2 >= len(nodes) or b.readers.get(conv_out) != {k + 1, k + 2}:
        return None
    sigmoid, multiply = nodes[k + 1], nodes[k + 2]
    us, um = sigmoid.xnode_union, multiply.xnode_union
    if type(us).__name__ != "XNNSigmoid" or type(um).__name__ != "XNNMultiply":
        return None
    gate = us.output_id
    if us.input_id != conv_out or {um.input1_id, um.input2_id} != {conv_out, gate}:
        return None
    if b.readers.get(gate) != {k + 2} or any(b.is_external(v) for v in (conv_out, gate)):
        return None
    if not _float32(b, gate, um.output_id):
        return None
    if any(bounds(node) != (-_INF, _INF) for node in (sigmoid, multiply)):
        return None
    return um.output_id


def _hardswish_after(b: StepBuilder, k: int, conv_out: int) -> int | None:
    """The output of an XNNHardswish at ``k + 1`` of ``conv_out`` (read by nothing else),
    without a clamp; else None."""
    nodes = b.graph.nodes
    if k + 1 >= len(nodes) or b.readers.get(conv_out) != {k + 1} or b.is_external(conv_out):
        return None
    node = nodes[k + 1]
    u = node.xnode_union
    if type(u).__name__ != "XNNHardswish" or u.input_id != conv_out:
        return None
    if not _float32(b, u.output_id) or bounds(node) != (-_INF, _INF):
        return None
    return u.output_id


# An activation right after a convolution, applied in its kernel's stores: (the nodes it
# takes, its name for channels_last_conv_step, the value it computes or None).
_ACTIVATIONS_AFTER = ((2, "silu", _silu_after), (1, "hardswish", _hardswish_after))


@maker("XNNConv2d", "XNNDepthwiseConv2d")
def _conv(b: StepBuilder, k: int) -> int:
    from pyexecutorch.kernels.conv.compiled_nhwc import (  # noqa: PLC0415
        channels_last_conv_step,
    )

    node = b.graph.nodes[k]
    u = node.xnode_union
    has_bias = u.bias_id != S.INVALID_ID
    vids = (u.input1_id, u.filter_id, u.output_id) + ((u.bias_id,) if has_bias else ())
    if not _float32(b, *vids) or u.flags & S.FLAG_TENSORFLOW_SAME_PADDING:
        return 0
    pad = _symmetric(u)
    w = b.const(u.filter_id)
    bias = b.const(u.bias_id) if has_bias else None
    if pad is None or w is None or (has_bias and bias is None):
        return 0
    n, h, wd, c = b.shape(u.input1_id)
    if type(u).__name__ == "XNNDepthwiseConv2d":
        if u.group_output_channels != 1:
            return 0  # a depth multiplier: not a kernel here
        weight = w[0].transpose(2, 0, 1)[:, None]  # [1, kh, kw, C] -> [C, 1, kh, kw]
        groups = c
    else:
        weight = w.transpose(0, 3, 1, 2)  # [O, kh, kw, I/g] -> [O, I/g, kh, kw]
        groups = u.groups
    c_out = weight.shape[0]
    kh, kw, sh, sw = u.kernel_height, u.kernel_width, u.subsampling_height, u.subsampling_width
    dh, dw = u.dilation_height, u.dilation_width
    oh = (h + 2 * pad[0] - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pad[1] - dw * (kw - 1) - 1) // sw + 1
    out_vid, residual, low, high, consumed = u.output_id, None, *bounds(node), 1
    fused = None
    if low == -_INF and high == _INF:
        fused = _residual_add(b, k, u.output_id)
    if fused is not None:
        other, out_vid, low, high = fused
        if b.shape(other) != (n, oh, ow, c_out):
            fused = None
            out_vid, low, high = u.output_id, *bounds(node)
        else:
            residual = b.array(other).transpose(0, 3, 1, 2)
            consumed = 2
    if math.isnan(low) or math.isnan(high):
        return 0
    # an activation right after (no clamp, no residual): in the kernel's stores
    activation = None
    if residual is None and (low, high) == (-_INF, _INF):
        for taken, name, after in _ACTIVATIONS_AFTER:
            act_out = after(b, k, u.output_id)
            if act_out is not None:
                out_vid, consumed, activation = act_out, 1 + taken, name
                break
    x, packed_weight = b.nchw(u.input1_id), _readonly(weight)
    packed_bias = None if bias is None else _readonly(bias)

    def step(out: np.ndarray, activation: str | None) -> Any:
        return channels_last_conv_step(
            x, packed_weight, packed_bias, (sh, sw), pad, (dh, dw), groups,
            out.transpose(0, 3, 1, 2), low=low, high=high, residual=residual,
            activation=activation,
        )  # fmt: skip

    out = b.new(out_vid, (n, oh, ow, c_out))
    pair = step(out, activation)
    if pair is None and activation is not None:  # (not in vectors here: the loop after)
        out_vid, consumed = u.output_id, 1
        out = b.new(out_vid, (n, oh, ow, c_out))
        pair = step(out, None)
    if pair is None:
        return 0
    b.commit(out_vid, out)
    b.add(_step(pair))
    return consumed


# ------------------------------------------------------------------ pooling


@maker("XNNMaxPooling2d", "XNNAvgPooling2d")
def _pool(b: StepBuilder, k: int) -> int:
    from pyexecutorch.kernels.pool.compiled_nhwc import (  # noqa: PLC0415
        avg_pool2d_step,
        max_pool2d_step,
    )

    node = b.graph.nodes[k]
    u = node.xnode_union
    if not _float32(b, u.input_id, u.output_id) or u.flags & S.FLAG_TENSORFLOW_SAME_PADDING:
        return 0
    pad = _symmetric(u)
    if pad is None:
        return 0
    n, h, w, c = b.shape(u.input_id)
    kh, kw, sh, sw = u.pooling_height, u.pooling_width, u.stride_height, u.stride_width
    dh, dw = u.dilation_height or 1, u.dilation_width or 1
    oh = (h + 2 * pad[0] - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pad[1] - dw * (kw - 1) - 1) // sw + 1
    low, high = bounds(node)
    if math.isnan(low) or math.isnan(high):
        return 0
    out = b.new(u.output_id, (n, oh, ow, c))
    x = b.array(u.input_id).transpose(0, 3, 1, 2)
    if type(u).__name__ == "XNNMaxPooling2d":
        pair = max_pool2d_step(
            x, out.transpose(0, 3, 1, 2), [kh, kw], [sh, sw], pad, [dh, dw], False
        )
    elif (dh, dw) == (1, 1):
        # the numpy builder averages the taps inside the image (padding not counted)
        pair = avg_pool2d_step(
            x, out.transpose(0, 3, 1, 2), [kh, kw], [sh, sw], pad, False, False, None
        )
    else:
        pair = None
    if pair is None:
        return 0
    b.commit(u.output_id, out)
    b.add(_step(pair))
    clamp_in_place(b, out, low, high)
    return 1


@maker("XNNGlobalAvgPooling2d")
def _global_avg_pool(b: StepBuilder, k: int) -> int:
    from pyexecutorch.kernels.pool.compiled_nhwc import mean_hw_step  # noqa: PLC0415

    node = b.graph.nodes[k]
    u = node.xnode_union
    xs = b.shape(u.input_id)
    if not _float32(b, u.input_id, u.output_id) or len(xs) != 4:
        return 0
    low, high = bounds(node)
    if math.isnan(low) or math.isnan(high):
        return 0
    declared = b.value(u.output_id).dims
    keep = bool(u.flags & S.FLAG_KEEP_DIMS) or len(declared) == len(xs)
    n, _, _, c = xs
    out = b.new(u.output_id, (n, 1, 1, c) if keep else (n, c))
    pair = mean_hw_step(b.array(u.input_id).transpose(0, 3, 1, 2), out.reshape(n, c))
    if pair is None:
        return 0
    b.commit(u.output_id, out)
    b.add(_step(pair))
    clamp_in_place(b, out, low, high)
    return 1


# ------------------------------------------------------------------ products


def _form_step(name: str, *args: Any, **options: Any) -> Step | None:
    """The step of kernel ``name``'s compiled form on these (planned) arguments."""
    from pyexecutorch.kernels.registry import fast_path_of, get_compiled_form  # noqa: PLC0415

    form = get_compiled_form(name)
    made = None if form is None else form(*args, **options)
    return _step(fast_path_of(made).step)


@maker("XNNFullyConnected")
def _fully_connected(b: StepBuilder, k: int) -> int:
    node = b.graph.nodes[k]
    u = node.xnode_union
    has_bias = u.bias_id != S.INVALID_ID
    vids = (u.input1_id, u.filter_id, u.output_id) + ((u.bias_id,) if has_bias else ())
    w = b.const(u.filter_id)
    bias = b.const(u.bias_id) if has_bias else None
    if not _float32(b, *vids) or w is None or (has_bias and bias is None):
        return 0
    low, high = bounds(node)
    if math.isnan(low) or math.isnan(high):
        return 0
    xs = b.shape(u.input1_id)
    transposed = bool(u.flags & S.FLAG_TRANSPOSE_WEIGHTS)
    key = ("kn", u.filter_id, transposed)
    wmat = shared(b, key, lambda: _readonly(w if transposed else w.T))  # [in, out]
    kk, units = wmat.shape
    m = math.prod(xs[:-1])
    out = b.new(u.output_id, xs[:-1] + (units,))
    a2, o2 = _view(b.array(u.input1_id), (m, kk)), out.reshape(m, units)
    if a2 is None:
        return 0
    if m == 1 and _one_row_linear(b, u, a2, wmat, bias, out, low, high):
        return 1
    if has_bias:
        row = shared(b, ("row", u.bias_id), lambda: _readonly(bias))
        step = _form_step("aten::addmm.out", row, a2, wmat, 1, 1, o2, whole=True)
    else:
        step = _form_step("aten::mm.out", a2, wmat, o2, whole=True)
    if step is None:
        return 0
    b.commit(u.output_id, out)
    b.add(step)
    clamp_in_place(b, out, low, high)
    return 1


def _one_row_linear(
    b: StepBuilder,
    u: Any,
    a2: np.ndarray,
    wmat: np.ndarray,
    bias: np.ndarray | None,
    out: np.ndarray,
    low: float,
    high: float,
) -> bool:
    """A fully connected node on one row (a decoded token) as one step of the one-row
    kernel (:mod:`pyexecutorch.kernels.linalg.compiled_one_row`): the weight streamed in
    its ``[in, out]`` layout, the bias and the clamp in the same call, the sums in
    XNNPACK's order."""
    from pyexecutorch.kernels.linalg import compiled_one_row as one_row  # noqa: PLC0415

    inputs, units = wmat.shape
    if not one_row.fits(inputs, units) or (bias is not None and bias.size != units):
        return False
    if bias is None:
        row = shared(b, ("zeros", units), lambda: _readonly(np.zeros(units, F32)))
    else:
        row = shared(b, ("row", u.bias_id), lambda: _readonly(bias)).reshape(units)
    args = (a2.reshape(inputs), wmat, row, out.reshape(units), F32.type(low), F32.type(high))
    b.commit(u.output_id, out)
    b.add(Step(one_row.form(inputs * units), (*args, one_row.mailbox())))
    return True


@maker("XNNBatchMatrixMultiply")
def _batch_matmul(b: StepBuilder, k: int) -> int:
    u = b.graph.nodes[k].xnode_union
    if not _float32(b, u.input1_id, u.input2_id, u.output_id):
        return 0
    a_s, b_s = b.shape(u.input1_id), b.shape(u.input2_id)
    if len(a_s) < 2 or a_s[:-2] != b_s[:-2]:
        return 0  # batch dimensions that broadcast: left to numpy
    trans = bool(u.flags & S.FLAG_TRANSPOSE_B)
    batch = math.prod(a_s[:-2])
    n, kk = a_s[-2:]
    p = b_s[-2] if trans else b_s[-1]
    out = b.new(u.output_id, a_s[:-2] + (n, p))
    const = b.const(u.input2_id)
    steps: list[Step] = []
    if const is not None:
        rhs = _readonly(const.swapaxes(-1, -2) if trans else const).reshape(batch, kk, p)
    elif trans:
        rhs = np.empty((batch, kk, p), F32)
        src = _view(b.array(u.input2_id), (batch, p, kk))
        if src is None:
            return 0
        src = src.transpose(0, 2, 1)
        copy = view_copy_step(src, rhs)
        if copy is None:
            return 0
        steps.append(copy)
    else:
        rhs = _view(b.array(u.input2_id), (batch, kk, p))
    lhs = _view(b.array(u.input1_id), (batch, n, kk))
    if lhs is None or rhs is None:
        return 0
    product = _form_step("aten::bmm.out", lhs, rhs, out.reshape(batch, n, p), whole=True)
    if product is None:
        return 0
    b.commit(u.output_id, out)
    for s in [*steps, product]:
        b.add(s)
    return 1


@maker("XNNSoftmax")
def _softmax(b: StepBuilder, k: int) -> int:
    u = b.graph.nodes[k].xnode_union
    if not _float32(b, u.input_id, u.output_id):
        return 0
    shape = b.shape(u.input_id)
    out = b.new(u.output_id, shape)
    step = _form_step("aten::_softmax.out", b.array(u.input_id), -1, False, out)
    if step is None:
        return 0
    b.commit(u.output_id, out)
    b.add(step)
    return 1


# ------------------------------------------------------------------ data movement


def _view_or_copy(b: StepBuilder, vid: int, view: np.ndarray, source: int) -> bool:
    """Make value ``vid`` ``view``'s elements (a view of value ``source``): the view itself
    when it is C-contiguous (no step), else a compiled copy into a new array. A delegate
    output viewing another input or output is copied too: one memory could not bind to
    two arrays of the caller, so every call copied both in or out (a ViT's attention
    delegates output the query, key and value and a slice of them: 1.4 MB copied a block
    where the slice's own copy is 0.3)."""
    if view.flags.c_contiguous and not (b.is_external(vid) and b.is_external(source)):
        b.commit(vid, view)
        return True
    from pyexecutorch.kernels.shape.compiled_permute import permute_copy  # noqa: PLC0415

    out = b.new(vid, view.shape)
    loops = permute_copy(view, out)  # (numba's n-d assignment: about 4x slower)
    step = Step(*loops) if loops is not None else view_copy_step(view, out)
    if step is None:
        return False
    b.commit(vid, out)
    b.add(step)
    return True


@maker("XNNStaticTranspose")
def _transpose(b: StepBuilder, k: int) -> int:
    u = b.graph.nodes[k].xnode_union
    if not movable(b, u.input_id, u.output_id):
        return 0
    perm = tuple(int(p) for p in u.perm)
    src_shape = b.shape(u.input_id)
    readers = b.readers.get(u.output_id, set())
    if (
        perm == (0, 2, 3, 1)
        and readers
        and not b.is_external(u.output_id)
        and all(b.reads_as_conv_input(j, u.output_id) for j in readers)
    ):
        # NCHW into NHWC for convolutions only: they read the NCHW array itself
        b.defer_nhwc(u.output_id, u.input_id, tuple(src_shape[p] for p in perm))
        return 1
    view = b.array(u.input_id).transpose(perm)
    return int(_view_or_copy(b, u.output_id, view, u.input_id))


@maker("XNNStaticSlice")
def _slice(b: StepBuilder, k: int) -> int:
    u = b.graph.nodes[k].xnode_union
    if not movable(b, u.input_id, u.output_id):
        return 0
    src = b.shape(u.input_id)
    key = tuple(
        slice(off, src[d] if size == 0 else off + size)
        for d, (off, size) in enumerate(zip(u.offsets, u.sizes, strict=True))
    )
    return int(_view_or_copy(b, u.output_id, b.array(u.input_id)[key], u.input_id))


@maker("XNNConcatenate2", "XNNConcatenate3", "XNNConcatenate4", "XNNConcatenate5")
def _concat(b: StepBuilder, k: int) -> int:
    from pyexecutorch.kernels.pool.compiled_nhwc import cat_channels_step  # noqa: PLC0415

    u = b.graph.nodes[k].xnode_union
    count = int(type(u).__name__[-1])
    ids = [u.input1_id, u.input2_id, u.input3_id, u.input4_id, u.input5_id][:count]
    if not movable(b, *ids, u.output_id):
        return 0
    shapes = [b.shape(v) for v in ids]
    axis = u.axis
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    out = b.new(u.output_id, tuple(out_shape))
    parts = [b.array(v) for v in ids]
    steps: list[Step] = []
    if len(out_shape) == 4 and axis == 3 and count <= 4 and out.dtype == F32:
        pair = cat_channels_step(
            [p.transpose(0, 3, 1, 2) for p in parts], out.transpose(0, 3, 1, 2)
        )
        if pair is not None:
            steps.append(_step(pair))
    if not steps:
        start = 0
        for p in parts:
            cut = (slice(None),) * axis + (slice(start, start + p.shape[axis]),)
            start += p.shape[axis]
            step = view_copy_step(p, out[cut])
            if step is None:
                return 0
            steps.append(step)
    b.commit(u.output_id, out)
    for s in steps:
        b.add(s)
    return 1


@maker("XNNStaticConstantPad")
def _pad(b: StepBuilder, k: int) -> int:
    u = b.graph.nodes[k].xnode_union
    if not movable(b, u.input_id, u.output_id) or b.is_external(u.output_id):
        return 0  # (a delegate output is the caller's array: its border is not kept)
    src = b.shape(u.input_id)
    pre, post = list(u.pre_paddings), list(u.post_paddings)
    shape = tuple(s + a + c for s, a, c in zip(src, pre, post, strict=False))
    out = b.new(u.output_id, shape)
    out.fill(float(u.padding_value))  # the border, once: nothing else writes it
    inner = tuple(slice(a, a + s) for s, a in zip(src, pre, strict=False))
    step = view_copy_step(b.array(u.input_id), out[inner])
    if step is None:
        return 0
    b.commit(u.output_id, out)
    b.add(step)
    return 1
