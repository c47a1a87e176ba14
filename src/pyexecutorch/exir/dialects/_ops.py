"""``exir_ops``: the edge-dialect operator namespace.

``exir_ops.edge.<ns>.<op>.<overload>`` is the edge operator (an ``EdgeOpOverload``,
see :mod:`pyexecutorch.exir.dialects.edge._ops`) standing for torch's
``torch.ops.<ns>.<op>.<overload>``, which it equals. ``exir_ops.backend`` gives the
same objects, and ``exir_ops.backend.executorch_prim`` the symbolic-scalar operators
of :mod:`pyexecutorch.exir.dialects.backend._ops`. ``dim_order_ops``
resolves to the operators in :mod:`pyexecutorch.exir.dialects.dim_order_ops`.

The namespaces are module objects, as the official ones: dynamo reads a module's
attributes eagerly instead of tracing its ``__getattr__``, so a traced forward may be
the first to touch ``exir_ops.edge.<ns>.<op>.<overload>`` (the packet it makes holds
every overload as a plain attribute).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
from torch._C import DispatchKey
from torch.library import Library

from pyexecutorch.exir.dialects import dim_order_ops
from pyexecutorch.exir.dialects.backend._ops import NAMESPACE, PrimNamespace
from pyexecutorch.exir.dialects.edge._ops import EdgeOpOverloadPacket


class _OpNamespace(types.ModuleType):
    def __init__(self, dialect: str, namespace: str) -> None:
        super().__init__(f"exir_ops.{dialect}.{namespace}")
        self._dialect = dialect
        self._namespace = namespace

    def __getattr__(self, name: str) -> EdgeOpOverloadPacket:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            if self._namespace == dim_order_ops.NAMESPACE:
                packet = dim_order_ops.packet(name)
            else:
                packet = getattr(getattr(torch.ops, self._namespace), name)
        except (AttributeError, RuntimeError):
            raise AttributeError(
                f"{self._dialect} dialect has no operator {self._namespace}.{name}"
            ) from None
        edge = EdgeOpOverloadPacket(packet)
        setattr(self, name, edge)  # one packet object per operator
        return edge

    def __repr__(self) -> str:
        return f"exir_ops.{self._dialect}.{self._namespace}"


class _Dialect(types.ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(f"exir_ops.{name}")
        self._name = name
        self._namespaces: dict[str, _OpNamespace] = {}

    def __getattr__(self, namespace: str) -> _OpNamespace:
        if namespace.startswith("__"):
            raise AttributeError(namespace)
        ns = self._namespaces.get(namespace)
        if ns is None:
            ns = self._namespaces[namespace] = _OpNamespace(self._name, namespace)
        return ns

    def __repr__(self) -> str:
        return f"exir_ops.{self._name}"


class _BackendDialect(_Dialect):
    """The edge dialect's operators, and the ``executorch_prim`` symbolic-scalar ones."""

    def __getattr__(self, namespace: str) -> Any:
        if namespace == NAMESPACE:
            ns = self._namespaces.get(namespace)
            if ns is None:
                ns = self._namespaces[namespace] = PrimNamespace()
            return ns
        return super().__getattr__(namespace)


class _Ops(types.ModuleType):
    """``ops.edge.<namespace>.<op>.<overload>``; ``ops.backend`` gives the same
    operators, and ``ops.backend.executorch_prim`` the symbolic-scalar ones."""

    def __init__(self) -> None:
        super().__init__("exir_ops")
        self.edge = _Dialect("edge")
        self.backend = _BackendDialect("backend")


ops = _Ops()

# Kernels that make an operator traceable: with none of them, the bound pattern is
# registered as its composite (decomposing) implementation.
_KERNEL_KEYS = (
    DispatchKey.CompositeExplicitAutograd,
    DispatchKey.CompositeImplicitAutograd,
    DispatchKey.Meta,
)


def bind_pattern_to_op(library: Library, schema_or_name: str) -> Callable[[Callable], Callable]:
    """Decorator: ``pattern`` becomes the implementation of the backend operator
    ``library.ns::schema_or_name`` (defined from the schema when one is given, e.g.
    ``"add_relu(Tensor x, Tensor y) -> Tensor"``), unless the operator already has a
    kernel. A pass can then replace the pattern with the operator, and retracing a
    graph holding it runs the pattern. The operator's ``_equivalent_callable`` is the
    pattern."""

    def bind(pattern: Callable) -> Callable:
        text = schema_or_name.split("::")[-1]
        if "(" in text:
            library.define(text)
            text = text[: text.index("(")]
        name, _, overload = text.partition(".")
        overload = overload or "default"
        op = getattr(getattr(getattr(torch.ops, library.ns), name), overload)
        if not any(op.has_kernel_for_dispatch_key(k) for k in _KERNEL_KEYS):
            qualified = name if overload == "default" else f"{name}.{overload}"
            library.impl(qualified, pattern, "CompositeImplicitAutograd")
        op._equivalent_callable = pattern
        return pattern

    return bind


__all__ = ["bind_pattern_to_op", "ops"]
