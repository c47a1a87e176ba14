"""Edge operators to backend operators: the Python symbolic-int operations of a graph
(``operator.sub`` on sizes, ``math.ceil``, ``torch.sym_max``, ...) become the backend
dialect's ``executorch_prim`` operators (``exir_ops.backend.executorch_prim.sub.Scalar``),
as the official pass makes them. Tensor operators are the same objects in our edge and
backend dialects, and stay."""

from __future__ import annotations

from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from pyexecutorch.exir.dialects.backend._ops import prim_operator_for
from pyexecutorch.exir.graph_utils import graph_modules


class EdgeToBackendOpsPass(PassBase):
    def call(self, graph_module: GraphModule) -> PassResult:
        changed = False
        for g in graph_modules(graph_module):
            for node in g.graph.nodes:
                prim = prim_operator_for(node.target) if node.op == "call_function" else None
                if prim is not None:
                    node.target = prim
                    changed = True
            if changed:
                g.recompile()
        return PassResult(graph_module, changed)


__all__ = ["EdgeToBackendOpsPass"]
