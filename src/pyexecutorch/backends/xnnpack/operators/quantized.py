"""Visitors of quantized partitions (after :mod:`.._passes.quantized`).

- quantizes and dequantizes left in the graph are ``XNNConvert`` nodes between
  float and quantized values (to ``qdint8`` per token for dynamic ones);
- ``choose_qparams`` nodes emit nothing (XNNPACK picks dynamic parameters);
- convolutions and linears on quantized weights: ``qcint8`` per output channel
  (``qbint4`` per group of 32.. input channels, two values a byte), biases
  ``qcint32`` with the input scale times each weight scale where the
  activations are static, float32 where they are dynamic.  Their scales live
  in the program's named data under ``scale_<sha256>``, as the official
  delegate stores them.  Float convolutions and linears keep their visitors.

Every other operator (add, multiply, concatenation, pooling, clamps, reshapes)
runs on quantized values with its float visitor: the builder gives each value
the datatype and parameters the pass recorded.
"""

from __future__ import annotations

import hashlib
import warnings

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers quantized_decomposed
from torch.fx import Node

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack._passes.channels_last import TO_NHWC
from pyexecutorch.backends.xnnpack._passes.fuse_activation import MIN_MAX
from pyexecutorch.backends.xnnpack._passes.quantized import (
    XNN_QUANT,
    XNN_QWEIGHT,
    WeightQuant,
    dynamic_dequantizers,
    dynamic_quantizers,
    qparam_choosers,
)
from pyexecutorch.backends.xnnpack.operators.builder import UINT64_MAX, GraphBuilder, xnode
from pyexecutorch.backends.xnnpack.operators.visitors import (
    LATE_REGISTRATIONS,
    VISITORS,
    conv_node,
    images_as_rows,
    register,
    rows_as_images,
)
from pyexecutorch.backends.xnnpack.partition.config import op_key
from pyexecutorch.exir.backend import PreprocessError

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _convert(b: GraphBuilder, node: Node) -> None:
    source = node.args[0]
    if isinstance(source, Node) and _is_per_token(source.meta.get(XNN_QUANT)):
        # XNNPACK converts qdint8 only into a dynamic linear: the runtime would refuse it.
        raise PreprocessError(
            f"XnnpackBackend: dynamically quantized {source.name} is dequantized by "
            f"{node.name} for a reader outside this delegate's dynamic linears; XNNPACK "
            "cannot convert qdint8 back to float"
        )
    layout = b.nhwc(node)
    x = b.value(node.args[0], layout)
    out = b.define(node, layout)
    b.emit(xnode("XNNConvert", input_id=x, output_id=out))


def _is_per_token(spec: object) -> bool:
    return getattr(spec, "datatype", None) == S.XNNDatatype.qdint8


def _nothing(b: GraphBuilder, node: Node) -> None:
    """Emits no node: XNNPACK computes dynamic parameters itself."""


def _unconsumed(b: GraphBuilder, node: Node) -> None:
    raise PreprocessError(
        f"XnnpackBackend: weight dequantization {node.name} is not read by a quantized "
        "convolution or linear"
    )


def _register_quant_ops() -> None:
    # Weight dequantizations are read through by the GEMMs (torchao's dequantize_affine
    # also dequantizes activations: a convert where left).
    register(qd.quantize_per_tensor.default, qd.dequantize_per_tensor.default)(_convert)
    register(*dynamic_quantizers(), *dynamic_dequantizers())(_convert)
    register(*qparam_choosers())(_nothing)
    register(qd.dequantize_per_channel.default)(_unconsumed)


# ------------------------------------------------------------------ weights


def _scale_buffer(b: GraphBuilder, scales: torch.Tensor) -> int:
    """The index of a constant-data entry holding ``scales`` (named ``scale_<sha256>``)."""
    data = scales.detach().contiguous()
    raw = (data.view(torch.int16) if data.dtype == torch.bfloat16 else data).numpy().tobytes()
    name = "scale_" + hashlib.sha256(raw).hexdigest()
    b.store.add_named_data(name, raw, 16)
    b.graph.constant_data.append(
        S.ConstantDataOffset(offset=UINT64_MAX, size=len(raw), named_key=name)
    )
    return len(b.graph.constant_data) - 1


def _per_channel(b: GraphBuilder, scales: torch.Tensor, axis: int) -> S.PerChannelQuant:
    flat = scales.reshape(-1).to(torch.float32)
    return S.PerChannelQuant(
        scale=[], channel_dim=axis, scale_buffer_idx=_scale_buffer(b, flat), num_scales=flat.numel()
    )


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """Rows of int8 values in [-8, 7] as XNNPACK's 4-bit layout: +8, two a byte, the
    first in the low nibble (odd row lengths padded with a zero)."""
    if values.shape[-1] % 2:
        values = torch.nn.functional.pad(values, (0, 1))
    u = (values.to(torch.int16) + 8).to(torch.uint8).reshape(values.shape[0], -1, 2)
    return (u[..., 1] << 4) | u[..., 0]


