"""Elementwise kernels, part 1: torch's dtype rules and the unary math kernels.

The helpers here (type promotion, scalar conversion, quiet floating-point
errors, ``erf``) are shared with :mod:`binary` and
:mod:`activation`.

Dtype rules follow torch eager:

* the *computation* dtype of an op is torch's ``result_type`` of its
  operands (dimensioned tensors outrank 0-dim tensors, which outrank Python
  scalars, unless a lower-priority operand is of a higher category:
  bool < integer < floating < complex); a Python float counts as float32
  (torch's default dtype), a Python int as int64;
* the result is computed in that dtype and cast into the planned output,
  whose dtype the compiler chose;
* float16 is computed in float32 and rounded once, like torch's CPU kernels;
* integer ops wrap around on overflow; Python ints are wrapped into the
  computation dtype first (``int8_tensor + 300`` adds 44, as torch does).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from pyexecutorch.jit.coefficients import ERF_P, ERF_Q
from pyexecutorch.kernels.common import fit, fp_warnings_off, fp_warnings_restore
from pyexecutorch.kernels.registry import KernelError, kernel

BOOL = np.dtype(np.bool_)
I64 = np.dtype(np.int64)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
C64 = np.dtype(np.complex64)
C128 = np.dtype(np.complex128)

# Dtypes for which numpy's own loop is exactly torch's computation.
FLOATS = frozenset({F32, F64})

_RANK = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}
_SMALL_UNSIGNED = frozenset({np.dtype(np.uint8)})

# ---------------------------------------------------------------------------
# Type promotion (torch semantics)
# ---------------------------------------------------------------------------


def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """torch.promote_types for two numpy dtypes."""
    if a is b or a == b:
        return a
    ka, kb = a.kind, b.kind
    if ka == "b":
        return b
    if kb == "b":
        return a
    ra, rb = _RANK[ka], _RANK[kb]
    if ra != rb:
        hi, lo = (a, b) if ra > rb else (b, a)
        if hi.kind == "c" and lo == F64:
            return C128
        # An integer never widens a floating type: int32 + float16 -> float16.
        return hi
    if ra == 1 and (
        (ka == "u" and a not in _SMALL_UNSIGNED) or (kb == "u" and b not in _SMALL_UNSIGNED)
    ):
        raise KernelError(f"torch has no promotion between {a} and {b}")
    return np.promote_types(a, b)


def _combine(higher: np.dtype | None, lower: np.dtype | None) -> np.dtype | None:
    # How a lower-priority operand (0-dim tensor, Python scalar) changes the
    # dtype set by higher-priority ones: only if it is of a higher category.
    if lower is None:
        return higher
    if higher is None:
        return lower
    kh, kl = higher.kind, lower.kind
    if kh == "c":
        return higher
    if kl == "c":
        if kh == "f":
            return C128 if higher == F64 else C64
        return lower
    if kh == "f":
        return higher
    if kh == "b" or kl == "f":
        return promote_types(higher, lower)
    return higher


def scalar_dtype(value: object) -> np.dtype:
    """The dtype torch gives a Python scalar when promoting (default dtypes)."""
    if isinstance(value, (bool, np.bool_)):
        return BOOL
    if isinstance(value, (int, np.integer)):
        return I64
    if isinstance(value, (float, np.floating)):
        return F32
    if isinstance(value, (complex, np.complexfloating)):
        return C64
    raise KernelError(f"expected a number (bool, int or float), got {type(value).__name__}")


def result_type(*operands: object) -> np.dtype:
    """torch.result_type over tensors (numpy arrays) and Python scalars; ``None`` is skipped."""
    dim = zero = wrapped = None
    for x in operands:
        if x is None:
            continue
        if isinstance(x, np.ndarray):
            if x.ndim:
                dim = x.dtype if dim is None else promote_types(dim, x.dtype)
            else:
                zero = x.dtype if zero is None else promote_types(zero, x.dtype)
        else:
            d = scalar_dtype(x)
            wrapped = d if wrapped is None else promote_types(wrapped, d)
    result = _combine(dim, _combine(zero, wrapped))
    if result is None:
        raise KernelError("expected at least one tensor or scalar operand")
    return result


def can_cast(src: np.dtype, dst: np.dtype) -> bool:
    """torch's canCast: no complex -> real, floating -> integral, non-bool -> bool."""
    ks, kd = src.kind, dst.kind
    if ks == "c" and kd != "c":
        return False
    if ks == "f" and kd in "biu":
        return False
    return not (ks != "b" and kd == "b")


