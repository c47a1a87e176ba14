"""Buffer updates made in place: ``buf2 = index_put(buf, ...)`` written back to
``buf`` becomes ``index_put_(buf, ...)`` when nothing reads ``buf`` afterwards, so
the update writes the buffer's own memory instead of a copy of it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

aten = torch.ops.aten

DEFAULT_INPLACEABLE_OPS: frozenset[Any] = frozenset({aten.index_put.default})


def inplace_variant(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """``aten.X_`` with the same overload and arguments as ``op``, if there is one."""
    packet = getattr(getattr(torch.ops, op.namespace), op._opname + "_", None)
    overload = getattr(packet, op._overloadname, None) if packet is not None else None
    if overload is None:
        return None
    same = [a.name for a in overload._schema.arguments] == [a.name for a in op._schema.arguments]
    return overload if same else None


def reinplace_pass(
    ep: ExportedProgram, ops_to_inplace: Iterable[Any] = DEFAULT_INPLACEABLE_OPS
) -> ExportedProgram:
    """In place on ``ep``'s graph; returns ``ep``. An update is rewritten only when
    its first argument is a mutable buffer's placeholder, its result is what the
    method writes back to that buffer, and no node after it reads the buffer."""
    wanted = set(ops_to_inplace)
    sig = ep.graph_signature
    mutated = {
        s.arg.name: s.target for s in sig.output_specs if s.kind == OutputKind.BUFFER_MUTATION
    }
    buffer_of = {s.arg.name: s.target for s in sig.input_specs if s.kind == InputKind.BUFFER}
    order = {n: i for i, n in enumerate(ep.graph.nodes)}
    for node in list(ep.graph.nodes):
        if node.op != "call_function" or node.target not in wanted:
            continue
        buf = node.args[0]
        target = buffer_of.get(getattr(buf, "name", ""))
        if target is None or mutated.get(node.name) != target:
            continue
        if any(order[u] > order[node] for u in buf.users if u is not node):
            continue
        inplace = inplace_variant(node.target)
        if inplace is not None:
            node.target = inplace
    ep.graph_module.recompile()
    return ep


__all__ = ["DEFAULT_INPLACEABLE_OPS", "inplace_variant", "reinplace_pass"]
