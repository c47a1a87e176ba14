"""Compiled (numba) forms of division with rounding and of remainders, integers included.

Floor and truncating division (``div`` with a rounding mode, ``floor_divide``),
``remainder`` (the sign of the divisor) and ``fmod`` (the sign of the dividend) on
operands of one dtype and shape, or by a scalar, as one flat loop. They are not in
the formula table (``formulas.py``) because an integer divisor of zero must raise, as
the numpy kernel raises: the loop checks the divisors first and, finding a zero,
writes nothing and returns False; the form (and a whole method, whose step is checked)
then calls the reference kernel, which raises its error. Every result is the numpy
kernel's, bit for bit:

- floats follow numpy's (and torch's) floor division and remainder algorithm (through
  ``fmod``, with its signed zeros, infinities and NaN), one rounding per operation;
- integers wrap as numpy wraps (the minimum divided by -1 is the minimum).

Imported only by the compiled tier; ``binary.py`` stays the reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from pyexecutorch.jit.arrays import FLOATS, dense
from pyexecutorch.jit.deferral import form_entry_point
from pyexecutorch.kernels.registry import compiled_form, get_kernel, offer

_INTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8))
FLOOR, TRUNC, REMAINDER, FMOD = range(4)


@njit(cache=True, inline="always", error_model="numpy")
def _float_op(x, y, one, mode):  # noqa: ANN001, ANN202
    """numpy's float floor_divide, trunc(x / y), remainder and fmod; ``one`` is 1 in the
    operands' dtype, so that every operation rounds to it."""
    if mode == TRUNC:
        return np.trunc(x / y)
    mod = np.fmod(x, y)
    if mode == FMOD:
        return mod
    if y == 0:
        return x / y if mode == FLOOR else mod
    zero = one - one
    div = (x - mod) / y
    if mod != 0:  # (NaN included, as numpy tests it)
        if (y < 0) != (mod < 0):
            mod = mod + y
            div = div - one
    elif mode == REMAINDER:
        return np.copysign(zero, y)
    if mode == REMAINDER:
        return mod
    if div != 0:
        floor = np.floor(div)
        return floor + one if div - floor > 0.5 else floor
    return np.copysign(zero, x / y)


@njit(cache=True, inline="always", error_model="numpy")
def _int_op(x, y, mode):  # noqa: ANN001, ANN202
    """Integer floor and truncating division, remainder and fmod of a nonzero divisor
    (numba's // and % on integers are Python's: floor and the sign of the divisor)."""
    if y == -1:  # the minimum // -1 wraps; no hardware division traps on it
        return 0 - x if mode in (FLOOR, TRUNC) else x - x
    if mode == FLOOR:
        return x // y
    if mode == REMAINDER:
        return x % y
    r = x % y
    if r != 0 and (r < 0) != (x < 0):  # toward zero: the sign of the dividend
        return x // y + 1 if mode == TRUNC else r - y
    return x // y if mode == TRUNC else r


@njit(cache=True, error_model="numpy")
def divide_tensors(a, b, unit, out, mode, integer):  # noqa: ANN001, ANN201
    """out = a (op) b, flat arrays of one dtype; False, writing nothing, on an integer
    divisor of zero."""
    if integer:
        for i in range(b.shape[0]):
            if b[i] == 0:
                return False
        for i in range(out.shape[0]):
            out[i] = _int_op(a[i], b[i], mode)
    else:
        one = unit[0]
        for i in range(out.shape[0]):
            out[i] = _float_op(a[i], b[i], one, mode)
    return True


@njit(cache=True, error_model="numpy")
def divide_by_scalar(a, b, unit, out, mode, integer):  # noqa: ANN001, ANN201
    """out = a (op) b[0], flat arrays of one dtype, b[0] an integer's nonzero divisor."""
    y = b[0]
    if integer:
        for i in range(out.shape[0]):
            out[i] = _int_op(a[i], y, mode)
    else:
        one = unit[0]
        for i in range(out.shape[0]):
            out[i] = _float_op(a[i], y, one, mode)
    return True


def _scalar(value: Any, dtype: np.dtype) -> np.ndarray | None:
    """A scalar divisor as a 1-element array of ``dtype`` when the reference computes in
    that dtype with it exactly (an int for integers, a nonzero one; int or float for
    floats), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if dtype in _INTS:
        if not isinstance(value, int) or value == 0:
            return None
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            return None
    return np.array([value], dtype)


def _bind(name: str, mode: int, a: Any, b: Any, out: Any) -> Any:
    """``run(a, b, [mode,] out)``: the compiled call of ``mode`` on these planned arrays,
    the reference on other arrays and where it refuses (an integer divisor of zero); or
    None when the arrays do not fit the loop."""
    if not (dense(a) and dense(out)) or a.dtype != out.dtype or a.shape != out.shape:
        return None
    dt = a.dtype
    integer = dt in _INTS
    if not (integer or dt in FLOATS) or out.size == 0 or not out.flags.writeable:
        return None
    if isinstance(b, np.ndarray):
        if not dense(b) or b.dtype != dt or b.shape != out.shape:
            return None
        divisor, function = b.reshape(-1), divide_tensors
    else:
        divisor, function = _scalar(b, dt), divide_by_scalar
        if divisor is None:
            return None
    for x in (a, b):
        if isinstance(x, np.ndarray) and np.shares_memory(x, out):
            if x.ctypes.data != out.ctypes.data:
                return None  # overlapping, not element for element
    args = (a.reshape(-1), divisor, np.ones(1, dt), out.reshape(-1), mode, integer)
    kern = form_entry_point(function, args)
    reference = get_kernel(name).fn
    a0, b0, o0 = a, b, out

    def run(a, b, *more):  # noqa: ANN001, ANN202
        out = more[-1]
        if a is a0 and b is b0 and out is o0 and kern(*args):
            return out
        return reference(a, b, *more)

    # the reference writes the same out; checked: False sends the method to the reference
    return offer(run, step=(function, args, True), fills_outputs=True)


_MODES = {"floor": FLOOR, "trunc": TRUNC}


@compiled_form("aten::div.out_mode", "aten::div.Scalar_mode_out")
def _div_mode_form(a: Any, b: Any, mode: Any, out: Any) -> Any:
    """Floor or truncating division of one dtype (by a tensor or a scalar), or None."""
    if mode not in _MODES:
        return None
    name = "aten::div.out_mode" if isinstance(b, np.ndarray) else "aten::div.Scalar_mode_out"
    return _bind(name, _MODES[mode], a, b, out)


@compiled_form("aten::floor_divide.out")
def _floor_divide_form(a: Any, b: Any, out: Any) -> Any:
    return _bind("aten::floor_divide.out", FLOOR, a, b, out)


@compiled_form("aten::remainder.Tensor_out", "aten::remainder.Scalar_out")
def _remainder_form(a: Any, b: Any, out: Any) -> Any:
    name = "aten::remainder." + ("Tensor_out" if isinstance(b, np.ndarray) else "Scalar_out")
    return _bind(name, REMAINDER, a, b, out)


@compiled_form("aten::fmod.Tensor_out", "aten::fmod.Scalar_out")
def _fmod_form(a: Any, b: Any, out: Any) -> Any:
    name = "aten::fmod." + ("Tensor_out" if isinstance(b, np.ndarray) else "Scalar_out")
    return _bind(name, FMOD, a, b, out)
