"""Load-time fast paths for elementwise math: unary float functions, pow by a
scalar, where, comparisons, logical ops, division with a rounding mode, atan2.

Each specializer takes the common static case (operands and output of one
dtype for which the general kernel's numpy call is exactly torch's) and binds
the one or two numpy calls that compute it; anything else keeps the general
kernel. Scalar operands are bound as 0-dim arrays of the tensor's dtype, which
numpy takes about 0.3 us faster per call than a Python number (and with the
same value: a Python scalar is converted to the tensor's dtype either way).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from pyexecutorch.kernels.elementwise.unary import NUMPY_FLOAT_UFUNCS
from pyexecutorch.kernels.registry import Const, Inline, specializer

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
BOOL = np.dtype(np.bool_)
FLOATS = (F32, F64)
_SIGNED = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
# dtypes whose comparisons and min/max numpy computes exactly as torch does
NUMERIC = FLOATS + _SIGNED + (np.dtype(np.uint8),)


def arrays(*xs: Any) -> bool:
    return all(isinstance(x, np.ndarray) for x in xs)


def same_dtype(kinds: tuple[np.dtype, ...], *xs: Any) -> bool:
    """Whether every ``x`` is an array of one dtype among ``kinds``."""
    if not arrays(*xs):
        return False
    dt = xs[0].dtype
    return dt in kinds and all(x.dtype == dt for x in xs)


def broadcasts_to(out: np.ndarray, *xs: np.ndarray) -> bool:
    """Whether ``xs`` broadcast exactly to ``out``'s shape."""
    try:
        return np.broadcast_shapes(out.shape, *(x.shape for x in xs)) == out.shape
    except ValueError:
        return False


def overlaps(out: np.ndarray, *xs: Any) -> bool:
    """Whether ``out`` shares memory with an array among ``xs``.

    Memory planning lets an output reuse the memory of an input that dies at
    the same instruction, so a fast path making several passes must not read
    an input after its first write to ``out`` unless they do not overlap.
    (One numpy call is always safe: numpy buffers overlapping operands.)
    The run-time arrays overlap as the load-time ones do: an input is either
    the same planned array or the caller's array, outside planned memory.
    """
    return any(isinstance(x, np.ndarray) and np.shares_memory(out, x) for x in xs)


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same elements of the same memory."""
    return (
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        and a.shape == b.shape
        and a.strides == b.strides
    )


def is_number(value: Any) -> bool:
    return type(value) in (int, float)


def fits(value: Any, dtype: np.dtype) -> bool:
    """Whether the Python number ``value`` converts to ``dtype`` without overflow."""
    if not is_number(value):
        return False
    if dtype.kind == "f":
        v = float(value)
        return math.isnan(v) or math.isinf(v) or abs(v) <= float(np.finfo(dtype).max)
    info = np.iinfo(dtype)
    return type(value) is int and info.min <= value <= info.max


def const(value: Any, dtype: np.dtype) -> np.ndarray:
    """``value`` as a read-only 0-dim array of ``dtype``: numpy's cheapest scalar operand."""
    a = np.array(value, dtype=dtype)
    a.flags.writeable = False
    return a


_FULL: weakref.WeakValueDictionary[tuple, np.ndarray] = weakref.WeakValueDictionary()
# Up to this size a 0-dim bound is as fast as a full one.
_FULL_BOUND_MIN = 256


def bound(value: Any, like: np.ndarray) -> np.ndarray:
    """A constant operand of ``maximum``/``minimum`` for arrays shaped like ``like``.

    numpy's SIMD min/max loops take two arrays of one shape; with a scalar
    they run three times slower on large tensors, so those get a read-only
    array of the full shape, shared by every instruction that needs the same one.
    """
    c = const(value, like.dtype)
    if like.size <= _FULL_BOUND_MIN:
        return c
    key = (like.shape, like.dtype.str, c.tobytes())
    full = _FULL.get(key)
    if full is None:
        full = np.full(like.shape, c)
        full.flags.writeable = False
        _FULL[key] = full
    return full


def unary(a: Any, out: Any, kinds: tuple[np.dtype, ...] = FLOATS) -> bool:
    """Same dtype among ``kinds``, same shape."""
    return same_dtype(kinds, a, out) and a.shape == out.shape


