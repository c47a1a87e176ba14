"""Runtime asserts and shape constraints are dropped (the runtime checks shapes)."""

from __future__ import annotations

import torch
from torch.fx import GraphModule

from pyexecutorch.exir.graph_utils import graph_modules

aten = torch.ops.aten

ASSERT_OPS = frozenset(
    {
        aten._assert_async.msg,
        aten._assert_scalar.default,
        aten.sym_constrain_range_for_size.default,
        aten.sym_constrain_range.default,
        aten._assert_tensor_metadata.default,
    }
)


def remove_asserts(gm: GraphModule, ops=ASSERT_OPS) -> bool:
    changed = False
    for g in graph_modules(gm):
        for node in reversed(list(g.graph.nodes)):
            if node.op == "call_function" and node.target in ops:
                g.graph.erase_node(node)
                changed = True
    if changed:
        eliminate_dead_code(gm)
    return changed


def eliminate_dead_code(gm: GraphModule) -> None:
    for g in graph_modules(gm):
        g.graph.eliminate_dead_code()
