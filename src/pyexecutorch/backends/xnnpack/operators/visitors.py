"""Edge node -> XNNPACK nodes: one visitor per operator, in one table.

A visitor gets the :class:`~.builder.GraphBuilder` and the edge node; it asks
the builder for its inputs' values in the layout it needs, defines its output
and emits the nodes. ``register`` adds visitors (quantized ones live in their
own module and register themselves the same way).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import torch
from torch.fx import Node

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack._passes.channels_last import TO_NCHW, TO_NHWC
from pyexecutorch.backends.xnnpack._passes.fuse_activation import MIN_MAX
from pyexecutorch.backends.xnnpack._passes.fuse_batch_norm import batch_norm_scale_shift
from pyexecutorch.backends.xnnpack.operators.builder import GraphBuilder, xnode
from pyexecutorch.backends.xnnpack.partition.config import arg, op_key, pool2d_args, rank
from pyexecutorch.exir.backend import PreprocessError

aten = torch.ops.aten
INF = float("inf")
Visitor = Callable[[GraphBuilder, Node], None]
VISITORS: dict[str, Visitor] = {}


def register(*targets: object) -> Callable[[Visitor], Visitor]:
    """Decorator: the visitor of the edge operators ``targets`` (OpOverloads or keys)."""

    def add(fn: Visitor) -> Visitor:
        for t in targets:
            VISITORS[t if isinstance(t, str) else op_key(t)] = fn
        return fn

    return add


def _min_max(node: Node) -> tuple[float, float] | None:
    return node.meta.get(MIN_MAX)


def rows_as_images(b: GraphBuilder, x_node: Node, node: Node) -> tuple[int, int]:
    """A 1-D convolution's [N, C, L] input as an [N, 1, L, C] image (reshape, transpose), and
    the value for its [N, 1, L', C'] output; temporaries take the nodes' quantization."""
    n, c, length = b.dims(x_node)
    dtype = x_node.meta["val"].dtype
    flat = b.value(x_node, False)
    x4 = b.temporary(dtype, [n, c, 1, length], like=x_node)
    b.emit(
        xnode(
            "XNNStaticReshape",
            num_dims=4,
            new_shape=[n, c, 1, length],
            input_id=flat,
            output_id=x4,
        )
    )
    x = b.temporary(dtype, [n, 1, length, c], like=x_node)
    b.emit(xnode("XNNStaticTranspose", num_dims=4, perm=list(TO_NHWC), input_id=x4, output_id=x))
    on, oc, olen = b.dims(node)
    return x, b.temporary(node.meta["val"].dtype, [on, 1, olen, oc], like=node)


def images_as_rows(b: GraphBuilder, y: int, node: Node) -> None:
    """The [N, 1, L', C'] image ``y`` back to the node's [N, C', L'] output."""
    on, oc, olen = b.dims(node)
    y4 = b.temporary(node.meta["val"].dtype, [on, oc, 1, olen], like=node)
    b.emit(xnode("XNNStaticTranspose", num_dims=4, perm=list(TO_NCHW), input_id=y, output_id=y4))
    out = b.define(node, False)
    b.emit(
        xnode("XNNStaticReshape", num_dims=3, new_shape=[on, oc, olen], input_id=y4, output_id=out)
    )


def conv_node(
    kind: str,
    weight_shape: Sequence[int],
    padding: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    grouping: tuple[int, int, int],
    x: int,
    filt: int,
    bias_id: int,
    y: int,
    adjustment: Sequence[int] = (0, 0),
) -> S.XNode:
    """A convolution node (``kind``: XNNConv2d, XNNDepthwiseConv2d, XNNConvTranspose2d) with
    symmetric padding; ``grouping`` is (input channels per group, output channels per group,
    groups), ``weight_shape`` the filter's torch shape (its last two are the kernel size)."""
    group_in, group_out, groups = grouping
    return xnode(
        kind,
        padding_top=padding[0],
        padding_right=padding[1],
        padding_bottom=padding[0],
        padding_left=padding[1],
        kernel_height=weight_shape[2],
        kernel_width=weight_shape[3],
        subsampling_height=stride[0],
        subsampling_width=stride[1],
        dilation_height=dilation[0],
        dilation_width=dilation[1],
        group_input_channels=group_in,
        group_output_channels=group_out,
        groups=groups,
        adjustment_height=adjustment[0],
        adjustment_width=adjustment[1],
        input1_id=x,
        filter_id=filt,
        bias_id=bias_id,
        output_id=y,
    )


