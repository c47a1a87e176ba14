"""The backend dialect's ``executorch_prim`` operators: Python symbolic-int operations
(``operator.sub`` on sizes, ``math.ceil``, ``torch.sym_max``, ...) under the names the
program calls them by (``executorch_prim::sub.Scalar``).

``exir_ops.backend.executorch_prim.sub.Scalar`` names itself
``executorch_prim.sub.Scalar`` from this module, so generated graph code calls it
``pyexecutorch_exir_dialects_backend__ops_executorch_prim_sub_Scalar``, as the official
dialect's. They are plain Python callables, not torch library operators: the official
package defines ``executorch_prim`` with ``Library("executorch_prim", "DEF")``, and a
second definition of one of its operators in the same process (either package loaded
first) is an error. Each equals the Python operation it stands for, with its hash, so
tables keyed by ``operator.sub`` (the emitter's, the kernel check's) find it too.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable
from typing import Any

import torch

from pyexecutorch.exir.dialects.stand_in import StandIn

BACKEND_MODULE = "pyexecutorch.exir.dialects.backend._ops"
NAMESPACE = "executorch_prim"

# The Python operation each executorch_prim operator stands for (overload ``Scalar``).
PRIM_OPERATIONS: dict[str, Callable[..., Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "truediv": operator.truediv,
    "mod": operator.mod,
    "neg": operator.neg,
    "eq": operator.eq,
    "gt": operator.gt,
    "lt": operator.lt,
    "ge": operator.ge,
    "le": operator.le,
    "round": builtins.round,
    "ceil": math.ceil,
    "trunc": math.trunc,
    "sym_float": torch.sym_float,
    "sym_int": torch.sym_int,
    "sym_max": torch.sym_max,
    "sym_min": torch.sym_min,
}


class PrimOperator(StandIn):
    """``executorch_prim::<name>.Scalar``: calls (and equals) ``operation``."""

    def __init__(self, name: str, operation: Callable[..., Any]) -> None:
        self._name = name
        self._op = operation  # the Python operation this one stands for
        self.__name__ = f"{NAMESPACE}.{name}.Scalar"
        self.__qualname__ = self.__name__
        self.__module__ = BACKEND_MODULE

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return prim_operator, (self._name,)

    def name(self) -> str:
        """The program's operator name, ``executorch_prim::sub.Scalar``."""
        return f"{NAMESPACE}::{self._name}.Scalar"

    def __repr__(self) -> str:
        return f"<PrimOperator: {self.name()}>"


_BY_NAME = {name: PrimOperator(name, op) for name, op in PRIM_OPERATIONS.items()}
# Python operation -> its operator (``id``: some of them are unhashable as keys alone).
_BY_OPERATION = {id(op): _BY_NAME[name] for name, op in PRIM_OPERATIONS.items()}


def prim_operator(name: str) -> PrimOperator:
    """The ``executorch_prim`` operator ``name`` (``"sub"``)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise AttributeError(
            f"backend dialect has no operator {NAMESPACE}.{name}; it has {sorted(_BY_NAME)}"
        ) from None


def prim_operator_for(target: Any) -> PrimOperator | None:
    """The operator standing for the Python operation ``target``; None for others."""
    if isinstance(target, PrimOperator):
        return None
    return _BY_OPERATION.get(id(target))


class _PrimPacket:
    """``exir_ops.backend.executorch_prim.<name>``: its one overload is ``Scalar``."""

    def __init__(self, op: PrimOperator) -> None:
        self.Scalar = op
        self.__name__ = f"{NAMESPACE}.{op._name}"

    def overloads(self) -> list[str]:
        return ["Scalar"]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.Scalar(*args, **kwargs)


class PrimNamespace:
    """``exir_ops.backend.executorch_prim``."""

    def __getattr__(self, name: str) -> _PrimPacket:
        if name.startswith("__"):
            raise AttributeError(name)
        packet = _PrimPacket(prim_operator(name))
        setattr(self, name, packet)
        return packet

    def __repr__(self) -> str:
        return f"exir_ops.backend.{NAMESPACE}"


__all__ = ["PRIM_OPERATIONS", "PrimNamespace", "PrimOperator", "prim_operator", "prim_operator_for"]
