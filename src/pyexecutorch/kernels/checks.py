"""Argument checks: one per operator family, called by the numpy kernel and, at load, by
every faster tier before it lowers an instruction.

A check takes a kernel's input arguments (as the kernel gets them, outputs left
out) and returns the shape of each output the kernel would produce (a list of
shapes for a list output, ``None`` where it cannot say), or raises
:class:`KernelError` with the kernel's own message. The numpy kernel calls the
same function, so what one tier refuses the other refuses too.

At load the runtime asks :func:`refusal` for each instruction whose arguments
are all fixed then: an instruction its check refuses, or whose result would
not fit a static planned output, keeps its reference kernel, which raises the
same error when it runs (:mod:`pyexecutorch.runtime.argument_checks`). The
fused loops, compiled forms and fast paths never see such arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pyexecutorch.kernels.registry import KernelError, registrar

Shape = tuple[int, ...]
Check = Callable[..., Sequence[Any]]

_CHECKS: dict[str, Check] = {}


def argument_check(*names: str) -> Callable[[Check], Check]:
    """Register ``fn`` as the argument check of the kernels ``names`` (once each)."""
    return registrar(_CHECKS, "argument check", names)


def get_argument_check(name: str) -> Check | None:
    """The argument check registered for ``name``, or None."""
    from pyexecutorch.kernels.registry import _ensure_loaded  # noqa: PLC0415 - registers them

    _ensure_loaded()
    return _CHECKS.get(name)


def checked_names() -> list[str]:
    """The kernels that have an argument check, sorted."""
    from pyexecutorch.kernels.registry import _ensure_loaded  # noqa: PLC0415

    _ensure_loaded()
    return sorted(_CHECKS)


class Typed(tuple):
    """An output's shape that also names its dtype (where an explicit ``dtype`` argument
    fixes it): the planned output must have both."""

    dtype: np.dtype


def typed(shape: Sequence[int], dtype: np.dtype | None) -> Shape:
    """``shape``, carrying ``dtype`` when one is given (see :class:`Typed`)."""
    if dtype is None:
        return tuple(shape)
    result = Typed(shape)
    result.dtype = np.dtype(dtype)
    return result


def _fits(result: Any, out: Any) -> bool:
    if result is None or out is None:
        return True
    if isinstance(out, np.ndarray):
        return tuple(result) == out.shape and getattr(result, "dtype", out.dtype) == out.dtype
    if isinstance(out, list) and isinstance(result, list):
        return len(result) == len(out) and all(
            _fits(r, o) for r, o in zip(result, out, strict=True)
        )
    return True


def refusal(check: Check, inputs: Sequence[Any], outputs: Sequence[Any]) -> str | None:
    """Why the kernel refuses these arguments or its ``outputs`` (static planned arrays,
    lists of them, or None where an output's size may change) cannot take its results;
    None when it accepts them. Any exception from the check is a refusal: the check
    met arguments of a kind the kernel does not take either."""
    try:
        shapes = check(*inputs)
    except Exception as e:  # noqa: BLE001 - the reference kernel raises it again at run time
        return f"{type(e).__name__}: {e}"
    if len(shapes) != len(outputs):
        return f"the operator has {len(shapes)} outputs, the instruction passes {len(outputs)}"
    for n, (result, out) in enumerate(zip(shapes, outputs, strict=True)):
        if not _fits(result, out):
            planned = out.shape if isinstance(out, np.ndarray) else [o.shape for o in out]
            if isinstance(result, Typed) and isinstance(out, np.ndarray):
                result, planned = f"{tuple(result)} {result.dtype}", f"{planned} {out.dtype}"
            return f"output {n}: a result of shape {result} does not fit its planned {planned}"
    return None


def scalar(value: object, op: str, what: str) -> complex | float | int:
    """``value`` when it is a Scalar (a number, complex too), else KernelError."""
    if not isinstance(value, (int, float, complex)):
        raise KernelError(f"{op}: {what} must be a number, got {value!r}")
    return value


def number(value: object, op: str, what: str) -> float | int:
    """``value`` when it is a number (a bool counts, as in torch), else KernelError."""
    if not isinstance(value, (int, float)):
        raise KernelError(f"{op}: {what} must be a number, got {value!r}")
    return value
