"""Dynamically quantized linears, compiled: int8 rows against int8 or 4-bit weights.

XNNPACK's ``qd8-f32-qc8w`` and ``qd8-f32-qb4w`` fully connected layers (the linears of
8da4w and dynamic-int8 programs): each input row is quantized at run time to int8 with
its own scale and zero point (:func:`quantize_rows`, XNNPACK's asymmetric parameters,
bit-exact with the numpy interpreter's ``DynamicRows``), multiplied in int32 against
weights packed at load, and scaled back to float32:

* int8 per-channel weights: ``y = fma(float(acc) * x_scale, w_scale[n], bias)``, ``acc``
  the exact sum of ``(q - zp) * w``;
* 4-bit blockwise weights (scales per output channel and block of ``bl`` inputs):
  one exact int32 sum of ``q * w`` per block, scaled by the block's scale and summed
  in float32, less the zero point's share (one float term per column, ``zp * sum_b s_b
  * sum_k w``, folded as XNNPACK folds it), then times ``x_scale`` plus the bias.
  The fold costs accuracy where a row's zero point is large (its share cancels against
  the products), as it does in XNNPACK; exact block sums would stream another 4 bytes
  per block and column, a third more than the weights at blocks of 32.

Weights are packed at load (:func:`pack_int8`, :func:`pack_int4`) in tiles of ``L``
output columns (``L`` = the float32 lanes of a vector): within a tile, each 4 inputs
of a column are 4 consecutive bytes, so one ``vpdpbusd``
(:func:`~pyexecutorch.kernels.quantized.compiled_int8_simd.dot_u8s8`) adds 4 inputs
of ``L`` columns. 4-bit weights stay packed, two per byte (offset by 8: 0..15), and are
unpacked in registers (a mask and a shift): half the bytes to stream, and a decoded
token's linears are bound by those bytes. The kernels take any shapes (dtype and rank
only), so one compiled form serves every program; the rows go inside tiles of 4 L
columns (the tiles' weights read from cache for every row) and the tiles split over the threads.

:func:`linear_8da4w` / :class:`DynamicLinear` are the entry points for callers outside
the XNNPACK interpreter (an LLM program's 8da4w linears): prepack once, call per token.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pyexecutorch.jit import simd, variants
from pyexecutorch.kernels.quantized import compiled_int8_simd as iv

NDArray = np.ndarray
L = iv.LANES
_F32 = np.float32
_QUAD_XOR = np.int32(-2139062144)  # 0x80808080: four int8 as uint8 (+128 each)


# ------------------------------------------------------------------ packing (at load)


def _tiles(n: int) -> int:
    return -(-n // L)


def pack_int8(w: NDArray) -> tuple[NDArray, NDArray]:
    """int8 weights (N, K), K a multiple of 4, as (tiles, K // 4, 4 L) bytes (pair-major
    where ``WIDE_ROWS``: see :func:`~.compiled_int8_simd.load_weights`), and each padded
    column's sum (tiles, L) int32."""
    n, k = w.shape
    t = _tiles(n)
    full = np.zeros((t * L, k), np.int8)
    full[:n] = w
    # [tile, column j, quad c, byte] -> [tile, quad c, column j, byte]
    packed = full.reshape(t, L, k // 4, 4).transpose(0, 2, 1, 3)
    if iv.WIDE_ROWS:  # [tile, quad c, half, column j, byte of the pair]
        packed = packed.reshape(t, k // 4, L, 2, 2).transpose(0, 1, 3, 2, 4)
    sums = full.astype(np.int32).sum(axis=1, dtype=np.int32).reshape(t, L)
    return np.ascontiguousarray(packed).reshape(t, k // 4, 4 * L), sums


def _bf16_exact(s: NDArray) -> NDArray | None:
    """float32 scales as bfloat16 bits (uint16) when every one is a bfloat16, else None."""
    bits = np.ascontiguousarray(s, _F32).view(np.uint32)
    return (bits >> 16).astype(np.uint16) if not (bits & 0xFFFF).any() else None


# Where the CPU has VNNI, 4-bit weights take XNNPACK's form for its VNNI kernels: two's
# complement nibbles, each unpacked into the high half of a byte (the signed byte 16 w)
# and multiplied against the rows' bytes plus 128 (unsigned): a block's int32 sum then
# holds no term of its row, and the share of the 128 and of the row's zero point is one
# float per column, ``-(zp + 128) * sum_b s_b * sum_k w``, where the sum starts (the
# scales are stored over 16). Without VNNI the nibbles are ``w + 8``, unsigned, against
# the signed rows (pmaddubsw, exact on them, would saturate on the other form), less 8
# times each block's row sum, and the zero point's share comes off at the end.
SIGNED_NIBBLES = iv.VNNI is not None


def pack_int4(
    w: NDArray, scales: NDArray, signed: bool = SIGNED_NIBBLES
) -> tuple[NDArray, NDArray, NDArray]:
    """4-bit weights (N, K) as int8 in [-8, 7] and their scales (N, blocks), a block a
    multiple of 8 inputs, in the form of :data:`SIGNED_NIBBLES` (``signed``): the bytes
    (tiles, K // 8, 4 L), two weights a byte (inputs 8c..8c+3 low, 8c+4..8c+7 high; ``w &
    15`` signed, else ``w + 8``); the scales (tiles, blocks, L), over 16 where signed, as
    bfloat16 bits (uint16) where they all are bfloat16 (XNNPACK's programs: half the bytes
    to stream), else float32; and each column's ``sum_b s_b * sum_k w`` (tiles, L)
    float32, negated where signed."""
    n, k = w.shape
    blocks = scales.shape[1]
    t = _tiles(n)
    full = np.zeros((t * L, k), np.int8)
    full[:n] = w
    s = np.zeros((t * L, blocks), _F32)
    s[:n] = scales
    nibbles = (full & 15) if signed else (full.astype(np.int16) + 8)
    nibbles = nibbles.astype(np.uint8).reshape(t, L, k // 8, 2, 4)
    packed = nibbles[:, :, :, 0, :] | (nibbles[:, :, :, 1, :] << 4)  # [tile, column, chunk, byte]
    packed = np.ascontiguousarray(packed.transpose(0, 2, 1, 3)).reshape(t, k // 8, 4 * L)
    sums = full.reshape(t * L, blocks, k // blocks).sum(axis=2, dtype=np.int64)
    column = (sums * s.astype(np.float64)).sum(axis=1).astype(_F32).reshape(t, L)
    if signed:
        s = s / _F32(16.0)  # (exact: a power of two)
        column = -column
    block_scales = np.ascontiguousarray(s.reshape(t, L, blocks).transpose(0, 2, 1))
    bits = _bf16_exact(block_scales)
    return packed, block_scales if bits is None else bits, column


# ------------------------------------------------------------------ compiled kernels


_NEG_INF, _POS_INF = _F32(-np.inf), _F32(np.inf)


@njit(cache=True, error_model="numpy")
def quantize_rows(x, q, zps, scales):  # noqa: ANN001, ANN201
    """Rows of float32 ``x`` (M, K) as int8 ``q`` with XNNPACK's asymmetric parameters:
    the range [min(0, lo), max(0, hi)], the multiplier ``255 / span`` (1 for an all-zero
    row), the zero point from the end with the smaller error, ``q = clamp(rint(v *
    mult), -128 - zp, 127 - zp) + zp``; ``scales`` gets ``1 / mult``, ``zps`` the zero
    points (float32 throughout, as ``DynamicRows``). A vector of the row at a time."""
    m, k = x.shape
    zero, full, one = _F32(0.0), _F32(255.0), _F32(1.0)
    qlo, qhi = _F32(-128.0), _F32(127.0)
    xptr = simd.pointer(x)
    qptr = simd.pointer(q)
    whole = k - k % L
    below = simd.splat(_NEG_INF)
    above = simd.splat(_POS_INF)
    for r in range(m):
        row = r * k
        low_v = simd.splat(zero)
        high_v = simd.splat(zero)
        for i in range(0, whole, L):
            v = simd.load(xptr, row + i)
            low_v = simd.clamp(low_v, below, v)  # min(low, v)
            high_v = simd.clamp(high_v, v, above)  # max(high, v)
        low = iv.lanes_min(low_v)
        high = iv.lanes_max(high_v)
        for i in range(whole, k):
            v = x[r, i]
            low = min(low, v)
            high = max(high, v)
        span = high - low
        if span == zero:
            span = full
        mult = full / span
        lo_m = low * mult
        hi_m = high * mult
        if (lo_m + qlo) + (hi_m + qhi) > zero:
            zp = qlo - lo_m
        else:
            zp = qhi - hi_m
        zp = np.rint(min(max(zp, qlo), qhi))
        zps[r] = np.int32(zp)
        scales[r] = one / mult
        mult_v = simd.splat(mult)
        zp_v = simd.splat(zp)
        bottom = simd.splat(qlo - zp)
        top = simd.splat(qhi - zp)
        for i in range(0, whole, L):
            c = iv.rint(simd.mul(simd.load(xptr, row + i), mult_v))
            iv.store_int8(qptr, row + i, simd.add(simd.clamp(c, bottom, top), zp_v))
        if whole < k:
            c = iv.rint(simd.mul(simd.load_first(xptr, row + whole, k - whole), mult_v))
            c = simd.add(simd.clamp(c, bottom, top), zp_v)
            iv.store_int8_first(qptr, row + whole, c, k - whole)


@njit(cache=True, error_model="numpy")
def dynamic_im2col(
    x, zps, scales, cols, row_zps, row_scales, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl
):  # noqa: ANN001, ANN201, E501
    """A dynamic convolution's windows as rows for :func:`int8_linear`: NHWC int8 ``x``,
    quantized per image (``zps``, ``scales``), into the rows of ``cols`` (N * oh * ow,
    >= kh * kw * C), taps in (kh, kw, C) order (the filter's OHWI order), taps outside the
    image the image's zero point (a real 0), columns past the taps 0; each row's zero
    point and scale (its image's) into ``row_zps`` and ``row_scales``."""
    nb, h, w, c = x.shape
    width = cols.shape[1]
    span = kw * c
    flat = x.reshape(-1)
    for b in range(nb):
        zp = np.int8(zps[b])
        for oy in range(oh):
            for ox in range(ow):
                r = (b * oh + oy) * ow + ox
                row_zps[r] = zps[b]
                row_scales[r] = scales[b]
                ix0 = ox * sw - pl
                whole = dw == 1 and ix0 >= 0 and ix0 + kw <= w  # a tap row is one span
                at = 0
                for i in range(kh):
                    iy = oy * sh - pt + i * dh
                    if iy < 0 or iy >= h:
                        for e in range(span):
                            cols[r, at + e] = zp
                    elif whole:
                        src = ((b * h + iy) * w + ix0) * c
                        for e in range(span):
                            cols[r, at + e] = flat[src + e]
                    else:
                        for j in range(kw):
                            ix = ix0 + j * dw
                            inside = 0 <= ix < w
                            src = ((b * h + iy) * w + ix) * c
                            for e in range(c):
                                cols[r, at + j * c + e] = flat[src + e] if inside else zp
                    at += span
                for e in range(kh * span, width):
                    cols[r, e] = 0


# The output tiles split into jobs that the threads in force take in turn from a counter
# (a dynamic split: a thread the system deschedules delays the product by one job, where
# an equal static share each stalled the other thread for the whole of its share, as at
# 2 threads on a busy machine). JOBS_PER_THREAD jobs a thread (or one a tile): each take
# is an atomic add on a line both cores write.
JOBS_PER_THREAD = 8
_THREADS = variants.threads_reader()
_take = variants.job_taker()


@njit(cache=True, error_model="numpy")
def _split(tiles, jobs, unit):  # noqa: ANN001, ANN202
    """(workers, tiles a job, jobs) for ``tiles`` output tiles on the threads in force, a
    job a multiple of ``unit`` tiles (the tiles its kernel takes a pass), the counter
    ``jobs`` reset. Not inlined: its thread reader and a parallel loop's declare the
    threading layer's function with two return types, one a module."""
    threads = _THREADS()
    count = min(tiles, JOBS_PER_THREAD * threads) if threads > 1 else 1
    per = (tiles + count - 1) // count
    per = (per + unit - 1) // unit * unit
    jobs[0] = 0
    count = (tiles + per - 1) // per
    return min(threads, count), per, count


@njit(cache=True, error_model="numpy", inline="always")
def _store_row(y, optr, r, t, n, low_v, high_v):  # noqa: ANN001, ANN202
    """Row ``r`` of output tile ``t``: ``y`` clamped and stored (the tile's first columns
    only where it passes ``n``)."""
    y = simd.clamp(y, low_v, high_v)
    left = n - t * L
    if left >= L:
        simd.store(optr, r * n + t * L, y)
    else:
        simd.store_first(optr, r * n + t * L, y, left)


@njit(cache=True, error_model="numpy", inline="always")
def _int4_finish(facc, zptr, xptr, t, r, cptr, bptr, optr, low_v, high_v, n):  # noqa: ANN001, ANN202
    """Row ``r`` of tile ``t`` (unsigned nibbles): less the zero point's share (``zp *
    sum_b s_b * sum_k w``, as XNNPACK folds it), times the row's scale, plus the bias."""
    facc = simd.fma(simd.splat(_F32(-zptr[r])), simd.load(cptr, t * L), facc)
    y = simd.add(simd.mul(facc, simd.splat(xptr[r])), simd.load(bptr, t * L))
    _store_row(y, optr, r, t, n, low_v, high_v)


@njit(cache=True, error_model="numpy")
def _int4_unsigned_rows(q32, rsum, zps, xscales, wp, bscales, column, bias, lo, hi, out, t0, t1):  # noqa: ANN001, ANN202
    """Output tiles t0..t1 of the 4-bit product on unsigned nibbles (see
    :func:`int4_linear`; ``rsum`` from :func:`_block_terms`): four rows at a time (each
    chunk of weights unpacked once for the four), the last rows one by one."""
    m_rows = q32.shape[0]
    blocks = bscales.shape[1]
    chunks = wp.shape[1] // blocks  # 8-input chunks a block
    n = out.shape[1]
    stride = 4 * L
    wptr = simd.pointer(wp)
    sptr = simd.pointer(bscales)
    cptr = simd.pointer(column)
    bptr = simd.pointer(bias)
    optr = simd.pointer(out)
    zptr = simd.pointer(zps)
    xptr = simd.pointer(xscales)
    low_v = simd.splat(_F32(lo))
    high_v = simd.splat(_F32(hi))
    four = m_rows - m_rows % 4
    for t in range(t0, t1):
        tile_w = t * wp.shape[1] * stride
        for r in range(0, four, 4):
            f0 = simd.splat(_F32(0.0))
            f1 = simd.splat(_F32(0.0))
            f2 = simd.splat(_F32(0.0))
            f3 = simd.splat(_F32(0.0))
            for g in range(blocks):
                a0 = iv.izeros()
                b0 = iv.izeros()
                a1 = iv.izeros()
                b1 = iv.izeros()
                a2 = iv.izeros()
                b2 = iv.izeros()
                a3 = iv.izeros()
                b3 = iv.izeros()
                base = tile_w + g * chunks * stride
                c0 = 2 * g * chunks
                for c in range(chunks):
                    v = iv.load_bytes(wptr, base + c * stride)
                    lo4 = iv.low_nibbles(v)
                    hi4 = iv.high_nibbles(v)
                    i = c0 + 2 * c
                    a0 = iv.dot_u8s8(a0, lo4, iv.splat_quad(q32[r, i]))
                    b0 = iv.dot_u8s8(b0, hi4, iv.splat_quad(q32[r, i + 1]))
                    a1 = iv.dot_u8s8(a1, lo4, iv.splat_quad(q32[r + 1, i]))
                    b1 = iv.dot_u8s8(b1, hi4, iv.splat_quad(q32[r + 1, i + 1]))
                    a2 = iv.dot_u8s8(a2, lo4, iv.splat_quad(q32[r + 2, i]))
                    b2 = iv.dot_u8s8(b2, hi4, iv.splat_quad(q32[r + 2, i + 1]))
                    a3 = iv.dot_u8s8(a3, lo4, iv.splat_quad(q32[r + 3, i]))
                    b3 = iv.dot_u8s8(b3, hi4, iv.splat_quad(q32[r + 3, i + 1]))
                scale = iv.load_scales(sptr, (t * blocks + g) * L)
                # each block's sum of q * w (the nibbles are w + 8), scaled and summed
                s0 = iv.iadd(iv.iadd(a0, b0), iv.isplat(rsum[r, g]))
                s1 = iv.iadd(iv.iadd(a1, b1), iv.isplat(rsum[r + 1, g]))
                s2 = iv.iadd(iv.iadd(a2, b2), iv.isplat(rsum[r + 2, g]))
                s3 = iv.iadd(iv.iadd(a3, b3), iv.isplat(rsum[r + 3, g]))
                f0 = simd.fma(iv.to_float(s0), scale, f0)
                f1 = simd.fma(iv.to_float(s1), scale, f1)
                f2 = simd.fma(iv.to_float(s2), scale, f2)
                f3 = simd.fma(iv.to_float(s3), scale, f3)
            _int4_finish(f0, zptr, xptr, t, r, cptr, bptr, optr, low_v, high_v, n)
            _int4_finish(f1, zptr, xptr, t, r + 1, cptr, bptr, optr, low_v, high_v, n)
            _int4_finish(f2, zptr, xptr, t, r + 2, cptr, bptr, optr, low_v, high_v, n)
            _int4_finish(f3, zptr, xptr, t, r + 3, cptr, bptr, optr, low_v, high_v, n)
        for r in range(four, m_rows):
            facc = simd.splat(_F32(0.0))
            for g in range(blocks):
                a0 = iv.izeros()
                a1 = iv.izeros()
                base = tile_w + g * chunks * stride
                c0 = 2 * g * chunks
                for c in range(chunks):
                    v = iv.load_bytes(wptr, base + c * stride)
                    a0 = iv.dot_u8s8(a0, iv.low_nibbles(v), iv.splat_quad(q32[r, c0 + 2 * c]))
                    a1 = iv.dot_u8s8(a1, iv.high_nibbles(v), iv.splat_quad(q32[r, c0 + 2 * c + 1]))
                # the block's sum of q * w (the nibbles are w + 8)
                acc = iv.iadd(iv.iadd(a0, a1), iv.isplat(rsum[r, g]))
                facc = simd.fma(iv.to_float(acc), iv.load_scales(sptr, (t * blocks + g) * L), facc)
            _int4_finish(facc, zptr, xptr, t, r, cptr, bptr, optr, low_v, high_v, n)


@njit(cache=True, error_model="numpy", inline="always")
def _signed_start(col, zptr, r):  # noqa: ANN001, ANN202
    """A row's sum before its blocks' (signed nibbles): the column's fold times the row's
    zero point plus 128, as XNNPACK's VNNI kernels start it."""
    return simd.mul(col, simd.splat(_F32(zptr[r] + 128)))


@njit(cache=True, error_model="numpy", inline="always")
def _signed_finish(f, xptr, r, t, bptr, optr, n, low_v, high_v):  # noqa: ANN001, ANN202
    """Row ``r`` of tile ``t`` (signed nibbles): times the row's scale, plus the bias."""
    y = simd.add(simd.mul(f, simd.splat(xptr[r])), simd.load(bptr, t * L))
    _store_row(y, optr, r, t, n, low_v, high_v)


# Rows a pass of the signed kernel takes at once (each chunk of weights unpacked once
# for them; their 16 accumulators and the weights fill the 32 vector registers), and the
# fewest rows left that still take such a pass (its missing rows repeat the last).
SIGNED_ROWS = 8
SIGNED_ROWS_LEAST = 3
# How far ahead of its loads a row alone (a decoded token's) asks for the weights: its
# products stream them from memory once a call (a decode step's 4-bit linears 0.41 -> 0.38
# ms CPU, one thread, this Sapphire Rapids; 1024 and 8192 bytes did no better).
WEIGHTS_AHEAD = 4096


@njit(cache=True, error_model="numpy")
def _int4_signed_rows(q32, u32, zps, xscales, wp, bscales, column, bias, lo, hi, out, t0, t1):  # noqa: ANN001, ANN202, PLR0915
    """Output tiles t0..t1 of the 4-bit product on signed nibbles (see :func:`int4_linear`;
    ``u32`` the rows plus 128 from :func:`_flip_rows`): eight rows at a time, one weight load and three unpacking instructions for sixteen
    ``vpdpbusd``; the last rows (fewer than :data:`SIGNED_ROWS_LEAST`) one by one, a
    row's two halves of a chunk in chains of their own."""
    m_rows = u32.shape[0]
    quads = u32.shape[1]
    blocks = bscales.shape[1]
    chunks = wp.shape[1] // blocks  # 8-input chunks a block
    n = out.shape[1]
    stride = 4 * L
    wptr = simd.pointer(wp)
    uptr = simd.pointer(u32)
    sptr = simd.pointer(bscales)
    cptr = simd.pointer(column)
    bptr = simd.pointer(bias)
    optr = simd.pointer(out)
    zptr = simd.pointer(zps)
    xptr = simd.pointer(xscales)
    low_v = simd.splat(_F32(lo))
    high_v = simd.splat(_F32(hi))
    last = m_rows - 1
    for t in range(t0, t1):
        tile_w = t * wp.shape[1] * stride
        col = simd.load(cptr, t * L)
        r = 0
        while r < m_rows:
            if m_rows - r >= SIGNED_ROWS_LEAST:
                # rows past the last repeat it: the same values stored twice
                r0, r1, r2, r3 = r, min(r + 1, last), min(r + 2, last), min(r + 3, last)
                r4, r5 = min(r + 4, last), min(r + 5, last)
                r6, r7 = min(r + 6, last), min(r + 7, last)
                f0 = _signed_start(col, zptr, r0)
                f1 = _signed_start(col, zptr, r1)
                f2 = _signed_start(col, zptr, r2)
                f3 = _signed_start(col, zptr, r3)
                f4 = _signed_start(col, zptr, r4)
                f5 = _signed_start(col, zptr, r5)
                f6 = _signed_start(col, zptr, r6)
                f7 = _signed_start(col, zptr, r7)
                for g in range(blocks):
                    a0 = iv.izeros()
                    a1 = iv.izeros()
                    a2 = iv.izeros()
                    a3 = iv.izeros()
                    a4 = iv.izeros()
                    a5 = iv.izeros()
                    a6 = iv.izeros()
                    a7 = iv.izeros()
                    base = tile_w + g * chunks * stride
                    i = 2 * g * chunks
                    for c in range(chunks):
                        v = iv.load_bytes(wptr, base + c * stride)
                        wl = iv.signed_low_nibbles(v)
                        wh = iv.signed_high_nibbles(v)
                        j = i + 2 * c
                        a0 = iv.dot_u8s8(a0, iv.splat_row(uptr, r0 * quads + j), wl)
                        a1 = iv.dot_u8s8(a1, iv.splat_row(uptr, r1 * quads + j), wl)
                        a2 = iv.dot_u8s8(a2, iv.splat_row(uptr, r2 * quads + j), wl)
                        a3 = iv.dot_u8s8(a3, iv.splat_row(uptr, r3 * quads + j), wl)
                        a4 = iv.dot_u8s8(a4, iv.splat_row(uptr, r4 * quads + j), wl)
                        a5 = iv.dot_u8s8(a5, iv.splat_row(uptr, r5 * quads + j), wl)
                        a6 = iv.dot_u8s8(a6, iv.splat_row(uptr, r6 * quads + j), wl)
                        a7 = iv.dot_u8s8(a7, iv.splat_row(uptr, r7 * quads + j), wl)
                        a0 = iv.dot_u8s8(a0, iv.splat_row(uptr, r0 * quads + j + 1), wh)
                        a1 = iv.dot_u8s8(a1, iv.splat_row(uptr, r1 * quads + j + 1), wh)
                        a2 = iv.dot_u8s8(a2, iv.splat_row(uptr, r2 * quads + j + 1), wh)
                        a3 = iv.dot_u8s8(a3, iv.splat_row(uptr, r3 * quads + j + 1), wh)
                        a4 = iv.dot_u8s8(a4, iv.splat_row(uptr, r4 * quads + j + 1), wh)
                        a5 = iv.dot_u8s8(a5, iv.splat_row(uptr, r5 * quads + j + 1), wh)
                        a6 = iv.dot_u8s8(a6, iv.splat_row(uptr, r6 * quads + j + 1), wh)
                        a7 = iv.dot_u8s8(a7, iv.splat_row(uptr, r7 * quads + j + 1), wh)
                    scale = iv.load_scales(sptr, (t * blocks + g) * L)
                    f0 = simd.fma(iv.to_float(a0), scale, f0)
                    f1 = simd.fma(iv.to_float(a1), scale, f1)
                    f2 = simd.fma(iv.to_float(a2), scale, f2)
                    f3 = simd.fma(iv.to_float(a3), scale, f3)
                    f4 = simd.fma(iv.to_float(a4), scale, f4)
                    f5 = simd.fma(iv.to_float(a5), scale, f5)
                    f6 = simd.fma(iv.to_float(a6), scale, f6)
                    f7 = simd.fma(iv.to_float(a7), scale, f7)
                _signed_finish(f0, xptr, r0, t, bptr, optr, n, low_v, high_v)
                _signed_finish(f1, xptr, r1, t, bptr, optr, n, low_v, high_v)
                _signed_finish(f2, xptr, r2, t, bptr, optr, n, low_v, high_v)
                _signed_finish(f3, xptr, r3, t, bptr, optr, n, low_v, high_v)
                _signed_finish(f4, xptr, r4, t, bptr, optr, n, low_v, high_v)
                _signed_finish(f5, xptr, r5, t, bptr, optr, n, low_v, high_v)
                _signed_finish(f6, xptr, r6, t, bptr, optr, n, low_v, high_v)
                _signed_finish(f7, xptr, r7, t, bptr, optr, n, low_v, high_v)
                r += SIGNED_ROWS
            else:
                f = _signed_start(col, zptr, r)
                row = r * quads
                for g in range(blocks):
                    a0 = iv.izeros()
                    a1 = iv.izeros()
                    base = tile_w + g * chunks * stride
                    i = row + 2 * g * chunks
                    for c in range(chunks):
                        iv.prefetch(wptr, base + c * stride + WEIGHTS_AHEAD)
                        v = iv.load_bytes(wptr, base + c * stride)
                        a0 = iv.dot_u8s8(
                            a0, iv.splat_row(uptr, i + 2 * c), iv.signed_low_nibbles(v)
                        )
                        a1 = iv.dot_u8s8(
                            a1, iv.splat_row(uptr, i + 2 * c + 1), iv.signed_high_nibbles(v)
                        )
                    scale = iv.load_scales(sptr, (t * blocks + g) * L)
                    f = simd.fma(iv.to_float(iv.iadd(a0, a1)), scale, f)
                _signed_finish(f, xptr, r, t, bptr, optr, n, low_v, high_v)
                r += 1


@njit(cache=True, error_model="numpy")
def _flip_rows(q, q32, u32):  # noqa: ANN001, ANN202
    """The rows' bytes plus 128 (as uint8, in int32 quads ``u32``): the signed kernel's."""
    m, quads = q32.shape
    for r in range(m):
        for i in range(quads):
            u32[r, i] = q32[r, i] ^ _QUAD_XOR


@njit(cache=True, error_model="numpy")
def _block_terms(q, q32, rsum):  # noqa: ANN001, ANN202
    """Per row and block: ``-8 * sum q`` (the unsigned nibbles' offset's share)."""
    m, k = q.shape
    blocks = rsum.shape[1]
    bl = k // blocks
    for r in range(m):
        for g in range(blocks):
            s = np.int32(0)
            for i in range(g * bl, (g + 1) * bl):
                s += np.int32(q[r, i])
            rsum[r, g] = np.int32(-8) * s


# Each form of 4-bit weights (signed nibbles or not: see SIGNED_NIBBLES): what the rows
# give its kernel, and the kernel (of output tiles t0..t1). Both are exact on any CPU; this
# CPU's runs in int4_linear.
INT4_FORMS = {True: (_flip_rows, _int4_signed_rows), False: (_block_terms, _int4_unsigned_rows)}
_row_terms, _int4_tiles = INT4_FORMS[SIGNED_NIBBLES]


def int4_scratch(m: int, k: int, blocks: int, signed: bool = SIGNED_NIBBLES) -> NDArray:
    """The int32 scratch of a 4-bit product of ``m`` rows of ``k`` inputs in ``blocks``
    blocks (:func:`int4_linear`'s on this CPU): the rows plus 128 (M, K / 4) where the
    nibbles are ``signed``, else each block's row term (M, blocks)."""
    return np.empty((m, k // 4 if signed else blocks), np.int32)


def int4_linear(q, q32, zps, xscales, wp, bscales, column, bias, lo, hi, out, scratch, jobs):  # noqa: ANN001, ANN201
    """``out (M, N) = clamp(dequantized(q) @ w4.T + bias, lo, hi)`` for rows ``q`` (M, K)
    int8 (``q32`` the same memory as int32 quads) with zero points ``zps`` and scales
    ``xscales``, and 4-bit weights packed by :func:`pack_int4` in this CPU's form
    (``bias`` padded to the tiles, zeros without one); ``scratch`` from
    :func:`int4_scratch`; ``jobs`` (1,) int64, the job counter of the threads (see
    :func:`_split`)."""
    _row_terms(q, q32, scratch)
    tiles = wp.shape[0]
    workers, per, count = _split(tiles, jobs, 1)
    for _ in prange(workers):
        job = _take(jobs)
        while job < count:
            t0 = job * per
            t1 = min(t0 + per, tiles)
            _int4_tiles(q32, scratch, zps, xscales, wp, bscales, column, bias, lo, hi, out, t0, t1)
            job = _take(jobs)


@njit(cache=True, error_model="numpy", inline="always")
def _int8_store(optr, r, n, t, acc, zp, xscale, sumptr, wsptr, bptr, low_v, high_v):  # noqa: ANN001, ANN202
    """Row ``r`` of output tile ``t`` from its int32 sums ``acc`` (see :func:`int8_linear`)."""
    # the uint8 inputs are q + 128: take (128 + zp) * column sum back
    shift = iv.isplat(-(np.int32(128) + np.int32(zp)))
    acc = iv.iadd(acc, iv.imul(shift, iv.iload(sumptr, t * L)))
    y = simd.mul(iv.to_float(acc), simd.splat(xscale))
    y = simd.fma(y, simd.load(wsptr, t * L), simd.load(bptr, t * L))  # (XNNPACK's fmadd)
    y = simd.clamp(y, low_v, high_v)
    left = n - t * L
    if left >= L:
        simd.store(optr, r * n + t * L, y)
    else:
        simd.store_first(optr, r * n + t * L, y, left)


@njit(cache=True, error_model="numpy")
def _int8_rows(q32, zps, xscales, wp, sums, wscales, bias, lo, hi, out, t0, t1):  # noqa: ANN001, ANN202
    """Output tiles t0..t1 of the int8 product (see :func:`int8_linear`): rows four a
    weight load (a prefill's or a transformer's rows: one a load ran at a third of the
    static products' rate), then the rest one at a time (a decode step's one row)."""
    m_rows = q32.shape[0]
    four = m_rows - m_rows % 4
    quads = wp.shape[1]
    n = out.shape[1]
    stride = 4 * L
    wptr = simd.pointer(wp)
    sumptr = simd.pointer(sums)
    wsptr = simd.pointer(wscales)
    bptr = simd.pointer(bias)
    optr = simd.pointer(out)
    low_v = simd.splat(_F32(lo))
    high_v = simd.splat(_F32(hi))
    for t in range(t0, t1):
        base = t * quads * stride
        for r in range(0, four, 4):
            a0, a1, a2, a3 = iv.izeros(), iv.izeros(), iv.izeros(), iv.izeros()
            for c in range(quads):
                v = iv.load_weights(wptr, base + c * stride)
                a0 = iv.dot_u8s8(a0, iv.splat_quad(q32[r, c] ^ _QUAD_XOR), v)
                a1 = iv.dot_u8s8(a1, iv.splat_quad(q32[r + 1, c] ^ _QUAD_XOR), v)
                a2 = iv.dot_u8s8(a2, iv.splat_quad(q32[r + 2, c] ^ _QUAD_XOR), v)
                a3 = iv.dot_u8s8(a3, iv.splat_quad(q32[r + 3, c] ^ _QUAD_XOR), v)
            _int8_store(optr, r, n, t, a0, zps[r], xscales[r], sumptr, wsptr, bptr,
                        low_v, high_v)  # fmt: skip
            _int8_store(optr, r + 1, n, t, a1, zps[r + 1], xscales[r + 1], sumptr, wsptr, bptr,
                        low_v, high_v)  # fmt: skip
            _int8_store(optr, r + 2, n, t, a2, zps[r + 2], xscales[r + 2], sumptr, wsptr, bptr,
                        low_v, high_v)  # fmt: skip
            _int8_store(optr, r + 3, n, t, a3, zps[r + 3], xscales[r + 3], sumptr, wsptr, bptr,
                        low_v, high_v)  # fmt: skip
        for r in range(four, m_rows):
            a0 = iv.izeros()
            a1 = iv.izeros()
            c = 0
            while c + 1 < quads:
                x0 = iv.splat_quad(q32[r, c] ^ _QUAD_XOR)
                x1 = iv.splat_quad(q32[r, c + 1] ^ _QUAD_XOR)
                a0 = iv.dot_u8s8(a0, x0, iv.load_weights(wptr, base + c * stride))
                a1 = iv.dot_u8s8(a1, x1, iv.load_weights(wptr, base + (c + 1) * stride))
                c += 2
            if c < quads:
                x0 = iv.splat_quad(q32[r, c] ^ _QUAD_XOR)
                a0 = iv.dot_u8s8(a0, x0, iv.load_weights(wptr, base + c * stride))
            _int8_store(optr, r, n, t, iv.iadd(a0, a1), zps[r], xscales[r], sumptr, wsptr, bptr,
                        low_v, high_v)  # fmt: skip


def int8_linear(q32, zps, xscales, wp, sums, wscales, bias, lo, hi, out, jobs):  # noqa: ANN001, ANN201
    """``out (M, N) = clamp(float(acc) * xscales[m] * wscales[n] + bias[n], lo, hi)``,
    ``acc`` the exact sum of ``(q - zp) * w``, for rows ``q32`` (M, K / 4) int8 quads with
    zero points ``zps`` and int8 weights packed by :func:`pack_int8` (``sums`` their
    column sums; ``wscales`` and ``bias`` padded to the tiles); ``jobs`` as
    :func:`int4_linear`'s."""
    tiles = wp.shape[0]
    workers, per, count = _split(tiles, jobs, 1)
    for _ in prange(workers):
        job = _take(jobs)
        while job < count:
            t0 = job * per
            t1 = min(t0 + per, tiles)
            _int8_rows(q32, zps, xscales, wp, sums, wscales, bias, lo, hi, out, t0, t1)
            job = _take(jobs)


# Seven rows and two tiles a pass where vectors are AVX-512's (14 accumulators in its 32
# registers), on rows flipped once before the product (:func:`flip_rows`): each weight
# vector loaded serves 7 rows, each row's quad 2 tiles, and the quads are broadcast
# straight from memory (the four-row form's xor on every quad took a vector port).
SEVEN_ROWS = L == 16 and not iv.WIDE_ROWS


@njit(cache=True, error_model="numpy")
def flip_rows(q, u):  # noqa: ANN001, ANN201
    """``u = q`` with each byte's sign bit flipped: the uint8 ``q + 128`` of every input,
    as :func:`int8_linear_flipped` reads its rows."""
    qf = q.reshape(-1)
    uf = u.reshape(-1)
    for i in range(qf.size):
        uf[i] = qf[i] ^ np.int8(-128)


@njit(cache=True, error_model="numpy", inline="always")
def _int8_pair(optr, r, n, t, t2, a0, a1, zp, xscale, sumptr, wsptr, bptr, low_v, high_v):  # noqa: ANN001, ANN202
    """Tiles t and t2 (t2 == t: one tile) of output row ``r``."""
    _int8_store(optr, r, n, t, a0, zp, xscale, sumptr, wsptr, bptr, low_v, high_v)
    if t2 != t:
        _int8_store(optr, r, n, t2, a1, zp, xscale, sumptr, wsptr, bptr, low_v, high_v)


@njit(cache=True, error_model="numpy")
def _int8_rows7(u, zps, xscales, wp, sums, wscales, bias, lo, hi, out, t0, t1):  # noqa: ANN001, ANN202, PLR0915
    """Output tiles t0..t1 of :func:`int8_linear_flipped`, 7 rows by 2 tiles a pass (a
    last odd tile computed twice and stored once; rows past the last read the last)."""
    m_rows, k = u.shape
    quads = wp.shape[1]
    n = out.shape[1]
    stride = 4 * L
    uptr, wptr, optr = simd.pointer(u), simd.pointer(wp), simd.pointer(out)
    sumptr, wsptr, bptr = simd.pointer(sums), simd.pointer(wscales), simd.pointer(bias)
    low_v = simd.splat(_F32(lo))
    high_v = simd.splat(_F32(hi))
    last = m_rows - 1
    for t in range(t0, t1, 2):
        t2 = min(t + 1, t1 - 1)
        w0, w1 = t * quads * stride, t2 * quads * stride
        for r in range(0, m_rows, 7):
            p0, p1, p2 = r * k, min(r + 1, last) * k, min(r + 2, last) * k
            p3, p4 = min(r + 3, last) * k, min(r + 4, last) * k
            p5, p6 = min(r + 5, last) * k, min(r + 6, last) * k
            z = iv.izeros()
            c00, c01, c10, c11, c20, c21, c30, c31 = z, z, z, z, z, z, z, z
            c40, c41, c50, c51, c60, c61 = z, z, z, z, z, z
            for c in range(quads):
                v0 = iv.load_weights(wptr, w0 + c * stride)
                v1 = iv.load_weights(wptr, w1 + c * stride)
                e = 4 * c
                x = iv.splat_quad_at(uptr, p0 + e)
                c00, c01 = iv.dot_u8s8(c00, x, v0), iv.dot_u8s8(c01, x, v1)
                x = iv.splat_quad_at(uptr, p1 + e)
                c10, c11 = iv.dot_u8s8(c10, x, v0), iv.dot_u8s8(c11, x, v1)
                x = iv.splat_quad_at(uptr, p2 + e)
                c20, c21 = iv.dot_u8s8(c20, x, v0), iv.dot_u8s8(c21, x, v1)
                x = iv.splat_quad_at(uptr, p3 + e)
                c30, c31 = iv.dot_u8s8(c30, x, v0), iv.dot_u8s8(c31, x, v1)
                x = iv.splat_quad_at(uptr, p4 + e)
                c40, c41 = iv.dot_u8s8(c40, x, v0), iv.dot_u8s8(c41, x, v1)
                x = iv.splat_quad_at(uptr, p5 + e)
                c50, c51 = iv.dot_u8s8(c50, x, v0), iv.dot_u8s8(c51, x, v1)
                x = iv.splat_quad_at(uptr, p6 + e)
                c60, c61 = iv.dot_u8s8(c60, x, v0), iv.dot_u8s8(c61, x, v1)
            rows = min(7, m_rows - r)
            _int8_pair(optr, r, n, t, t2, c00, c01, zps[r], xscales[r], sumptr, wsptr, bptr,
                       low_v, high_v)  # fmt: skip
            if rows > 1:
                _int8_pair(optr, r + 1, n, t, t2, c10, c11, zps[r + 1], xscales[r + 1], sumptr,
                           wsptr, bptr, low_v, high_v)  # fmt: skip
            if rows > 2:
                _int8_pair(optr, r + 2, n, t, t2, c20, c21, zps[r + 2], xscales[r + 2], sumptr,
                           wsptr, bptr, low_v, high_v)  # fmt: skip
            if rows > 3:
                _int8_pair(optr, r + 3, n, t, t2, c30, c31, zps[r + 3], xscales[r + 3], sumptr,
                           wsptr, bptr, low_v, high_v)  # fmt: skip
            if rows > 4:
                _int8_pair(optr, r + 4, n, t, t2, c40, c41, zps[r + 4], xscales[r + 4], sumptr,
                           wsptr, bptr, low_v, high_v)  # fmt: skip
            if rows > 5:
                _int8_pair(optr, r + 5, n, t, t2, c50, c51, zps[r + 5], xscales[r + 5], sumptr,
                           wsptr, bptr, low_v, high_v)  # fmt: skip
            if rows > 6:
                _int8_pair(optr, r + 6, n, t, t2, c60, c61, zps[r + 6], xscales[r + 6], sumptr,
                           wsptr, bptr, low_v, high_v)  # fmt: skip


def int8_linear_flipped(u, zps, xscales, wp, sums, wscales, bias, lo, hi, out, jobs):  # noqa: ANN001, ANN201
    """:func:`int8_linear` on rows flipped by :func:`flip_rows` (``u`` (M, K) int8 holding
    ``q + 128``), seven a pass (see :data:`SEVEN_ROWS`): for M of 7 and more."""
    tiles = wp.shape[0]
    workers, per, count = _split(tiles, jobs, 2)
    for _ in prange(workers):
        job = _take(jobs)
        while job < count:
            t0 = job * per
            t1 = min(t0 + per, tiles)
            _int8_rows7(u, zps, xscales, wp, sums, wscales, bias, lo, hi, out, t0, t1)
            job = _take(jobs)


INT8_LINEAR_FLIPPED = variants.serial_and_parallel(int8_linear_flipped, "int8_linear_flipped")
INT4_LINEAR = variants.serial_and_parallel(int4_linear, "int4_linear")
INT8_LINEAR = variants.serial_and_parallel(int8_linear, "int8_linear")


class DynamicLinear:
    """An 8da4w (4-bit blockwise) or dynamic-int8 linear, packed once, called per input.

    ``weight`` (N, K) int8 holds the integer weights (in [-8, 7] for 4-bit), ``scales``
    is (N,) for per-channel int8 weights or (N, K // block) for 4-bit blocks (a block a
    multiple of 8 inputs; int8 needs K a multiple of 4); ``bias`` (N,) float32 or None.
    A call quantizes the rows of ``x`` (..., K) float32 as XNNPACK does and returns (or
    writes into ``out``) the (..., N) float32 product, clamped to [low, high].
    """

    def __init__(
        self,
        weight: NDArray,
        scales: NDArray,
        bias: NDArray | None = None,
        low: float = -np.inf,
        high: float = np.inf,
    ) -> None:
        w = np.asarray(weight)
        s = np.asarray(scales, _F32)
        if w.ndim != 2 or w.dtype != np.int8:
            raise ValueError(
                f"DynamicLinear: weight must be a 2-D int8 array, got {w.dtype} {w.shape}"
            )
        n, k = w.shape
        self.units, self.inputs = n, k
        self.low, self.high = float(low), float(high)
        if s.ndim == 2:
            blocks = s.shape[1]
            if s.shape[0] != n or blocks == 0 or k % blocks or (k // blocks) % 8:
                raise ValueError(
                    f"DynamicLinear: 4-bit scales {s.shape} for weight {w.shape}: blocks must "
                    "split the inputs into equal blocks of a multiple of 8"
                )
            if w.min(initial=0) < -8 or w.max(initial=0) > 7:
                raise ValueError("DynamicLinear: 4-bit weights must lie in [-8, 7]")
            self.packed = pack_int4(w, s)
            self.kind = "int4"
        else:
            s = s.reshape(-1)
            if s.size not in (1, n) or k % 4:
                raise ValueError(
                    f"DynamicLinear: int8 scales {s.shape} for weight {w.shape}: one scale or "
                    "one per output, and inputs a multiple of 4"
                )
            self.packed = pack_int8(w)
            self.wscales = padded(np.broadcast_to(s, (n,)), self.packed[0].shape[0] * L)
            self.kind = "int8"
        b = None if bias is None else np.asarray(bias, _F32).reshape(-1)
        if b is not None and b.size != n:
            raise ValueError(f"DynamicLinear: bias of {b.size} values for {n} outputs")
        self.bias = padded(b, self.packed[0].shape[0] * L)
        self._rows = 0
        self._jobs = np.zeros(1, np.int64)

    def _scratch(self, m: int) -> None:
        if m > self._rows:
            self._q = np.empty((m, self.inputs), np.int8)
            self._zps = np.empty(m, np.int32)
            self._scales = np.empty(m, _F32)
            if self.kind == "int4":
                self._terms = int4_scratch(m, self.inputs, self.packed[1].shape[1])
            self._rows = m

    def __call__(self, x: NDArray, out: NDArray | None = None) -> NDArray:
        x = np.asarray(x)
        if x.dtype != _F32 or x.ndim < 1 or x.shape[-1] != self.inputs:
            raise ValueError(
                f"DynamicLinear: input must be float32 (..., {self.inputs}), got {x.dtype} {x.shape}"
            )
        m = x.size // self.inputs
        shape = x.shape[:-1] + (self.units,)
        if out is None:
            out = np.empty(shape, _F32)
        elif out.shape != shape or out.dtype != _F32 or not out.flags.c_contiguous:
            raise ValueError(f"DynamicLinear: out must be a C-contiguous float32 {shape}")
        self._scratch(m)
        q, zps, xs = self._q[:m], self._zps[:m], self._scales[:m]
        quantize_rows(np.ascontiguousarray(x).reshape(m, self.inputs), q, zps, xs)
        o2 = out.reshape(m, self.units)
        work = m * self.units * self.inputs // 4
        if self.kind == "int4":
            wp, bs, col = self.packed
            args = (q, q.view(np.int32), zps, xs, wp, bs, col, self.bias, self.low, self.high,
                    o2, self._terms[:m], self._jobs)  # fmt: skip
            variants.choose(INT4_LINEAR, work)(*args)
        else:
            wp, sums = self.packed
            args = (q.view(np.int32), zps, xs, wp, sums, self.wscales, self.bias, self.low,
                    self.high, o2, self._jobs)  # fmt: skip
            variants.choose(INT8_LINEAR, work)(*args)
        return out


def padded(values: NDArray | None, size: int) -> NDArray:
    """``values`` (or zeros) in a float32 array of ``size``, zeros past them."""
    out = np.zeros(size, _F32)
    if values is not None:
        out[: values.size] = values
    return out
