"""Operator packets that carry their schemas without entering torch's dispatcher.

The official package registers its own operator namespaces (``dim_order_ops``,
``et_copy``) in torch's dispatcher; registering the same names here would make a later
import of the official package fail (torch refuses a second definition). So where the
official registration is absent, each such operator is an ``OpOverloadPacket`` built
here, whose ``OpOverload`` objects have the official schemas and call a Python reference
implementation. A graph's generated code names them as globals, so
``ExportedProgram.module()`` runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch._ops import OpOverload, OpOverloadPacket

# The module the operator objects say they come from (generated graph code names them
# ``pyexecutorch_exir_dialects_edge__ops_<namespace>_<name>_<overload>``).
EDGE_MODULE = "pyexecutorch.exir.dialects.edge._ops"


class SchemaOnlyPacket(OpOverloadPacket):
    """``namespace::name`` with ``overloads``: overload name -> (schema text after the
    name, reference implementation). Each overload's ``__name__`` (which names graph
    nodes) is ``namespace.name.overload`` as the official edge operators', or with
    ``torch_names`` ``name.overload`` as torch's own operators'."""

    def __init__(  # noqa: D107 - deliberately skips the base __init__
        self,
        namespace: str,
        name: str,
        overloads: Mapping[str, tuple[str, Callable[..., object]]],
        *,
        torch_names: bool = False,
    ) -> None:
        self._qualified_op_name = f"{namespace}::{name}"
        self.__name__ = name
        self.__module__ = f"torch.ops.{namespace}"
        self._op = overloads["default"][1]
        self._overload_names = ["" if k == "default" else k for k in overloads]
        self._dir = []
        self._has_torchbind_op_overload = False
        for overload, (schema_text, fn) in overloads.items():
            suffix = "" if overload == "default" else f".{overload}"
            schema = torch._C.parse_schema(f"{namespace}::{name}{suffix}{schema_text}")
            op = OpOverload(self, fn, fn, schema, [])
            op.__module__ = EDGE_MODULE
            op.__name__ = f"{name}.{overload}" if torch_names else f"{namespace}.{name}.{overload}"
            object.__setattr__(self, overload, op)
            self._dir.append(overload)

    @property
    def _schemas(self):
        return {getattr(self, k)._schema.overload_name: getattr(self, k)._schema for k in self._dir}

    def __getattr__(self, key: str):
        raise AttributeError(f"'{self}' has no overload named '{key}'")

    def __hash__(self):
        return hash(self._qualified_op_name)


def registered(namespace: str, name: str) -> OpOverloadPacket | None:
    """torch's own packet ``namespace::name`` when something registered it, else None."""
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return None


__all__ = ["EDGE_MODULE", "SchemaOnlyPacket", "registered"]
