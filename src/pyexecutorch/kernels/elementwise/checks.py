"""The elementwise family's argument checks (see :mod:`pyexecutorch.kernels.checks`).

For every operator with a scalar formula (the ones the compiled tier fuses,
:data:`~pyexecutorch.kernels.elementwise.formulas.FORMULAS`) and the other elementwise
operators with compiled forms (:data:`OTHERS`): its tensor operands
broadcast together (:func:`~pyexecutorch.kernels.common.broadcast_shape`, as the
kernels broadcast), that broadcast is the output's shape, and its scalar
arguments are numbers (:func:`number`, which the kernels call for theirs) or,
where the operator takes one, a choice among its names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pyexecutorch.kernels.checks import argument_check, number
from pyexecutorch.kernels.common import broadcast_shape
from pyexecutorch.kernels.elementwise.formulas import FORMULAS
from pyexecutorch.kernels.registry import KernelError


def optional_number(value: object, op: str, what: str) -> float | int | None:
    return None if value is None else number(value, op, what)


def rounding_mode(value: object) -> str | None:
    """div's rounding mode (None, 'trunc' or 'floor'), else KernelError."""
    if value not in (None, "trunc", "floor"):
        raise KernelError(f"rounding_mode must be None, 'trunc' or 'floor', got {value!r}")
    return value  # type: ignore[return-value]


def gelu_approximation(value: object) -> str:
    if value not in ("none", "tanh"):
        raise KernelError(f"gelu's approximate must be 'none' or 'tanh', got {value!r}")
    return value  # type: ignore[return-value]


# operator -> argument position -> (its name, its check)
_Scalar = Callable[[object, str, str], object]
_ALPHA = {2: ("alpha", number)}
_OTHER = {1: ("other", number)}
SCALARS: dict[str, dict[int, tuple[str, _Scalar]]] = {
    "aten::add.out": _ALPHA,
    "aten::sub.out": _ALPHA,
    "aten::add.Scalar_out": {**_OTHER, **_ALPHA},
    "aten::sub.Scalar_out": {**_OTHER, **_ALPHA},
    "aten::rsub.Scalar_out": {**_OTHER, **_ALPHA},
    "aten::mul.Scalar_out": _OTHER,
    "aten::div.Scalar_out": _OTHER,
    "aten::pow.Tensor_Scalar_out": {1: ("exponent", number)},
    "aten::leaky_relu.out": {1: ("negative_slope", number)},
    "aten::hardtanh.out": {1: ("min_val", number), 2: ("max_val", number)},
    "aten::clamp.out": {1: ("min", optional_number), 2: ("max", optional_number)},
    "aten::elu.out": {1: ("alpha", number), 2: ("scale", number), 3: ("input_scale", number)},
    "aten::gelu.out": {1: ("approximate", lambda v, op, what: gelu_approximation(v))},
    "aten::full_like.out": {1: ("fill_value", number)},
    **{f"aten::{name}.Scalar_out": _OTHER for name in ("eq", "ne", "lt", "le", "gt", "ge")},
}


def check_alpha(alpha: object, ct: np.dtype) -> None:
    """add/sub's alpha for a result of dtype ``ct``: a bool only for bool results, a float
    not for integer ones (torch's rule)."""
    if isinstance(alpha, (bool, np.bool_)) and ct != np.bool_:
        raise KernelError(f"a boolean alpha is only supported for bool results, not {ct}")
    if isinstance(alpha, float) and ct.kind in "biu":
        raise KernelError(f"alpha must be an integer for integer inputs (got alpha={alpha!r})")


def _operand(value: Any, op: str, pos: int) -> tuple[int, ...]:
    if not isinstance(value, np.ndarray):
        raise KernelError(f"{op}: argument {pos} must be a tensor, got {type(value).__name__}")
    return value.shape


_MODE = {2: ("rounding_mode", lambda v, op, what: rounding_mode(v))}
# The other elementwise operators with compiled forms: (tensor operands, scalar arguments).
OTHERS: dict[str, tuple[tuple[int, ...], dict[int, tuple[str, _Scalar]]]] = {
    "aten::div.out_mode": ((0, 1), _MODE),
    "aten::div.Scalar_mode_out": ((0,), {**_OTHER, **_MODE}),
    "aten::floor_divide.out": ((0, 1), {}),
    "aten::fmod.Tensor_out": ((0, 1), {}),
    "aten::remainder.Tensor_out": ((0, 1), {}),
    "aten::fmod.Scalar_out": ((0,), _OTHER),
    "aten::remainder.Scalar_out": ((0,), _OTHER),
}


def _check_of(
    name: str, operands: tuple[int, ...], scalars: dict[int, tuple[str, _Scalar]]
) -> Callable[..., tuple[tuple[int, ...]]]:
    op = name.split("::", 1)[1].split(".", 1)[0]

    def check(*args: Any) -> tuple[tuple[int, ...]]:
        for pos, (what, valid) in scalars.items():
            if pos >= len(args):
                raise KernelError(f"{op}: missing argument {pos} ({what})")
            valid(args[pos], op, what)
        shape: tuple[int, ...] | None = None
        for pos in operands:
            if pos >= len(args):
                raise KernelError(f"{op}: missing tensor argument {pos}")
            s = _operand(args[pos], op, pos)
            shape = s if shape is None else broadcast_shape(shape, s)
        if 2 in scalars and scalars[2][0] == "alpha":  # (the two operands come first)
            from pyexecutorch.kernels.elementwise.unary import result_type  # noqa: PLC0415

            check_alpha(args[2], result_type(args[0], args[1]))
        return (() if shape is None else shape,)

    check.__name__ = f"check_{op}"
    return check


for _name, _formula in FORMULAS.items():
    _operands = (*_formula.tensors, *_formula.shape_only)
    argument_check(_name)(_check_of(_name, _operands, SCALARS.get(_name, {})))
for _name, (_operands, _scalars) in OTHERS.items():
    argument_check(_name)(_check_of(_name, _operands, _scalars))