def check_out(ct: np.dtype, out: np.ndarray) -> None:
    if not can_cast(ct, out.dtype):
        raise KernelError(f"result of dtype {ct} cannot be cast to the output's dtype {out.dtype}")


def loop_dtype(ct: np.dtype) -> np.dtype:
    """The numpy loop dtype for computation dtype ``ct`` (float16 is computed in float32)."""
    return F32 if ct is F16 or ct == F16 else ct


def compute_in_loop_dtype(compute: Callable, x: np.ndarray, o: np.ndarray, dtype: np.dtype) -> None:
    """Run ``compute(x, out)`` in the loop dtype of ``dtype`` (float32 for float16) and store into ``o``."""
    lt = loop_dtype(dtype)
    v = x if x.dtype == lt else x.astype(lt)
    if o.dtype == lt:
        compute(v, o)
    else:
        tmp = np.empty(o.shape, dtype=lt)
        compute(v, tmp)
        np.copyto(o, tmp, casting="unsafe")


def float_dtype(dt: np.dtype) -> np.dtype:
    """The dtype of a floating op's result for input dtype ``dt`` (ints and bool -> float32)."""
    return F32 if dt.kind in "biu" else dt


_INT_RANGE = {
    np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max))
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
}


def scalar_for(value: object, ct: np.dtype) -> object:
    """A Python scalar as an operand of a computation in dtype ``ct``.

    Integers are wrapped into ``ct`` (torch converts scalars to the
    computation type with C semantics); floats stay Python floats, which
    numpy converts to the loop dtype (float32 for float16, like torch's
    float opmath).
    """
    k = ct.kind
    if k in "iu":
        v = int(value)  # type: ignore[call-overload]
        lo, hi = _INT_RANGE[ct]
        if lo <= v <= hi:
            return v
        return np.array(v & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64).astype(ct)[()]
    if k == "b":
        return bool(value)
    if k == "f":
        return float(value)  # type: ignore[arg-type]
    return complex(value)  # type: ignore[arg-type]


def checked_scalar(value: object, dt: np.dtype, what: str) -> object:
    """``value`` converted to ``dt``, refusing overflow like torch's checked conversion."""
    k = dt.kind
    if isinstance(value, complex) and k != "c":
        raise KernelError(f"{what} {value!r} cannot be converted to {dt}")
    if k in "iu":
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise KernelError(f"{what} {value!r} cannot be converted to {dt} without overflow")
            v = int(value)
        else:
            v = int(value)  # type: ignore[call-overload]
        lo, hi = _INT_RANGE[dt]
        if k == "u" and -hi <= v < 0 and not isinstance(value, float):
            v += hi + 1  # torch lets negative integers wrap into unsigned types
        if not lo <= v <= hi:
            raise KernelError(f"{what} {value!r} cannot be converted to {dt} without overflow")
        return dt.type(v)
    if k == "f":
        v = float(value)  # type: ignore[arg-type]
        big = v == v and abs(v) != float("inf")
        if big and dt != F64 and abs(v) > float(np.finfo(dt).max):
            raise KernelError(f"{what} {value!r} cannot be converted to {dt} without overflow")
        return dt.type(v)
    if k == "b":
        return np.bool_(bool(value))
    return dt.type(value)


