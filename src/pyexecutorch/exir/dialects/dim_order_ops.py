"""The ``dim_order_ops`` operators of the ExecuTorch edge dialect.

ExecuTorch replaces the memory-format ops (``_to_copy``, ``clone``,
``empty.memory_format``) with variants taking an explicit ``dim_order``.  The
official package registers them in torch's dispatcher under the namespace
``dim_order_ops``; when that registration is present we use it, otherwise schema-only
stand-ins (:mod:`pyexecutorch.exir.dialects.schema_only`).  Either
way the graph holds ``torch._ops.OpOverload`` objects named
``dim_order_ops::<name>.<overload>``, which is all the emitter needs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._ops import OpOverload, OpOverloadPacket

from pyexecutorch.exir.dialects.schema_only import (  # EDGE_MODULE: serde reads it here
    EDGE_MODULE,  # noqa: F401
    SchemaOnlyPacket,
    registered,
)

NAMESPACE = "dim_order_ops"

_SCHEMAS: dict[str, dict[str, str]] = {
    "_to_dim_order_copy": {
        "default": "(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
        "bool? pin_memory=None, bool non_blocking=False, int[]? dim_order=None) -> Tensor",
        "out": "(Tensor self, *, bool non_blocking=False, int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)",
    },
    "_empty_dim_order": {
        "default": "(int[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
        "bool? pin_memory=None, int[]? dim_order=None) -> Tensor",
        "out": "(int[] size, *, int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)",
    },
    "_clone_dim_order": {
        "default": "(Tensor self, *, bool non_blocking=False, int[]? dim_order=None) -> Tensor",
        "out": "(Tensor self, *, bool non_blocking=False, int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)",
    },
}


def memory_format_of(dim_order: Any, ndim: int | None = None) -> torch.memory_format:
    """The torch memory format that a ``dim_order`` argument stands for."""
    if dim_order is None:
        return torch.preserve_format
    dim_order = [int(d) for d in dim_order]
    if dim_order == list(range(len(dim_order))):
        return torch.contiguous_format
    if dim_order == [0, 2, 3, 1]:
        return torch.channels_last
    if dim_order == [0, 2, 3, 4, 1]:
        return torch.channels_last_3d
    raise ValueError(f"dim_order {dim_order} has no torch memory format")


def dim_order_of(memory_format: torch.memory_format | None, ndim: int) -> list[int] | None:
    """The ``dim_order`` for a torch memory format (None for preserve)."""
    if memory_format in (None, torch.preserve_format):
        return None
    if memory_format == torch.contiguous_format:
        return list(range(ndim))
    if memory_format == torch.channels_last and ndim == 4:
        return [0, 2, 3, 1]
    if memory_format == torch.channels_last_3d and ndim == 5:
        return [0, 2, 3, 4, 1]
    raise ValueError(f"memory format {memory_format} has no dim order for rank {ndim}")


def _impl(name: str, overload: str):
    """Reference semantics of each op, through the ATen op it stands for."""
    aten = torch.ops.aten

    def to_copy(self, *, dim_order=None, **kw):
        return aten._to_copy.default(self, memory_format=memory_format_of(dim_order), **kw)

    def to_copy_out(self, *, non_blocking=False, dim_order=None, out):
        return aten._to_copy.out(
            self, non_blocking=non_blocking, memory_format=memory_format_of(dim_order), out=out
        )

    def empty(size, *, dim_order=None, **kw):
        fmt = memory_format_of(dim_order)
        return aten.empty.memory_format(
            size, memory_format=None if fmt == torch.preserve_format else fmt, **kw
        )

    def empty_out(size, *, dim_order=None, out):
        return aten.empty.out(size, out=out)

    def clone(self, *, non_blocking=False, dim_order=None):
        return aten.clone.default(self, memory_format=memory_format_of(dim_order))

    def clone_out(self, *, non_blocking=False, dim_order=None, out):
        return aten.clone.out(self, memory_format=memory_format_of(dim_order), out=out)

    table = {
        ("_to_dim_order_copy", "default"): to_copy,
        ("_to_dim_order_copy", "out"): to_copy_out,
        ("_empty_dim_order", "default"): empty,
        ("_empty_dim_order", "out"): empty_out,
        ("_clone_dim_order", "default"): clone,
        ("_clone_dim_order", "out"): clone_out,
    }
    return table[(name, overload)]


_PACKETS: dict[str, OpOverloadPacket] = {}


def packet(name: str) -> OpOverloadPacket:
    """The ``dim_order_ops`` packet ``name`` (official registration if present)."""
    if name not in _SCHEMAS:
        raise AttributeError(f"dim_order_ops has no operator named {name!r}")
    found = _PACKETS.get(name)
    if found is None:
        found = registered(NAMESPACE, name) or SchemaOnlyPacket(
            NAMESPACE, name, {ov: (text, _impl(name, ov)) for ov, text in _SCHEMAS[name].items()}
        )
        _PACKETS[name] = found
    return found


def to_dim_order_copy() -> OpOverload:
    return packet("_to_dim_order_copy").default


def clone_dim_order() -> OpOverload:
    return packet("_clone_dim_order").default


def empty_dim_order() -> OpOverload:
    return packet("_empty_dim_order").default


def is_dim_order_op(target: Any) -> bool:
    return isinstance(target, OpOverload) and target._schema.name.startswith(f"{NAMESPACE}::")
