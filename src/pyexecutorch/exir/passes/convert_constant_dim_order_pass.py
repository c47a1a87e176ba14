"""Constants in a dim order the program format cannot describe (anything but
contiguous or channels-last, or with gaps in their strides) become contiguous."""

from __future__ import annotations

import torch
from torch.export import ExportedProgram


def _needs_contiguous(t: torch.Tensor) -> bool:
    if t.is_contiguous():
        return False
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return False
    return True


def convert_constant_dim_order_pass(exported_program: ExportedProgram) -> ExportedProgram:
    """In place: each such constant, parameter or buffer is replaced by a contiguous
    copy, and its placeholder's ``meta["val"]`` follows."""
    by_target = {}
    for spec in exported_program.graph_signature.input_specs:
        if spec.target is not None:
            by_target[spec.target] = spec.arg.name
    placeholders = {n.name: n for n in exported_program.graph.nodes if n.op == "placeholder"}
    for store in (exported_program.constants, exported_program.state_dict):
        for key, value in list(store.items()):
            if not isinstance(value, torch.Tensor) or not _needs_contiguous(value):
                continue
            fixed = value.contiguous()
            if isinstance(value, torch.nn.Parameter):
                fixed = torch.nn.Parameter(fixed, requires_grad=value.requires_grad)
            store[key] = fixed
            node = placeholders.get(by_target.get(key, ""))
            val = node.meta.get("val") if node is not None else None
            if isinstance(val, torch.Tensor):
                node.meta["val"] = val.contiguous()
    return exported_program


__all__ = ["convert_constant_dim_order_pass"]
