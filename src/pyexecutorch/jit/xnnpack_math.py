"""sin, cos, sigmoid and 1/sqrt of a float32 as the official XNNPACK delegate computes
them on this x86-64 CPU, bit for bit: the compiled tier's scalar forms of
``backends/xnnpack/exact_math.py`` (see there why), for the loops generated from the
XNNPACK nodes' formulas (bound as ``XSIN``, ``XCOS``, ``XSIGMOID``, ``XRSQRT``).

``xnn_sigmoid_f32`` and ``xnn_rsqrt_f32`` are the AVX-512F or the AVX2 kernels' forms, by
LLVM's host features read once at import (``VARIANT``, ``xnnpack_coefficients.variant``).
Without AVX-512F the 1/sqrt estimate is the ``rsqrtps`` instruction itself, so it is the
official one on any vendor's CPU.

Every multiply-add XNNPACK fuses goes through ``llvm.fma`` (always one rounding; a CPU
without FMA gets the C library's ``fmaf``), every other operation is a separate float32
operation, as in the microkernels; subnormal inputs and results are flushed to zero where
these functions can meet them, as the delegate runs (DAZ and FTZ). Straight-line code with selects: the loops vectorize.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from pyexecutorch.jit.math_functions import bits_of_float64, float64_of_bits
from pyexecutorch.jit.xnnpack_coefficients import (
    AVX512F,
    RSQRT14_BASE,
    RSQRT14_SLOPE,
    SIGMOID,
    SIGMOID_P5,
    SIGMOID_TABLE,
    TRIG,
    variant,
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


@intrinsic
def _float32_of_bits(typingctx, n):  # noqa: ANN001, ANN202, ARG001
    """The float32 with the bits of integer ``n``'s low 32 bits."""
    if not isinstance(n, types.Integer):
        return None
    sig = types.float32(n)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        low = builder.trunc(args[0], ir.IntType(32)) if n.bitwidth > 32 else args[0]
        return builder.bitcast(low, ir.FloatType())

    return sig, codegen