def _phys_axis(b: GraphBuilder, node: Node, axis: int) -> int:
    """The storage axis of logical ``axis`` of ``node``'s tensor (NHWC-aware)."""
    axis %= max(rank(node), 1)
    return TO_NCHW[axis] if b.nhwc(node) and rank(node) == 4 else axis


# ------------------------------------------------------------------ elementwise

_BINARY = {
    aten.add.Tensor: "XNNAdd",
    aten.sub.Tensor: "XNNSubtract",
    aten.mul.Tensor: "XNNMultiply",
    aten.div.Tensor: "XNNDiv",
    aten.minimum.default: "XNNMinimum",
    aten.maximum.default: "XNNMaximum",
}


@register(*_BINARY)
def _binary(b: GraphBuilder, node: Node) -> None:
    layout = b.nhwc(node)
    a = b.value(node.args[0], layout, like=node)
    c = b.value(node.args[1], layout, like=node)
    out = b.define(node)
    b.emit(xnode(_BINARY[node.target], input1_id=a, input2_id=c, output_id=out), _min_max(node))


_UNARY = {
    aten.abs.default: "XNNAbs",
    aten.ceil.default: "XNNCeiling",
    aten.cos.default: "XNNCos",
    aten.exp.default: "XNNExp",
    aten.floor.default: "XNNFloor",
    aten.gelu.default: "XNNGelu",
    aten.hardswish.default: "XNNHardswish",
    aten.log.default: "XNNLog",
    aten.neg.default: "XNNNegate",
    aten.rsqrt.default: "XNNReciprocalSquareRoot",
    aten.sigmoid.default: "XNNSigmoid",
    aten.sin.default: "XNNSin",
    aten.sqrt.default: "XNNSquareRoot",
    aten.tanh.default: "XNNTanh",
    aten.pow.Tensor_Scalar: "XNNSquare",  # the config takes exponent 2 only
    aten._softmax.default: "XNNSoftmax",
}
_COPIES = (
    aten.clone.default,
    "dim_order_ops::_clone_dim_order.default",
    "dim_order_ops::_to_dim_order_copy.default",
)


@register(*_UNARY)
def _unary(b: GraphBuilder, node: Node) -> None:
    x = b.value(node.args[0], b.nhwc(node))
    out = b.define(node)
    b.emit(xnode(_UNARY[node.target], input_id=x, output_id=out), _min_max(node))


@register(*_COPIES)
def _copy(b: GraphBuilder, node: Node) -> None:
    """The copies :func:`.._passes.remove_copies` kept (a delegate input to an output)."""
    x = b.value(node.args[0], b.nhwc(node))
    out = b.define(node)
    b.emit(xnode("XNNCopy", input_id=x, output_id=out))


def _clamp_bounds(node: Node) -> tuple[float, float]:
    if node.target == aten.relu.default:
        return 0.0, INF
    if node.target == aten.hardtanh.default:
        return float(arg(node, 1, "min_val", -1.0)), float(arg(node, 2, "max_val", 1.0))
    lo, hi = arg(node, 1, "min", None), arg(node, 2, "max", None)
    return (-INF if lo is None else float(lo)), (INF if hi is None else float(hi))


@register(aten.relu.default, aten.hardtanh.default, aten.clamp.default)
def _clamp(b: GraphBuilder, node: Node) -> None:
    x = b.value(node.args[0], b.nhwc(node))
    out = b.define(node)
    b.emit(xnode("XNNClamp", input_id=x, output_id=out), _clamp_bounds(node))


