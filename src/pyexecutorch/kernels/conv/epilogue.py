"""Which elementwise runs after a convolution its channels-last step applies as it stores.

The runtime (:mod:`pyexecutorch.runtime.epilogue`) hands over the run after a
convolution as ``(operator name, arguments, output)`` triples and asks
:func:`store_pass`; the answer is what :func:`~pyexecutorch.kernels.conv.compiled.
channels_last_step` takes as its epilogue (``low``, ``high``, ``residual``,
``activation``). Declared to the registry in :mod:`pyexecutorch.kernels.conv.facts`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Activations the channels-last kernels apply in registers (their ``activation`` codes).
SILU, HARDSWISH = 1, 2
# each code's name, as the channels-last kernels take it (compiled_nhwc.ACTIVATIONS)
_ACTIVATION_NAMES = {SILU: "silu", HARDSWISH: "hardswish"}

# Clamps with constant bounds, as (low, high) from the instruction's argument values.
_CLAMPS: dict[str, Callable[[list[Any]], tuple[Any, Any]]] = {
    "aten::relu.out": lambda v: (0.0, math.inf),
    "aten::hardtanh.out": lambda v: (v[1], v[2]),
    "aten::clamp.out": lambda v: (
        -math.inf if v[1] is None else v[1],
        math.inf if v[2] is None else v[2],
    ),
}

# One instruction of the run: (operator name, argument values' indices, output index).
Op = tuple[str, list[int], "int | None"]


@dataclass(frozen=True)
class StorePass:
    """What the run applies as the convolution stores: a residual add of value
    ``residual`` (None: none), an activation code (0: none), then a clamp to
    ``[low, high]``."""

    residual: int | None
    low: float
    high: float
    activation: int


def store_pass(
    ops: list[Op], conv_out: int, number: Callable[[int], float | None], value: Callable
) -> StorePass | None:
    """The run ``ops`` after a convolution writing value ``conv_out`` as a store pass, or
    None: an add of a tensor (alpha 1), then SiLU (x * sigmoid(x)) or hardswish
    (x * clamp(x + 3, 0, 6) / 6, as exported), then clamps, each reading the one before.
    ``number(j)``: value ``j`` as a number (a scalar or a one-element constant), else
    None; ``value(j)``: value ``j`` at load."""
    current, residual, activation = conv_out, None, 0
    low, high = -math.inf, math.inf

    def take(n: int) -> None:
        nonlocal ops, current
        current = ops[n - 1][2]
        ops = ops[n:]

    if ops and ops[0][0] == "aten::add.out":
        args = ops[0][1]
        if number(args[2]) != 1 or current not in args[:2]:
            return None
        residual = args[1] if args[0] == current else args[0]
        if residual == current or isinstance(value(residual), (int, float)):
            return None
        take(1)
    if (
        len(ops) >= 2
        and ops[0][0] == "aten::sigmoid.out"
        and ops[0][1][0] == current
        and ops[1][0] == "aten::mul.out"
        and sorted(ops[1][1][:2]) == sorted([current, ops[0][2]])
    ):
        activation = SILU
        take(2)
    elif (found := _hardswish(ops, current, number, value)) is not None:
        activation = HARDSWISH
        take(found)
    for clamps, (name, args, _) in enumerate(list(ops)):
        clamp = _CLAMPS.get(name)
        if clamp is None or args[0] != current:
            return None
        bounds = clamp([value(j) for j in args])
        if any(type(b) not in (int, float) for b in bounds):
            return None
        if clamps and (bounds[0] > high or bounds[1] < low):
            return None  # (disjoint clamps in a row are not one clamp)
        low, high = max(low, bounds[0]), min(high, bounds[1])
        take(1)
    return StorePass(residual, low, high, activation)


def _hardswish(ops: list[Op], x: int, number: Callable, value: Callable) -> int | None:
    """How many of ``ops`` compute hardswish of ``x`` as exported: add 3, clamp to [0, 6]
    (one or two clamps), multiply by ``x``, divide by 6; or None."""
    if len(ops) < 4 or ops[0][0] != "aten::add.out":
        return None
    args = ops[0][1]
    if args[0] != x or number(args[1]) != 3 or number(args[2]) != 1:
        return None
    t, n, low, high = ops[0][2], 1, -math.inf, math.inf
    while n < len(ops) and ops[n][0] in _CLAMPS and ops[n][1][0] == t:
        bounds = _CLAMPS[ops[n][0]]([value(j) for j in ops[n][1]])
        if any(type(b) not in (int, float) for b in bounds):
            return None
        low, high = max(low, bounds[0]), min(high, bounds[1])
        t, n = ops[n][2], n + 1
    if (low, high) != (0, 6) or n + 2 > len(ops):
        return None
    mul, div = ops[n], ops[n + 1]
    if mul[0] != "aten::mul.out" or sorted(mul[1][:2]) != sorted([x, t]):
        return None
    if div[0] != "aten::div.out" or div[1][0] != mul[2] or number(div[1][1]) != 6:
        return None
    return n + 2


def channels_last_step(values: list[Any], out: Any, found: StorePass, residual: Any) -> Any:
    """The convolution on load-time ``values`` (its arguments but the out array) writing
    ``out`` with the store pass ``found`` (``residual``: the residual's array, or None),
    as the channels-last kernels' step, or None."""
    from pyexecutorch.kernels.conv.compiled import (  # noqa: PLC0415 - needs numba
        channels_last_step as conv_step,
    )

    epilogue: dict[str, Any] = {"low": found.low, "high": found.high, "residual": residual}
    if found.activation:
        if (found.low, found.high) != (-math.inf, math.inf):
            return None  # (the kernels clamp before their activation; the run clamps after)
        epilogue["activation"] = _ACTIVATION_NAMES[found.activation]
    try:
        return conv_step(*values, out, **epilogue)
    except TypeError:  # (kernels without that activation)
        return None