class GroupSizeError(PreprocessError, AssertionError):
    """A 4-bit groupwise weight whose group size XNNPACK cannot take (the official
    delegate fails an assert there: ``except AssertionError`` code keeps working)."""


class OddInt4InputsWarning(UserWarning):
    """A delegated 4-bit per-channel linear whose input count XNNPACK mishandles."""


def _weight(
    b: GraphBuilder, node: Node, data: torch.Tensor, wq: WeightQuant, axis: int, linear: bool
) -> int:
    """The filter value of a quantized GEMM (``data`` already in XNNPACK's layout)."""
    w_node = node.args[1]
    if wq.group_size:
        if not wq.four_bit:
            raise PreprocessError(
                f"XnnpackBackend: {node.name}: groupwise weights must be 4-bit (XNNPACK qbint4)"
            )
        inputs = data.shape[1]
        # the official visitor's asserts, word for word (its partitioner takes any group)
        if wq.group_size % 32:
            raise GroupSizeError(
                f"XnnpackBackend: {node.name}: Delegation to XNNPACK requires group_size to be "
                f"a multiple of 32, but got {wq.group_size}"
            )
        if inputs % wq.group_size:
            raise GroupSizeError(
                f"XnnpackBackend: {node.name}: For per_channel_group quant, expecting input "
                f"channels to be divisible by group_size, but got ic: {inputs}, group_size: "
                f"{wq.group_size}"
            )
        scales = wq.scales.to(torch.bfloat16)
        quant = S.PerChannelGroupQuant(
            scale=[],
            channel_dim=0,
            group_size=wq.group_size,
            scale_buffer_idx=_scale_buffer(b, scales),
            num_scales=scales.numel(),
        )
        return b.constant_data(
            pack_int4(data),
            (w_node, "qbint4"),
            datatype=S.XNNDatatype.qbint4,
            quant=quant,
            dims=list(data.shape),
        )
    if wq.four_bit:
        if not linear:
            raise PreprocessError(
                f"XnnpackBackend: {node.name}: 4-bit per-channel weights are supported on "
                "linears only"
            )
        inputs = int(data.shape[1])
        if inputs % 2:
            warnings.warn(
                f"XnnpackBackend: {node.name}: a 4-bit per-channel linear with an odd number "
                f"of inputs ({inputs}) is delegated as the official exporter delegates it, but "
                f"XNNPACK 1.5.1 (and our runtime, which computes what it computes) reads its "
                f"input in rows of {inputs + 1}: its outputs are not the model's. Use "
                "group-wise 4-bit weights or an even number of inputs",
                OddInt4InputsWarning,
                stacklevel=2,
            )
        # XNNPACK's qcint4: the official's bytes (rows padded to whole bytes), float32 scales
        return b.constant_data(
            pack_int4(data),
            (w_node, "qcint4", axis),
            datatype=S.XNNDatatype.qcint4,
            quant=_per_channel(b, wq.scales, axis),
            dims=list(data.shape),
        )
    if wq.per_tensor:
        return b.constant_data(
            data,
            (w_node, "qint8"),
            datatype=S.XNNDatatype.qint8,
            quant=S.PerTensorQuant(scale=float(wq.scales[0]), zero_point=0),
        )
    return b.constant_data(
        data,
        (w_node, "qcint8", axis),
        datatype=S.XNNDatatype.qcint8,
        quant=_per_channel(b, wq.scales, axis),
    )


def _bias(b: GraphBuilder, node: Node, wq: WeightQuant) -> int:
    bias = node.args[2] if len(node.args) > 2 else None
    if bias is None:
        return S.INVALID_ID
    x_spec = node.args[0].meta.get(XNN_QUANT)
    if x_spec is None or x_spec.datatype != S.XNNDatatype.qint8:
        # dynamic activations: a float32 bias whatever the model's float type (XNNPACK's
        # qd8-f16 and qd8-bf16 kernels take no other; the official visitor converts too)
        data = b.ctx.constant(bias)
        if data is None:
            return b.value(bias, False)
        b.note(bias)
        return b.constant_data(data.float(), (bias, "fp32"))
    data = b.ctx.constant(bias)
    if wq.per_tensor:
        # the official QuantParams.from_bias: the two Python floats' product
        scale = float(wq.scales[0]) * float(x_spec.params.scale)
        q = qd.quantize_per_tensor.default(
            data.to(torch.float32), scale, 0, INT32_MIN, INT32_MAX, torch.int32
        )
        return b.constant_data(
            q,
            (bias, "qint32"),
            datatype=S.XNNDatatype.qint32,
            quant=S.PerTensorQuant(scale=scale, zero_point=0),
        )
    scales = wq.scales * float(x_spec.params.scale)
    zeros = torch.zeros(scales.shape, dtype=torch.int64)
    q = qd.quantize_per_channel.default(
        data.to(torch.float32), scales, zeros, 0, INT32_MIN, INT32_MAX, torch.int32
    )
    return b.constant_data(
        q, (bias, "qcint32"), datatype=S.XNNDatatype.qcint32, quant=_per_channel(b, scales, 0)
    )


