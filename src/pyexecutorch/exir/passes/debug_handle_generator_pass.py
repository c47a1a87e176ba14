"""Debug handles on every operator node (the official pass names)."""

from __future__ import annotations

from torch.export import ExportedProgram
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from pyexecutorch.exir.debug_handle_utils import DEBUG_HANDLE_KEY, UNSET_DEBUG_HANDLE
from pyexecutorch.exir.graph_utils import graph_modules
from pyexecutorch.exir.passes.debug_handles import assign_debug_handles


class DebugHandleGeneratorPass(PassBase):
    """Number the nodes afresh: one handle per original node (1, 2, ...), shared by
    every node decomposed from it."""

    def call(self, graph_module: GraphModule) -> PassResult:
        assign_debug_handles(graph_module)
        return PassResult(graph_module, True)


def generate_missing_debug_handles(ep: ExportedProgram) -> None:
    """Give a handle, after the largest one present, to every operator node of
    ``ep`` that has none (nodes added by passes after ``to_edge``)."""
    nodes = [
        node
        for g in graph_modules(ep.graph_module)
        for node in g.graph.nodes
        if node.op not in ("placeholder", "output")
    ]
    largest = max((n.meta.get(DEBUG_HANDLE_KEY) or 0 for n in nodes), default=0)
    for node in nodes:
        if node.meta.get(DEBUG_HANDLE_KEY, UNSET_DEBUG_HANDLE) == UNSET_DEBUG_HANDLE:
            largest += 1
            node.meta[DEBUG_HANDLE_KEY] = largest


__all__ = ["DebugHandleGeneratorPass", "generate_missing_debug_handles"]
