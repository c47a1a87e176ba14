"""Math functions that fused loops can vectorize (the compiled tier only; imports numba).

numba lowers ``math.exp`` to one libm call per element, which the loop
vectorizer cannot widen: a SiLU over a 32x32x32 map costs about 8 ns per
element that way, against about 2 for numpy's SIMD exp. ``vmath.exp`` is
plain arithmetic instead (so the loop around it becomes SIMD code), with no
fastmath: for float32 it reduces ``x = k ln2 + r`` (|r| <= ln2/2, Cody-Waite
with a two-part ln2), evaluates a degree-7 polynomial for ``e**r`` and scales
by ``2**k`` built from its exponent bits, in two halves so that results in
the subnormal range round once more rather than flush. Measured over every
float32 from -104 to 89 and random ones it is within 1 ulp of the correctly
rounded result (numpy's own float32 exp: within 3). NaN stays NaN, +inf and
overflow give inf, -inf and underflow give 0. ``vmath.erf`` of a float32 is the
numpy kernel's float32 rational approximation (``unary._RP / unary._RQ``, about
3e-9 relative in float64), rounded once. Other dtypes call ``math``'s functions.

Formulas name these as ``vmath.<function>`` (the loop header imports the module),
so the fusion rule that treats ``math.`` calls as costly still sees them.
"""

from __future__ import annotations

import math

import numpy as np
from numba import types
from numba.extending import intrinsic, overload

from pyexecutorch.kernels.elementwise.unary import _RP, _RQ

_F = np.float32
_LOG2E = _F(1.4426950408889634)
# ln2 = _LN2_HI + _LN2_LO, with _LN2_HI exact in 10 bits: k * _LN2_HI is exact for |k| < 2**14
_LN2_HI = _F(0.693359375)
_LN2_LO = _F(-2.1219444005469057e-4)
# Adding 1.5 * 2**23 rounds a float32 of magnitude below 2**22 to an integer, which lands
# in the low bits of the sum's mantissa.
_SHIFTER = _F(12582912.0)
_SHIFTER_BITS = np.int32(0x4B400000)
# e**r's Taylor coefficients 1/n!; with |r| <= 0.347 the truncation error is below 1e-9
_C = tuple(_F(1.0 / math.factorial(n)) for n in range(8))
# Inputs clamped into [_LOWEST, _HIGHEST] keep 2**k's halves normal; the clamped
# ends still overflow to inf and underflow to 0.
_HIGHEST = _F(89.0)
_LOWEST = _F(-104.0)


@intrinsic
def _float_from_bits(typingctx, bits):  # noqa: ANN001, ANN202, ARG001
    """The float32 whose IEEE bits are the int32 ``bits``."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        return builder.bitcast(args[0], context.get_value_type(types.float32))

    return types.float32(types.int32), codegen


@intrinsic
def _bits_of_float(typingctx, x):  # noqa: ANN001, ANN202, ARG001
    """The IEEE bits of the float32 ``x`` as an int32."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        return builder.bitcast(args[0], context.get_value_type(types.int32))

    return types.int32(types.float32), codegen


def exp(x: float) -> float:
    """``e ** x``; compiled code gets the vectorizable float32 form below."""
    return math.exp(x)


def _exp_float32(x):  # noqa: ANN001, ANN202
    c = x if x < _HIGHEST else _HIGHEST
    c = c if c > _LOWEST else _LOWEST
    shifted = c * _LOG2E + _SHIFTER
    k = shifted - _SHIFTER
    r = (c - k * _LN2_HI) - k * _LN2_LO
    c0, c1, c2, c3, c4, c5, c6, c7 = _C
    p = c0 + r * (c1 + r * (c2 + r * (c3 + r * (c4 + r * (c5 + r * (c6 + r * c7))))))
    ki = _bits_of_float(shifted) - _SHIFTER_BITS
    half = ki >> 1
    low = _float_from_bits((half + 127) << 23)
    high = _float_from_bits((ki - half + 127) << 23)
    return p * low * high if x == x else x


@overload(exp)
def _exp_overload(x):  # noqa: ANN001, ANN202
    if x == types.float32:
        return _exp_float32
    return lambda x: math.exp(x)


def erf(x: float) -> float:
    """The error function; compiled code gets the vectorizable float32 form below."""
    return math.erf(x)


_ERF_CLAMP = 4.0  # float32 erf is +-1 beyond it
_P = tuple(float(c) for c in _RP)
_Q = tuple(float(c) for c in _RQ)


def _erf_float32(x):  # noqa: ANN001, ANN202
    d = np.float64(x)
    c = d if d < _ERF_CLAMP else _ERF_CLAMP
    c = c if c > -_ERF_CLAMP else -_ERF_CLAMP
    t = c * c
    p0, p1, p2, p3, p4, p5, p6 = _P
    q0, q1, q2, q3, q4, q5 = _Q
    p = p6 + t * (p5 + t * (p4 + t * (p3 + t * (p2 + t * (p1 + t * p0)))))
    q = q5 + t * (q4 + t * (q3 + t * (q2 + t * (q1 + t * q0))))
    return np.float32(c * p / q) if x == x else x


@overload(erf)
def _erf_overload(x):  # noqa: ANN001, ANN202
    if x == types.float32:
        return _erf_float32
    return lambda x: math.erf(x)
