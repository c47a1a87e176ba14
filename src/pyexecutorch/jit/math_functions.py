"""exp, erf and tanh for float32 loops of the compiled tier, in a form LLVM vectorizes.

numba compiles ``math.exp``/``math.erf``/``math.tanh`` to calls of the C library,
one element at a time (2.7, 6.5 and 24 ns an element here, against 0.2 ns for a
multiply-add), and those calls are what SiLU, softmax and GELU spend their time
in. The functions below are straight-line arithmetic (selects, no branches, no
library calls), so the loop around them becomes SIMD code:

* ``exp_f32`` and ``tanh_f32`` compute in float32, eight lanes of an AVX2
  register (a float64 form fills four and took ~100 instructions per eight
  elements against ~40): Cody-Waite reduction, Cephes' polynomials, and a
  scaling by 2**n in two halves so that subnormal results round once. Both stay
  within one float32 ulp of the correctly rounded result.
* ``erf_f64`` (and ``tanh_f64``/``exp_f64``) compute in float64 on a float32
  argument: the erf rational's 3e-9 is the numpy kernel's own, which float32
  evaluation would miss by up to 6 ulp. They return float64 and the formula that
  calls them rounds (``T(...)``).

Polynomials go through ``llvm.fmuladd`` (fused where the CPU has FMA, else a
multiply and an add; neither rounds worse). No fastmath flag is set: NaN
propagates, infinities and overflow give what the C library gives after
rounding to float32 (exp(89) is inf, exp(-104) is 0), and -0.0 keeps its sign
where the function is odd. Loops over float64 keep the C library's functions
(see :func:`header_lines`).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from pyexecutorch.jit.coefficients import ERF_P, ERF_Q


@intrinsic
def _fma(typingctx, a, b, c):  # noqa: ANN001, ANN202, ARG001
    """a * b + c through llvm.fmuladd (one rounding where the CPU fuses it)."""
    if not (a == b == c and isinstance(a, types.Float)):
        return None
    sig = a(a, a, a)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        lty = args[0].type
        suffix = "f32" if a == types.float32 else "f64"
        fnty = ir.FunctionType(lty, [lty, lty, lty])
        fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.fmuladd.{suffix}")
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def fma_f32(typingctx, a, b, c):  # noqa: ANN001, ANN202, ARG001 - numba's intrinsic protocol
    """float32 ``a * b + c`` rounded once (``llvm.fma``: C's ``fmaf``, fused on every CPU)."""
    if not (a == b == c == types.float32):
        return None

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        lty = args[0].type
        fnty = ir.FunctionType(lty, [lty, lty, lty])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.fma.f32")
        return builder.call(fn, args)

    return a(a, a, a), codegen


@intrinsic
def _times_pow2(typingctx, p, t):  # noqa: ANN001, ANN202, ARG001
    """float32 ``p * 2**n`` where ``t`` is ``n + _ROUND32`` (``n`` in its low mantissa
    bits), scaled in two halves so that a subnormal result rounds once."""
    if not (p == t == types.float32):
        return None
    sig = types.float32(types.float32, types.float32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        i32 = ir.IntType(32)
        f32 = ir.FloatType()
        n = builder.sub(builder.bitcast(args[1], i32), ir.Constant(i32, _ROUND32_BITS))
        half = builder.ashr(n, ir.Constant(i32, 1))
        rest = builder.sub(n, half)
        bias, shift = ir.Constant(i32, 127), ir.Constant(i32, 23)
        s1 = builder.bitcast(builder.shl(builder.add(half, bias), shift), f32)
        s2 = builder.bitcast(builder.shl(builder.add(rest, bias), shift), f32)
        return builder.fmul(builder.fmul(args[0], s1), s2)

    return sig, codegen


@intrinsic
def bits_of_float64(typingctx, x):  # noqa: ANN001, ANN202, ARG001 - numba's intrinsic protocol
    """The int64 with the bits of float64 ``x``."""
    sig = types.int64(types.float64)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        return builder.bitcast(args[0], ir.IntType(64))

    return sig, codegen


@intrinsic
def float64_of_bits(typingctx, n):  # noqa: ANN001, ANN202, ARG001
    """The float64 with the bits of int64 ``n``."""
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


_LOG2E = 1.4426950408889634
# ln 2 split so that n * _LN2_HI is exact for the |n| < 2**11 used here
_LN2_HI = 0.6931471803691238  # 0x3FE62E42FEE00000
_LN2_LO = 1.9082149292705877e-10
# float32 exp: ln 2 split so that n * _LN2_HI32 is exact for |n| <= 150 (9 bits), Cephes'
# polynomial for (e**r - 1 - r) / r**2 on |r| <= ln2 / 2, and the clamp past which float32
# results are 0 or inf
_F = np.float32
_LOG2E32 = _F(1.4426950408889634)
_LN2_HI32, _LN2_LO32 = _F(-0.693359375), _F(2.12194440e-4)
_ROUND32 = _F(12582912.0)  # 1.5 * 2**23
_ROUND32_BITS = 0x4B400000
_EXP32_LO, _EXP32_HI = _F(-104.0), _F(89.0)
_C0, _C1, _C2, _C3, _C4, _C5 = (
    _F(c) for c in (5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3,
                    1.3981999507e-3, 1.9875691500e-4)
)  # fmt: skip
_ONE32 = _F(1.0)
# Adding 1.5 * 2**52 rounds a float64 of magnitude < 2**51 to an integer, which then
# sits in the low bits of the sum.
_ROUND = 6755399441055744.0
_ROUND_BITS = 0x4338000000000000
# exp's argument is clamped here: float32 results are 0 below and inf above anyway.
_EXP_LO, _EXP_HI = -120.0, 100.0
# 1/k!: Taylor's series of e**r to r**8 on |r| <= ln2 / 2 errs by < 3e-10 (relative).
_E0, _E1, _E2, _E3, _E4, _E5, _E6, _E7, _E8 = (1.0 / math.factorial(k) for k in range(9))
# erf's rational (the numpy kernel's float32 erf, on z clamped to [-4, 4]): P and Q's
# coefficients of t = z*z, lowest power first.
_P0, _P1, _P2, _P3, _P4, _P5, _P6 = ERF_P[::-1]
_Q0, _Q1, _Q2, _Q3, _Q4, _Q5 = ERF_Q[::-1]
_ERF_CLAMP = 4.0
# tanh(x) is 1 in float64 past 20; below 2**-10 its series to x**5 errs by < 1e-18.
_TANH_BIG, _TANH_SMALL = 20.0, 0.0009765625

# The polynomials are evaluated in Estrin's form: Horner's chain of dependent
# multiply-adds leaves the SIMD units waiting on each other's latency.


@njit(inline="always", error_model="numpy")
def exp_f32(x: float) -> float:
    """float32 e**x within one ulp of the correctly rounded result; NaN stays NaN."""
    c = _EXP32_HI if x > _EXP32_HI else x
    c = _EXP32_LO if c < _EXP32_LO else c
    t = _fma(c, _LOG2E32, _ROUND32)
    n = t - _ROUND32  # round(c / ln 2), exactly
    r = _fma(n, _LN2_HI32, c)
    r = _fma(n, _LN2_LO32, r)
    r2 = r * r
    # Estrin's pairs: Horner's chain of dependent multiply-adds waits on their latency
    q = _fma(_fma(_C5, r, _C4), r2, _fma(_C3, r, _C2))
    q = _fma(q, r2, _fma(_C1, r, _C0))
    y = _times_pow2(_fma(q, r2, r) + _ONE32, t)
    return y if x == x else x


@njit(inline="always", error_model="numpy")
def exp_f64(x: float) -> float:
    """e**x for ``x`` in float32's range, to ~3e-10 relative; NaN stays NaN."""
    c = _EXP_HI if x > _EXP_HI else x
    c = _EXP_LO if c < _EXP_LO else c
    t = c * _LOG2E + _ROUND
    n = t - _ROUND  # round(c / ln 2)
    r = (c - n * _LN2_HI) - n * _LN2_LO
    r2 = r * r
    r4 = r2 * r2
    low = _fma(r2, _fma(_E3, r, _E2), _fma(_E1, r, _E0))
    high = _fma(r4, _E8, _fma(r2, _fma(_E7, r, _E6), _fma(_E5, r, _E4)))
    scale = float64_of_bits((bits_of_float64(t) - _ROUND_BITS + 1023) << 52)  # 2**n
    y = _fma(r4, high, low) * scale
    return y if x == x else x


@njit(inline="always", error_model="numpy")
def erf_f64(x: float) -> float:
    """erf(x) to ~3e-9 (the numpy kernel's float32 rational); NaN stays NaN."""
    z = _ERF_CLAMP if x > _ERF_CLAMP else (-_ERF_CLAMP if x < -_ERF_CLAMP else x)
    t = z * z
    t2 = t * t
    t4 = t2 * t2
    p = _fma(t4, _fma(t2, _P6, _fma(_P5, t, _P4)), _fma(t2, _fma(_P3, t, _P2), _fma(_P1, t, _P0)))
    q = _fma(t4, _fma(_Q5, t, _Q4), _fma(t2, _fma(_Q3, t, _Q2), _fma(_Q1, t, _Q0)))
    return z * p / q


@njit(inline="always", error_model="numpy")
def tanh_f64(x: float) -> float:
    """tanh(x) to ~1e-9 relative; NaN stays NaN, -0.0 stays -0.0."""
    a = abs(x)
    a = _TANH_BIG if a > _TANH_BIG else a
    big = 1.0 - 2.0 / (exp_f64(2.0 * a) + 1.0)
    big = big if x >= 0.0 else -big
    s = x * x
    small = x * (1.0 + s * (-1.0 / 3.0 + s * (2.0 / 15.0)))
    y = small if a < _TANH_SMALL else big
    return y if x == x else x


def exp_of(x: float) -> float:
    """e**x in compiled kernels generic in dtype: :func:`exp_f32` for float32 values, the
    C library's exp for the others (see the overload below)."""
    return math.exp(x)


@overload(exp_of, inline="always")
def _exp_of(x):  # noqa: ANN001, ANN202 - numba's overload protocol
    if x == types.float32:
        return lambda x: exp_f32(x)
    return lambda x: np.exp(x)


# float32 tanh: Cephes' odd polynomial below 0.625, 1 - 2 / (e**2a + 1) above, and 1 past
# 9.1 (where 1 - tanh is under a quarter of float32's step below 1)
_TANH32_SMALL, _TANH32_BIG = _F(0.625), _F(9.1)
_TANH32_TINY = _F(2.0**-12)  # below, tanh(x) rounds to x (and -0.0 is kept)
_H0, _H1, _H2, _H3, _H4 = (
    _F(c) for c in (-3.33332819422e-1, 1.33314422036e-1, -5.37397155531e-2, 2.06390887954e-2,
                    -5.70498872745e-3)
)  # fmt: skip
_TWO32 = _F(2.0)


@njit(inline="always", error_model="numpy")
def tanh_f32(x: float) -> float:
    """float32 tanh(x) within two ulps; NaN stays NaN, -0.0 stays -0.0."""
    a = abs(x)
    e = exp_f32(_TWO32 * (_TANH32_BIG if a > _TANH32_BIG else a))
    big = _ONE32 - _TWO32 / (e + _ONE32)
    big = big if x >= 0 else -big
    z = x * x
    p = _fma(_fma(_fma(_fma(_H4, z, _H3), z, _H2), z, _H1), z, _H0)
    small = _fma(p * z, x, x)
    small = x if a < _TANH32_TINY else small
    y = small if a < _TANH32_SMALL else big
    return y if x == x else x


# What a generated loop calls exp, erf and tanh by: these for float32 loops, the C
# library's for float64 ones (whose results these would not round correctly).
_FLOAT32_NAMES = {"EXP": "exp_f32", "ERF": "erf_f64", "TANH": "tanh_f32"}
_LIBRARY = {"EXP": "math.exp", "ERF": "math.erf", "TANH": "math.tanh"}
# numba's disk cache of a generated loop is keyed by the loop's source, which names
# these functions but does not contain them: the digest of this file goes into the
# source, so that changing it compiles the loops again.
_VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
# The XNNPACK delegate's float32 sin, cos, sigmoid and 1/sqrt (xnnpack_math), which the
# formulas of those XNNPACK nodes call, and the digest of their file and its constants.
_XNNPACK_NAMES = {
    "XSIN": "xnn_sin_f32",
    "XCOS": "xnn_cos_f32",
    "XSIGMOID": "xnn_sigmoid_f32",
    "XRSQRT": "xnn_rsqrt_f32",
}
_XNNPACK_VERSION = hashlib.sha256(
    b"".join(
        (Path(__file__).parent / name).read_bytes()
        for name in ("xnnpack_math.py", "xnnpack_coefficients.py")
    )
).hexdigest()[:16]


def header_lines(dtype: np.dtype) -> list[str]:
    """The lines binding ``EXP``, ``ERF`` and ``TANH`` in a loop module of ``dtype`` (and,
    in a float32 one, the XNNPACK functions ``XSIN``, ``XCOS``, ``XSIGMOID``, ``XRSQRT``)."""
    if dtype != np.float32:
        return [f"{name} = {fn}" for name, fn in _LIBRARY.items()]
    names = ", ".join(f"{fn} as {name}" for name, fn in _FLOAT32_NAMES.items())
    xnnpack = ", ".join(f"{fn} as {name}" for name, fn in _XNNPACK_NAMES.items())
    return [
        f"# math_functions {_VERSION} {_XNNPACK_VERSION}",
        f"from pyexecutorch.jit.math_functions import {names}",
        f"from pyexecutorch.jit.xnnpack_math import {xnnpack}",
    ]
