"""``addmm``/``mm`` on ``permute_copy(w, [1, 0])`` of a constant ``w`` become ``linear``."""

from __future__ import annotations

import torch

from pyexecutorch.backends.xnnpack._passes.common import PassContext, absorb

aten = torch.ops.aten


def _transposed_constant(ctx: PassContext, node: object) -> object:
    if (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and node.target == aten.permute_copy.default
        and list(node.args[1]) == [1, 0]
        and ctx.is_constant(node.args[0])
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
