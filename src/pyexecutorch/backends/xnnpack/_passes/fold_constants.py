"""Nodes computed from constants only become constants (permutes of weights, ...).

A node feeding the partition's output stays: XNNPACK outputs are computed
values, never constants.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Node
from torch.utils import _pytree as pytree

from pyexecutorch.backends.xnnpack._passes.common import PassContext, absorb


def fold_constants(ctx: PassContext) -> None:
    graph = ctx.gm.graph
    output = next(n for n in graph.nodes if n.op == "output")
    for node in list(graph.nodes):
        if (
            node.op != "call_function"
            or node.target is operator.getitem
            or not node.all_input_nodes
            or output in node.users
            or not isinstance(node.meta.get("val"), torch.Tensor)
        ):
            continue
        if not all(ctx.is_constant(a) for a in node.all_input_nodes):
            continue
        values = {a: ctx.constant(a) for a in node.all_input_nodes}
        args, kwargs = pytree.tree_map_only(Node, values.__getitem__, (node.args, node.kwargs))
        with torch.no_grad():
            result = node.target(*args, **kwargs)
        if not isinstance(result, torch.Tensor):
            continue
        const = ctx.new_constant(result, node, node)
        absorb(const, *node.all_input_nodes)
        node.replace_all_uses_with(const)
        graph.erase_node(node)