@register(aten.leaky_relu.default)
def _leaky_relu(b: GraphBuilder, node: Node) -> None:
    x = b.value(node.args[0], b.nhwc(node))
    out = b.define(node)
    slope = float(arg(node, 1, "negative_slope", 0.01))
    b.emit(xnode("XNNLeakyReLU", negative_slope=slope, input_id=x, output_id=out))


@register(aten.prelu.default)
def _prelu(b: GraphBuilder, node: Node) -> None:
    x = b.value(node.args[0], True)
    weight = b.ctx.constant(node.args[1]).reshape(-1)
    channels = b.dims(node.args[0])[1] if rank(node.args[0]) > 1 else 1
    if weight.numel() == 1 and channels > 1:
        weight = weight.expand(channels)
    slope = b.constant_data(weight, (node.args[1], "prelu"))
    out = b.define(node)
    b.emit(xnode("XNNPReLU", input1_id=x, input2_id=slope, output_id=out))


# ------------------------------------------------------------------ GEMMs


@register(aten.linear.default)
def _linear(b: GraphBuilder, node: Node) -> None:
    x = b.value(node.args[0], False)
    w = b.value(node.args[1], False)
    bias = node.args[2] if len(node.args) > 2 else None
    bias_id = b.value(bias, False) if bias is not None else S.INVALID_ID
    out = b.define(node)
    b.emit(
        xnode("XNNFullyConnected", input1_id=x, filter_id=w, bias_id=bias_id, output_id=out),
        _min_max(node),
    )


@register(aten.addmm.default, aten.mm.default)
def _matmul(b: GraphBuilder, node: Node) -> None:
    if node.target == aten.addmm.default:
        bias, x, weight = node.args[:3]
    else:
        (x, weight), bias = node.args[:2], None
    xid = b.value(x, False)
    w = b.value(weight, False)
    bias_id = b.value(bias, False) if bias is not None else S.INVALID_ID
    out = b.define(node)
    b.emit(
        xnode(
            "XNNFullyConnected",
            input1_id=xid,
            filter_id=w,
            bias_id=bias_id,
            output_id=out,
            flags=S.FLAG_TRANSPOSE_WEIGHTS,
        ),
        _min_max(node),
    )


@register(aten.bmm.default)
def _bmm(b: GraphBuilder, node: Node) -> None:
    x = b.value(node.args[0], False)
    y = b.value(node.args[1], False)
    out = b.define(node)
    b.emit(xnode("XNNBatchMatrixMultiply", input1_id=x, input2_id=y, output_id=out))


# ------------------------------------------------------------------ convolutions


def _pairs(values: object, n: int = 2) -> list[int]:
    values = [values] if isinstance(values, int) else list(values)
    return values * n if len(values) == 1 else values


