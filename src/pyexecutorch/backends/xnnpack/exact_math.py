"""sin, cos, sigmoid and 1/sqrt of float32 values as the official XNNPACK delegate
computes them on this x86-64 CPU, bit for bit (the numpy tier; the compiled tier's scalar
forms are ``jit/xnnpack_math.py``, from the same constants).

XNNPACK does not round these correctly: its microkernels are rational or table-driven
approximations, and its 1/sqrt starts from the CPU's estimate instruction. Which kernels
it runs depends on the CPU (``xnnpack_coefficients.variant``): ``sigmoid`` and ``rsqrt``
are those of this host's variant, read once at import from /proc/cpuinfo's flags
(``VARIANT``); both variants stay callable by name. Without AVX-512F the estimate is
``rsqrtps``, whose bits differ by vendor: this tier reproduces an AMD Zen 3's (a table
read off the instruction), so on another vendor's CPU without AVX-512F its 1/sqrt may be
an ulp from the official one (the compiled tier calls the instruction itself). A model
whose activations are quantized after them (8da4w) flips an int8 code wherever our
result differs from the official one by an ulp at a rounding boundary, so the delegate's
nodes compute what XNNPACK computes, not the nearest float32.

The delegate runs with denormals off (flushed to zero as inputs and as results, the
MXCSR's DAZ and FTZ): ``_flush`` applies that where these functions can meet one (an
input, sigmoid's 2**n, the square in 1/sqrt's Newton step, a result).

Each fused multiply-add rounds once: ``_fma`` forms the exact product in float64 and adds;
the sums whose rounding to float32 could then round twice (an exact float32 midpoint, or a
subnormal result) are added again with round-to-odd (the sum's rounding error from TwoSum
decides the last bit), so the final rounding to float32 is the correctly rounded fused
result. The common path is four array operations, not a dozen.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from pyexecutorch.jit.xnnpack_coefficients import (
    AVX512F,
    RSQRT14_BASE,
    RSQRT14_SLOPE,
    RSQRTPS_AMD,
    SIGMOID,
    SIGMOID_P5,
    SIGMOID_TABLE,
    TRIG,
    variant,
)

_F32 = np.float32
_F64 = np.float64
_TRIG = {k: _F32(v) for k, v in TRIG.items()}
_SIG = {k: _F32(v) for k, v in SIGMOID.items()}
_SIG_TABLE = np.array(SIGMOID_TABLE, _F32)
_R14_BASE = np.array(RSQRT14_BASE, np.int64) * 256
_R14_SLOPE = np.array(RSQRT14_SLOPE, np.int64)
_P5 = {k: _F32(v) for k, v in SIGMOID_P5.items()}
_ONE = _F32(1.0)
_HALF = _F32(0.5)
_TINY = _F32(np.finfo(np.float32).tiny)  # the smallest normal float32
_TINY64 = _F64(np.finfo(np.float32).tiny)
_LOW29 = (1 << 29) - 1  # the float64 mantissa bits below float32's
_HALF_ULP32 = 1 << 28


def _flush(v: NDArray) -> NDArray:
    """``v`` with its subnormal values replaced by zeros of their sign."""
    return np.where(np.abs(v) < _TINY, np.copysign(_F32(0.0), v), v)


def fma(a: NDArray | np.float32, b: NDArray | np.float32, c: NDArray | np.float32) -> NDArray:
    """float32 ``a * b + c`` rounded once, as the CPU's fused multiply-add."""
    p = np.multiply(a, b, dtype=_F64)  # exact: 24 + 24 bits
    s = np.add(p, c, dtype=_F64)
    # Rounding the float64 sum to float32 rounds twice; that can differ from rounding once
    # only where the sum lands exactly halfway between two float32 values (its low 29
    # bits 1 followed by zeros), or where the result is a float32 subnormal (a coarser
    # grid; an exact zero is exact). Those rare values alone take the exact path.
    s = np.asarray(s)
    risky = ((s.view(np.int64) & _LOW29) == _HALF_ULP32) | ((np.abs(s) < _TINY64) & (s != 0))
    if risky.any():
        where = np.nonzero(risky)
        p, c = np.broadcast_arrays(p, np.asarray(c, _F64))
        s = s.copy()
        s[where] = _fma_to_odd(p[where], c[where], s[where])
    return s.astype(_F32)


