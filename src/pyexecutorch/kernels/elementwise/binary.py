"""Elementwise kernels, part 2: arithmetic, comparison, bitwise and logical ops,
``where``, ``clamp``, ``masked_fill`` and ``fill``.

Every kernel has a fast path for the common case (operands and output of one
dtype that numpy computes exactly like torch, or a float tensor with a Python
scalar) and a general path that applies torch's promotion rules (see
:mod:`pyexecutorch.kernels.elementwise.unary`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pyexecutorch.kernels.checks import number
from pyexecutorch.kernels.common import broadcast_shape, fit
from pyexecutorch.kernels.elementwise.checks import check_alpha as _check_alpha
from pyexecutorch.kernels.elementwise.checks import rounding_mode
from pyexecutorch.kernels.elementwise.unary import (
    BOOL,
    F16,
    F32,
    F64,
    FLOATS,
    check_out,
    checked_scalar,
    loop_dtype,
    operand,
    out_for,
    quiet,
    result_type,
    scalar_dtype,
    scalar_for,
)
from pyexecutorch.kernels.registry import KernelError, kernel

_INTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8))
# dtypes for which numpy's same-dtype loop is torch's computation (float16
# loops convert to float32 and round once, like torch)
_ARITH_FAST = frozenset({F16, F32, F64}) | _INTS
_SCALAR_TYPES = (int, float)


def _is_bool(x: object) -> bool:
    if isinstance(x, np.ndarray):
        return x.dtype == BOOL
    return isinstance(x, (bool, np.bool_))


def _compute(
    ufunc: np.ufunc, a: object, b: object, o: np.ndarray, ct: np.dtype, opmath: bool = False
) -> None:
    """o = ufunc(a, b) computed in dtype ``ct`` (float16 in float32), cast into ``o``."""
    y = operand(b, ct, opmath)
    ufunc(operand(a, ct), y, out=o, dtype=loop_dtype(ct), casting="unsafe")


def _zero_check(b: object, o: np.ndarray) -> None:
    if o.size == 0:
        return  # torch only fails when an element is computed
    if isinstance(b, np.ndarray):
        if not b.all():
            raise KernelError(
                "integer division by zero (ZeroDivisionError): the divisor contains 0"
            )
    elif b == 0:
        raise KernelError("integer division by zero (ZeroDivisionError): the divisor is 0")


# ---------------------------------------------------------------------------
# add / sub / rsub / mul (with alpha)
# ---------------------------------------------------------------------------


def _addsub_general(ufunc, sub: bool, a, b, alpha, o) -> None:
    ct = result_type(a, b)
    if sub and (_is_bool(a) or _is_bool(b)):
        raise KernelError(
            "subtraction with a bool tensor or scalar is not supported "
            "(torch asks for logical_xor or logical_not instead)"
        )
    check_out(ct, o)
    _check_alpha(alpha, ct)
    lt = loop_dtype(ct)
    x = operand(a, ct)
    y = operand(b, ct)
    if alpha != 1:
        y = np.multiply(y, scalar_for(alpha, ct), dtype=lt, casting="unsafe")
    ufunc(x, y, out=o, dtype=lt, casting="unsafe")


def _addsub(ufunc: np.ufunc, sub: bool) -> tuple[Callable, Callable]:
    def tensor_op(a, b, alpha, out):
        sa, sb = a.shape, b.shape
        shape = sa if sa == sb else broadcast_shape(sa, sb)
        o = out if out.shape == shape else fit(out, shape)
        dt = a.dtype
        if (
            alpha == 1
            and type(alpha) is int
            and dt is b.dtype
            and dt is o.dtype
            and dt in _ARITH_FAST
        ):
            ufunc(a, b, out=o)
            return o
        _addsub_general(ufunc, sub, a, b, alpha, o)
        return o

    def scalar_op(a, b, alpha, out):
        o = out if out.shape == a.shape else fit(out, a.shape)
        dt = a.dtype
        if (
            alpha == 1
            and type(alpha) is int
            and dt is o.dtype
            and dt in FLOATS
            and type(b) in _SCALAR_TYPES
        ):
            ufunc(a, b, out=o)
            return o
        _addsub_general(ufunc, sub, a, b, alpha, o)
        return o

    return quiet(tensor_op), quiet(scalar_op)


_add_t, _add_s = _addsub(np.add, False)
_sub_t, _sub_s = _addsub(np.subtract, True)
kernel("aten::add.out")(_add_t)
kernel("aten::add.Scalar_out")(_add_s)
kernel("aten::sub.out")(_sub_t)
kernel("aten::sub.Scalar_out")(_sub_s)


@kernel("aten::rsub.Scalar_out")
@quiet
def rsub_scalar(a, b, alpha, out):
    # other - alpha * self
    o = out if out.shape == a.shape else fit(out, a.shape)
    ct = result_type(a, b)
    if _is_bool(a) or _is_bool(b):
        raise KernelError("subtraction with a bool tensor or scalar is not supported")
    check_out(ct, o)
    _check_alpha(alpha, ct)
    lt = loop_dtype(ct)
    x = operand(a, ct)
    if alpha != 1:
        x = np.multiply(x, scalar_for(alpha, ct), dtype=lt, casting="unsafe")
    np.subtract(operand(b, ct), x, out=o, dtype=lt, casting="unsafe")
    return o


def _plain(
    ufunc: np.ufunc,
    fast: frozenset,
    check: Callable | None = None,
    opmath: bool = False,
    quiet_fast: bool = True,
) -> tuple[Callable, Callable]:
    """Tensor and Scalar kernels of a binary op computed in torch's result type.

    ``check(ct, a, b)`` may refuse a computation dtype (raising KernelError).
    ``quiet_fast=False`` skips silencing numpy for ops whose same-dtype loop
    cannot raise floating-point flags (max, min, bitwise).
    """

    @quiet
    def general(a, b, o):
        ct = result_type(a, b)
        if check is not None:
            check(ct, a, b)
        check_out(ct, o)
        _compute(ufunc, a, b, o, ct, opmath)
        return o

    def tensor_op(a, b, out):
        sa, sb = a.shape, b.shape
        shape = sa if sa == sb else broadcast_shape(sa, sb)
        o = out if out.shape == shape else fit(out, shape)
        dt = a.dtype
        if dt is b.dtype and dt is o.dtype and dt in fast:
            ufunc(a, b, out=o)
            return o
        return general(a, b, o)

    def scalar_op(a, b, out):
        o = out if out.shape == a.shape else fit(out, a.shape)
        dt = a.dtype
        if dt is o.dtype and dt in FLOATS and dt in fast and type(b) in _SCALAR_TYPES:
            ufunc(a, b, out=o)
            return o
        return general(a, b, o)

    if quiet_fast:
        return quiet(tensor_op), quiet(scalar_op)
    return tensor_op, scalar_op


_mul_t, _mul_s = _plain(np.multiply, _ARITH_FAST | {BOOL}, opmath=True)
kernel("aten::mul.out")(_mul_t)
kernel("aten::mul.Scalar_out")(_mul_s)

_max_t, _ = _plain(np.maximum, _ARITH_FAST | {BOOL}, quiet_fast=False)
_min_t, _ = _plain(np.minimum, _ARITH_FAST | {BOOL}, quiet_fast=False)
kernel("aten::maximum.out")(_max_t)  # NaN propagates, like torch
kernel("aten::minimum.out")(_min_t)

# ---------------------------------------------------------------------------
# Division and remainders
# ---------------------------------------------------------------------------


def _true_div(a, b, o) -> None:
    ct = result_type(a, b)
    if ct.kind in "biu":
        ct = F32  # integer inputs divide in the default float dtype
    check_out(ct, o)
    _compute(np.divide, a, b, o, ct, opmath=True)


def _rounding_ct(a, b, name: str) -> np.dtype:
    ct = result_type(a, b)
    if ct == BOOL:
        raise KernelError(f"{name} is not supported for bool tensors")
    if ct.kind == "c":
        raise KernelError(f"{name} is not supported for complex tensors")
    return ct


def _floor_div(a, b, o) -> None:
    ct = _rounding_ct(a, b, "floor division")
    check_out(ct, o)
    y = operand(b, ct, opmath=True)
    if ct.kind in "iu":
        _zero_check(y, o)  # after conversion: int8 // 256 divides by 0 in torch too
    # numpy's float floor_divide is torch's (Python's) algorithm, inf/nan included
    np.floor_divide(operand(a, ct), y, out=o, dtype=loop_dtype(ct), casting="unsafe")


def _trunc_div(a, b, o) -> None:
    ct = _rounding_ct(a, b, "truncating division")
    check_out(ct, o)
    lt = loop_dtype(ct)
    x, y = operand(a, ct), operand(b, ct, opmath=True)
    if ct.kind == "u":
        _zero_check(y, o)
        np.floor_divide(x, y, out=o, dtype=lt, casting="unsafe")
    elif ct.kind == "i":
        _zero_check(y, o)
        # x - fmod(x, y) is an exact multiple of y, so floor division is exact
        whole = np.subtract(x, np.fmod(x, y, dtype=lt), dtype=lt)
        np.floor_divide(whole, y, out=o, dtype=lt, casting="unsafe")
    else:
        q = np.divide(x, y, dtype=lt)
        np.trunc(q, out=o, casting="unsafe")


def _div_mode(a, b, mode, o) -> None:
    if mode is None:
        _true_div(a, b, o)
    elif mode == "trunc":
        _trunc_div(a, b, o)
    elif mode == "floor":
        _floor_div(a, b, o)
    else:
        rounding_mode(mode)  # raises: the check the compiled tier makes at load


@kernel("aten::div.out")
@quiet
def div(a, b, out):
    sa, sb = a.shape, b.shape
    shape = sa if sa == sb else broadcast_shape(sa, sb)
    o = out if out.shape == shape else fit(out, shape)
    dt = a.dtype
    if dt is b.dtype and dt is o.dtype and dt in FLOATS:
        np.divide(a, b, out=o)
        return o
    _true_div(a, b, o)
    return o


@kernel("aten::div.Scalar_out")
@quiet
def div_scalar(a, b, out):
    o = out if out.shape == a.shape else fit(out, a.shape)
    dt = a.dtype
    if dt is o.dtype and dt in FLOATS and type(b) in _SCALAR_TYPES:
        np.divide(a, b, out=o)
        return o
    _true_div(a, b, o)
    return o


@kernel("aten::div.out_mode")
@quiet
def div_mode(a, b, mode, out):
    o = out_for(out, a, b)
    _div_mode(a, b, mode, o)
    return o


@kernel("aten::div.Scalar_mode_out")
@quiet
def div_scalar_mode(a, b, mode, out):
    o = out if out.shape == a.shape else fit(out, a.shape)
    _div_mode(a, b, mode, o)
    return o


@kernel("aten::floor_divide.out")
@quiet
def floor_divide(a, b, out):
    o = out_for(out, a, b)
    _floor_div(a, b, o)
    return o


def _remainder_like(ufunc: np.ufunc, name: str) -> tuple[Callable, Callable]:
    def run(a, b, o):
        dt = a.dtype
        if (
            dt is o.dtype
            and dt in FLOATS
            and (type(b) in _SCALAR_TYPES or (isinstance(b, np.ndarray) and b.dtype is dt))
        ):
            ufunc(a, b, out=o)
            return o
        ct = _rounding_ct(a, b, name)
        check_out(ct, o)
        y = operand(b, ct)
        if ct.kind in "iu":
            _zero_check(y, o)
        ufunc(operand(a, ct), y, out=o, dtype=loop_dtype(ct), casting="unsafe")
        return o

    @quiet
    def tensor_op(a, b, out):
        return run(a, b, out_for(out, a, b))

    @quiet
    def scalar_op(a, b, out):
        number(b, name, "other")  # (the check the compiled tier makes at load)
        return run(a, b, out if out.shape == a.shape else fit(out, a.shape))

    return tensor_op, scalar_op


# fmod: C remainder (sign of the dividend); remainder: Python's (sign of the divisor)
_fmod_t, _fmod_s = _remainder_like(np.fmod, "fmod")
_rem_t, _rem_s = _remainder_like(np.remainder, "remainder")
kernel("aten::fmod.Tensor_out")(_fmod_t)
kernel("aten::fmod.Scalar_out")(_fmod_s)
kernel("aten::remainder.Tensor_out")(_rem_t)
kernel("aten::remainder.Scalar_out")(_rem_s)

# ---------------------------------------------------------------------------
# pow, atan2
# ---------------------------------------------------------------------------


def _int_pow(x, y, o, ct: np.dtype) -> None:
    # torch: integer powers wrap; a negative exponent gives 1 for base 1,
    # +-1 for base -1 and 0 otherwise (0 ** -1 included)
    if ct.kind == "i" and isinstance(y, np.ndarray) and (y < 0).any():
        xb, yb = np.broadcast_arrays(np.asarray(x, dtype=ct), np.asarray(y, dtype=ct))
        r = np.asarray(np.power(xb, np.maximum(yb, 0), dtype=ct))
        neg = yb < 0
        odd = (yb & 1).astype(bool)
        inv = np.where(xb == 1, 1, np.where(xb == -1, np.where(odd, -1, 1), 0)).astype(ct)
        np.copyto(r, inv, where=neg)
        np.copyto(o, r, casting="unsafe")
    else:
        np.power(x, y, out=o, dtype=ct, casting="unsafe")


def _pow(a, b, o) -> None:
    ct = result_type(a, b)
    scalar_exponent = not isinstance(b, np.ndarray)
    if scalar_exponent and b == 0:
        check_out(ct, o)
        o[...] = 1  # x ** 0 is 1, NaN and bool included
        return
    if scalar_exponent and b == 1 and not isinstance(b, float):
        check_out(ct, o)
        np.copyto(o, a, casting="unsafe")
        return
    if ct == BOOL:
        raise KernelError("pow is not supported for two bool operands")
    check_out(ct, o)
    if ct.kind in "iu" and scalar_exponent and b < 0:
        raise KernelError("integers to negative integer powers are not allowed")
    if scalar_exponent and (ct.kind in "iu" or ct == F16):
        b = checked_scalar(b, ct, "exponent")  # torch converts it to the tensor's type
    x, y = operand(a, ct), operand(b, ct)
    if ct.kind in "iu":
        _int_pow(x, y, o, ct)
    else:
        np.power(x, y, out=o, dtype=loop_dtype(ct), casting="unsafe")
        if ct == F16 and scalar_exponent and b == 0.5:
            # numpy's power takes sqrt for 0.5; torch's float16 pow is C's pow: +inf at
            # -inf, +0 at -0
            o[np.isneginf(x)] = np.inf
            np.add(o, 0, out=o)


@kernel("aten::pow.Tensor_Tensor_out")
@quiet
def pow_tensor_tensor(a, b, out):
    sa, sb = a.shape, b.shape
    shape = sa if sa == sb else broadcast_shape(sa, sb)
    o = out if out.shape == shape else fit(out, shape)
    dt = a.dtype
    if dt is b.dtype and dt is o.dtype and dt in FLOATS:
        np.power(a, b, out=o)
        return o
    _pow(a, b, o)
    return o


@kernel("aten::pow.Tensor_Scalar_out")
@quiet
def pow_tensor_scalar(a, b, out):
    o = out if out.shape == a.shape else fit(out, a.shape)
    dt = a.dtype
    # (torch takes these shortcuts for float32 and float64 only: float16 powers go through
    # C's pow, where pow(-inf, 0.5) is inf, not sqrt's NaN)
    if dt is o.dtype and dt in FLOATS and dt != F16 and type(b) in _SCALAR_TYPES:
        _pow_float_scalar(a, b, o)
        return o
    _pow(a, b, o)
    return o


def _pow_float_scalar(a, b, o) -> None:
    # torch computes these exponents with plain arithmetic, as these calls do
    # (pow would differ for the roots at -0.0 and -inf, and by an ulp for the
    # cube), the others with pow in the tensor's dtype
    if b in (3, -0.5, -2) and np.may_share_memory(a, o):
        a = a.copy()  # computed in two passes through o
    if b == 2:
        np.multiply(a, a, out=o)
    elif b == 3:
        np.multiply(a, a, out=o)
        np.multiply(o, a, out=o)
    elif b == 0.5:
        np.sqrt(a, out=o)
    elif b == -0.5:
        np.sqrt(a, out=o)
        np.divide(1, o, out=o)
    elif b == -1:
        np.divide(1, a, out=o)
    elif b == -2:
        np.multiply(a, a, out=o)
        np.divide(1, o, out=o)
    else:
        np.power(a, b, out=o)


@kernel("aten::pow.Scalar_out")
@quiet
def pow_scalar(a, b, out):
    o = out if out.shape == b.shape else fit(out, b.shape)
    ct = result_type(a, b)
    if ct == BOOL:
        raise KernelError("pow is not supported for two bool operands")
    check_out(ct, o)
    x, y = operand(a, ct, opmath=True), operand(b, ct)
    if ct.kind in "iu":
        _int_pow(x, y, o, ct)
    else:
        np.power(x, y, out=o, dtype=loop_dtype(ct), casting="unsafe")
    return o


@kernel("aten::atan2.out")
@quiet
def atan2(a, b, out):
    sa, sb = a.shape, b.shape
    shape = sa if sa == sb else broadcast_shape(sa, sb)
    o = out if out.shape == shape else fit(out, shape)
    dt = a.dtype
    if dt is b.dtype and dt is o.dtype and dt in FLOATS:
        np.arctan2(a, b, out=o)
        return o
    ct = result_type(a, b)
    if ct.kind in "biu":
        ct = F32
    if ct.kind == "c":
        raise KernelError("atan2 does not support complex tensors")
    check_out(ct, o)
    _compute(np.arctan2, a, b, o, ct)
    return o


# ---------------------------------------------------------------------------
# Bitwise and logical ops
# ---------------------------------------------------------------------------


def _integral(name: str, allow_bool: bool) -> Callable:
    def check(ct, a, b):
        if ct.kind not in ("biu" if allow_bool else "iu"):
            what = "integer or bool" if allow_bool else "integer"
            raise KernelError(f"{name} needs {what} operands, got {ct}")

    return check


for _name, _ufunc in (
    ("bitwise_and", np.bitwise_and),
    ("bitwise_or", np.bitwise_or),
    ("bitwise_xor", np.bitwise_xor),
):
    _t, _s = _plain(_ufunc, _INTS | {BOOL}, _integral(_name, True), quiet_fast=False)
    kernel(f"aten::{_name}.Tensor_out")(_t)
    kernel(f"aten::{_name}.Scalar_out")(_s)

# Shifts by a negative amount or by the bit width or more give 0 (left) or
# the sign fill (right), in both torch and numpy.
for _name, _ufunc in (
    ("bitwise_left_shift", np.left_shift),
    ("bitwise_right_shift", np.right_shift),
):
    _t, _s = _plain(_ufunc, _INTS, _integral(_name, False), quiet_fast=False)
    kernel(f"aten::{_name}.Tensor_out")(_t)
    kernel(f"aten::{_name}.Tensor_Scalar_out")(_s)


def _logical(ufunc: np.ufunc) -> Callable:
    @quiet  # (the cast to the common dtype may overflow: int32 -> float16 inf, true as torch's)
    def run(a, b, out):
        sa, sb = a.shape, b.shape
        shape = sa if sa == sb else broadcast_shape(sa, sb)
        o = out if out.shape == shape else fit(out, shape)
        # torch tests the operands in their common dtype: a 0-dim int32 -2**31 next to an
        # int8 tensor is an int8 0 (the official portable kernel tests each as it is)
        ct = result_type(a, b)
        ufunc(operand(a, ct), operand(b, ct), out=o, casting="unsafe")
        return o

    return run


kernel("aten::logical_and.out")(_logical(np.logical_and))
kernel("aten::logical_or.out")(_logical(np.logical_or))
kernel("aten::logical_xor.out")(_logical(np.logical_xor))

# ---------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------


def _comparison(ufunc: np.ufunc) -> tuple[Callable, Callable]:
    @quiet
    def general(a, b, o):
        ct = result_type(a, b)
        x, y = operand(a, ct), operand(b, ct)
        ufunc(x, y, out=o, signature=(ct, ct, BOOL), casting="unsafe")
        return o

    def tensor_op(a, b, out):
        sa, sb = a.shape, b.shape
        shape = sa if sa == sb else broadcast_shape(sa, sb)
        o = out if out.shape == shape else fit(out, shape)
        if a.dtype is b.dtype and o.dtype is BOOL:
            ufunc(a, b, out=o)
            return o
        return general(a, b, o)

    def scalar_op(a, b, out):
        o = out if out.shape == a.shape else fit(out, a.shape)
        if a.dtype in FLOATS and o.dtype is BOOL and type(b) in _SCALAR_TYPES:
            ufunc(a, b, out=o)
            return o
        return general(a, b, o)

    return tensor_op, scalar_op


for _name, _ufunc in (
    ("eq", np.equal),
    ("ne", np.not_equal),
    ("lt", np.less),
    ("le", np.less_equal),
    ("gt", np.greater),
    ("ge", np.greater_equal),
):
    _t, _s = _comparison(_ufunc)
    kernel(f"aten::{_name}.Tensor_out")(_t)
    kernel(f"aten::{_name}.Scalar_out")(_s)

# ---------------------------------------------------------------------------
# where, clamp, masked_fill, fill
# ---------------------------------------------------------------------------


@kernel("aten::where.self_out")
def where(cond, a, b, out):
    if cond.dtype is not BOOL and cond.dtype != BOOL:
        raise KernelError(f"where expects a bool condition, got a tensor of dtype {cond.dtype}")
    shape = a.shape
    if cond.shape == shape and b.shape == shape and out.shape == shape:
        o = out
    else:
        o = out_for(out, cond, a, b)
    if a.dtype is b.dtype and a.dtype is o.dtype:
        o[...] = np.where(cond, a, b)
        return o
    return _where_general(cond, a, b, o)


@quiet
def _where_general(cond, a, b, o):
    ct = result_type(a, b)
    check_out(ct, o)
    x = np.asarray(operand(a, ct)).astype(ct, copy=False)
    y = np.asarray(operand(b, ct)).astype(ct, copy=False)
    np.copyto(o, np.where(cond, x, y), casting="unsafe")
    return o


def _clamp_into(x, lo, hi, o, lt) -> None:
    # min(max(x, lo), hi): NaN in x or in a bound propagates, lo > hi gives hi;
    # numpy's min and max return their second operand on ties, so x goes
    # second: clamping -0.0 at 0 keeps -0.0, as torch does
    if lo is not None:
        np.maximum(lo, x, out=o, dtype=lt, casting="unsafe")
        x = o
    if hi is not None:
        np.minimum(hi, x, out=o, dtype=lt, casting="unsafe")
    elif lo is None:
        np.copyto(o, x, casting="unsafe")


@kernel("aten::clamp.out")
def clamp(x, lo, hi, out):
    o = out if out.shape == x.shape else fit(out, x.shape)
    dt = x.dtype
    if dt is o.dtype and dt in FLOATS:
        # min(max(x, lo), hi): NaN propagates, lo > hi gives hi, ties keep x
        # (-0.0), as in torch
        if type(lo) in _SCALAR_TYPES:
            if type(hi) in _SCALAR_TYPES:
                np.maximum(lo, x, out=o)
                np.minimum(hi, o, out=o)
                return o
            if hi is None:
                np.maximum(lo, x, out=o)
                return o
        elif lo is None and type(hi) in _SCALAR_TYPES:
            np.minimum(hi, x, out=o)
            return o
    return _clamp_general(x, lo, hi, o)


@quiet
def _clamp_general(x, lo, hi, o):
    if lo is None and hi is None:
        raise KernelError("clamp needs at least one of min and max")
    ct = result_type(x, lo, hi)
    if ct == BOOL:
        raise KernelError("clamp is not supported for bool tensors with bool bounds")
    check_out(ct, o)
    if lo is not None and hi is not None and (lo != lo or hi != hi):
        o[...] = np.nan  # torch fills NaN before converting the bounds
        return o
    lo = None if lo is None else checked_scalar(lo, ct, "min")
    hi = None if hi is None else checked_scalar(hi, ct, "max")
    _clamp_into(operand(x, ct), lo, hi, o, loop_dtype(ct))
    return o


@kernel("aten::clamp.Tensor_out")
@quiet
def clamp_tensor(x, lo, hi, out):
    if lo is None and hi is None:
        raise KernelError("clamp needs at least one of min and max")
    o = out_for(out, x, lo, hi)
    ct = result_type(x, lo, hi)
    if ct == BOOL:
        raise KernelError("clamp is not supported for bool tensors")
    check_out(ct, o)
    lo = None if lo is None else operand(lo, ct)
    hi = None if hi is None else operand(hi, ct)
    if lo is not None and isinstance(hi, np.ndarray) and np.may_share_memory(hi, o):
        hi = hi.copy()  # read after o is first written
    _clamp_into(operand(x, ct), lo, hi, o, loop_dtype(ct))
    return o


@kernel("aten::hardtanh.out")
def hardtanh(x, lo, hi, out):
    o = out if out.shape == x.shape else fit(out, x.shape)
    dt = x.dtype
    if dt is o.dtype and dt in FLOATS and type(lo) in _SCALAR_TYPES and type(hi) in _SCALAR_TYPES:
        np.maximum(lo, x, out=o)  # x second: ties keep -0.0, as in torch
        np.minimum(hi, o, out=o)
        return o
    return _hardtanh_general(x, lo, hi, o)


@quiet
def _hardtanh_general(x, lo, hi, o):
    dt = x.dtype
    if dt == BOOL:
        raise KernelError("hardtanh is not supported for bool tensors")
    if dt.kind == "u" and (lo < 0 or hi < 0):
        raise KernelError("hardtanh of an unsigned tensor needs non-negative limits")
    check_out(dt, o)
    lo, hi = checked_scalar(lo, dt, "min_val"), checked_scalar(hi, dt, "max_val")
    _clamp_into(x, lo, hi, o, loop_dtype(dt))
    return o


@kernel("aten::masked_fill.Scalar_out")
@quiet
def masked_fill(x, mask, value, out):
    if mask.dtype != BOOL:
        raise KernelError(f"masked_fill needs a bool mask, got a mask of dtype {mask.dtype}")
    o = out_for(out, x, mask)
    check_out(x.dtype, o)
    v = checked_scalar(value, x.dtype, "value")
    if o.dtype != x.dtype:
        v = o.dtype.type(v)
    if np.may_share_memory(mask, o):
        mask = mask.copy()  # read after o is written
    np.copyto(o, x, casting="unsafe")
    np.copyto(o, v, where=mask, casting="unsafe")
    return o


@kernel("aten::fill.Scalar_out")
@quiet
def fill_scalar(x, value, out):
    o = out if out.shape == x.shape else fit(out, x.shape)
    scalar_dtype(value)  # refuses non-numbers
    if o.size == 1 and o.dtype == F16:
        # torch fills one element through float32: checked there, then rounded (to inf)
        o[...] = checked_scalar(value, F32, "value")
    else:
        o[...] = checked_scalar(value, o.dtype, "value")
    return o


@kernel("aten::fill.Tensor_out")
@quiet
def fill_tensor(x, value, out):
    if value.ndim != 0:
        raise KernelError(
            f"fill needs a 0-dimensional value tensor, got one of shape {value.shape}"
        )
    o = out if out.shape == x.shape else fit(out, x.shape)
    np.copyto(o, value, casting="unsafe")
    return o