def _quantized_linear(b: GraphBuilder, node: Node) -> None:
    wq: WeightQuant = node.meta[XNN_QWEIGHT]
    x = b.value(node.args[0], False)
    w = _weight(b, node, b.ctx.constant(node.args[1]), wq, 0, True)
    bias_id = _bias(b, node, wq)
    out = b.define(node, False)
    b.emit(
        xnode("XNNFullyConnected", input1_id=x, filter_id=w, bias_id=bias_id, output_id=out),
        node.meta.get(MIN_MAX),
    )


def _listed(values: object) -> list[int]:
    return [values] if isinstance(values, int) else list(values)


def _quantized_conv(b: GraphBuilder, node: Node) -> None:
    """A 2-D convolution (direct, depthwise or transposed), or a 1-D one as a 2-D
    convolution of height 1 between a reshape and transposes (the official delegate's
    nodes), on quantized values."""
    x_node, w_node, _, stride, padding, dilation, transposed, out_pad, groups = node.args
    wq: WeightQuant = node.meta[XNN_QWEIGHT]
    weight = b.ctx.constant(w_node)
    if weight.dim() not in (3, 4):
        raise PreprocessError(f"XnnpackBackend: quantized convolution {node.name}: 1-D or 2-D only")
    one_d = weight.dim() == 3
    stride, padding, dilation, out_pad = (_listed(v) for v in (stride, padding, dilation, out_pad))
    if one_d:
        weight = weight.unsqueeze(2)
        stride, padding, dilation, out_pad = (
            [1, *stride], [0, *padding], [1, *dilation], [0, *out_pad]
        )  # fmt: skip
    else:
        stride, padding, dilation, out_pad = (
            v * 2 if len(v) == 1 else v for v in (stride, padding, dilation, out_pad)
        )
    groups = int(groups)
    if transposed:
        group_in, group_out = weight.shape[0] // groups, weight.shape[1]
    else:
        group_in, group_out = weight.shape[1], weight.shape[0] // groups
    depthwise = group_in == 1 and group_out % group_in == 0 and not transposed
    if depthwise:
        # [out, 1, kh, kw] -> [1, kh, kw, out]: output channels last
        data, axis = weight.permute(1, 2, 3, 0).contiguous(), 3
    elif transposed:
        # [in, out / g, kh, kw] -> [g * out / g, kh, kw, in / g], output channels first
        # (per-channel weights are quantized along torch's axis 1, XNNPACK's axis 0)
        shape = weight.shape
        swapped = weight.reshape(groups, shape[0] // groups, *shape[1:]).transpose(1, 2)
        swapped = swapped.reshape(shape[1] * groups, shape[0] // groups, *shape[2:])
        data, axis = swapped.permute(*TO_NHWC).contiguous(), 0
        weight = swapped
    else:
        data, axis = weight.permute(*TO_NHWC).contiguous(), 0
    filt = _weight(b, node, data, wq, axis, False)
    bias_id = _bias(b, node, wq)
    if one_d:
        x, y = rows_as_images(b, x_node, node)
    else:
        x, y = b.value(x_node, True), b.define(node, True)
    kind = _CONV_KINDS[depthwise, bool(transposed)]
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
        node.meta.get(MIN_MAX),
    )
    if one_d:
        images_as_rows(b, y, node)


# (depthwise, transposed) -> the node type
_CONV_KINDS = {
    (False, False): "XNNConv2d",
    (True, False): "XNNDepthwiseConv2d",
    (False, True): "XNNConvTranspose2d",
}


def _with_quantized(target: object, quantized) -> None:
    """``target``'s visitor takes the quantized path where the pass left weight scales."""
    key = op_key(target)
    float_visitor = VISITORS[key]

    def visit(b: GraphBuilder, node: Node) -> None:
        (quantized if XNN_QWEIGHT in node.meta else float_visitor)(b, node)

    VISITORS[key] = visit


_register_quant_ops()
LATE_REGISTRATIONS.append(_register_quant_ops)  # torchao's operators, once they exist
_with_quantized(aten.linear.default, _quantized_linear)
_with_quantized(aten.convolution.default, _quantized_conv)