@intrinsic
def _pow2_of_bits(typingctx, n):  # noqa: ANN001, ANN202, ARG001
    """The float32 whose bits are float32 ``n``'s shifted left by 23 (vpslld: n's low
    bits, biased, become an exponent)."""
    if n != types.float32:
        return None
    sig = types.float32(types.float32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        i32 = ir.IntType(32)
        bits = builder.shl(builder.bitcast(args[0], i32), ir.Constant(i32, 23))
        return builder.bitcast(bits, ir.FloatType())

    return sig, codegen


@intrinsic
def _rsqrtps(typingctx, x):  # noqa: ANN001, ANN202, ARG001
    """The CPU's 12-bit estimate of 1/sqrt(x) (rsqrtss: rsqrtps's arithmetic, one lane)."""
    if x != types.float32:
        return None
    sig = types.float32(types.float32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        v4 = ir.VectorType(ir.FloatType(), 4)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(v4, [v4]), "llvm.x86.sse.rsqrt.ss"
        )
        zero = ir.Constant(ir.IntType(32), 0)
        lane = builder.insert_element(ir.Constant(v4, None), args[0], zero)
        return builder.extract_element(builder.call(fn, [lane]), zero)

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
_P5_MAGIC, _P5_LOG2E, _P5_LN2 = (_F(SIGMOID_P5[k]) for k in ("magic_bias", "log2e", "minus_ln2"))
_P5_C5, _P5_C4, _P5_C3, _P5_C2, _P5_C1 = (_F(SIGMOID_P5[f"c{i}"]) for i in range(5, 0, -1))
_P5_CUTOFF = _F(SIGMOID_P5["denorm_cutoff"])
_ONE, _HALF, _ZERO = _F(1.0), _F(0.5), _F(0.0)
_MANTISSA = (1 << 52) - 1
_TINY = _F(np.finfo(np.float32).tiny)
_MIN_NORMAL_EXPONENT = _F(-126.0)


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
def sigmoid_avx512f(x: float) -> float:
    """XNNPACK's float32 sigmoid (AVX-512F: 32-entry table, degree 2, scalef)."""
    z = -abs(x)
    n = _fma(z, _LOG2E, _MAGIC)
    table = _SIG_TABLE[_bits32(n) & 31]
    n = n - _MAGIC
    t = _fma(n, _LN2_HI, z)
    t = _fma(n, _LN2_LO, t)
    p = _fma(t, _C2, _C1)
    t = t * table
    p = _fma(t, p, table)
    # scalef: p * 2**floor(n) rounded once, then flushed. p lies in [0.98, 2) (the table's
    # 2**(i/32) times e**t, |t| <= ln2/64) or is NaN, so below 2**-126 every result is
    # subnormal, flushed to a zero (a NaN p stays NaN); from 2**-126 on, a float32
    # multiply by that exact power of two rounds once. In float32 and int32 only: the
    # loops stay vectors (a float64 route halved their width).
    whole = np.floor(n)
    inside = whole >= _MIN_NORMAL_EXPONENT  # (false for NaN and -inf)
    k = np.int32(whole) if inside else np.int32(-126)
    e = p * _float32_of_bits((k + 127) << 23)
    e = _flush(e) if inside else p * _ZERO
    e = _ZERO if z == -np.inf else e  # (the delegate's limits: 0 and 1)
    f = e / (e + _ONE)
    f = f if (_bits32(x) < 0) else _ONE - f
    return f if x == x else x


@njit(inline="always", error_model="numpy")
def sigmoid_avx2(x: float) -> float:
    """XNNPACK's float32 sigmoid (AVX2: rr1_p5_div)."""
    x = _flush(x)
    z = -abs(x)
    n = _fma(z, _P5_LOG2E, _P5_MAGIC)
    scale = _pow2_of_bits(n)
    n = n - _P5_MAGIC
    t = _fma(n, _P5_LN2, z)
    p = _fma(_P5_C5, t, _P5_C4)
    p = _fma(p, t, _P5_C3)
    p = _fma(p, t, _P5_C2)
    p = _fma(p, t, _P5_C1)
    t = _flush(t * scale)
    e = _flush(_fma(t, p, scale))
    f = _flush(e / (e + _ONE))
    f = _ZERO if z < _P5_CUTOFF else f
    return f if (_bits32(x) < 0) else _ONE - f


@njit(inline="always", error_model="numpy")
def rsqrt_avx512f(x: float) -> float:
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


@njit(inline="always", error_model="numpy")
def rsqrt_avx(x: float) -> float:
    """XNNPACK's float32 1/sqrt without AVX-512F: rsqrtps, one Newton-Raphson step."""
    x = _flush(x)  # (the instruction flushes nothing itself)
    y = _rsqrtps(x)
    residual = x * _flush(y * y) - _ONE
    y = y - residual * (_HALF * y)
    return _ZERO if x == np.inf else y


def _host_features() -> dict[str, bool]:
    from llvmlite import binding  # noqa: PLC0415

    try:
        return dict(binding.get_host_cpu_features())
    except RuntimeError:  # LLVM cannot tell (not x86): no feature
        return {}


# The delegate's kernels on this CPU, decided once (the official runtime picks them from
# the same features).
VARIANT = variant(_host_features())
xnn_sigmoid_f32 = sigmoid_avx512f if VARIANT == AVX512F else sigmoid_avx2
xnn_rsqrt_f32 = rsqrt_avx512f if VARIANT == AVX512F else rsqrt_avx


@intrinsic
def silu_vector_avx512f(typingctx, v):  # noqa: ANN001, ANN202, ARG001 - numba's intrinsic protocol
    """v * sigmoid(v) of a 16-lane float32 vector (jit.simd), each lane's sigmoid
    :func:`sigmoid_avx512f`'s arithmetic bit for bit (its table read by two in-register
    permutes): the SiLU a convolution's epilogue applies before its store."""
    from pyexecutorch.jit.simd import Vector  # noqa: PLC0415 - the compiled tier's type

    if not (isinstance(v, Vector) and v.dtype == types.float32 and v.count == 16):
        return None

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        x = args[0]
        vty = x.type
        ity = ir.VectorType(ir.IntType(32), 16)

        def const(value: float) -> Any:
            return ir.Constant(vty, [float(value)] * 16)

        def iconst(value: int) -> Any:
            return ir.Constant(ity, [int(value)] * 16)

        def call(name: str, result: Any, operands: list[Any]) -> Any:
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(result, [a.type for a in operands]), name
            )
            return builder.call(fn, operands)

        def fma(a: Any, b: Any, c: Any) -> Any:
            return call("llvm.fma.v16f32", vty, [a, b, c])

        def flushed(e: Any) -> Any:  # (_flush)
            tiny = builder.fcmp_ordered("<", call("llvm.fabs.v16f32", vty, [e]), const(_TINY))
            return builder.select(tiny, builder.fmul(e, const(0.0)), e)

        z = builder.fneg(call("llvm.fabs.v16f32", vty, [x]))
        n = fma(z, const(_LOG2E), const(_MAGIC))
        index = builder.bitcast(n, ity)
        low_half = ir.Constant(vty, [float(t) for t in _SIG_TABLE[:16]])
        high_half = ir.Constant(vty, [float(t) for t in _SIG_TABLE[16:]])
        # (vpermi2ps: entry index & 31 of the two halves, in one instruction)
        permute = "llvm.x86.avx512.vpermi2var.ps.512"
        table = call(permute, vty, [low_half, index, high_half])
        n = builder.fsub(n, const(_MAGIC))
        t = fma(n, const(_LN2_HI), z)
        t = fma(n, const(_LN2_LO), t)
        p = fma(t, const(_C2), const(_C1))
        t = builder.fmul(t, table)
        p = fma(t, p, table)
        # (vscalefps: p * 2**floor(n) rounded once, as sigmoid_avx512f's steps compute it;
        # below 2**-126 a subnormal, flushed to the zero they give)
        scalef = "llvm.x86.avx512.mask.scalef.ps.512"
        all_lanes, current_rounding = (
            ir.Constant(ir.IntType(16), -1),
            ir.Constant(ir.IntType(32), 4),
        )
        e = flushed(call(scalef, vty, [p, n, const(0.0), all_lanes, current_rounding]))
        # (an n of -inf, |x| past 2.3587e38: the steps give NaN, which vscalefps as LLVM
        # compiles it does not)
        e = builder.select(builder.fcmp_ordered("==", n, const(-np.inf)), const(np.nan), e)
        e = builder.select(builder.fcmp_ordered("==", z, const(-np.inf)), const(0.0), e)
        f = builder.fdiv(e, builder.fadd(e, const(1.0)))
        negative = builder.icmp_signed("<", builder.bitcast(x, ity), iconst(0))
        f = builder.select(negative, f, builder.fsub(const(1.0), f))
        f = builder.select(builder.fcmp_ordered("==", x, x), f, x)
        return builder.fmul(x, f)

    return v(v), codegen