# ---------------------------------------------------------------------------
# Unary functions
# ---------------------------------------------------------------------------


def _inline_unary(fn: Any, kinds: tuple[np.dtype, ...] = FLOATS):  # noqa: ANN202
    inline = Inline(fn, (0, -1))

    def specialize(a: Any, out: Any) -> Any:
        return inline if unary(a, out, kinds) else None

    return specialize


# exp, sqrt and tanh have theirs in shape/fast.py
for _name, _ufunc in NUMPY_FLOAT_UFUNCS.items():
    if _name not in ("exp", "sqrt", "tanh", "reciprocal"):
        specializer(f"aten::{_name}.out")(_inline_unary(_ufunc))

specializer("aten::abs.out")(_inline_unary(np.absolute, NUMERIC))
specializer("aten::ceil.out")(_inline_unary(np.ceil))
specializer("aten::floor.out")(_inline_unary(np.floor))
specializer("aten::trunc.out")(_inline_unary(np.trunc))
specializer("aten::round.out")(_inline_unary(np.rint))  # half to even, as torch


def _reciprocal_of(a: np.ndarray) -> Inline:
    # 1 / x is np.reciprocal's value; numpy's division loop is vectorized and
    # takes half the time on larger tensors, reciprocal's call 0.05 us less
    if a.size <= 256:
        return Inline(np.reciprocal, (0, -1))
    return Inline(np.divide, (Const(const(1, a.dtype)), 0, -1))


def _rsqrt_of(a: np.ndarray):  # noqa: ANN202
    one = const(1, a.dtype)

    def rsqrt(a: np.ndarray, *rest: Any) -> np.ndarray:
        out = rest[-1]
        np.sqrt(a, out=out)  # 1 / sqrt(x), as torch computes it
        return np.divide(one, out, out=out)

    return rsqrt


@specializer("aten::reciprocal.out")
def _reciprocal(a: Any, out: Any) -> Any:
    return _reciprocal_of(a) if unary(a, out) else None


@specializer("aten::rsqrt.out")
def _rsqrt(a: Any, out: Any) -> Any:
    return _rsqrt_of(a) if unary(a, out) else None


@specializer("aten::logical_not.out")
def _logical_not(a: Any, out: Any) -> Any:
    if arrays(a, out) and out.dtype == BOOL and a.shape == out.shape:
        return Inline(np.logical_not, (0, -1))
    return None


def _float_test(ufunc: np.ufunc):  # noqa: ANN202
    inline = Inline(ufunc, (0, -1))

    def specialize(a: Any, out: Any) -> Any:
        if arrays(a, out) and a.dtype in FLOATS and out.dtype == BOOL and a.shape == out.shape:
            return inline
        return None

    return specialize


specializer("aten::isnan.out")(_float_test(np.isnan))
specializer("aten::isinf.out")(_float_test(np.isinf))

# ---------------------------------------------------------------------------
# pow(tensor, scalar)
# ---------------------------------------------------------------------------


def _cube_of(a: np.ndarray, out: np.ndarray):  # noqa: ANN202
    # (a * a) * a, as torch; the square goes to scratch when out is a's memory
    square = np.empty_like(out) if overlaps(out, a) else None

    def cube(a: np.ndarray, b: Any, out: np.ndarray) -> np.ndarray:
        s = out if square is None else square
        np.multiply(a, a, out=s)
        return np.multiply(s, a, out=out)

    return cube


def _inverse_square_of(a: np.ndarray):  # noqa: ANN202
    one = const(1, a.dtype)

    def inverse_square(a: np.ndarray, b: Any, out: np.ndarray) -> np.ndarray:
        np.multiply(a, a, out=out)
        return np.divide(one, out, out=out)

    return inverse_square