def operand(x: object, ct: np.dtype, opmath: bool = False) -> object:
    """An operand (array or Python scalar) prepared for a computation in ``ct``.

    0-dim tensors are converted to ``ct`` first (torch casts them to the
    common dtype) and float16 computations round their other inputs to
    float16 before the float32 loop, as torch does. The exception is torch's
    "opmath" scalar: for ``mul`` and the divisions, a Python scalar or 0-dim
    tensor as the second operand of a float16 computation keeps float32
    precision (``opmath=True``).
    """
    if isinstance(x, np.ndarray):
        if x.dtype != ct:
            if x.ndim == 0:
                return x.astype(F32 if opmath and ct == F16 else ct)
            if ct == F16:
                return x.astype(F16)
        return x
    if ct == F16 and not opmath:
        return float(np.float16(x))  # type: ignore[arg-type]
    return scalar_for(x, ct)


def shape_of(x: object) -> tuple[int, ...]:
    return x.shape if isinstance(x, np.ndarray) else ()


def out_for(out: np.ndarray, *operands: object) -> np.ndarray:
    """``out`` fitted to the broadcast shape of ``operands`` (arrays or scalars)."""
    shapes = [x.shape for x in operands if isinstance(x, np.ndarray)]
    shape = shapes[0]
    for s in shapes[1:]:
        if s != shape:
            try:
                shape = np.broadcast_shapes(shape, s)
            except ValueError:
                raise KernelError(
                    "shapes " + " and ".join(str(tuple(t)) for t in shapes) + " cannot be broadcast"
                ) from None
    return out if out.shape == shape else fit(out, shape)


# ---------------------------------------------------------------------------
# Floating-point error state: torch never warns about inf/nan results
# ---------------------------------------------------------------------------


def quiet(fn: Callable) -> Callable:
    """Run ``fn`` with numpy's floating-point warnings off (about 0.2 us)."""

    @functools.wraps(fn)
    def run(*args):
        token = fp_warnings_off()
        try:
            return fn(*args)
        finally:
            fp_warnings_restore(token)

    return run


# ---------------------------------------------------------------------------
# erf: numpy has none, so it is evaluated here from fitted approximations
# ---------------------------------------------------------------------------
#
# Coefficients were fitted for this module by weighted least squares on
# Chebyshev nodes against 40-digit mpmath values (tests check the result on a
# dense grid against math.erf).
#
# float64 (max relative error ~1e-15):
#   |x| < 1:      erf(x) = x * S64(x*x)
#   1 <= |x| < 6: erf(x) = sign(x) * (1 - exp(-x*x) * L64(2.4/|x| - 1.4))
#   |x| >= 6:     erf(x) = sign(x)
# float32 and float16 (evaluated in float64, max relative error ~3e-9 before
# rounding): erf(x) = x * RP(t) / RQ(t), t = x*x, with |x| clamped to 4.
# Tensors of at most SMALL elements use math.erf instead.

_S64 = (
    -7.711354695850779e-10, 1.3670915859628352e-08, -1.6196078576112106e-07,
    1.6445644077596762e-06, -1.4924576946928491e-05, 0.00012055285579700127,
    -0.000854832562158586, 0.005223977598598632, -0.026866170642017007,
    0.11283791670935857, -0.3761263890318316, 1.1283791670955123,
)  # fmt: skip
_L64 = (
    1.171477140390454e-09, 1.622461043017303e-11, -7.249298674963784e-09,
    1.2991378800956425e-09, 1.5407877195505536e-08, 1.3065880313204423e-09,
    -2.045352981036585e-08, -2.0867376661704397e-08, 7.181534932486235e-08,
    -9.21815777774346e-08, 1.1084304242937286e-07, -4.675469763899814e-10,
    -6.568362677285607e-07, 2.583964058640455e-06, -6.499883507653213e-06,
    1.0882397240548e-05, -4.046320246967694e-06, -5.528645319653133e-05,
    0.0002656054409538727, -0.0007383867464843692, 0.0010344322272911068,
    0.0028211318979488864, -0.030831050508432017, 0.16536269001261816,
    0.28972211632346456,
)  # fmt: skip

# Work on blocks small enough to stay in cache (numpy passes over the whole
# array once per operation).
_BLOCK = 16384


def _horner(coefs: tuple[float, ...], u: np.ndarray) -> np.ndarray:
    r = u * coefs[0]
    r += coefs[1]
    for c in coefs[2:]:
        r *= u
        r += c
    return r


