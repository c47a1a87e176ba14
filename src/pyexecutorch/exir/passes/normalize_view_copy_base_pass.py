"""A view of a view reads its root directly: ``view(view(x))`` becomes ``view(x)``
where the outer view's arguments describe the result from the root alone
(``view``/``_unsafe_view`` and ``reshape``-like ``view_copy``)."""

from __future__ import annotations

import torch
from torch.fx import GraphModule

from pyexecutorch.exir.graph_utils import graph_modules
from pyexecutorch.exir.passes._official_names import GraphFunctionPass

aten = torch.ops.aten
# Views whose result depends only on the root's elements and the target shape.
_SHAPE_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.view_copy.default})


def read_view_roots(gm: GraphModule) -> bool:
    changed = False
    for g in graph_modules(gm):
        for node in g.graph.nodes:
            if node.op != "call_function" or node.target not in _SHAPE_VIEWS:
                continue
            base = node.args[0]
            while (
                isinstance(base, torch.fx.Node)
                and base.op == "call_function"
                and base.target in _SHAPE_VIEWS
            ):
                base = base.args[0]
            if base is not node.args[0]:
                node.args = (base, *node.args[1:])
                changed = True
    # The views no longer read are left for dead-code elimination (the official
    # pass only rebases).
    return changed


class NormalizeViewCopyBasePass(GraphFunctionPass):
    function = staticmethod(read_view_roots)


__all__ = ["NormalizeViewCopyBasePass"]
