"""ATen operators to edge operators: the last step of ``to_edge``.

Every ``OpOverload`` target (ATen or custom) becomes the ``EdgeOpOverload`` standing
for it, in the graph and in every control-flow submodule; symbolic-size and assertion
operators stay torch's, as in the official dialect.
"""

from __future__ import annotations

from typing import Any

from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from pyexecutorch.exir.dialects.edge._ops import EdgeOpOverload, edge_op, lowers_to_edge
from pyexecutorch.exir.graph_utils import graph_modules


def aten_to_edge(aten_op: Any) -> EdgeOpOverload:
    """The edge operator for a torch operator overload."""
    return edge_op(aten_op)


def should_lower_to_edge(op: Any) -> bool:
    """Whether ``op`` becomes an edge operator in an edge graph."""
    return lowers_to_edge(op)


def replace_aten_with_edge(gm: GraphModule) -> bool:
    """Swap the targets in place; whether any changed."""
    changed = False
    for g in graph_modules(gm):
        for node in g.graph.nodes:
            if node.op == "call_function" and lowers_to_edge(node.target):
                node.target = edge_op(node.target)
                changed = True
    return changed


class OpReplacePass(PassBase):
    """The official pass's name for :func:`replace_aten_with_edge`."""

    def call(self, graph_module: GraphModule) -> PassResult:
        changed = replace_aten_with_edge(graph_module)
        if changed:
            for g in graph_modules(graph_module):
                g.recompile()
        return PassResult(graph_module, changed)


__all__ = ["OpReplacePass", "aten_to_edge", "replace_aten_with_edge", "should_lower_to_edge"]