def erf_f64(x: np.ndarray, dst: np.ndarray) -> None:
    """dst = erf(x) for a float64 block ``x`` into float64 ``dst``, to ~1e-15."""
    ax = np.abs(x)
    small = ax < 1.0
    if small.all():
        t = x * x
        r = _horner(_S64, t)
        np.multiply(r, x, out=dst)
        return
    dst[...] = x  # NaN stays NaN; every other element is overwritten
    xs = x[small]
    dst[small] = xs * _horner(_S64, xs * xs)
    mid = ~small & (ax < 6.0)
    xm = x[mid]
    if xm.size:
        am = np.abs(xm)
        u = 2.4 / am
        u -= 1.4
        g = _horner(_L64, u)
        np.multiply(am, am, out=am)
        np.negative(am, out=am)
        np.exp(am, out=am)
        am *= g
        np.subtract(1.0, am, out=am)
        dst[mid] = np.copysign(am, xm)
    big = ax >= 6.0
    if big.any():
        dst[big] = np.copysign(1.0, x[big])


def blocked(fn: Callable[[np.ndarray, np.ndarray], None], x: np.ndarray, dst: np.ndarray) -> None:
    """Apply ``fn(float64 block, dst block)`` over ``x`` in cache-sized blocks."""
    n = x.size
    if x.ndim == 0:
        x, dst = x.reshape(1), dst.reshape(1)
    if n <= _BLOCK:
        fn(x.astype(F64, copy=False), dst)
        return
    flat_x = x.reshape(-1)  # copies only when x is not contiguous
    if dst.flags.c_contiguous:
        flat_d = dst.reshape(-1)
        for i in range(0, n, _BLOCK):
            fn(flat_x[i : i + _BLOCK].astype(F64, copy=False), flat_d[i : i + _BLOCK])
    else:
        tmp = np.empty(n, dtype=dst.dtype)
        for i in range(0, n, _BLOCK):
            fn(flat_x[i : i + _BLOCK].astype(F64, copy=False), tmp[i : i + _BLOCK])
        dst[...] = tmp.reshape(dst.shape)


# float32 and float16: the rational z * P(t) / Q(t) (jit.coefficients) evaluated in float64. Its
# error (~3e-9) and float64's rounding stay far below float32's half ulp, so
# the result is within ~0.55 ulp of erf (torch's own float32 erf: ~0.77 ulp);
# the same rational evaluated in float32 errs by up to 6 ulp. The powers
# 1, t, ..., t**6 are the rows of one matrix, so P and Q come from a single
# matrix product: 10 numpy calls whatever the size, against ~30 for Horner's
# scheme. At 4, erf is 1 - 1.5e-8, which rounds to 1 in float32.
_RATIONAL = np.array([ERF_P[::-1], ERF_Q[::-1] + (0.0,)])  # rows P, Q; column k: t**k
_CLAMP = 4.0
# (first factor, second factor, product) rows of the powers matrix: t**2..t**6
_POWER_STEPS = ((1, 1, 2), (2, 1, 3), (2, 2, 4), (4, 1, 5), (3, 3, 6))
# Up to this many elements, math.erf element by element is cheaper than the
# ten numpy calls (each ~0.4 us) of the vector evaluation.
SMALL = 48
# Scratch size of the vector evaluation (its 10 rows of float64 stay in cache).
_RATIONAL_BLOCK = 16384


