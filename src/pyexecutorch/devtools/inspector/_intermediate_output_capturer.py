"""Run a graph module in torch and keep each operator's output by its debug handle
(the official ``executorch.devtools.inspector._intermediate_output_capturer`` path):
the AOT side of an intermediate-output comparison."""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import GraphModule, Node
from torch.fx.interpreter import Interpreter

from pyexecutorch.devtools.inspector._inspector_utils import DebugHandle, NodeFilter
from pyexecutorch.exir.debug_handle_utils import DEBUG_HANDLE_KEY


def _kept(value: Any) -> Any:
    # a copy the rest of the run cannot change (and that holds no autograd graph)
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return [_kept(v) for v in value]
    return value


class IntermediateOutputCapturer(Interpreter):
    """Interprets ``module`` node by node, recording the output of every operator that
    has a debug handle (getitems left out: their operator's output is recorded)."""

    def __init__(self, module: GraphModule) -> None:
        super().__init__(module)
        self.node_filters = [NodeFilter(DEBUG_HANDLE_KEY, "call_function", exclude_ops=["getitem"])]
        self._captured: dict[DebugHandle, Any] | None = None

    def run_node(self, n: Node) -> Any:
        result = super().run_node(n)
        if self._captured is not None and all(f.matches(n) for f in self.node_filters):
            handle = n.meta[DEBUG_HANDLE_KEY]
            key = (handle,) if isinstance(handle, int) else tuple(handle)
            self._captured[key] = _kept(result)
        return result

    def run_and_capture(self, *args: Any, **kwargs: Any) -> dict[DebugHandle, Any]:
        """Run the module on ``args``; each recorded output by its debug-handle tuple."""
        self._captured = {}
        try:
            self.run(*args, **kwargs)
            return self._captured
        finally:
            self._captured = None
