"""Edge operators to backend operators.

Our edge and backend dialects share torch's operator objects
(``exir_ops.backend.ns.op is exir_ops.edge.ns.op``), so there is nothing to
replace: the pass reports the graph unchanged."""

from __future__ import annotations

from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult


class EdgeToBackendOpsPass(PassBase):
    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, False)


__all__ = ["EdgeToBackendOpsPass"]