class ScaledErf:
    """``yscale * erf(xscale * x)`` for flat floating arrays, rounded once into the output.

    Float32 and float16 outputs come from the float64 rational above (the
    scales are folded into its coefficients); tensors of at most :data:`SMALL`
    elements, of any floating dtype, from ``math.erf``. gelu uses
    ``xscale = 1/sqrt(2)``, ``yscale = 0.5``, so that its ``0.5 * erf`` rounds
    to exactly +-0.5 in the tails, where torch's float32 erf is exactly +-1.
    """

    def __init__(self, xscale: float = 1.0, yscale: float = 1.0) -> None:
        self.xscale = xscale
        self.yscale = yscale
        k = np.arange(_RATIONAL.shape[1])
        coefs = _RATIONAL * xscale ** (2.0 * k)
        coefs[0] *= xscale * yscale
        self.coefs = coefs
        bound = _CLAMP / xscale
        self.lo = np.array(-bound)
        self.hi = np.array(bound)

    def small(self, x: np.ndarray, out: np.ndarray) -> None:
        """out = yscale * erf(xscale * x) element by element (flat arrays, any float dtype)."""
        xs, ys, erf = self.xscale, self.yscale, math.erf
        if xs == 1.0 and ys == 1.0:
            out[:] = list(map(erf, x.tolist()))
        else:
            out[:] = [ys * erf(xs * v) for v in x.tolist()]

    def evaluator(self, n: int) -> Callable[[np.ndarray, np.ndarray], None]:
        """``f(x, out)`` for flat arrays of ``n`` elements (out float32 or float16), scratch allocated here."""
        if n <= SMALL:
            return self.small
        b = min(n, _RATIONAL_BLOCK)
        block = self._block(b)
        if n == b:
            return block
        full = n - n % b
        tail = self._block(n - full) if full < n else None

        def run(x: np.ndarray, out: np.ndarray) -> None:
            for i in range(0, full, b):
                block(x[i : i + b], out[i : i + b])
            if tail is not None:
                tail(x[full:], out[full:])

        return run

    def _block(self, b: int) -> Callable[[np.ndarray, np.ndarray], None]:
        z = np.empty(b)
        powers = np.empty((_RATIONAL.shape[1], b))
        powers[0] = 1.0
        pq = np.empty((2, b))
        t, p, q = powers[1], pq[0], pq[1]
        steps = tuple((powers[i], powers[j], powers[k]) for i, j, k in _POWER_STEPS)
        coefs, lo, hi = self.coefs, self.lo, self.hi
        # np.clip costs ~3 us more per call than minimum + maximum, but is one pass.
        clip = b >= 2048
        product = np.matmul if b >= 1024 else np.dot  # dot has less overhead
        multiply = np.multiply

        def evaluate(x: np.ndarray, out: np.ndarray) -> None:
            if clip:
                np.clip(x, lo, hi, out=z)  # NaN stays NaN
            else:
                np.minimum(x, hi, out=z)
                np.maximum(z, lo, out=z)
            multiply(z, z, out=t)
            for f, g, r in steps:
                multiply(f, g, out=r)
            product(coefs, powers, out=pq)
            multiply(p, z, out=p)
            np.divide(p, q, out=out)

        return evaluate

    def __call__(self, x: np.ndarray, dst: np.ndarray) -> None:
        """dst = yscale * erf(xscale * x) for arrays of one shape (scratch allocated per call)."""
        flat_x = x.reshape(-1)  # copies only when x is not contiguous
        if dst.flags.c_contiguous:
            self.evaluator(x.size)(flat_x, dst.reshape(-1))
        else:
            tmp = np.empty(x.size, dtype=dst.dtype)
            self.evaluator(x.size)(flat_x, tmp)
            dst[...] = tmp.reshape(dst.shape)


ERF = ScaledErf()


def erf_into(x: np.ndarray, dst: np.ndarray) -> None:
    """dst = erf(x) for a floating ``x``; float64 at ~1e-15, others within ~0.55 ulp of float32."""
    if x.dtype == F64 and x.size > SMALL:
        blocked(erf_f64, x, dst)
    else:
        ERF(x, dst)


# ---------------------------------------------------------------------------
# Unary kernels
# ---------------------------------------------------------------------------


def float_apply(
    compute: Callable[[np.ndarray, np.ndarray], object], x: np.ndarray, o: np.ndarray, name: str
) -> None:
    """o = f(x) for a floating function f: ints and bool give float32, float16 runs in float32.

    ``compute(v, dst)`` writes f(v) into ``dst`` of the same floating dtype as ``v``.
    """
    if x.ndim == 0:  # ufuncs return scalars for 0-dim arrays: work on 1-element views
        x, o = x.reshape(1), o.reshape(1)
    dt = x.dtype
    if dt is o.dtype and dt in FLOATS:
        compute(x, o)
        return
    if dt.kind == "c" and name in _REAL_ONLY:
        raise KernelError(f"{name} does not support complex input (got {dt})")
    ct = float_dtype(dt)
    check_out(ct, o)
    compute_in_loop_dtype(compute, x, o, ct)


