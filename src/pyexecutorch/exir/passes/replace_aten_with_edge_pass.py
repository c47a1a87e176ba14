"""ATen operators to edge operators: the last step of ``to_edge``.

Every ``OpOverload`` target (ATen or custom) becomes the ``EdgeOpOverload`` standing
for it, in the graph and in every control-flow submodule; symbolic-size and assertion
operators stay torch's, as in the official dialect.
"""

from __future__ import annotations

from typing import Any

from torch._ops import OpOverload
from torch.fx import Graph, GraphModule
from torch.fx.graph import _Namespace
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


def _name_for(graph: Graph, target: Any) -> str:
    if isinstance(target, EdgeOpOverload):  # (an OpOverload too: checked first)
        return graph._target_to_str(target)  # aten.add.Tensor -> aten_add_tensor
    if isinstance(target, OpOverload):  # torch's operators that stay: sym_size, scalar_tensor
        return graph._target_to_str(target.overloadpacket.__name__)
    return graph._target_to_str(target)  # getitem, mul, cond


def name_nodes_by_target(gm: GraphModule) -> None:
    """Name every operator call after its target, numbered afresh in graph order, as
    the official ``to_edge`` does (it re-traces the graph): ``aten_add_tensor``,
    ``aten_add_tensor_1``, ``dim_order_ops__to_dim_order_copy_default``, ``getitem``,
    ``sym_size``. Other nodes keep their names. A caller's ``ExportGraphSignature``
    must be rebuilt from the graph after this (``graph_utils.updated_signature``)."""
    for g in graph_modules(gm):
        graph = g.graph
        names = _Namespace()  # fresh: the old names' numbers would carry over
        for node in graph.nodes:
            candidate = _name_for(graph, node.target) if node.op == "call_function" else node.name
            node.name = names.create_name(candidate, node)
        graph._graph_namespace = names


class OpReplacePass(PassBase):
    """The official pass's name for :func:`replace_aten_with_edge`."""

    def call(self, graph_module: GraphModule) -> PassResult:
        changed = replace_aten_with_edge(graph_module)
        if changed:
            for g in graph_modules(graph_module):
                g.recompile()
        return PassResult(graph_module, changed)


__all__ = [
    "OpReplacePass",
    "aten_to_edge",
    "name_nodes_by_target",
    "replace_aten_with_edge",
    "should_lower_to_edge",
]
