"""sin, cos, sigmoid and 1/sqrt of a float32 as the official XNNPACK delegate computes
them (x86-64, AVX-512F), bit for bit: the compiled tier's scalar forms of
``backends/xnnpack/exact_math.py`` (see there why), for the loops generated from the
XNNPACK nodes' formulas (bound as ``XSIN``, ``XCOS``, ``XSIGMOID``, ``XRSQRT``).

Every multiply-add XNNPACK fuses goes through ``llvm.fma`` (always one rounding; a CPU
without FMA gets the C library's ``fmaf``), every other operation is a separate float32
operation, as in the microkernels; subnormal inputs and results are flushed to zero where
these functions can meet them, as the delegate runs (DAZ and FTZ). Straight-line code with selects: the loops vectorize.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from pyexecutorch.jit.math_functions import bits_of_float64, float64_of_bits
from pyexecutorch.jit.xnnpack_coefficients import (
    RSQRT14_BASE,
    RSQRT14_SLOPE,
    SIGMOID,
    SIGMOID_TABLE,
    TRIG,
)


@intrinsic
def _fma(typingctx, a, b, c):  # noqa: ANN001, ANN202, ARG001 - numba's intrinsic protocol
    """float32 a * b + c rounded once (llvm.fma, never split into two roundings)."""
    if not (a == b == c == types.float32):
        return None
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        f32 = ir.FloatType()
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(f32, [f32, f32, f32]), "llvm.fma.f32"
        )
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def _rint(typingctx, x):  # noqa: ANN001, ANN202, ARG001
    """float32 x rounded to an integer, ties to even (vrndscaleps)."""
    if x != types.float32:
        return None
    sig = types.float32(types.float32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        f32 = ir.FloatType()
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(f32, [f32]), "llvm.rint.f32"
        )
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def _bits32(typingctx, x):  # noqa: ANN001, ANN202, ARG001
    """The int32 with the bits of float32 ``x``."""
    sig = types.int32(types.float32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        return builder.bitcast(args[0], ir.IntType(32))

    return sig, codegen


_F = np.float32
_INV_2PI, _TWO_PI_HI, _TWO_PI_LO = _F(TRIG["inv_2pi"]), _F(TRIG["two_pi_hi"]), _F(TRIG["two_pi_lo"])
_PI, _HALF_PI = _F(TRIG["pi"]), _F(TRIG["half_pi"])
_A3, _A5, _B2, _B4 = (_F(TRIG[k]) for k in ("a3", "a5", "b2", "b4"))
_MAGIC, _LOG2E = _F(SIGMOID["magic_bias"]), _F(SIGMOID["log2e"])
_LN2_HI, _LN2_LO = _F(SIGMOID["minus_ln2_hi"]), _F(SIGMOID["minus_ln2_lo"])
_C2, _C1 = _F(SIGMOID["c2"]), _F(SIGMOID["c1"])
_SIG_TABLE = np.array(SIGMOID_TABLE, np.float32)
_R14_BASE = np.array(RSQRT14_BASE, np.int64).reshape(-1) * 256
_R14_SLOPE = np.array(RSQRT14_SLOPE, np.int64).reshape(-1)
_ONE, _HALF, _ZERO = _F(1.0), _F(0.5), _F(0.0)
_MANTISSA = (1 << 52) - 1
_TINY = _F(np.finfo(np.float32).tiny)


@njit(inline="always", error_model="numpy")
def _flush(v: float) -> float:
    """``v``, or a zero of its sign where it is subnormal."""
    return v if not abs(v) < _TINY else v * _ZERO


@njit(inline="always", error_model="numpy")
def _trig(x: float, cosine: bool) -> float:
    k = _rint(x * _INV_2PI)
    r = _fma(-k, _TWO_PI_HI, x)
    r = _fma(-k, _TWO_PI_LO, r)
    if cosine:
        r = _HALF_PI - r
    # vminps/vmaxps: the second operand where the comparison fails
    s = _PI - r
    r = r if r < s else s
    s = -_PI - r
    r = r if r > s else s
    s = _PI - r
    r = r if r < s else s
    r2 = r * r
    p = r * _fma(r2, _fma(r2, _A5, _A3), _ONE)
    q = _fma(r2, _fma(r2, _B4, _B2), _ONE)
    return p / q


@njit(inline="always", error_model="numpy")
def xnn_sin_f32(x: float) -> float:
    """XNNPACK's float32 sine."""
    return _flush(_trig(_flush(x), False))


@njit(inline="always", error_model="numpy")
def xnn_cos_f32(x: float) -> float:
    """XNNPACK's float32 cosine."""
    return _flush(_trig(_flush(x), True))


@njit(inline="always", error_model="numpy")
def xnn_sigmoid_f32(x: float) -> float:
    """XNNPACK's float32 sigmoid."""
    z = -abs(x)
    n = _fma(z, _LOG2E, _MAGIC)
    table = _SIG_TABLE[_bits32(n) & 31]
    n = n - _MAGIC
    t = _fma(n, _LN2_HI, z)
    t = _fma(n, _LN2_LO, t)
    p = _fma(t, _C2, _C1)
    t = t * table
    p = _fma(t, p, table)
    # scalef: p * 2**floor(n) rounded once (exact in float64, then one rounding); past
    # 2**-1000 every result is 0
    whole = np.floor(n) if n == n else _ZERO
    k = np.int64(whole) if whole > -1000.0 else np.int64(-1000)
    e = _flush(np.float32(np.float64(p) * float64_of_bits((k + 1023) << 52)))
    e = _ZERO if z == -np.inf else e  # (the delegate's limits: 0 and 1)
    f = e / (e + _ONE)
    f = f if (_bits32(x) < 0) else _ONE - f
    return f if x == x else x


@njit(inline="always", error_model="numpy")
def xnn_rsqrt_f32(x: float) -> float:
    """XNNPACK's float32 1/sqrt: the vrsqrt14ps estimate, one Newton-Raphson step."""
    x = _flush(x)
    bits = bits_of_float64(np.float64(x))
    e = ((bits >> 52) & 0x7FF) - 1023
    m = bits & _MANTISSA
    parity = e & 1
    at = parity * 32 + ((m >> 47) & 31)
    v = (_R14_BASE[at] - _R14_SLOPE[at] * ((m >> 37) & 1023)) >> 10
    v = np.int64(1 << 17) if (m == 0 and parity == 0) else v
    # V * 2**-(17 + e // 2): exact in float64, then float32 (e // 2 within +-75)
    y = np.float32(np.float64(v) * float64_of_bits((1023 - 17 - (e >> 1)) << 52))
    y = (_ONE / x) if x == 0 else y
    residual = x * _flush(y * y) - _ONE
    y = y - residual * (_HALF * y)
    y = _ZERO if x == np.inf else y
    return y if x >= 0 else np.float32(np.nan)