@register(aten.convolution.default)
def _convolution(b: GraphBuilder, node: Node) -> None:
    x_node, w_node, bias_node, stride, padding, dilation, transposed, out_pad, groups = node.args
    weight = b.ctx.constant(w_node)
    if weight is None:
        raise PreprocessError(f"XnnpackBackend: convolution {node.name} has no constant weight")
    one_d = weight.dim() == 3
    stride, padding, dilation, out_pad = (
        _pairs(v, 1 if one_d else 2) for v in (stride, padding, dilation, out_pad)
    )
    if one_d:  # as a 2-D convolution of height 1: stride and dilation 1, no padding and
        # no output adjustment along the height (an adjustment of 1 would make it 2 rows)
        weight = weight.unsqueeze(2)
        stride, padding, dilation, out_pad = (
            [first, *v]
            for first, v in zip((1, 0, 1, 0), (stride, padding, dilation, out_pad), strict=True)
        )
    groups = int(groups)
    if transposed:
        group_in, group_out = weight.shape[0] // groups, weight.shape[1]
    else:
        group_in, group_out = weight.shape[1], weight.shape[0] // groups
    depthwise = group_in == 1 and group_out % group_in == 0 and not transposed
    if depthwise or transposed:
        # XNNPACK wants [groups * out, in / groups, kh, kw] as [1, kh, kw, out] / [out, kh, kw, in]
        g = groups if transposed else 1
        shape = weight.shape
        w = weight.reshape(g, shape[0] // g, *shape[1:]).transpose(1, 2)
        weight = w.reshape(shape[1] * g, shape[0] // g, *shape[2:])
    b.note(w_node)
    filt = b.constant_data(weight.float().permute(*TO_NHWC), (w_node, "conv", depthwise))
    bias_id = S.INVALID_ID
    if bias_node is not None:
        bias_id = b.constant_data(b.ctx.constant(bias_node).float(), (bias_node, "conv"))
        b.note(bias_node)
    if one_d:
        x, y = rows_as_images(b, x_node, node)
    else:
        x = b.value(x_node, True)
        y = b.define(node, True)
    kind = (
        "XNNDepthwiseConv2d" if depthwise else ("XNNConvTranspose2d" if transposed else "XNNConv2d")
    )
    b.emit(
        conv_node(
            kind,
            weight.shape,
            padding,
            stride,
            dilation,
            (group_in, group_out, groups),
            x,
            filt,
            bias_id,
            y,
            out_pad,
        ),
        _min_max(node),
    )
    if one_d:
        images_as_rows(b, y, node)


@register(aten._native_batch_norm_legit_no_training.default)
def _batch_norm(b: GraphBuilder, node: Node) -> None:
    """A batch norm that did not fold: ``x * scale + shift`` per channel."""
    src = node.args[0]
    layout = b.nhwc(src) and rank(src) == 4
    x = b.value(src, layout)
    scale, shift = batch_norm_scale_shift(b.ctx, node)
    dtype = src.meta["val"].dtype
    shape = [-1] if layout else [-1, *[1] * (rank(src) - 2)]
    s = b.constant_data(scale.to(dtype).reshape(shape), (node, "scale"))
    t = b.constant_data(shift.to(dtype).reshape(shape), (node, "shift"))
    readers = [u for u in node.users if u.target is operator.getitem]
    dims = b.dims(src, layout)
    scaled = b.temporary(dtype, dims)
    b.emit(xnode("XNNMultiply", input1_id=x, input2_id=s, output_id=scaled))
    out = b.define(readers[0], layout)
    b.emit(xnode("XNNAdd", input1_id=scaled, input2_id=t, output_id=out))
    for r in readers[1:]:
        b.alias(r, out, layout)


@register(operator.getitem)
def _getitem(b: GraphBuilder, node: Node) -> None:
    """Defined by the visitor of the node it reads from."""


# ------------------------------------------------------------------ pooling


@register(aten.max_pool2d.default)
def _max_pool(b: GraphBuilder, node: Node) -> None:
    kernel, stride, padding, dilation = pool2d_args(node, has_dilation=True)
    pad_bottom, pad_right = padding[0], padding[1]
    if bool(arg(node, 5, "ceil_mode", False)):
        _, _, h, w = b.dims(node.args[0])
        pad_bottom += _ceil_extra(h, kernel[0], stride[0], padding[0], dilation[0])
        pad_right += _ceil_extra(w, kernel[1], stride[1], padding[1], dilation[1])
    x = b.value(node.args[0], True)
    out = b.define(node, True)
    b.emit(
        xnode(
            "XNNMaxPooling2d",
            padding_top=padding[0],
            padding_right=pad_right,
            padding_bottom=pad_bottom,
            padding_left=padding[1],
            pooling_height=kernel[0],
            pooling_width=kernel[1],
            stride_height=stride[0],
            stride_width=stride[1],
            dilation_height=dilation[0],
            dilation_width=dilation[1],
            input_id=x,
            output_id=out,
            flags=S.FLAG_KEEP_DIMS,
        )
    )


def _ceil_extra(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """Extra bottom/right padding that makes floor-mode pooling give ceil mode's size."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (span + stride - 1) // stride + 1
    if (out - 1) * stride >= size + pad:  # the last window would start in the padding
        out -= 1
    return max(0, (out - 1) * stride - span)


@register(aten.max.dim)
def _max_dim(b: GraphBuilder, node: Node) -> None:
    """Max over H or W (keepdim; the config takes no other form) as a max pooling whose
    window spans that axis; only the values are read (the indices are not)."""
    _, _, h, w = b.dims(node.args[0])
    over_h = int(node.args[1]) % 4 == 2
    x = b.value(node.args[0], True)
    readers = [u for u in node.users if u.target is operator.getitem]
    out = b.define(readers[0], True)
    for r in readers[1:]:
        b.alias(r, out, True)
    b.emit(
        xnode(
            "XNNMaxPooling2d",
            pooling_height=h if over_h else 1,
            pooling_width=1 if over_h else w,
            stride_height=h if over_h else 1,
            stride_width=1 if over_h else w,
            dilation_height=1,
            dilation_width=1,
            input_id=x,
            output_id=out,
        )
    )


@register(aten.avg_pool2d.default)
def _avg_pool(b: GraphBuilder, node: Node) -> None:
    kernel, stride, padding, _ = pool2d_args(node, has_dilation=False)
    x = b.value(node.args[0], True)
    out = b.define(node, True)
    b.emit(
        xnode(
            "XNNAvgPooling2d",
            padding_top=padding[0],
            padding_right=padding[1],
            padding_bottom=padding[0],
            padding_left=padding[1],
            pooling_height=kernel[0],
            pooling_width=kernel[1],
            stride_height=stride[0],
            stride_width=stride[1],
            input_id=x,
            output_id=out,
            flags=S.FLAG_KEEP_DIMS,
        )
    )


@register(aten.mean.dim)
def _mean(b: GraphBuilder, node: Node) -> None:
    x = b.value(node.args[0], True)
    out = b.define(node, True)
    b.emit(xnode("XNNGlobalAvgPooling2d", input_id=x, output_id=out, flags=S.FLAG_KEEP_DIMS))


@register(aten.upsample_bilinear2d.vec)
def _upsample(b: GraphBuilder, node: Node) -> None:
    x = b.value(node.args[0], True)
    out = b.define(node, True)
    _, _, h, w = b.dims(node)
    flags = S.FLAG_ALIGN_CORNERS if bool(arg(node, 2, "align_corners", False)) else 0
    b.emit(
        xnode(
            "XNNStaticResizeBilinear2D",
            new_height=h,
            new_width=w,
            input_id=x,
            output_id=out,
            flags=flags,
        )
    )


# ------------------------------------------------------------------ shapes and copies


@register(aten.cat.default)
def _cat(b: GraphBuilder, node: Node) -> None:
    layout = b.nhwc(node)
    axis = _phys_axis(b, node, int(arg(node, 1, "dim", 0)))
    ids = [b.value(t, layout) for t in node.args[0]]
    dtype = node.meta["val"].dtype
    # XNNPACK concatenates up to 5 tensors: longer lists in steps of 5
    while len(ids) > 5:
        dims = [b.graph.xvalues[i].tensor.dims for i in ids[:5]]
        joined = list(dims[0])
        joined[axis] = sum(d[axis] for d in dims)
        tmp = b.temporary(dtype, joined)
        _emit_cat(b, axis, ids[:5], tmp)
        ids = [tmp, *ids[5:]]
    _emit_cat(b, axis, ids, b.define(node))


def _emit_cat(b: GraphBuilder, axis: int, ids: list[int], out: int) -> None:
    padded = ids + [S.INVALID_ID] * (5 - len(ids))
    b.emit(
        xnode(
            f"XNNConcatenate{len(ids)}",
            axis=axis,
            input1_id=padded[0],
            input2_id=padded[1],
            input3_id=padded[2],
            input4_id=padded[3],
            input5_id=padded[4],
            output_id=out,
        )
    )


@register(aten.slice_copy.Tensor)
def _slice(b: GraphBuilder, node: Node) -> None:
    src = node.args[0]
    layout = b.nhwc(node)
    in_dims = b.dims(src)
    dim = int(arg(node, 1, "dim", 0)) % len(in_dims)
    start = arg(node, 2, "start", None) or 0
    if start < 0:
        start += in_dims[dim]
    start = min(max(start, 0), in_dims[dim])
    offsets = [0] * len(in_dims)
    offsets[dim] = start
    sizes = b.dims(node)
    if layout:
        offsets = [offsets[i] for i in TO_NHWC]
        sizes = [sizes[i] for i in TO_NHWC]
    x = b.value(src, layout)
    out = b.define(node)
    b.emit(
        xnode(
            "XNNStaticSlice",
            num_dims=len(sizes),
            offsets=offsets,
            sizes=sizes,
            input_id=x,
            output_id=out,
        )
    )


@register(aten.constant_pad_nd.default)
def _pad(b: GraphBuilder, node: Node) -> None:
    src = node.args[0]
    layout = b.nhwc(node)
    n = rank(src)
    pads = list(node.args[1]) + [0] * (2 * n - len(node.args[1]))
    pre, post = pads[-2::-2], pads[::-2]  # torch lists the last dim first
    if layout:
        pre, post = [pre[i] for i in TO_NHWC], [post[i] for i in TO_NHWC]
    x = b.value(src, layout)
    out = b.define(node)
    b.emit(
        xnode(
            "XNNStaticConstantPad",
            pre_paddings=pre,
            post_paddings=post,
            padding_value=float(arg(node, 2, "value", 0.0)),
            input_id=x,
            output_id=out,
        )
    )


@register(aten.permute_copy.default)
def _permute(b: GraphBuilder, node: Node) -> None:
    src = node.args[0]
    n = rank(src)
    perm = [int(p) % n for p in node.args[1]]
    if b.nhwc(src) and n == 4:
        # reading the NHWC storage: logical dim k sits at storage dim TO_NCHW[k]
        perm = [TO_NCHW[p] for p in perm]
        x = b.value(src, True)
    else:
        x = b.value(src, False)
    if perm == list(range(n)) and node not in b.outputs:
        b.alias(node, x, False)
        return
    out = b.define(node, False)
    b.emit(xnode("XNNStaticTranspose", num_dims=n, perm=perm, input_id=x, output_id=out))


def _reshape_target(node: Node) -> list[int]:
    """The new shape: static dims as they are, the one dynamic dim as 0 (inferred)."""
    return [d if isinstance(d, int) else 0 for d in node.meta["val"].shape]


@register(aten.view_copy.default, aten.unsqueeze_copy.default, aten.squeeze_copy.dim)
def _reshape(b: GraphBuilder, node: Node) -> None:
    x = b.value(node.args[0], False)
    out = b.define(node, False)
    shape = _reshape_target(node)
    if node.target == aten.view_copy.default:
        asked = list(node.args[1])
        shape = [0 if d == -1 else s for d, s in zip(asked, shape, strict=True)]
    b.emit(
        xnode(
            "XNNStaticReshape",
            num_dims=len(shape),
            new_shape=shape,
            input_id=x,
            output_id=out,
        )
    )


# Registrations of operators that may exist only later (torchao's, once torchao has
# imported): run again when a node finds no visitor.
LATE_REGISTRATIONS: list[Callable[[], None]] = []


def visit(b: GraphBuilder, node: Node) -> None:
    """Serialize one edge node (PreprocessError where no visitor takes it)."""
    key = op_key(node.target)
    visitor = VISITORS.get(key)
    if visitor is None:
        for late in LATE_REGISTRATIONS:
            late()
        visitor = VISITORS.get(key)
    if visitor is None:
        raise PreprocessError(
            f"XnnpackBackend cannot serialize node {node.name} ({key}): no XNNPACK visitor"
        )
    b.begin(node)
    visitor(b, node)


__all__ = ["VISITORS", "Visitor", "register", "visit"]
