"""Quantize/dequantize nodes of a partition become quantization parameters of values.

PT2E graphs compute in float between ``dequantize -> op -> quantize`` pairs.
XNNPACK runs such an op on the int8 values themselves: the pass gives the
op's output the quantization parameters of the ``quantize`` after it (and of
the activation fused into it), points the op at the int8 values before the
``dequantize`` nodes, and removes the pairs, as the official delegate does
with its implicit q/dq nodes.  What remains:

- a ``quantize`` of a float value (a delegate input, a float op's output)
  and a ``dequantize`` read by a float op or a delegate output: ``XNNConvert``
  nodes (``meta[XNN_QUANT]`` on the quantize gives its output's datatype);
  dynamic quantization (scales chosen at run time) is always such a convert,
  to ``qdint8`` per token;
- weight dequantizations: the convolution or linear reads the int8 constant,
  with ``meta[XNN_QWEIGHT]`` holding its scales (per channel, or per group of
  input channels for 4-bit weights).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers quantized_decomposed
from torch.fx import Node

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack._passes.common import PassContext, absorb
from pyexecutorch.backends.xnnpack.partition.config import op_key
from pyexecutorch.backends.xnnpack.partition.quant_configs import conv_input_pad

XNN_QUANT = "xnn_quant"
XNN_QWEIGHT = "xnn_qweight"

qd = torch.ops.quantized_decomposed
aten = torch.ops.aten

STATIC_Q = (qd.quantize_per_tensor.default,)
STATIC_DQ = (qd.dequantize_per_tensor.default,)
_ACTIVATIONS = (aten.relu.default, aten.hardtanh.default)
_GEMMS = (aten.convolution.default, aten.linear.default)


@dataclass(frozen=True)
class QuantSpec:
    """How a value is quantized: its XNNPACK datatype and parameters table."""

    datatype: S.XNNDatatype
    params: Any  # S.PerTensorQuant | S.PerTokenDynamicQuant


@dataclass(frozen=True)
class WeightQuant:
    """A quantized constant weight: int8 values (4-bit ones in [-8, 7]) and their scales
    (``[out]`` per channel, ``[out, in // group_size]`` per group, ``[1]`` per tensor)."""

    scales: torch.Tensor
    axis: int
    group_size: int  # 0: per channel (or per tensor)
    four_bit: bool
    per_tensor: bool = False


def _ops(namespace: str, *names: str) -> tuple:
    ns = getattr(torch.ops, namespace)
    found = []
    for name in names:
        try:
            found.append(getattr(ns, name).default)
        except (AttributeError, RuntimeError):
            pass
    return tuple(found)


# Ops XNNPACK runs on int8 values, as the official partitioner's configs with the
# STATIC_QUANT precision; any other op between a dequantize and a quantize (hardswish,
# sigmoid, div, ...) computes in float, its q/dq pairs staying converts.
_STATIC_QUANT_OPS = frozenset(
    {
        op_key(o)
        for o in (
            *_GEMMS,
            *_ACTIVATIONS,
            aten.add.Tensor,
            aten.mul.Tensor,
            aten.cat.default,
            aten.clamp.default,
            aten.max_pool2d.default,
            aten.max_pool2d_with_indices.default,
            aten.mean.dim,
            aten.permute_copy.default,
            aten.view_copy.default,
            aten.slice_copy.Tensor,
            aten.unsqueeze_copy.default,
        )
    }
    | {"dim_order_ops::_clone_dim_order.default", "dim_order_ops::_to_dim_order_copy.default"}
)


def torchao_ops() -> tuple:
    """``(choose_qparams_affine, quantize_affine, dequantize_affine)`` where torchao is
    loaded (empty otherwise)."""
    return _ops("torchao", "choose_qparams_affine", "quantize_affine", "dequantize_affine")


def dynamic_quantizers() -> tuple:
    """Quantize operators whose scales a graph chooses at run time."""
    return (qd.quantize_per_tensor.tensor, *_ops("torchao", "quantize_affine"))


def dynamic_dequantizers() -> tuple:
    return (qd.dequantize_per_tensor.tensor, *_ops("torchao", "dequantize_affine"))


def qparam_choosers() -> tuple:
    return (qd.choose_qparams.tensor, *_ops("torchao", "choose_qparams_affine"))


def weight_dequantizers() -> tuple:
    return (
        qd.dequantize_per_channel.default,
        qd.dequantize_per_tensor.default,
        *_ops("torchao", "dequantize_affine"),
    )


def per_tensor(scale: float, zero_point: int) -> QuantSpec:
    return QuantSpec(S.XNNDatatype.qint8, S.PerTensorQuant(float(scale), int(zero_point)))


def per_token(nonbatch_dims: int = 1) -> QuantSpec:
    """``qdint8`` with parameters chosen per row of the last ``nonbatch_dims`` dims."""
    return QuantSpec(S.XNNDatatype.qdint8, S.PerTokenDynamicQuant(num_nonbatch_dims=nonbatch_dims))


def _static_spec(q: Node) -> QuantSpec:
    return per_tensor(q.args[1], q.args[2])


def is_dynamic_quantize(ctx: PassContext, node: Node) -> bool:
    """A quantize whose scale comes from a ``choose_qparams`` in the graph."""
    if node.op != "call_function" or node.target not in dynamic_quantizers():
        return False
    scale = node.args[2] if node.target in torchao_ops() else node.args[1]
    return (
        isinstance(scale, Node)
        and scale.target is operator.getitem
        and scale.args[0].target in qparam_choosers()
    )


def weight_quant(ctx: PassContext, dq: Node) -> WeightQuant | None:
    """The quantization of a dequantized constant weight, or None if ``dq`` is not one."""
    if dq.op != "call_function" or dq.target not in weight_dequantizers():
        return None
    data = ctx.constant(dq.args[0])
    if data is None or data.dtype != torch.int8 or data.dim() not in (2, 3, 4):
        return None
    if dq.target == qd.dequantize_per_tensor.default:
        # dequantize_per_tensor(input, scale, zero_point, qmin, qmax, dtype): symmetric only
        if int(dq.args[2]) != 0:
            return None
        scale = torch.tensor([float(dq.args[1])], dtype=torch.float64)  # the Python float
        return WeightQuant(scale, 0, 0, False, per_tensor=True)
    if dq.target == qd.dequantize_per_channel.default:
        scales = ctx.constant(dq.args[1])
        axis, qmin, qmax = int(dq.args[3]), int(dq.args[4]), int(dq.args[5])
        if scales is None or scales.dim() != 1:
            return None
        return WeightQuant(scales, axis, 0, (qmin, qmax) == (-8, 7))
    # torchao::dequantize_affine(input, block_size, scale, zero_point, dtype, qmin, qmax)
    block = list(dq.args[1])
    scales = ctx.constant(dq.args[2])
    zero = ctx.constant(dq.args[3]) if len(dq.args) > 3 and dq.args[3] is not None else None
    qmin = dq.args[5] if len(dq.args) > 5 else -128
    qmax = dq.args[6] if len(dq.args) > 6 else 127
    if scales is None or data.dim() != 2 or len(block) != 2 or block[0] != 1:
        return None
    if zero is not None and bool((zero != 0).any()):
        return None  # XNNPACK weights are symmetric
    four_bit = (qmin, qmax) == (-8, 7)
    group = int(block[1])
    scales = scales.reshape(data.shape[0], -1)
    if group >= data.shape[1] and not four_bit:
        return WeightQuant(scales.reshape(-1), 0, 0, False)
    return WeightQuant(scales, 0, group, four_bit)


def _input_pad(node: Node) -> Node | None:
    """A zero padding between a direct convolution and its static dequantize, run on the
    int8 values (the official delegate's quantized XNNStaticConstantPad)."""
    return conv_input_pad(node) if node.op == "call_function" else None


def _quantized_op(ctx: PassContext, node: Node) -> bool:
    """An op computed between dequantizes and one quantize: every activation input is
    a static dequantize (a convolution's through a zero padding), weights are quantized
    constants, its output (through at most one relu/hardtanh) reaches a single quantize."""
    if node.op != "call_function" or op_key(node.target) not in _STATIC_QUANT_OPS:
        return False
    inputs = node.all_input_nodes
    if not inputs:
        return False
    if node.target in _GEMMS and weight_quant(ctx, node.args[1]) is None:
        return False
    for a in inputs:
        if a.target in STATIC_DQ or (node.target in _GEMMS and a is node.args[1]):
            continue
        if a is _input_pad(node):
            continue
        if node.target in _GEMMS and len(node.args) > 2 and a is node.args[2]:
            if ctx.is_constant(a):
                continue
        return False
    return _output_quantize(node) is not None


def _output_quantize(node: Node) -> Node | None:
    users = list(node.users)
    if len(users) != 1:
        return None
    out = users[0]
    if out.op == "call_function" and out.target in _ACTIVATIONS and len(out.users) == 1:
        out = next(iter(out.users))
    return out if out.op == "call_function" and out.target in STATIC_Q else None


def fold_quantization(ctx: PassContext) -> None:
    graph = ctx.gm.graph
    nodes = list(graph.nodes)
    quantized = {n for n in nodes if _quantized_op(ctx, n)}

    # Outputs of quantized ops carry their quantize's parameters.
    for op in quantized:
        q = _output_quantize(op)
        spec = _static_spec(q)
        chain = [op]
        if q.args[0] is not op:
            chain.append(q.args[0])  # the activation between them
        for n in chain:
            n.meta[XNN_QUANT] = spec
        absorb(op, q)
        q.replace_all_uses_with(chain[-1])
        graph.erase_node(q)

    # A padding before a quantized convolution pads the int8 values (with their zero
    # point): it reads the dequantize's input and keeps its parameters.
    for op in list(quantized):
        pad = _input_pad(op)
        if pad is not None:
            dq = pad.args[0]
            pad.meta[XNN_QUANT] = per_tensor(dq.args[1], dq.args[2])
            quantized.add(pad)

    # Weights: the GEMM reads the int8 constant.
    for op in [n for n in nodes if n in quantized or _dynamic_gemm(ctx, n)]:
        if op.target not in _GEMMS:
            continue
        dq = op.args[1]
        wq = weight_quant(ctx, dq)
        if wq is None:
            continue
        op.meta[XNN_QWEIGHT] = wq
        op.replace_input_with(dq, dq.args[0])
        bias = op.args[2] if len(op.args) > 2 else None
        absorb(op, dq, *([bias] if isinstance(bias, Node) else []))
        if not dq.users:
            graph.erase_node(dq)

    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in STATIC_Q:
            node.meta[XNN_QUANT] = _static_spec(node)  # a convert from float
        elif is_dynamic_quantize(ctx, node):
            # a convolution's input is quantized per image (C, H, W), a linear's per row
            node.meta[XNN_QUANT] = per_token(3 if _feeds_convolution(node) else 1)
        elif node.target in STATIC_DQ or (
            node.target in dynamic_dequantizers() and is_dynamic_quantize(ctx, node.args[0])
        ):
            _bypass_dequantize(ctx, node, quantized)
    graph.eliminate_dead_code()


def _feeds_convolution(q: Node) -> bool:
    return any(_is_conv(u) for dq in q.users for u in dq.users)


def _is_conv(node: Node) -> bool:
    return node.op == "call_function" and node.target == aten.convolution.default


def _dynamic_gemm(ctx: PassContext, node: Node) -> bool:
    """A linear or 2-D convolution on a dynamically quantized activation and a quantized
    constant weight."""
    if node.op != "call_function" or node.target not in _DYNAMIC_GEMMS:
        return False
    if _is_conv(node) and node.args[1].meta["val"].dim() != 4:
        return False
    x = node.args[0]
    return (
        isinstance(x, Node)
        and x.target in dynamic_dequantizers()
        and is_dynamic_quantize(ctx, x.args[0])
        and weight_quant(ctx, node.args[1]) is not None
    )


def _bypass_dequantize(ctx: PassContext, dq: Node, quantized: set[Node]) -> None:
    """Quantized readers of ``dq`` read its int8 input; float readers keep the
    dequantize (a convert)."""
    src = dq.args[0]
    if dq.target in STATIC_DQ and XNN_QUANT not in src.meta:
        src.meta[XNN_QUANT] = per_tensor(dq.args[1], dq.args[2])
    for user in list(dq.users):
        if user in quantized or (dq.target not in STATIC_DQ and _reads_dynamic(user, dq)):
            user.replace_input_with(dq, src)
    if not dq.users:
        absorb(src, dq)
        ctx.gm.graph.erase_node(dq)


def _reads_dynamic(user: Node, dq: Node) -> bool:
    return user.op == "call_function" and user.target in _DYNAMIC_GEMMS and user.args[0] is dq


_DYNAMIC_GEMMS = (aten.linear.default, aten.convolution.default)


__all__ = ["XNN_QUANT", "XNN_QWEIGHT", "QuantSpec", "WeightQuant", "fold_quantization"]
