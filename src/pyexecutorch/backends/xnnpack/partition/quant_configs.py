"""Quantized op configs: what XNNPACK takes from PT2E and torchao quantized graphs.

Static quantization (``STATIC_QUANT``): int8 per-tensor quantize/dequantize
nodes, per-channel int8 weight dequantizations, and convolutions/linears that
read them.  Dynamic quantization (``DYNAMIC_QUANT``): the ``choose_qparams``,
quantize and dequantize nodes of activations quantized at run time (int8 per
tensor or per token), and linears on int8 per-channel or 4-bit groupwise
weights.  The float configs take the ops between quantize/dequantize pairs
(add, multiply, concatenation, pooling, clamps, reshapes); the XNNPACK passes
then run them on the quantized values.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers quantized_decomposed
from torch.export import ExportedProgram
from torch.fx import Node

from pyexecutorch.backends.xnnpack.partition.config import (
    ConfigPrecisionType,
    OpConfig,
    arg,
    is_constant,
    linear_source_partition,
    rank,
    register_configs,
)

STATIC = ConfigPrecisionType.STATIC_QUANT
DYNAMIC = ConfigPrecisionType.DYNAMIC_QUANT
aten = torch.ops.aten
qd = torch.ops.quantized_decomposed
_SUBCLASS_ACCESS = "export::access_subclass_inner_tensor"


def _torchao(name: str):
    try:
        return getattr(torch.ops.torchao, name).default
    except (AttributeError, RuntimeError):
        return None


def _constant(ep: ExportedProgram, node: object) -> bool:
    """A constant, or (before decomposition) a part of a constant tensor subclass."""
    if is_constant(ep, node):
        return True
    return (
        isinstance(node, Node)
        and node.op == "call_function"
        and getattr(node.target, "name", lambda: "")() == _SUBCLASS_ACCESS
        and is_constant(ep, node.args[0])
    )


def _dtype_of(node: object) -> torch.dtype | None:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return getattr(val, "dtype", None)


def _int8_range(qmin: object, qmax: object) -> str | None:
    if not (isinstance(qmin, int) and isinstance(qmax, int) and -128 <= qmin < qmax <= 127):
        return f"quantization range [{qmin}, {qmax}] is not signed 8-bit"
    return None


# ------------------------------------------------------------------ static


def _q_per_tensor(node: Node, ep: ExportedProgram) -> str | None:
    if node.args[5] != torch.int8:
        return f"quantizes to {node.args[5]} (XNNPACK takes signed int8)"
    return _int8_range(node.args[3], node.args[4])


def _dq_per_tensor(node: Node, ep: ExportedProgram) -> str | None:
    if node.args[5] != torch.int8 or _dtype_of(node.args[0]) not in (torch.int8, None):
        return f"dequantizes {node.args[5]} (XNNPACK takes signed int8)"
    return _int8_range(node.args[3], node.args[4])


def weight_problem(
    ep: ExportedProgram, dq: object, channel_axis: int = 0, four_bit_per_channel: bool = False
) -> str | None:
    """Why ``dq`` is not a dequantized constant weight XNNPACK can take (per channel:
    along ``channel_axis``, the weight's output channels). 4-bit per-channel weights
    (XNNPACK's qcint4) only where ``four_bit_per_channel``: a linear on dynamically
    quantized rows, the one qc4w form checked against the official runtime."""
    if not isinstance(dq, Node) or dq.op != "call_function":
        return "weight is not dequantized"
    if dq.target == qd.dequantize_per_tensor.default:
        if not _constant(ep, dq.args[0]):
            return "per-tensor weight is not a constant"
        return _int8_range(dq.args[3], dq.args[4])
    if dq.target == qd.dequantize_per_channel.default:
        if not (_constant(ep, dq.args[0]) and _constant(ep, dq.args[1])):
            return "per-channel weight or scales are not constants"
        if int(dq.args[3]) != channel_axis:
            return (
                f"weight quantized along axis {dq.args[3]} (output channels, axis "
                f"{channel_axis}, only)"
            )
        if (dq.args[4], dq.args[5]) == (-8, 7):
            return None if four_bit_per_channel else "4-bit per-channel weights"
        return _int8_range(dq.args[4], dq.args[5])
    if dq.target == _torchao("dequantize_affine"):
        if not (_constant(ep, dq.args[0]) and _constant(ep, dq.args[2])):
            return "affine weight or scales are not constants"
        block = list(dq.args[1])
        qmin, qmax = arg(dq, 5, "quant_min", -128), arg(dq, 6, "quant_max", 127)
        if len(block) != 2 or block[0] != 1:
            return f"weight block size {block} (one row of groups only)"
        k = (dq.args[0].meta["val"].shape[1]) if "val" in dq.args[0].meta else block[1]
        if (qmin, qmax) == (-8, 7):
            # any group size, as the official partitioner: XNNPACK's (multiples of 32
            # dividing the inputs) is enforced at preprocess, by the official's assert
            return None if block[1] > 0 else f"4-bit groups of {block[1]}"
        if block[1] < k:
            return f"8-bit groups of {block[1]} (per channel only)"
        return _int8_range(qmin, qmax)
    return "weight is not dequantized per channel"


def _weight_deps(node: Node) -> list[Node]:
    dq = node.args[1]
    return [dq, *dq.all_input_nodes] if isinstance(dq, Node) else []


def _is_static_dq(node: object) -> bool:
    return isinstance(node, Node) and node.target == qd.dequantize_per_tensor.default


def _bias_problem(node: Node, ep: ExportedProgram) -> str | None:
    bias = node.args[2] if len(node.args) > 2 else None
    if bias is not None and not _constant(ep, bias):
        return "bias is not a constant"
    return None


def _gemm_deps(node: Node, ep: ExportedProgram) -> list[Node]:
    bias = node.args[2] if len(node.args) > 2 else None
    return _weight_deps(node) + ([bias] if isinstance(bias, Node) else [])


def conv_input_pad(conv: Node) -> Node | None:
    """The zero padding between a direct convolution and its dequantized input (an
    even-kernel 'same' convolution decomposes so), which XNNPACK runs on the int8
    values, as the official ConvolutionConfig takes it: its only reader, non-negative
    amounts on the spatial dimensions only."""
    pad = conv.args[0]
    if conv.target != aten.convolution.default or conv.args[6] or not isinstance(pad, Node):
        return None
    if pad.target != aten.constant_pad_nd.default or len(pad.users) != 1:
        return None
    amounts, value = list(pad.args[1]), arg(pad, 2, "value", 0.0)
    spatial = 2 * (rank(conv.args[1]) - 2)
    if value != 0 or any(a < 0 for a in amounts) or any(amounts[spatial:]):
        return None
    return pad if _is_static_dq(pad.args[0]) else None


def _static_gemm_deps(node: Node, ep: ExportedProgram) -> list[Node]:
    """Weight and bias, the input's dequantize (and a padding before it) and the output's
    quantize (through a fused activation): one group, never split across delegates."""
    pad = conv_input_pad(node)
    deps = [*_gemm_deps(node, ep), node.args[0], *([pad.args[0]] if pad else [])]
    users = list(node.users)
    if len(users) == 1 and users[0].target in _STATIC_GEMM_ACTS:
        deps.append(users[0])
        users = list(users[0].users)
    if len(users) == 1 and users[0].target == qd.quantize_per_tensor.default:
        deps.append(users[0])
    return deps


_STATIC_GEMM_ACTS = (aten.relu.default, aten.hardtanh.default)


def _static_gemm(node: Node, ep: ExportedProgram) -> str | None:
    if not (_is_static_dq(node.args[0]) or conv_input_pad(node)):
        return "input is not dequantized per tensor"
    # The input's own dequantize is checked by its config, but a legacy addmm/mm takes
    # its whole source partition with it: an int16 activation must not come along.
    input_problem = _dq_per_tensor(node.args[0], ep) if _is_static_dq(node.args[0]) else None
    return (
        input_problem
        or weight_problem(ep, node.args[1], _channel_axis(node))
        or _bias_problem(node, ep)
    )


def _channel_axis(gemm: Node) -> int:
    """The weight axis of a GEMM's output channels: 1 for a transposed convolution
    ([in, out / groups, kh, kw]), else 0."""
    transposed = gemm.target == aten.convolution.default and bool(gemm.args[6])
    return 1 if transposed else 0


_CONV_WEIGHT_DQ = (qd.dequantize_per_channel.default, qd.dequantize_per_tensor.default)


def _conv_problem(node: Node, ep: ExportedProgram, kind: str, ranks: tuple[int, ...]) -> str | None:
    """What the official ConvolutionConfig refuses for a quantized convolution."""
    weight = node.args[1]
    if rank(weight) not in ranks:
        dims = " and ".join(f"{r - 2}-D" for r in ranks)
        return f"{rank(weight) - 2}-D {kind} convolution ({dims} only)"
    if not isinstance(weight, Node) or weight.target not in _CONV_WEIGHT_DQ:
        return "convolution weight is not dequantized per channel or per tensor"
    per_channel = weight.target == qd.dequantize_per_channel.default
    if node.args[6] and per_channel and int(node.args[8]) != 1:
        return "transposed convolution with groups and per-channel weights"
    return None


def _static_conv(node: Node, ep: ExportedProgram) -> str | None:
    return _conv_problem(node, ep, "quantized", (3, 4)) or _static_gemm(node, ep)


def _dq_per_channel(node: Node, ep: ExportedProgram) -> str | None:
    users = list(node.users)
    if not users or any(
        u.target not in (aten.convolution.default, aten.linear.default) for u in users
    ):
        return "per-channel dequantization not read by a convolution or linear"
    axes = {_channel_axis(u) for u in users}
    if len(axes) != 1:
        return "per-channel weight read as both a transposed and a direct convolution"
    return weight_problem(ep, node, axes.pop())


def _weight_constants(node: Node, ep: ExportedProgram) -> list[Node]:
    return list(node.all_input_nodes)


# ------------------------------------------------------------------ dynamic


def _choose_qparams(node: Node, ep: ExportedProgram) -> str | None:
    if _dtype_of(node.args[0]) != torch.float32:
        return "choose_qparams of a non-float32 input"
    if any(u.target is not operator.getitem for u in node.users):
        return "choose_qparams results read directly"
    return None


def _getitems(node: Node, ep: ExportedProgram) -> list[Node]:
    return list(node.users)


def _scale_source(node: Node) -> Node | None:
    scale = node.args[2] if node.target == _torchao("quantize_affine") else node.args[1]
    if isinstance(scale, Node) and scale.target is operator.getitem:
        return scale.args[0]
    return None


def _dynamic_q(node: Node, ep: ExportedProgram) -> str | None:
    source = _scale_source(node)
    if source is None or source.target not in _choosers():
        return "scales are not chosen at run time"
    if node.target == _torchao("quantize_affine"):
        block, n = list(node.args[1]), rank(node.args[0])
        if block[:-1] != [1] * (n - 1) or block[-1] != node.args[0].meta["val"].shape[-1]:
            return f"dynamic block size {block} (per token only)"
        if arg(node, 4, "output_dtype", None) != torch.int8:
            return "dynamic quantization to a type other than int8"
        return _int8_range(arg(node, 5, "quant_min", -128), arg(node, 6, "quant_max", 127))
    return _int8_range(node.args[3], node.args[4])


def _dynamic_deps(node: Node, ep: ExportedProgram) -> list[Node]:
    # the scale and zero point picked at run time, not a getitem quantized (a norm's output)
    return [
        n
        for n in node.all_input_nodes
        if n.target is operator.getitem and n.args[0].target in _choosers()
    ]


def _dynamic_dq(node: Node, ep: ExportedProgram) -> str | None:
    src = node.args[0]
    if not isinstance(src, Node) or src.target not in _dynamic_quantizers():
        return "not the dequantization of a dynamic quantization"
    return _dynamic_q(src, ep)


def _dynamic_linear(node: Node, ep: ExportedProgram) -> str | None:
    x = node.args[0]
    if not isinstance(x, Node) or x.target not in _dynamic_dequantizers():
        return "input is not dynamically quantized"
    weight = node.args[1]
    if isinstance(weight, Node) and weight.target == qd.dequantize_per_tensor.default:
        # XNNPACK has no such kernel; the official GEMM configs refuse it too
        return "per-tensor weights with dynamically quantized activations (per channel only)"
    # the official delegates qd8-qc4w linears (XNNPACK's qcint4 filter) as any other
    qc4w = node.target == aten.linear.default
    return weight_problem(ep, weight, _channel_axis(node), qc4w) or _bias_problem(node, ep)


def _dynamic_gemm_deps(node: Node, ep: ExportedProgram) -> list[Node]:
    """Weight and bias, and the run-time quantization of the input (choose_qparams, its
    getitems, quantize, dequantize): one group, shared by every linear reading it."""
    dq = node.args[0]
    q = dq.args[0]
    return [*_gemm_deps(node, ep), dq, q, *_dynamic_deps(q, ep), _scale_source(q)]


def _dynamic_conv(node: Node, ep: ExportedProgram) -> str | None:
    problem = _conv_problem(node, ep, "dynamically quantized", (4,))
    if problem:
        return problem
    shape = node.args[1].meta["val"].shape
    # one input channel a group: the official is_depthwise_conv (transposed ones too)
    group_in = shape[0] // int(node.args[8]) if node.args[6] else shape[1]
    if group_in == 1:
        return "depthwise dynamically quantized convolution (standard 2-D only)"
    return _dynamic_linear(node, ep)


def _affine_dq(node: Node, ep: ExportedProgram) -> str | None:
    """torchao's dequantize_affine: a weight (read by a linear) or a dynamic activation."""
    if _constant(ep, node.args[0]):
        if not node.users or any(u.target != aten.linear.default for u in node.users):
            return "affine weight dequantization not read by a linear"
        return weight_problem(ep, node)
    return _dynamic_dq(node, ep)


def _choosers() -> tuple:
    return tuple(op for op in (qd.choose_qparams.tensor, _torchao("choose_qparams_affine")) if op)


def _dynamic_quantizers() -> tuple:
    return tuple(op for op in (qd.quantize_per_tensor.tensor, _torchao("quantize_affine")) if op)


def _dynamic_dequantizers() -> tuple:
    return tuple(
        op for op in (qd.dequantize_per_tensor.tensor, _torchao("dequantize_affine")) if op
    )


# ------------------------------------------------------------------ legacy addmm / mm


@dataclass(frozen=True)
class _LinearView:
    """The ``linear`` a decomposed ``nn.Linear`` stands for (to_edge's addmm or mm between
    reshapes, on a transposed weight): what the linear configs read of a node."""

    args: tuple
    users: dict
    target: object = aten.linear.default


def _linear_view(node: Node) -> _LinearView | None:
    """``node`` (addmm/mm of an nn.Linear source partition) seen as that linear, as the
    official AddmmConfig fakes one: the partition's activation input, the weight before
    its transpose, the bias, and the readers of the partition's output."""
    part = linear_source_partition(node)
    if part is None:
        return None
    addmm = node.target == aten.addmm.default
    act, weight = (node.args[1], node.args[2]) if addmm else node.args[:2]
    bias = node.args[0] if addmm else None
    while isinstance(act, Node) and act not in part.input_nodes and act.all_input_nodes:
        act = act.all_input_nodes[0]
    if not (
        isinstance(weight, Node)
        and weight.target == aten.permute_copy.default
        and list(weight.args[1]) == [1, 0]
    ):
        return None
    return _LinearView((act, weight.args[0], bias), part.output_nodes[0].users)


def _legacy(check: Callable, deps: Callable) -> tuple[Callable, Callable]:
    """A linear config's check and deps for an addmm/mm of a decomposed nn.Linear: its
    source partition goes whole (reshapes, transpose), with the linear's own deps."""

    def legacy_check(node: Node, ep: ExportedProgram) -> str | None:
        view = _linear_view(node)
        if view is None:
            return "not the addmm/mm of an nn.Linear source partition on a transposed weight"
        return check(view, ep)

    def legacy_deps(node: Node, ep: ExportedProgram) -> list[Node]:
        view = _linear_view(node)
        part = linear_source_partition(node)
        return [n for n in (*part.nodes, *deps(view, ep)) if n is not node]

    return legacy_check, legacy_deps


def quantized_configs() -> list[OpConfig]:
    raw = dict(check_dtypes=False)
    configs = [
        OpConfig(
            "QuantizedPerTensorConfig", qd.quantize_per_tensor.default, STATIC, _q_per_tensor, **raw
        ),
        OpConfig(
            "DeQuantizedPerTensorConfig",
            qd.dequantize_per_tensor.default,
            STATIC,
            _dq_per_tensor,
            **raw,
        ),
        OpConfig(
            "DeQuantizedPerChannelConfig",
            qd.dequantize_per_channel.default,
            STATIC,
            _dq_per_channel,
            _weight_constants,
            **raw,
        ),
        OpConfig(
            "QuantizedConvolutionConfig",
            aten.convolution.default,
            STATIC,
            _static_conv,
            _static_gemm_deps,
        ),
        OpConfig(
            "QuantizedLinearConfig",
            aten.linear.default,
            STATIC,
            _static_gemm,
            _static_gemm_deps,
            keep_whole=True,
        ),
        OpConfig(
            "DeQuantizedPerChannelConfig",
            qd.dequantize_per_channel.default,
            DYNAMIC,
            _dq_per_channel,
            _weight_constants,
            **raw,
        ),
        OpConfig(
            "ChooseQParamsConfig",
            qd.choose_qparams.tensor,
            DYNAMIC,
            _choose_qparams,
            _getitems,
            **raw,
        ),
        OpConfig(
            "QuantizeDynamicConfig",
            qd.quantize_per_tensor.tensor,
            DYNAMIC,
            _dynamic_q,
            _dynamic_deps,
            **raw,
        ),
        OpConfig(
            "DeQuantizeDynamicConfig",
            qd.dequantize_per_tensor.tensor,
            DYNAMIC,
            _dynamic_dq,
            _dynamic_deps,
            **raw,
        ),
        OpConfig(
            "DynamicQuantizedConvolutionConfig",
            aten.convolution.default,
            DYNAMIC,
            _dynamic_conv,
            _dynamic_gemm_deps,
        ),
        OpConfig(
            "DynamicQuantizedLinearConfig",
            aten.linear.default,
            DYNAMIC,
            _dynamic_linear,
            _dynamic_gemm_deps,
            keep_whole=True,
        ),
    ]
    for op in (aten.addmm.default, aten.mm.default):
        configs += [
            OpConfig("QuantizedAddmmConfig", op, STATIC, *_legacy(_static_gemm, _static_gemm_deps)),
            OpConfig(
                "DynamicQuantizedAddmmConfig",
                op,
                DYNAMIC,
                *_legacy(_dynamic_linear, _dynamic_gemm_deps),
            ),
        ]
    chooser, quantizer, dequantizer = (
        _torchao(n) for n in ("choose_qparams_affine", "quantize_affine", "dequantize_affine")
    )
    if chooser is not None:
        configs += [
            OpConfig(
                "ChooseQParamsAffineConfig", chooser, DYNAMIC, _choose_qparams, _getitems, **raw
            ),
            OpConfig("QuantizeAffineConfig", quantizer, DYNAMIC, _dynamic_q, _dynamic_deps, **raw),
            OpConfig(
                "DeQuantizeAffineConfig", dequantizer, DYNAMIC, _affine_dq, _affine_deps, **raw
            ),
        ]
    return configs


def _affine_deps(node: Node, ep: ExportedProgram) -> list[Node]:
    if _constant(ep, node.args[0]):
        return list(node.all_input_nodes)
    return _dynamic_deps(node, ep)


register_configs(quantized_configs())

__all__ = ["quantized_configs", "weight_problem"]