@specializer("aten::pow.Tensor_Scalar_out")
def _pow_tensor_scalar(a: Any, b: Any, out: Any) -> Any:
    # torch computes these exponents with plain arithmetic, as the calls here
    # do (pow would differ for the roots at -0.0 and -inf, and by an ulp for
    # the cube), the others with pow in the tensor's dtype
    if not unary(a, out) or not fits(b, a.dtype) or not math.isfinite(b):
        return None
    if b == 2:
        return Inline(np.multiply, (0, 0, -1))
    if b == 3:
        return _cube_of(a, out)
    if b == 0.5:
        return Inline(np.sqrt, (0, -1))
    if b == -0.5:
        return _rsqrt_of(a)
    if b == -1:
        return _reciprocal_of(a)
    if b == -2:
        return _inverse_square_of(a)
    if b == 1:
        return Inline(np.copyto, (-1, 0))
    if b == 0:
        return Inline(np.copyto, (-1, Const(const(1, a.dtype))))  # NaN ** 0 is 1 too
    return Inline(np.power, (0, Const(const(b, a.dtype)), -1))


# ---------------------------------------------------------------------------
# where, comparisons, logical ops
# ---------------------------------------------------------------------------

# Above this size where() selects by bit masks: np.copyto(where=) and
# np.where branch per element and run up to 10x slower on irregular masks.
_WHERE_BITS_MIN = 1024
_UINT = {4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}


