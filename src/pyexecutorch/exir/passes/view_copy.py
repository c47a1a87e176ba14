"""View operators to their ``*_copy`` variants (the edge dialect is alias-free)."""

from __future__ import annotations

import torch
from torch.fx import GraphModule

from pyexecutorch.exir.graph_utils import graph_modules, infer_val, refresh_layouts

aten = torch.ops.aten

_SPECIAL = {aten._unsafe_view.default: aten.view_copy.default}
_CACHE: dict[torch._ops.OpOverload, torch._ops.OpOverload | None] = {}


def view_copy_of(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """``aten.permute_copy.default`` for ``aten.permute.default``; None for non-views."""
    if op in _CACHE:
        return _CACHE[op]
    found = _SPECIAL.get(op)
    if found is None and op.namespace == "aten":
        args = op._schema.arguments
        alias = args[0].alias_info if args else None
        if alias is not None and not alias.is_write:
            packet = getattr(aten, op._schema.name.split("::")[1] + "_copy", None)
            if packet is None or not hasattr(packet, op._overloadname):
                raise RuntimeError(f"view operator {op} has no *_copy variant")
            found = getattr(packet, op._overloadname)
    _CACHE[op] = found
    return found


def replace_view_ops_with_view_copy(gm: GraphModule, fake_mode) -> bool:
    """Swap every ATen view op for its copy variant; returns whether any changed."""
    changed = False
    for g in graph_modules(gm):
        dirty = set()
        for node in g.graph.nodes:
            op = node.target
            if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
                continue
            new = view_copy_of(op)
            if new is None:
                continue
            node.target = new
            # A view's value carries its base's strides; the copy is contiguous.
            old = node.meta.get("val")
            node.meta["val"] = infer_val(fake_mode, new, node.args, node.kwargs)
            if not isinstance(old, torch.Tensor) or tuple(old.stride()) != tuple(
                node.meta["val"].stride()
            ):
                dirty.add(node)
            changed = True
        refresh_layouts(g, fake_mode, dirty)
    return changed
