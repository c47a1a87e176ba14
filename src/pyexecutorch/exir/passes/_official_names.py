"""Shared by the modules that give our passes their official names: a pass object
over one of our in-place graph functions."""

from __future__ import annotations

from collections.abc import Callable

from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from pyexecutorch.exir.graph_utils import graph_modules


def recompile_all(gm: GraphModule) -> None:
    for g in graph_modules(gm):
        g.recompile()


class GraphFunctionPass(PassBase):
    """Runs ``self.function(graph_module) -> changed`` in place and recompiles."""

    function: Callable[[GraphModule], bool]

    def call(self, graph_module: GraphModule) -> PassResult:
        changed = bool(type(self).function(graph_module))
        if changed:
            recompile_all(graph_module)
        return PassResult(graph_module, changed)