def vector_silu(v):  # noqa: ANN001, ANN201 - numba's overload protocol
    """v * sigmoid(v) of a jit.simd vector in compiled code: :func:`silu_vector_avx512f`
    for 16 float32 lanes where the delegate's sigmoid is the AVX-512F form; other vectors
    come back unchanged (kernels compiled for them never set SiLU: see SILU_VECTORS)."""
    raise NotImplementedError("compiled code only")


@overload(vector_silu, inline="always")
def _vector_silu(v):  # noqa: ANN001, ANN202
    from pyexecutorch.jit.simd import Vector  # noqa: PLC0415 - the compiled tier's type

    if isinstance(v, Vector) and v.dtype == types.float32 and v.count == 16 and VARIANT == AVX512F:
        return lambda v: silu_vector_avx512f(v)
    return lambda v: v


# Whether compiled kernels can apply SiLU to float32 vectors (vector_silu): 16 lanes with
# the delegate's AVX-512F sigmoid.
SILU_VECTORS = VARIANT == AVX512F


def vector_hardswish(v):  # noqa: ANN001, ANN201 - numba's overload protocol
    """XNNPACK's hardswish node of a float32 jit.simd vector in compiled code, each step
    rounded to float32 as the delegate's loops (and the numpy interpreter) compute it:
    ``(min(max(v + 3, 0), 6) * v) * (1/6)``, NaN kept; other vectors come back unchanged
    (kernels compiled for them never set it)."""
    raise NotImplementedError("compiled code only")


@overload(vector_hardswish, inline="always")
def _vector_hardswish(v):  # noqa: ANN001, ANN202
    from pyexecutorch.jit import simd  # noqa: PLC0415 - the compiled tier's module

    if not (isinstance(v, simd.Vector) and v.dtype == types.float32):
        return lambda v: v
    three, zero, six, sixth = _F(3.0), _F(0.0), _F(6.0), _F(1.0 / 6.0)

    def hardswish(v):  # noqa: ANN001, ANN202
        clipped = simd.clamp(simd.add(v, simd.splat(three)), simd.splat(zero), simd.splat(six))
        return simd.mul(simd.mul(clipped, v), simd.splat(sixth))

    return hardswish
