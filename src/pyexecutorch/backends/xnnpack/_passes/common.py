"""What the XNNPACK passes share: the partition being rewritten and its constants."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.export import ExportedProgram
from torch.fx import GraphModule, Node

from pyexecutorch.backends.xnnpack.partition.config import constant_tensor, is_constant

SOURCES = "xnn_sources"


@dataclass
class PassContext:
    ep: ExportedProgram
    gm: GraphModule
    _counter: int = 0

    def constant(self, node: object) -> torch.Tensor | None:
        """The data of a constant node (parameter, buffer, lifted constant, get_attr)."""
        if not is_constant(self.ep, node):
            return None
        return constant_tensor(self.ep, node)

    def is_constant(self, node: object) -> bool:
        return is_constant(self.ep, node)

    def new_constant(self, tensor: torch.Tensor, before: Node, like: Node | None = None) -> Node:
        """A ``get_attr`` node holding ``tensor``, inserted before ``before``."""
        while hasattr(self.gm, f"_xnn_constant{self._counter}"):
            self._counter += 1
        name = f"_xnn_constant{self._counter}"
        self._counter += 1
        self.gm.register_buffer(name, tensor.detach().contiguous(), persistent=False)
        with self.gm.graph.inserting_before(before):
            node = self.gm.graph.get_attr(name)
        node.meta["val"] = tensor
        if like is not None:
            node.meta[SOURCES] = sources(like)
        return node


def sources(node: Node) -> tuple[int, ...]:
    """The debug handles of the edge nodes ``node`` stands for."""
    found = node.meta.get(SOURCES)
    if found is not None:
        return found
    handle = node.meta.get("debug_handle")
    return (handle,) if isinstance(handle, int) else ()


def absorb(into: Node, *others: Node) -> None:
    """``into`` now also stands for ``others`` (their debug handles join its own)."""
    merged = list(sources(into))
    for o in others:
        merged += [h for h in sources(o) if h not in merged]
    into.meta[SOURCES] = tuple(merged)