def _fma_to_odd(p: NDArray, c: NDArray, s: NDArray) -> NDArray:
    """``p + c`` rounded to odd in float64 (``s`` is the nearest-rounded sum): a sum that
    was rounded and ended on an even last bit moves one ulp toward the exact value, so
    that rounding it to float32 is the correctly rounded fused result."""
    v = s - p
    err = (p - (s - v)) + (c - v)  # s + err == p + c exactly (TwoSum)
    odd = (err != 0) & ((np.asarray(s).view(np.int64) & 1) == 0)
    return np.where(odd, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)


def _trig(x: NDArray, cosine: bool) -> NDArray:
    t = _TRIG
    with np.errstate(invalid="ignore", over="ignore"):
        k = np.rint(x * t["inv_2pi"])
        r = fma(-k, t["two_pi_hi"], x)
        r = fma(-k, t["two_pi_lo"], r)
        if cosine:
            r = t["half_pi"] - r
        r = np.minimum(r, t["pi"] - r)
        r = np.maximum(r, -t["pi"] - r)
        r = np.minimum(r, t["pi"] - r)
        r2 = r * r
        p = r * fma(r2, fma(r2, t["a5"], t["a3"]), _ONE)
        q = fma(r2, fma(r2, t["b4"], t["b2"]), _ONE)
        return p / q


def sin(x: NDArray) -> NDArray:
    """XNNPACK's float32 sine (``f32-vsin``, rational 5/4)."""
    return _flush(_trig(_flush(np.asarray(x, _F32)), False))


def cos(x: NDArray) -> NDArray:
    """XNNPACK's float32 cosine (``f32-vcos``: the sine of pi/2 - x)."""
    return _flush(_trig(_flush(np.asarray(x, _F32)), True))


def sigmoid_avx512f(x: NDArray) -> NDArray:
    """XNNPACK's float32 sigmoid (``f32-vsigmoid``, AVX-512F: 32-entry table, degree 2,
    a division)."""
    x = np.asarray(x, _F32)
    s = _SIG
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        z = -np.abs(x)
        n = fma(z, s["log2e"], s["magic_bias"])
        table = _SIG_TABLE[n.view(np.uint32) & 31]  # 2**(n mod 1), n in 32nds
        n = n - s["magic_bias"]
        t = fma(n, s["minus_ln2_hi"], z)
        t = fma(n, s["minus_ln2_lo"], t)
        p = fma(t, s["c2"], s["c1"])
        t = t * table
        p = fma(t, p, table)
        # (past 2**-1000 every result is 0; NaN's exponent is any)
        whole = np.maximum(np.nan_to_num(np.floor(n), nan=0.0), _F32(-1000.0))
        e = _flush(np.ldexp(p, whole.astype(np.int32)))  # scalef: p * 2**floor(n)
        e = np.where(z == -np.inf, _F32(0.0), e)  # (the delegate's limits: 0 and 1)
        f = e / (e + _ONE)
        return np.where(np.signbit(x), f, _ONE - f)


def rsqrt14_estimate(x: NDArray) -> NDArray:
    """The CPU's ``vrsqrt14ps`` estimate of 1/sqrt(x) (see ``xnnpack_coefficients``)."""
    x = np.asarray(x, _F32)
    with np.errstate(invalid="ignore"):  # (a signalling NaN)
        bits = x.astype(_F64).view(np.int64)  # (a float32 subnormal is normal in float64)
    e = ((bits >> 52) & 0x7FF) - 1023
    m = bits & ((1 << 52) - 1)
    parity, half = e & 1, e >> 1
    segment, t = (m >> 47) & 31, (m >> 37) & 1023
    v = (_R14_BASE[parity, segment] - _R14_SLOPE[parity, segment] * t) >> 10
    v = np.where((m == 0) & (parity == 0), 1 << 17, v)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        y = np.ldexp(v.astype(_F64), (-17 - half).astype(np.int32)).astype(_F32)
        y = np.where(x == 0, _ONE / x, y)  # +-inf
        y = np.where(np.isposinf(x), _F32(0.0), y)
        return np.where((x < 0) | np.isnan(x), _F32(np.nan), y)


