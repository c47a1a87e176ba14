"""Passes that retrace a graph node by node: ``ExportPass``, ``PassResult``.

``ExportPass`` re-runs a graph module under fake tensors, calling one overridable
hook per node kind (``call_operator``, ``call_getitem``, ``call_cond``,
``call_map``, ``call_delegate``, ``placeholder``, ``output``) and recording what
the hooks return as a new graph, so a pass rewrites a node by returning other
calls from its hook. The node-by-node interpreter is PyTorch's own export pass
base; this adds the ``executorch_call_delegate`` hook and the names the official
``executorch.exir.pass_base`` exposes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._export.pass_base import (
    Argument,
    ExportPassBaseError,
    NodeMetadata,
    ProxyValue,
)
from torch._export.pass_base import (
    _ExportPassBaseDeprecatedDoNotUse as _RetracingPassBase,
)
from torch._higher_order_ops.executorch_call_delegate import executorch_call_delegate
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from pyexecutorch.exir.dialects.backend._ops import PrimOperator

PassType = Callable[[torch.fx.GraphModule], PassResult | None]


class ExportPass(_RetracingPassBase):
    """Retraces a graph; override the ``call_*`` hooks to rewrite nodes.

    ``ExportPass()(graph_module)`` returns a ``PassResult`` holding the retraced
    graph module, whose nodes carry fresh ``meta["val"]`` fake values."""

    class ExportInterpreter(_RetracingPassBase.ExportInterpreter):
        def call_function(
            self, target: Any, args: tuple[Argument, ...], kwargs: dict[str, Argument]
        ) -> ProxyValue:
            if target is executorch_call_delegate:
                lowered, *inputs = args
                meta = NodeMetadata(self.node.meta)
                return self.callback.call_delegate(lowered, tuple(inputs), kwargs, meta)
            if isinstance(target, PrimOperator):  # a symbolic-int operation, retraced as one
                return self.callback.call_sym(target, args, NodeMetadata(self.node.meta))
            return super().call_function(target, args, kwargs)

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        result = super().call(graph_module)
        # The retraced module keeps the graph module's own meta (what passes and
        # tools recorded there), as the official ExportPass does.
        for key, value in graph_module.meta.items():
            result.graph_module.meta.setdefault(key, value)
        return result

    def call_delegate(
        self,
        lowered_module: torch.nn.Module,
        args: tuple[Argument, ...],
        kwargs: dict[str, Argument],
        meta: NodeMetadata,
    ) -> ProxyValue:
        """Hook for ``executorch_call_delegate(lowered_module, *args)``: kept as is."""
        return self._fx(
            "call_function", executorch_call_delegate, (lowered_module, *args), kwargs, meta
        )


__all__ = [
    "Argument",
    "ExportPass",
    "ExportPassBaseError",
    "NodeMetadata",
    "PassBase",
    "PassResult",
    "PassType",
    "ProxyValue",
]