@specializer("aten::where.self_out")
def _where(cond: Any, a: Any, b: Any, out: Any) -> Any:
    if not arrays(cond, a, b, out) or cond.dtype != BOOL or not same_dtype(NUMERIC, a, b, out):
        return None
    if not broadcasts_to(out, cond, a, b):
        return None
    bits = out.dtype.itemsize in _UINT
    if bits and (out.size > _WHERE_BITS_MIN or overlaps(out, cond, a)):
        return _where_bits(out)
    if overlaps(out, cond, a):
        return None  # read after the first write to out

    def where(cond: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
        np.copyto(out, b)
        np.copyto(out, a, where=cond)
        return out

    return where


def _where_bits(out: np.ndarray):  # noqa: ANN202
    # out = b ^ ((a ^ b) * cond) on the bit patterns: exact for all of them
    # (NaN payloads, -0.0), branch-free, and out is written only by the last
    # call, so it may be any input's memory.
    u = _UINT[out.dtype.itemsize]
    diff = np.empty(out.shape, u)

    def where(cond: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
        bb = b.view(u)
        np.bitwise_xor(a.view(u), bb, out=diff)
        np.multiply(diff, cond, out=diff)
        np.bitwise_xor(bb, diff, out=out.view(u))
        return out

    return where


_COMPARISONS = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _compare_tensors(ufunc: np.ufunc):  # noqa: ANN202
    inline = Inline(ufunc, (0, 1, -1))

    def specialize(a: Any, b: Any, out: Any) -> Any:
        if not same_dtype(NUMERIC + (BOOL,), a, b) or not arrays(out) or out.dtype != BOOL:
            return None
        return inline if broadcasts_to(out, a, b) else None

    return specialize


def _compare_scalar(ufunc: np.ufunc):  # noqa: ANN202
    def specialize(a: Any, b: Any, out: Any) -> Any:
        if not arrays(a, out) or out.dtype != BOOL or a.shape != out.shape:
            return None
        # an integer tensor against a float compares in float32: the general kernel's case
        if a.dtype not in NUMERIC or not fits(b, a.dtype):
            return None
        return Inline(ufunc, (0, Const(const(b, a.dtype)), -1))

    return specialize


for _name, _ufunc in _COMPARISONS.items():
    specializer(f"aten::{_name}.Tensor_out")(_compare_tensors(_ufunc))
    specializer(f"aten::{_name}.Scalar_out")(_compare_scalar(_ufunc))


def _logical(ufunc: np.ufunc):  # noqa: ANN202
    inline = Inline(ufunc, (0, 1, -1))

    def specialize(a: Any, b: Any, out: Any) -> Any:
        if arrays(a, b, out) and out.dtype == BOOL and broadcasts_to(out, a, b):
            # (a 0-dim operand of another dtype is first cast to the common one: the kernel)
            if a.dtype == b.dtype or (a.ndim and b.ndim):
                return inline
        return None

    return specialize


specializer("aten::logical_and.out")(_logical(np.logical_and))
specializer("aten::logical_or.out")(_logical(np.logical_or))
specializer("aten::logical_xor.out")(_logical(np.logical_xor))


# ---------------------------------------------------------------------------
# Division with a rounding mode, atan2
# ---------------------------------------------------------------------------


def _divide_by(mode: Any) -> Any:
    """The numpy calls of float division with ``mode``, given operands 0 and 1."""
    if mode is None:
        return Inline(np.divide, (0, 1, -1))
    if mode == "floor":
        # numpy's float floor_divide is torch's algorithm (Python's), inf and NaN included
        return Inline(np.floor_divide, (0, 1, -1))
    if mode == "trunc":

        def trunc_divide(a: Any, b: Any, mode: Any, out: np.ndarray) -> np.ndarray:
            np.divide(a, b, out=out)
            return np.trunc(out, out=out)

        return trunc_divide
    return None


@specializer("aten::div.out_mode")
def _div_mode(a: Any, b: Any, mode: Any, out: Any) -> Any:
    if same_dtype(_SIGNED, a, b, out) and broadcasts_to(out, a, b):
        return _integer_divide_by(mode, out)
    if not same_dtype(FLOATS, a, b, out) or not broadcasts_to(out, a, b):
        return None
    return _divide_by(mode)


def _integer_divide_by(mode: Any, out: np.ndarray) -> Any:
    """Signed integer division rounding down or toward zero; a zero divisor keeps the
    general kernel, which raises torch's error."""
    if mode not in ("floor", "trunc"):
        return None
    general = _general("aten::div.out_mode")
    if mode == "floor":

        def floor(a: np.ndarray, b: np.ndarray, mode: Any, out: np.ndarray) -> np.ndarray:
            if not b.all():
                return general(a, b, mode, out)
            return np.floor_divide(a, b, out)

        return floor
    whole = np.empty(out.shape, out.dtype)  # scratch: out may be a's or b's memory

    def trunc(a: np.ndarray, b: np.ndarray, mode: Any, out: np.ndarray) -> np.ndarray:
        if not b.all():
            return general(a, b, mode, out)
        # a - fmod(a, b) is an exact multiple of b: floor division of it truncates
        np.fmod(a, b, whole)
        np.subtract(a, whole, whole)
        return np.floor_divide(whole, b, out)

    return trunc


@specializer("aten::div.Scalar_mode_out")
def _div_scalar_mode(a: Any, b: Any, mode: Any, out: Any) -> Any:
    if not unary(a, out) or not fits(b, a.dtype):
        return None
    plan = _divide_by(mode)
    if plan is None:
        return None
    scalar = const(b, a.dtype)
    if isinstance(plan, Inline):
        return Inline(plan.fn, (0, Const(scalar), -1))
    return lambda a, b, mode, out: plan(a, scalar, mode, out)


@specializer("aten::atan2.out")
def _atan2(a: Any, b: Any, out: Any) -> Any:
    if same_dtype(FLOATS, a, b, out) and broadcasts_to(out, a, b):
        return Inline(np.arctan2, (0, 1, -1))
    return None


# ---------------------------------------------------------------------------
# remainder (sign of the divisor) and fmod (sign of the dividend)


def _remainder_like(ufunc: np.ufunc, name: str):  # noqa: ANN202
    def tensor(a: Any, b: Any, out: Any) -> Any:
        if not same_dtype(NUMERIC, a, b, out) or not broadcasts_to(out, a, b):
            return None
        if a.dtype.kind == "f":
            return Inline(ufunc, (0, 1, -1))  # numpy's float loops are torch's
        general = _general(f"{name}.Tensor_out")

        def checked(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
            # An integer zero divisor is torch's ZeroDivisionError: the general
            # kernel raises it with its message.
            if not b.all():
                return general(a, b, out)
            return ufunc(a, b, out)

        return checked

    def scalar(a: Any, b: Any, out: Any) -> Any:
        if not same_dtype(NUMERIC, a, out) or a.shape != out.shape or not fits(b, a.dtype):
            return None
        if a.dtype.kind != "f" and (type(b) is not int or b == 0):
            return None
        return Inline(ufunc, (0, Const(const(b, a.dtype)), -1))

    specializer(f"{name}.Tensor_out")(tensor)
    specializer(f"{name}.Scalar_out")(scalar)


def _general(name: str) -> Any:
    from pyexecutorch.kernels.registry import get_kernel  # noqa: PLC0415 - registered by now

    return get_kernel(name).fn


_remainder_like(np.remainder, "aten::remainder")
_remainder_like(np.fmod, "aten::fmod")