def _float_unary(compute: Callable[[np.ndarray, np.ndarray], object], name: str) -> Callable:
    def run(x, out):
        o = out if out.shape == x.shape else fit(out, x.shape)
        if x.dtype is o.dtype and x.dtype in FLOATS and x.ndim:
            compute(x, o)
        else:
            float_apply(compute, x, o, name)
        return o

    return quiet(run)


_REAL_ONLY = {"erf", "logit", "sigmoid"}

NUMPY_FLOAT_UFUNCS = {
    "acos": np.arccos,
    "acosh": np.arccosh,
    "asin": np.arcsin,
    "asinh": np.arcsinh,
    "atan": np.arctan,
    "atanh": np.arctanh,
    "cos": np.cos,
    "cosh": np.cosh,
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log10": np.log10,
    "log1p": np.log1p,
    "log2": np.log2,
    "reciprocal": np.reciprocal,
    "sin": np.sin,
    "sinh": np.sinh,
    "sqrt": np.sqrt,
    "tan": np.tan,
    "tanh": np.tanh,
}


def _ufunc_compute(ufunc: np.ufunc) -> Callable[[np.ndarray, np.ndarray], object]:
    def compute(x, dst):
        ufunc(x, out=dst)

    return compute


for _name, _ufunc in NUMPY_FLOAT_UFUNCS.items():
    kernel(f"aten::{_name}.out")(_float_unary(_ufunc_compute(_ufunc), _name))


def _rsqrt(x, dst):
    np.sqrt(x, out=dst)
    np.reciprocal(dst, out=dst)


def sigmoid_into(x: np.ndarray, dst: np.ndarray) -> None:
    """dst = 1 / (1 + exp(-x)), torch's formula (exact limits 0 and 1, NaN kept)."""
    np.negative(x, out=dst)
    np.exp(dst, out=dst)
    dst += 1
    np.reciprocal(dst, out=dst)


kernel("aten::rsqrt.out")(_float_unary(_rsqrt, "rsqrt"))
kernel("aten::sigmoid.out")(_float_unary(sigmoid_into, "sigmoid"))
kernel("aten::erf.out")(_float_unary(erf_into, "erf"))


@kernel("aten::logit.out")
@quiet
def logit(x, eps, out):
    o = out if out.shape == x.shape else fit(out, x.shape)

    def compute(v, dst):
        if eps is not None and eps >= 0:  # torch clamps only for eps >= 0
            # the bounds are computed in the tensor's dtype (1 - 1e-6 is 1 in float16)
            ft = float_dtype(x.dtype).type
            e = ft(eps)
            lo, hi = float(e), float(ft(1) - e)
            if lo <= hi:
                v = np.minimum(np.maximum(v, lo), hi)
            else:  # torch tests x < lo first
                v = np.where(v < lo, lo, np.where(v > hi, hi, v)).astype(v.dtype)
        denom = np.subtract(1, v)
        np.divide(v, denom, out=dst)
        np.log(dst, out=dst)

    float_apply(compute, x, o, "logit")
    return o


# Ops that keep integer dtypes (and refuse bool, like torch).


def _same_dtype(x: np.ndarray, out: np.ndarray, name: str, allow_bool: bool = False) -> np.ndarray:
    o = out if out.shape == x.shape else fit(out, x.shape)
    if x.dtype == BOOL and not allow_bool:
        raise KernelError(f"{name} is not supported for bool tensors")
    check_out(x.dtype, o)
    return o


