"""What the emitter reads from a graph node's target: the program operator it calls (its
schema's arguments, outputs and aliasing, once per operator), and the tables of Python
symbolic-int callables and of checks dropped at emission."""

from __future__ import annotations

import math
import operator
from typing import Any

import torch

# Python callables that symbolic-shape graphs use, and the runtime's names for them.
PY_SYM_OPS: dict[Any, str] = {
    operator.add: "add",
    operator.sub: "sub",
    operator.mul: "mul",
    operator.floordiv: "floordiv",
    operator.truediv: "truediv",
    operator.mod: "mod",
    operator.neg: "neg",
    operator.eq: "eq",
    operator.gt: "gt",
    operator.lt: "lt",
    operator.ge: "ge",
    operator.le: "le",
    round: "round",
    math.ceil: "ceil",
    math.trunc: "trunc",
    torch.sym_float: "sym_float",
    torch.sym_int: "sym_int",
    torch.sym_max: "sym_max",
    torch.sym_min: "sym_min",
    torch.sym_not: "sym_not",
    torch.sym_ite: "sym_ite",
}

# Runtime checks that carry no computation: dropped at emission.
IGNORED_OPS = frozenset(
    {
        "aten::_assert_scalar",
        "aten::_assert_async",
        "aten::_assert_tensor_metadata",
        "aten::sym_constrain_range",
        "aten::sym_constrain_range_for_size",
        "aten::_functional_sym_constrain_range",
        "aten::_functional_sym_constrain_range_for_size",
    }
)


class OperatorInfo:
    """What the emitter needs from an operator's schema, computed once per operator."""

    __slots__ = ("name", "overload", "args", "out_positions", "ret", "alias_positions", "ret_kinds")

    def __init__(self, target: Any) -> None:
        schema = target._schema
        self.name: str = schema.name
        self.overload: str = schema.overload_name
        self.args = tuple(
            (
                a.name,
                a.kwarg_only,
                arg_kind(a.type),
                a.has_default_value(),
                a.default_value if a.has_default_value() else None,
            )
            for a in schema.arguments
        )
        self.out_positions = tuple(i for i, a in enumerate(schema.arguments) if a.is_out)
        self.alias_positions: tuple[int, ...] = ()
        self.ret_kinds = tuple(r.type.kind() for r in schema.returns)
        if self.out_positions:
            self.ret = "out"
        elif not schema.returns:
            self.ret = "none"
        elif all(arg_kind(r.type) == "scalar" for r in schema.returns):
            self.ret = "sym"
        else:
            positions = []
            for r in schema.returns:
                alias = r.alias_info
                found = None
                if alias is not None and alias.is_write:
                    for i, a in enumerate(schema.arguments):
                        if (
                            a.alias_info is not None
                            and a.alias_info.is_write
                            and a.alias_info.before_set == alias.before_set
                        ):
                            found = i
                            break
                positions.append(found)
            if all(p is not None for p in positions):
                self.ret = "alias"
                self.alias_positions = tuple(positions)  # type: ignore[arg-type]
            else:
                self.ret = "spec"


def arg_kind(t: Any) -> str:
    kind = t.kind()
    if kind == "TensorType":
        return "tensor"
    if kind == "OptionalType":
        inner = arg_kind(t.getElementType())
        return "opt_tensor" if inner == "tensor" else inner
    if kind == "ListType":
        elem = t.getElementType()
        ek = elem.kind()
        if ek == "TensorType":
            return "tensor_list"
        if ek == "OptionalType" and elem.getElementType().kind() == "TensorType":
            return "opt_tensor_list"
        if ek in ("IntType", "SymIntType"):
            return "int_list"
        if ek == "FloatType":
            return "float_list"
        if ek == "BoolType":
            return "bool_list"
        return "list"
    return "scalar"


def target_name(target: Any) -> str:
    if isinstance(target, str):
        return target
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    module = getattr(target, "__module__", None)
    if hasattr(target, "_schema"):
        return str(target)
    if name and module:
        return f"{module}.{name}"
    return str(target)
