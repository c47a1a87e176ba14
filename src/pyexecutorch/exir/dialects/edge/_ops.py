"""The edge dialect's operator objects.

An edge program's graph targets ``EdgeOpOverload``s, as in the official dialect:
``exir_ops.edge.aten.add.Tensor`` names itself ``aten.add.Tensor`` from this module,
so generated graph code calls it
``pyexecutorch_exir_dialects_edge__ops_aten_add_Tensor``. It wraps the ATen (or custom) overload it stands for (``_op``)
and *equals* it, with the same hash: tables keyed by torch's operators
(``target in {aten.add.Tensor}``, ``table[target]``) and ``==`` find an edge operator
too, so passes written for either dialect work on both. Only ``is`` tells them apart;
``aten_of`` gives the wrapped overload where identity matters.

It is a ``torch._ops.OpOverload`` (a copy of the wrapped overload's state), so torch's
tracing, fake-tensor propagation, verifiers and serializers treat it as one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._ops import OpOverload, OpOverloadPacket

from pyexecutorch.exir.dialects.stand_in import StandIn

# Generated graph code names an edge operator ``<module>.<ns>.<op>.<overload>``.
EDGE_MODULE = "pyexecutorch.exir.dialects.edge._ops"

# Operators that stay torch's in an edge graph (the official dialect keeps these).
_KEPT_ATEN = frozenset(
    {
        "aten::sym_size.int",
        "aten::sym_numel.default",
        "aten::sym_stride.int",
        "aten::sym_storage_offset.default",
        "aten::_assert_scalar.default",
        "aten::_assert_async.msg",
        "aten::scalar_tensor.default",
    }
)


class EdgeOpOverload(StandIn, OpOverload):
    """An edge-dialect operator: the overload ``op`` under its edge name."""

    def __init__(self, op: OpOverload) -> None:  # noqa: D107 - deliberately skips the base __init__
        # The wrapped overload's state (schema, tags, dispatch tables) is this one's.
        self.__dict__.update(op.__dict__)
        self._op = op  # the official attribute: the overload this one stands for
        namespace, name = op._schema.name.split("::")
        self.__name__ = f"{namespace}.{name}.{op._overloadname}"
        self.__module__ = EDGE_MODULE

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return _edge_op_named, (self._op._schema.name, self._op._overloadname)

    def __repr__(self) -> str:
        return f"<EdgeOpOverload: {self.__name__}>: schema = {self._schema}"

    def to_out_variant(self) -> OpOverload:
        """The ``out`` overload of the wrapped operator."""
        from pyexecutorch.exir.passes.out_variants import out_variant  # noqa: PLC0415 - cycle

        found = out_variant(self._op)
        if found is None:
            raise RuntimeError(f"edge operator {self.__name__} has no out variant")
        return found[0]


class EdgeOpOverloadPacket:
    """``exir_ops.edge.<ns>.<op>``: its attributes are the edge overloads (all made
    with the packet)."""

    def __init__(self, packet: OpOverloadPacket) -> None:
        self._parent_overload_packet = packet
        self._qualified_op_name = f"edge::{packet._qualified_op_name}"
        self.__name__ = packet._qualified_op_name.replace("::", ".")
        self._overload_names = packet._overload_names
        # Every overload's edge operator is made now, so ``packet.<overload>`` is a plain
        # attribute: dynamo reads one in a traced forward, but refuses to build one there.
        for overload in packet.overloads():
            try:
                setattr(self, overload, edge_op(getattr(packet, overload)))
            except (AttributeError, RuntimeError):
                continue  # left to __getattr__, which names it

    @property
    def op(self) -> Any:
        return self._parent_overload_packet._op

    def __getattr__(self, key: str) -> EdgeOpOverload:
        if key.startswith("__"):
            raise AttributeError(key)
        try:
            overload = getattr(self._parent_overload_packet, key)
        except (AttributeError, RuntimeError):
            raise AttributeError(f"edge operator {self.__name__} has no overload {key!r}") from None
        edge = edge_op(overload)
        setattr(self, key, edge)  # one object per overload: identity holds across lookups
        return edge

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._parent_overload_packet(*args, **kwargs)

    def __hash__(self) -> int:
        return hash(self._parent_overload_packet)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EdgeOpOverloadPacket):
            other = other._parent_overload_packet
        return other is self._parent_overload_packet

    def overloads(self) -> list[str]:
        return self._parent_overload_packet.overloads()

    def __repr__(self) -> str:
        return f"<EdgeOpOverloadPacket(op='edge.{self.__name__}', parent_op='{self.__name__}')>"


_EDGE: dict[OpOverload, EdgeOpOverload] = {}


def edge_op(op: OpOverload) -> EdgeOpOverload:
    """The edge operator standing for ``op`` (one object per overload)."""
    if isinstance(op, EdgeOpOverload):
        return op
    found = _EDGE.get(op)
    if found is None:
        found = _EDGE[op] = EdgeOpOverload(op)
    return found


def aten_of(target: Any) -> Any:
    """The torch operator an edge operator stands for; any other target as it is."""
    return target._op if isinstance(target, EdgeOpOverload) else target


def in_dialect_of(target: Any, op: OpOverload) -> OpOverload:
    """``op`` in ``target``'s dialect: a pass swapping an edge operator keeps the
    graph in the edge dialect."""
    return edge_op(op) if isinstance(target, EdgeOpOverload) else op


def lowers_to_edge(target: Any) -> bool:
    """Whether ``target`` becomes an edge operator in an edge graph."""
    return (
        isinstance(target, OpOverload)
        and not isinstance(target, EdgeOpOverload)
        and f"{target._schema.name}.{target._overloadname}" not in _KEPT_ATEN
    )


def _edge_op_named(qualified: str, overload: str) -> EdgeOpOverload:
    """Unpickling: ``aten::add``, ``Tensor`` -> the edge ``aten.add.Tensor``."""
    from pyexecutorch.exir.dialects import dim_order_ops  # noqa: PLC0415 - cycle

    namespace, name = qualified.split("::")
    if namespace == dim_order_ops.NAMESPACE:
        packet = dim_order_ops.packet(name)
    else:
        packet = getattr(getattr(torch.ops, namespace), name)
    return edge_op(getattr(packet, overload))


__all__ = [
    "EDGE_MODULE",
    "EdgeOpOverload",
    "EdgeOpOverloadPacket",
    "aten_of",
    "edge_op",
    "in_dialect_of",
]