def _rounding(ufunc: np.ufunc, name: str) -> Callable:
    @quiet
    def general(x, out):
        o = _same_dtype(x, out, name)
        k = x.dtype.kind
        if k in "iu":
            np.copyto(o, x, casting="unsafe")  # integers are already whole
        elif k == "c":
            raise KernelError(f"{name} does not support complex input (got {x.dtype})")
        else:
            ufunc(x, out=o, casting="unsafe")
        return o

    def run(x, out):
        o = out if out.shape == x.shape else fit(out, x.shape)
        dt = x.dtype
        if dt is o.dtype and dt in FLOATS:
            ufunc(x, out=o)
            return o
        return general(x, out)

    return run


kernel("aten::ceil.out")(_rounding(np.ceil, "ceil"))
kernel("aten::floor.out")(_rounding(np.floor, "floor"))
kernel("aten::trunc.out")(_rounding(np.trunc, "trunc"))
kernel("aten::round.out")(_rounding(np.rint, "round"))  # half to even


@kernel("aten::abs.out")
def abs_(x, out):
    o = out if out.shape == x.shape else fit(out, x.shape)
    if x.dtype is o.dtype and x.dtype in FLOATS:
        np.abs(x, out=o)
        return o
    return _abs_general(x, o)


@quiet
def _abs_general(x, o):
    if x.dtype == BOOL:
        raise KernelError("abs is not supported for bool tensors")
    if x.dtype.kind == "c":
        check_out(float_dtype(x.real.dtype), o)
    else:
        check_out(x.dtype, o)
    np.abs(x, out=o, casting="unsafe")
    return o


@kernel("aten::neg.out")
def neg(x, out):
    o = out if out.shape == x.shape else fit(out, x.shape)
    if x.dtype is o.dtype and x.dtype in FLOATS:
        np.negative(x, out=o)
        return o
    return _neg_general(x, o)


@quiet
def _neg_general(x, o):
    if x.dtype == BOOL:
        raise KernelError(
            "negation of a bool tensor is not supported (torch asks for logical_not instead)"
        )
    check_out(x.dtype, o)
    np.negative(x, out=o, casting="unsafe")
    return o


@kernel("aten::sign.out")
@quiet
def sign(x, out):
    o = _same_dtype(x, out, "sign", allow_bool=True)
    k = x.dtype.kind
    if k == "f":
        # (x > 0) - (x < 0): NaN and -0.0 give 0, as in torch (numpy keeps NaN);
        # x < 0 first, as o may be x's memory
        negative = np.less(x, 0)
        np.greater(x, 0, out=o, casting="unsafe")
        np.subtract(o, negative, out=o, casting="unsafe")
    elif k == "b":
        np.copyto(o, x, casting="unsafe")
    elif k == "c":
        raise KernelError("sign does not support complex input (torch uses sgn)")
    else:
        np.sign(x, out=o, casting="unsafe")
    return o


@kernel("aten::bitwise_not.out")
def bitwise_not(x, out):
    o = out if out.shape == x.shape else fit(out, x.shape)
    if x.dtype.kind not in "biu":
        raise KernelError(f"bitwise_not needs an integer or bool tensor, got {x.dtype}")
    check_out(x.dtype, o)
    np.invert(x, out=o, casting="unsafe")
    return o


@kernel("aten::logical_not.out")
def logical_not(x, out):
    o = out if out.shape == x.shape else fit(out, x.shape)
    np.logical_not(x, out=o, casting="unsafe")
    return o


def _float_test(ufunc: np.ufunc) -> Callable:
    def run(x, out):
        o = out if out.shape == x.shape else fit(out, x.shape)
        if x.dtype.kind in "fc":
            ufunc(x, out=o, casting="unsafe")
        else:
            o[...] = False  # integers are never NaN or infinite
        return o

    return run


kernel("aten::isnan.out")(_float_test(np.isnan))
kernel("aten::isinf.out")(_float_test(np.isinf))


@kernel("aten::_conj_physical.out")
@quiet
def conj_physical(x, out):
    o = out if out.shape == x.shape else fit(out, x.shape)
    if x.dtype.kind == "c":
        np.conjugate(x, out=o, casting="unsafe")
    else:
        np.copyto(o, x, casting="unsafe")
    return o
