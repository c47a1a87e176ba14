"""``addmm``/``mm`` on ``permute_copy(w, [1, 0])`` of a constant ``w`` become ``linear``;
a linear between the two reshapes of a decomposed ``nn.Linear`` (a rank > 2 input
flattened to rows, the rows' outputs shaped back) reads the input as it is, as the
official ConvertToLinearPass makes it: XNNPACK's fully connected takes any rank."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from pyexecutorch.backends.xnnpack._passes.common import PassContext, absorb
from pyexecutorch.backends.xnnpack._passes.quantized import XNN_QUANT

aten = torch.ops.aten


def _is_weight(ctx: PassContext, node: object) -> bool:
    """A constant, or the dequantization of one (a quantized weight, before the
    quantization passes fold it)."""
    if ctx.is_constant(node):
        return True
    return (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and "dequantize" in str(node.target)
        and ctx.is_constant(node.args[0])
    )


def _transposed_constant(ctx: PassContext, node: object) -> object:
    if (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and node.target == aten.permute_copy.default
        and list(node.args[1]) == [1, 0]
        and _is_weight(ctx, node.args[0])
    ):
        return node.args[0]
    return None


def convert_to_linear(ctx: PassContext) -> None:
    graph = ctx.gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.kwargs:
            continue
        if node.target == aten.addmm.default and len(node.args) == 3:
            bias, x, mat2 = node.args
        elif node.target == aten.mm.default:
            bias, (x, mat2) = None, node.args
        else:
            continue
        weight = _transposed_constant(ctx, mat2)
        if weight is None:
            continue
        with graph.inserting_before(node):
            linear = graph.call_function(aten.linear.default, (x, weight, bias))
        linear.meta = dict(node.meta)
        absorb(linear, mat2)
        node.replace_all_uses_with(linear)
        graph.erase_node(node)
        if not mat2.users:
            graph.erase_node(mat2)


def _same_dims(a: Sequence[object], b: Sequence[object]) -> bool:
    """Equal sizes, symbolic ones where their shape environment proves it without adding
    a guard (two batch dims of one size ``s`` are reshaped back as ``(s, s**2 // s)``)."""
    return len(a) == len(b) and all(
        statically_known_true(x == y) for x, y in zip(a, b, strict=True)
    )


def _shape(node: object) -> tuple | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def fold_linear_reshapes(ctx: PassContext) -> None:
    graph = ctx.gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target != aten.linear.default:
            continue
        rows, users = node.args[0], list(node.users)
        if not (
            isinstance(rows, torch.fx.Node)
            and rows.target == aten.view_copy.default
            and len(rows.users) == 1
            and len(users) == 1
            and users[0].target == aten.view_copy.default
        ):
            continue
        x, out = rows.args[0], users[0]
        # quantized values keep their parameters through a reshape; anything else stays
        if rows.meta.get(XNN_QUANT) != x.meta.get(XNN_QUANT) or out.meta.get(
            XNN_QUANT
        ) != node.meta.get(XNN_QUANT):
            continue
        x_shape, out_shape = _shape(x), _shape(out)
        if x_shape is None or out_shape is None or len(x_shape) < 3:
            continue
        # the input's leading dims, flattened into rows and restored after: one linear
        if not (
            _same_dims(x_shape[:-1], out_shape[:-1]) and _same_dims(x_shape[-1:], _shape(rows)[-1:])
        ):
            continue
        node.replace_input_with(rows, x)
        # sized by the input's leading dims: the reshape back may spell them otherwise
        # (s**2 // s for s), which bounds far above them
        node.meta["val"] = x.meta["val"].new_empty(
            (*x_shape[:-1], out_shape[-1]), dtype=out.meta["val"].dtype
        )
        absorb(node, rows, out)
        out.replace_all_uses_with(node)
        graph.erase_node(out)
        graph.erase_node(rows)
