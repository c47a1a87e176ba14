"""Decomposition to Core ATen with torch's own tables."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.export import ExportedProgram

_TABLE: dict[Any, Any] | None = None


def _quant_primitives() -> list[Any]:
    ns = getattr(torch.ops, "quantized_decomposed", None)
    if ns is None:
        return []
    out = []
    for name in (
        "quantize_per_tensor",
        "dequantize_per_tensor",
        "quantize_per_channel",
        "dequantize_per_channel",
        "choose_qparams",
    ):
        try:
            packet = getattr(ns, name)
        except (AttributeError, RuntimeError):
            continue
        for overload in packet.overloads():
            out.append(getattr(packet, overload))
    return out


def default_decomposition_table() -> dict[Any, Any]:
    """torch.export's default Core ATen table, plus ``linalg_vector_norm``.

    Built once per process (materialising torch's table costs about 0.1 s)
    and returned as a fresh dict each call.
    """
    global _TABLE
    if _TABLE is None:
        from torch._decomp import get_decompositions
        from torch.export import default_decompositions

        table = dict(default_decompositions().items())
        table.update(get_decompositions([torch.ops.aten.linalg_vector_norm.default]))
        for op in _quant_primitives():
            table.pop(op, None)
        _TABLE = table
    return dict(_TABLE)


def decompose(program: ExportedProgram, preserve_ops: Iterable[Any] = ()) -> ExportedProgram:
    """``program`` lowered to Core ATen, keeping ``preserve_ops`` as they are."""
    table = default_decomposition_table()
    for op in preserve_ops:
        if isinstance(op, torch._ops.OpOverloadPacket):
            for name in op.overloads():
                table.pop(getattr(op, name), None)
        else:
            table.pop(op, None)
    return program.run_decompositions(table)
