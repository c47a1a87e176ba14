"""Mutated buffers written back at the end of the graph (the official pass name)."""

from __future__ import annotations

from torch.export import ExportedProgram, ExportGraphSignature
from torch.fx import GraphModule

from pyexecutorch.exir.passes.write_back import insert_write_back


def insert_write_back_for_buffers_pass(
    ep: ExportedProgram,
) -> tuple[GraphModule, ExportGraphSignature]:
    """Insert ``copy_(buffer, new_value)`` for every mutated buffer in ``ep``'s graph
    (in place); returns the graph module and the updated signature."""
    gm = ep.graph_module
    signature = insert_write_back(ep, gm)
    gm.recompile()
    return gm, signature


__all__ = ["insert_write_back_for_buffers_pass"]
