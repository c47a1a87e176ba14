"""Decomposition to Core ATen with torch's own tables.

``ExportedProgram.run_decompositions`` spends most of its time, on small
models, sorting torch's whole operator registry into "composite implicit"
operators and the rest and patching every one of them, before it traces the
graph.  That split depends only on the table and on the registered
operators, so it is computed once per process (again when new operators get
registered) and the tracing entry point is called directly; only the
composite operators whose behaviour differs from torch's default (those
preserved) are patched.  If torch's private entry points change, the public
``run_decompositions`` is used instead.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch
from torch.export import ExportedProgram

_TABLE: dict[Any, Any] | None = None
_SPLITS: dict[Any, tuple[dict[Any, Any], dict[Any, Any]]] = {}


# Quantization operators stay whole, as the official exporter keeps them: they
# get out variants (pyexecutorch.exir.dialects.quantized_ops) or are delegated.
_QUANT_OPS: dict[str, tuple[str, ...]] = {
    "quantized_decomposed": (
        "quantize_per_tensor",
        "dequantize_per_tensor",
        "quantize_per_channel",
        "dequantize_per_channel",
        "choose_qparams",
        "choose_qparams_symmetric",
        "choose_qparams_per_token",
        "choose_qparams_per_token_asymmetric",
        "quantize_per_token",
        "dequantize_per_token",
        "quantize_per_channel_group",
        "dequantize_per_channel_group",
    ),
    "torchao": ("quantize_affine", "dequantize_affine", "choose_qparams_affine"),
}


def _quant_primitives() -> list[Any]:
    out = []
    for namespace, names in _QUANT_OPS.items():
        ns = getattr(torch.ops, namespace)
        for name in names:
            try:
                packet = getattr(ns, name)
            except (AttributeError, RuntimeError):
                continue
            out += [getattr(packet, overload) for overload in packet.overloads()]
    return out


def default_decomposition_table() -> dict[Any, Any]:
    """torch.export's default Core ATen table, plus ``linalg_vector_norm``
    (as the official exporter), less the quantization operators, as a fresh dict."""
    global _TABLE
    if _TABLE is None:
        from torch._decomp import get_decompositions
        from torch.export import default_decompositions

        table = dict(default_decompositions().items())
        table.update(get_decompositions([torch.ops.aten.linalg_vector_norm.default]))
        _TABLE = table
    table = dict(_TABLE)
    # Looked up on each call: torchao registers its operators when it is imported.
    for op in _quant_primitives():
        table.pop(op, None)
    return table


def _is_default_cia_decomposition(op: Any, fn: Any) -> bool:
    """``fn`` decomposes ``op`` exactly as its CompositeImplicitAutograd kernel does."""
    return (
        isinstance(fn, functools.partial)
        and getattr(fn.func, "__name__", "") == "_special_op_to_decompose_cia"
        and fn.keywords.get("kernel") is op
        and not fn.args
    )


def _split(table: dict[Any, Any], removed: frozenset) -> tuple[dict[Any, Any], dict[Any, Any]]:
    from torch._export.utils import (
        _collect_all_valid_cia_ops,
        _is_preservable_cia_op,
        _special_op_to_preserve_cia,
    )

    key = (removed, len(torch._C._dispatch_get_all_op_names()))
    found = _SPLITS.get(key)
    if found is not None:
        return found
    preservable = set(_collect_all_valid_cia_ops())
    cia: dict[Any, Any] = {}
    python: dict[Any, Any] = {}
    for op, fn in table.items():
        if op in preservable:
            preservable.discard(op)
            if not _is_default_cia_decomposition(op, fn):
                cia[op] = fn
        elif _is_preservable_cia_op(op):
            cia[op] = fn
        else:
            python[op] = fn
    for op in preservable:
        cia[op] = _special_op_to_preserve_cia
    _SPLITS[key] = (cia, python)
    return cia, python


def decompose(program: ExportedProgram, preserve_ops: Iterable[Any] = ()) -> ExportedProgram:
    """``program`` lowered to Core ATen, keeping ``preserve_ops`` as they are."""
    table = default_decomposition_table()
    removed = set()
    for op in preserve_ops:
        ops = (
            [getattr(op, n) for n in op.overloads()]
            if isinstance(op, torch._ops.OpOverloadPacket)
            else [op]
        )
        for o in ops:
            if table.pop(o, None) is not None:
                removed.add(o)
    try:
        from torch.export.exported_program import _decompose_exported_program

        cia, python = _split(table, frozenset(removed))
    except (ImportError, AttributeError, TypeError):
        return program.run_decompositions(table)
    return _decompose_exported_program(
        program,
        cia_to_decomp=dict(cia),
        python_decomp_table=dict(python),
        joint_loss_index=None,
        decompose_custom_triton_ops=False,
    )