def sigmoid_avx2(x: NDArray) -> NDArray:
    """XNNPACK's float32 sigmoid (``f32-vsigmoid``, AVX2: ``rr1_p5_div``, a degree-5
    polynomial of e**t, 2**n from n's bits, a division)."""
    x = _flush(np.asarray(x, _F32))
    s = _P5
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        z = -np.abs(x)
        n = fma(z, s["log2e"], s["magic_bias"])
        scale = (n.view(np.uint32) << np.uint32(23)).view(_F32)  # 2**n (vpslld)
        n = n - s["magic_bias"]
        t = fma(n, s["minus_ln2"], z)
        p = fma(s["c5"], t, s["c4"])
        for c in ("c3", "c2", "c1"):
            p = fma(p, t, s[c])
        t = _flush(t * scale)
        e = _flush(fma(t, p, scale))
        f = _flush(e / (e + _ONE))
        f = np.where(z < s["denorm_cutoff"], _F32(0.0), f)
        return np.where(np.signbit(x), f, _ONE - f)


def _rsqrtps_table() -> NDArray:
    """The 12-bit mantissas of ``rsqrtps``'s estimate, by exponent parity and the input
    mantissa's top 12 bits (decoded from ``RSQRTPS_AMD``)."""
    table = np.empty((2, 4096), np.int64)
    for parity, (first, steps_hex) in enumerate(RSQRTPS_AMD):
        packed = np.frombuffer(bytes.fromhex(steps_hex), np.uint8).astype(np.int64)
        steps = ((packed[:, None] >> np.array([6, 4, 2, 0])) & 3).reshape(-1)
        table[parity] = first - np.cumsum(steps)
    return table


_RSQRTPS = _rsqrtps_table()


def rsqrtps_estimate(x: NDArray) -> NDArray:
    """An AMD Zen 3's ``rsqrtps`` estimate of 1/sqrt(x) (see ``xnnpack_coefficients``);
    a subnormal input counts as a zero of its sign, as the delegate runs (DAZ)."""
    x = _flush(np.asarray(x, _F32))
    bits = x.view(np.uint32).astype(np.int64)
    e = ((bits >> 23) & 0xFF) - 127
    mantissa = _RSQRTPS[e & 1, (bits >> 11) & 4095]
    y = ((((126 - (e >> 1)) << 23) | (mantissa << 11)) & 0xFFFFFFFF).astype(np.uint32)
    y = y.view(_F32)
    with np.errstate(divide="ignore"):
        y = np.where(x == 0, _ONE / x, y)  # +-inf
    y = np.where(np.isposinf(x), _F32(0.0), y)
    return np.where((x < 0) | np.isnan(x), _F32(np.nan), y)


def _rsqrt(x: NDArray, estimate: Callable[[NDArray], NDArray]) -> NDArray:
    """``estimate`` and one Newton-Raphson step, each operation rounded (the AVX-512F and
    the AVX kernels alike); an infinite input gives 0."""
    x = _flush(np.asarray(x, _F32))
    y = estimate(x)
    with np.errstate(invalid="ignore", over="ignore"):
        residual = x * _flush(y * y) - _ONE
        y = y - residual * (_HALF * y)
        return np.where(np.isposinf(x), _F32(0.0), y)


def rsqrt_avx512f(x: NDArray) -> NDArray:
    """XNNPACK's float32 1/sqrt (``f32-vrsqrt``, AVX-512F: ``vrsqrt14ps``, one step)."""
    return _rsqrt(x, rsqrt14_estimate)


def rsqrt_avx(x: NDArray) -> NDArray:
    """XNNPACK's float32 1/sqrt (``f32-vrsqrt``, AVX: ``vrsqrtps``, one step)."""
    return _rsqrt(x, rsqrtps_estimate)


def host_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo's text (``cpuinfo``, else the file's;
    none where it cannot be read)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


# The delegate's kernels on this CPU, decided once: the official runtime in this process
# picked them from the same features.
VARIANT = variant(host_flags())
sigmoid = sigmoid_avx512f if VARIANT == AVX512F else sigmoid_avx2
rsqrt = rsqrt_avx512f if VARIANT == AVX512F else rsqrt_avx
