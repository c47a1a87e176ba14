"""Dense channels-last 2-D convolutions with explicit SIMD vectors (compiled tier).

:func:`_dense` (any dense convolution, 1x1 included: a product pixels x C_in @ C_in x
C_out; directly, no im2col) over register tiles of 8 consecutive output pixels (across
rows: small images fill them; each pixel's window start read from a table made at load,
which repeats the last pixel past the end: a tail tile computes repeats, not stored) x
2 vectors of output channels (with AVX-512's 32 registers, else 4 pixels at a time; 8 x
1 for an odd last vector), accumulating ``fma(splat(x), w_vec, acc)`` over taps and
input channels from the bias; the residual is added and the clamp applied in registers
before the store (masked for a channel tail). Jobs are strips of pixels (an image
serially); a strip runs each block of output vectors over all its pixels in turn, the
block's weights held in L1. Where all outputs fit in half a vector (8 float32 channels)
each lane pair sums two adjacent input elements instead (``simd.splat_pair``): no lane
idles, and with exactly half a vector two pixels' folded sums make one whole store
(``simd.fold_pairs2``). A one-pixel image (a squeeze-excite gate) is a product of a
vector by a matrix in four chains of sums; an image of at most 4 pixels computes only
those. Weights are packed at load per output vector (pair), unit by unit, zero-padded to
whole vectors. An input with padding is read from a zero-padded copy (made each call
into a buffer made at load; when larger than L1, band by band, each strip copying the
rows it reads just before), so every window lies inside what is read: as runs of
contiguous units (a whole tap row's (kw, c_in) on NHWC memory). A stem (an NCHW input
of at most 4 channels, a filter wider than 1) reads an NHWC copy (three planes
interleaved by vectors: ``simd.store_interleaved3``); other NCHW inputs are read through
strides, a run per tap over c_in, or per (c_in, kh) over kw.

The step that calls it is planned in :mod:`pyexecutorch.kernels.conv.compiled_nhwc`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pyexecutorch.jit import simd, symbol_calls
from pyexecutorch.jit.variants import serial_and_parallel
from pyexecutorch.kernels.conv import geometry
from pyexecutorch.kernels.conv.compiled_nhwc_common import (  # noqa: PLC2701
    _BANDED,
    _COPY,
    _COUT,
    _DH,
    _GROUPS,
    _H,
    _HAS_RESIDUAL,
    _HIGH,
    _KH,
    _LOW,
    _N,
    _NO_HIGH,
    _NO_LOW,
    _OH,
    _OW,
    _PAIRED,
    _PH,
    _RUN_LEN,
    _RUN_STEP,
    _RUNS,
    _SH,
    _STRIPS,
    _TO_PLANES,
    _XS_IMAGE,
    RESIDUAL,
    _activated,
    _always,
    _call,
    _div,
    _epilogue,
    _finish,
    _finish_whole,
    _pad_input,
    _pad_rows,
    _part,
    _store_pixels4,
    _store_some4,
    _to_planes,
)

# (_always: a dot product's accumulators passed to a called function go through memory
# both ways; a tile of short runs, a 1x1 convolution's, ran 1.4x slower)


@_always
def _shift8(a, d):  # noqa: ANN001, ANN202
    return a[0] + d, a[1] + d, a[2] + d, a[3] + d, a[4] + d, a[5] + d, a[6] + d, a[7] + d


@_always
def _shift4(a, d):  # noqa: ANN001, ANN202
    return a[0] + d, a[1] + d, a[2] + d, a[3] + d


# ---------------------------------------------------------------------------
# The register tiles' inner products: ``count`` steps; pixel m's scalar at xp[i_m],
# advancing by ``xstep``; the weight vectors at wp[w] (and wp[w + L]), advancing by
# a vector (pair) a step; accumulators ``acc`` in, sums out (pixel by pixel: the first
# vector's, then the second's). Where the scalars are contiguous (``xstep`` 1: NHWC
# runs), four steps a loop turn at constant offsets: one step a turn ran at 58 GMAC/s
# where four run at 81 on this machine's AVX-512 (the turn's scalar updates took
# FMA port slots).


@_always
def _step8x2(xp, i, d, wp, w, acc):  # noqa: ANN001, ANN202
    """One step of _dot8x2: pixel m's scalar at xp[i_m + d] times the weight vectors at
    wp[w] and wp[w + L]."""
    lanes = simd.lanes_of(wp)
    wa, wb = simd.load(wp, w), simd.load(wp, w + lanes)
    i0, i1, i2, i3, i4, i5, i6, i7 = i
    s0, s1, s2, s3, s4, s5, s6, s7, t0, t1, t2, t3, t4, t5, t6, t7 = acc
    v = simd.splat(xp[i0 + d])
    s0, t0 = simd.fma(v, wa, s0), simd.fma(v, wb, t0)
    v = simd.splat(xp[i1 + d])
    s1, t1 = simd.fma(v, wa, s1), simd.fma(v, wb, t1)
    v = simd.splat(xp[i2 + d])
    s2, t2 = simd.fma(v, wa, s2), simd.fma(v, wb, t2)
    v = simd.splat(xp[i3 + d])
    s3, t3 = simd.fma(v, wa, s3), simd.fma(v, wb, t3)
    v = simd.splat(xp[i4 + d])
    s4, t4 = simd.fma(v, wa, s4), simd.fma(v, wb, t4)
    v = simd.splat(xp[i5 + d])
    s5, t5 = simd.fma(v, wa, s5), simd.fma(v, wb, t5)
    v = simd.splat(xp[i6 + d])
    s6, t6 = simd.fma(v, wa, s6), simd.fma(v, wb, t6)
    v = simd.splat(xp[i7 + d])
    s7, t7 = simd.fma(v, wa, s7), simd.fma(v, wb, t7)
    return s0, s1, s2, s3, s4, s5, s6, s7, t0, t1, t2, t3, t4, t5, t6, t7


@_always
def _step4x2(xp, i, d, wp, w, acc):  # noqa: ANN001, ANN202
    lanes = simd.lanes_of(wp)
    wa, wb = simd.load(wp, w), simd.load(wp, w + lanes)
    i0, i1, i2, i3 = i
    s0, s1, s2, s3, t0, t1, t2, t3 = acc
    v = simd.splat(xp[i0 + d])
    s0, t0 = simd.fma(v, wa, s0), simd.fma(v, wb, t0)
    v = simd.splat(xp[i1 + d])
    s1, t1 = simd.fma(v, wa, s1), simd.fma(v, wb, t1)
    v = simd.splat(xp[i2 + d])
    s2, t2 = simd.fma(v, wa, s2), simd.fma(v, wb, t2)
    v = simd.splat(xp[i3 + d])
    s3, t3 = simd.fma(v, wa, s3), simd.fma(v, wb, t3)
    return s0, s1, s2, s3, t0, t1, t2, t3


@_always
def _step8x1(xp, i, d, wp, w, acc):  # noqa: ANN001, ANN202
    wa = simd.load(wp, w)
    i0, i1, i2, i3, i4, i5, i6, i7 = i
    s0, s1, s2, s3, s4, s5, s6, s7 = acc
    s0 = simd.fma(simd.splat(xp[i0 + d]), wa, s0)
    s1 = simd.fma(simd.splat(xp[i1 + d]), wa, s1)
    s2 = simd.fma(simd.splat(xp[i2 + d]), wa, s2)
    s3 = simd.fma(simd.splat(xp[i3 + d]), wa, s3)
    s4 = simd.fma(simd.splat(xp[i4 + d]), wa, s4)
    s5 = simd.fma(simd.splat(xp[i5 + d]), wa, s5)
    s6 = simd.fma(simd.splat(xp[i6 + d]), wa, s6)
    s7 = simd.fma(simd.splat(xp[i7 + d]), wa, s7)
    return s0, s1, s2, s3, s4, s5, s6, s7


@_always
def _step4x1(xp, i, d, wp, w, acc):  # noqa: ANN001, ANN202
    wa = simd.load(wp, w)
    i0, i1, i2, i3 = i
    s0, s1, s2, s3 = acc
    s0 = simd.fma(simd.splat(xp[i0 + d]), wa, s0)
    s1 = simd.fma(simd.splat(xp[i1 + d]), wa, s1)
    s2 = simd.fma(simd.splat(xp[i2 + d]), wa, s2)
    s3 = simd.fma(simd.splat(xp[i3 + d]), wa, s3)
    return s0, s1, s2, s3


# Elements of weights ahead of a dot product's loads that a turn asks the caches for (4
# turns of _dot8x2, 2 KB): a block's weights come from memory in its first tile (a model's
# weights outgrow L2), and the hardware prefetchers missed much of that stream (ResNet-18's
# 512-channel convolutions 1.5x slower). A hint past the pack's end is ignored. (The
# one-vector tiles gained nothing from it: EfficientNet-B0, MobileNetV3-Small.)
WEIGHTS_AHEAD = 512
# Only for blocks of weights larger than this: a smaller block is read again from L1 by its
# every tile after the first, where the hints only took load slots (MobileNetV2's 16 -> 96
# and 24 -> 144 expansions 1.2x slower with them).
PREFETCH_BLOCK_BYTES = 32 * 1024


def _dot_of(step, shift, vectors):  # noqa: ANN001, ANN202
    """The dot product of a register tile whose one step is ``step`` (``vectors`` weight
    vectors a step; ``shift`` moves its pixels' indices): ``count`` steps, four a loop
    turn where ``xstep`` is 1, asking for the turn's weight lines WEIGHTS_AHEAD ahead
    where ``far`` (the caller's block of weights larger than PREFETCH_BLOCK_BYTES; the
    one-vector tiles pass False)."""
    lines = 4 * vectors

    @_always
    def dot(xp, i, xstep, wp, w, count, acc, far):  # noqa: ANN001, ANN202
        lanes = simd.lanes_of(wp)
        wstep = vectors * lanes
        quads = count // 4 if xstep == 1 else 0  # (unit steps: the offsets are constants)
        for _ in range(quads):
            if far:  # (the same every turn: predicted)
                for k in range(lines):  # (a constant count: unrolled)
                    simd.prefetch(wp, w + WEIGHTS_AHEAD + k * lanes)
            acc = step(xp, i, 0, wp, w, acc)
            acc = step(xp, i, 1, wp, w + wstep, acc)
            acc = step(xp, i, 2, wp, w + 2 * wstep, acc)
            acc = step(xp, i, 3, wp, w + 3 * wstep, acc)
            i = shift(i, 4)
            w += 4 * wstep
        for _ in range(count - 4 * quads):
            acc = step(xp, i, 0, wp, w, acc)
            i = shift(i, xstep)
            w += wstep
        return acc

    return dot


_dot8x2 = _dot_of(_step8x2, _shift8, 2)
_dot4x2 = _dot_of(_step4x2, _shift4, 2)
_dot8x1 = _dot_of(_step8x1, _shift8, 1)
_dot4x1 = _dot_of(_step4x1, _shift4, 1)


@_call
def _dot8x1_paired(xp, i, wp, w, count, acc):  # noqa: ANN001, ANN202
    """As _dot8x1 over a run of ``count`` contiguous input elements, two a step (the last
    alone when ``count`` is odd): lane 2k + e of a weight vector holds output k's weight of
    element 2j + e (see simd.fold_pairs)."""
    lanes = simd.lanes_of(wp)
    i0, i1, i2, i3, i4, i5, i6, i7 = i
    s0, s1, s2, s3, s4, s5, s6, s7 = acc
    for _ in range(count // 2):
        wa = simd.load(wp, w)
        s0 = simd.fma(simd.splat_pair(xp, i0), wa, s0)
        s1 = simd.fma(simd.splat_pair(xp, i1), wa, s1)
        s2 = simd.fma(simd.splat_pair(xp, i2), wa, s2)
        s3 = simd.fma(simd.splat_pair(xp, i3), wa, s3)
        s4 = simd.fma(simd.splat_pair(xp, i4), wa, s4)
        s5 = simd.fma(simd.splat_pair(xp, i5), wa, s5)
        s6 = simd.fma(simd.splat_pair(xp, i6), wa, s6)
        s7 = simd.fma(simd.splat_pair(xp, i7), wa, s7)
        i0, i1, i2, i3 = i0 + 2, i1 + 2, i2 + 2, i3 + 2
        i4, i5, i6, i7 = i4 + 2, i5 + 2, i6 + 2, i7 + 2
        w += lanes
    if count % 2:
        wa = simd.load(wp, w)
        s0 = simd.fma(simd.splat_pair_first(xp, i0, 1), wa, s0)
        s1 = simd.fma(simd.splat_pair_first(xp, i1, 1), wa, s1)
        s2 = simd.fma(simd.splat_pair_first(xp, i2, 1), wa, s2)
        s3 = simd.fma(simd.splat_pair_first(xp, i3, 1), wa, s3)
        s4 = simd.fma(simd.splat_pair_first(xp, i4, 1), wa, s4)
        s5 = simd.fma(simd.splat_pair_first(xp, i5, 1), wa, s5)
        s6 = simd.fma(simd.splat_pair_first(xp, i6, 1), wa, s6)
        s7 = simd.fma(simd.splat_pair_first(xp, i7, 1), wa, s7)
    return s0, s1, s2, s3, s4, s5, s6, s7


@_call
def _fold8(v):  # noqa: ANN001, ANN202
    return (
        simd.fold_pairs(v[0]),
        simd.fold_pairs(v[1]),
        simd.fold_pairs(v[2]),
        simd.fold_pairs(v[3]),
        simd.fold_pairs(v[4]),
        simd.fold_pairs(v[5]),
        simd.fold_pairs(v[6]),
        simd.fold_pairs(v[7]),
    )


@_call
def _splat16(ba, bb):  # noqa: ANN001, ANN202
    return ba, ba, ba, ba, ba, ba, ba, ba, bb, bb, bb, bb, bb, bb, bb, bb


@_call
def _splat8(ba):  # noqa: ANN001, ANN202
    return ba, ba, ba, ba, ba, ba, ba, ba


# ---------------------------------------------------------------------------
# Dense convolutions (1x1 included): tiles of 8 consecutive output pixels (across rows),
# their windows' first elements read from a table made at load; blocks of output vectors.


@_call
def _starts8(wt, p, base):  # noqa: ANN001, ANN202
    """The first elements of the windows of pixels p .. p + 7 (the table repeats its last
    pixel up to whole tiles)."""
    return (base + wt[p], base + wt[p + 1], base + wt[p + 2], base + wt[p + 3],
            base + wt[p + 4], base + wt[p + 5], base + wt[p + 6], base + wt[p + 7])  # fmt: skip


@_call
def _starts4(wt, p, base):  # noqa: ANN001, ANN202
    return base + wt[p], base + wt[p + 1], base + wt[p + 2], base + wt[p + 3]


@_always
def _clamp_store(op, o, v, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """op[o : o + L] = clamp(v + rp[o : o + L], low, high), the residual only with the
    flag: _finish_whole without an activation."""
    if has_residual & RESIDUAL:
        v = simd.add(v, simd.load(rp, o))
    simd.store(op, o, simd.clamp(v, low, high))


def _eight_of(store):  # noqa: ANN001, ANN202
    """The stores of 8 pixels' whole vectors v_m at op[o + m * step:], each by ``store``
    (one vector's: _finish_whole, _clamp_store), inlined where they are called."""

    @_always
    def eight(op, o, step, v, rp, has_residual, low, high):  # noqa: ANN001, ANN202
        v0, v1, v2, v3, v4, v5, v6, v7 = v
        store(op, o, v0, rp, has_residual, low, high)
        store(op, o + step, v1, rp, has_residual, low, high)
        store(op, o + 2 * step, v2, rp, has_residual, low, high)
        store(op, o + 3 * step, v3, rp, has_residual, low, high)
        store(op, o + 4 * step, v4, rp, has_residual, low, high)
        store(op, o + 5 * step, v5, rp, has_residual, low, high)
        store(op, o + 6 * step, v6, rp, has_residual, low, high)
        store(op, o + 7 * step, v7, rp, has_residual, low, high)

    return eight


_finish_whole8 = _eight_of(_finish_whole)
# In a tile's own code (an activation follows, _activate_pixels): the call of
# _store_pixels8 (the accumulators through memory both ways) cost a 1x1 convolution of 16
# input channels a third of its time (MobileNetV2's 16 -> 96 at 112x112, one thread: 511
# -> 379 us).
_clamp_store8 = _eight_of(_clamp_store)


@_call
def _store_pixels8(op, o, step, stored, count, v, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """The first ``stored`` of 8 pixels' vectors v_m (``count`` lanes) at op[o + m * step:]."""
    if stored == 8 and count >= simd.lanes_of(op):  # (the common case, without a test each)
        _finish_whole8(op, o, step, v, rp, has_residual, low, high)
    else:
        _store_some8(op, o, step, stored, count, v, rp, has_residual, low, high)


@_part
def _activate_pixels(op, o, step, vectors, flags):  # noqa: ANN001, ANN202
    """The activation among the epilogue ``flags`` applied in place to ``vectors`` whole
    vectors of 8 pixels at op[o + m * step:], which a tile has just stored (read back from
    L1): one copy of the activation's code, not one a register of the tile."""
    lanes = simd.lanes_of(op)
    for m in range(8):
        i = o + m * step
        for k in range(vectors):
            simd.store(op, i + k * lanes, _activated(simd.load(op, i + k * lanes), flags))


@_part
def _store_some8(op, o, step, stored, count, v, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """_store_pixels8 of a tail tile or a channel tail: a function of its own (its masked
    stores inlined into every tile would multiply the kernels' compile time)."""
    v0, v1, v2, v3, v4, v5, v6, v7 = v
    _store_some4(op, o, step, stored, count, (v0, v1, v2, v3), rp, has_residual, low, high)
    o4 = o + 4 * step
    _store_some4(op, o4, step, stored - 4, count, (v4, v5, v6, v7), rp, has_residual, low, high)


@_call
def _eights_end(p0, p1):  # noqa: ANN001, ANN202
    """Where the 8-pixel tiles of pixels [p0, p1) end: a last 1 to 4 pixels take a 4-pixel
    tile (a 7x7 image's 49 pixels computed as 52, not 56)."""
    end = p0 + (p1 - p0) // 8 * 8
    return p1 if p1 - end > 4 else end


@_part
def _pair8(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, p0, p1, c0, has_residual):  # noqa: ANN001, ANN202
    """Output channels [c0, c0 + 2L) of pixels [p0, p1) of an image (its windows at
    ``base`` + the table's starts, its outputs at op[o:]), 8 at a time: the runs'
    products summed onto the bias, the epilogue."""
    lanes = simd.lanes_of(op)
    n_runs, run_len, run_step, c_out = g[_RUNS], g[_RUN_LEN], g[_RUN_STEP], g[_COUT]
    ba, bb = simd.load(bp, c0), simd.load(bp, c0 + lanes)
    na, nb = min(lanes, c_out - c0), min(lanes, c_out - c0 - lanes)
    far = 2 * n_runs * run_len * simd.VECTOR_BYTES > PREFETCH_BLOCK_BYTES
    plain = (has_residual | RESIDUAL) == RESIDUAL  # (no activation after the clamp)
    eights = _eights_end(p0, p1)
    for p in range(p0, eights, 8):
        acc = _splat16(ba, bb)
        a = _starts8(wt, p, base)
        w = c0 * n_runs * run_len
        for r in range(n_runs):
            acc = _dot8x2(xp, _shift8(a, runs[r]), run_step, wp, w, run_len, acc, far)
            w += 2 * lanes * run_len
        q, stored = o + p * c_out + c0, min(8, p1 - p)
        if stored == 8 and nb == lanes:  # (predicted: most tiles)
            _clamp_store8(op, q, c_out, acc[:8], rp, has_residual, low, high)
            _clamp_store8(op, q + lanes, c_out, acc[8:], rp, has_residual, low, high)
            if not plain:
                _activate_pixels(op, q, c_out, 2, has_residual)
        else:
            _store_pixels8(op, q, c_out, stored, na, acc[:8], rp, has_residual, low, high)
            _store_pixels8(op, q + lanes, c_out, stored, nb, acc[8:], rp, has_residual, low, high)
    if eights < p1:
        _pair4(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, eights, p1, c0, has_residual)


@_part
def _single8(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, p0, p1, c0, has_residual):  # noqa: ANN001, ANN202
    """As _pair8 for one vector of output channels from c0 (an odd last one)."""
    lanes = simd.lanes_of(op)
    n_runs, run_len, run_step, c_out = g[_RUNS], g[_RUN_LEN], g[_RUN_STEP], g[_COUT]
    b = simd.load(bp, c0)
    plain = (has_residual | RESIDUAL) == RESIDUAL
    eights = _eights_end(p0, p1)
    for p in range(p0, eights, 8):
        acc = _splat8(b)
        a = _starts8(wt, p, base)
        w = c0 * n_runs * run_len
        for r in range(n_runs):
            acc = _dot8x1(xp, _shift8(a, runs[r]), run_step, wp, w, run_len, acc, False)
            w += lanes * run_len
        q, stored = o + p * c_out + c0, min(8, p1 - p)
        if stored == 8 and c_out - c0 >= lanes:
            _clamp_store8(op, q, c_out, acc, rp, has_residual, low, high)
            if not plain:
                _activate_pixels(op, q, c_out, 1, has_residual)
        else:
            _store_pixels8(op, q, c_out, stored, c_out - c0, acc, rp, has_residual, low, high)
    if eights < p1:
        _single4(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, eights, p1, c0, has_residual)


@_part
def _pair4(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, p0, p1, c0, has_residual):  # noqa: ANN001, ANN202
    """As _pair8, 4 pixels at a time."""
    lanes = simd.lanes_of(op)
    n_runs, run_len, run_step, c_out = g[_RUNS], g[_RUN_LEN], g[_RUN_STEP], g[_COUT]
    ba, bb = simd.load(bp, c0), simd.load(bp, c0 + lanes)
    na, nb = min(lanes, c_out - c0), min(lanes, c_out - c0 - lanes)
    for p in range(p0, p1, 4):
        acc = (ba, ba, ba, ba, bb, bb, bb, bb)
        a = _starts4(wt, p, base)
        w = c0 * n_runs * run_len
        for r in range(n_runs):
            i = _shift4(a, runs[r])
            acc = _dot4x2(xp, i, run_step, wp, w, run_len, acc, False)
            w += 2 * lanes * run_len
        q, stored = o + p * c_out + c0, min(4, p1 - p)
        _store_pixels4(op, q, c_out, stored, na, acc[:4], rp, has_residual, low, high)
        _store_pixels4(op, q + lanes, c_out, stored, nb, acc[4:], rp, has_residual, low, high)


@_part
def _single4(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, p0, p1, c0, has_residual):  # noqa: ANN001, ANN202
    """As _single8, 4 pixels at a time."""
    lanes = simd.lanes_of(op)
    n_runs, run_len, run_step, c_out = g[_RUNS], g[_RUN_LEN], g[_RUN_STEP], g[_COUT]
    b = simd.load(bp, c0)
    for p in range(p0, p1, 4):
        acc = (b, b, b, b)
        a = _starts4(wt, p, base)
        w = c0 * n_runs * run_len
        for r in range(n_runs):
            i = _shift4(a, runs[r])
            acc = _dot4x1(xp, i, run_step, wp, w, run_len, acc, False)
            w += lanes * run_len
        q, stored = o + p * c_out + c0, min(4, p1 - p)
        _store_pixels4(op, q, c_out, stored, c_out - c0, acc, rp, has_residual, low, high)


@_part
def _vectors1(xp, wp, bp, runs, op, rp, g, low, high, a, o, c0, width, has_residual):  # noqa: ANN001, ANN202
    """Output channels [c0, c0 + width * L) (width 1 or 2) of one pixel, its window at
    xp[a], its outputs at op[o:]: a product of a vector by a matrix, four units at a time
    into four sets of sums (a chain of one sum a vector would wait an FMA's latency
    every unit)."""
    lanes = simd.lanes_of(op)
    n_runs, run_len, run_step, c_out = g[_RUNS], g[_RUN_LEN], g[_RUN_STEP], g[_COUT]
    wstep = width * lanes
    w = c0 * n_runs * run_len
    zero = simd.zeros_like(simd.load(bp, c0))
    s0, s1, s2, s3 = simd.load(bp, c0), zero, zero, zero
    t0, t1, t2, t3 = simd.load(bp, c0 + lanes) if width == 2 else zero, zero, zero, zero
    for r in range(n_runs):
        i = a + runs[r]
        for _ in range(run_len // 4):
            x0, x1 = simd.splat(xp[i]), simd.splat(xp[i + run_step])
            x2, x3 = simd.splat(xp[i + 2 * run_step]), simd.splat(xp[i + 3 * run_step])
            s0 = simd.fma(x0, simd.load(wp, w), s0)
            s1 = simd.fma(x1, simd.load(wp, w + wstep), s1)
            s2 = simd.fma(x2, simd.load(wp, w + 2 * wstep), s2)
            s3 = simd.fma(x3, simd.load(wp, w + 3 * wstep), s3)
            if width == 2:
                t0 = simd.fma(x0, simd.load(wp, w + lanes), t0)
                t1 = simd.fma(x1, simd.load(wp, w + wstep + lanes), t1)
                t2 = simd.fma(x2, simd.load(wp, w + 2 * wstep + lanes), t2)
                t3 = simd.fma(x3, simd.load(wp, w + 3 * wstep + lanes), t3)
            i += 4 * run_step
            w += 4 * wstep
        for _ in range(run_len % 4):
            x0 = simd.splat(xp[i])
            s0 = simd.fma(x0, simd.load(wp, w), s0)
            if width == 2:
                t0 = simd.fma(x0, simd.load(wp, w + lanes), t0)
            i += run_step
            w += wstep
    s = simd.add(simd.add(s0, s1), simd.add(s2, s3))
    _finish(op, o + c0, s, min(lanes, c_out - c0), rp, has_residual, low, high)
    if width == 2:
        t = simd.add(simd.add(t0, t1), simd.add(t2, t3))
        _finish(op, o + c0 + lanes, t, min(lanes, c_out - c0 - lanes), rp, has_residual, low, high)


@_part
def _paired8(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, p0, p1, has_residual):  # noqa: ANN001, ANN202
    """All outputs of pixels [p0, p1), in half a vector, 8 pixels at a time: two
    contiguous input elements a lane pair (see _dot8x1_paired). With exactly half a
    vector of outputs, two pixels' folded sums make one vector (NHWC holds them side by
    side): whole stores."""
    lanes = simd.lanes_of(op)
    n_runs, run_len, c_out = g[_RUNS], g[_RUN_LEN], g[_COUT]
    b = simd.load(bp, 0)
    half = 2 * c_out == lanes
    for p in range(p0, p1, 8):
        acc = _splat8(b)
        a = _starts8(wt, p, base)
        for r in range(n_runs):
            w = r * ((run_len + 1) // 2) * lanes
            acc = _dot8x1_paired(xp, _shift8(a, runs[r]), wp, w, run_len, acc)
        q, stored = o + p * c_out, min(8, p1 - p)
        if stored == 8 and half:
            v0, v1, v2, v3, v4, v5, v6, v7 = acc
            _finish_whole(op, q, simd.fold_pairs2(v0, v1), rp, has_residual, low, high)
            _finish_whole(op, q + lanes, simd.fold_pairs2(v2, v3), rp, has_residual, low, high)
            _finish_whole(op, q + 2 * lanes, simd.fold_pairs2(v4, v5), rp, has_residual, low, high)
            _finish_whole(op, q + 3 * lanes, simd.fold_pairs2(v6, v7), rp, has_residual, low, high)
        else:
            _store_pixels8(op, q, c_out, stored, c_out, _fold8(acc), rp, has_residual, low, high)


# With AVX-512's 32 vector registers 8 pixels x 2 vectors of sums fit (16, + 2 weight
# vectors + a broadcast); AVX2's 16 take 4 pixels x 2.
_WIDE = simd.VECTOR_BYTES == 64


@_part
def _dense_strip(xp, wp, bp, runs, wt, op, rp, g, low, high, n, p0, p1, q0, q1, tail, has_residual):  # noqa: ANN001, ANN202, E501
    """Output pixels [p0, p1) of image n, output vector pairs [q0, q1) and, with ``tail``,
    an odd last vector: a block of output vectors at a time (its weights stay in L1 across
    the pixels); a one-pixel image as a product of a vector by a matrix."""
    lanes = simd.lanes_of(op)
    c_out = g[_COUT]
    pixels = g[_OH] * g[_OW]
    base, o = n * g[_XS_IMAGE], n * pixels * c_out
    if g[_PAIRED] != 0:
        _paired8(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, p0, p1, has_residual)
        return
    # (the tiny images' forms take the residual's test at run time: compiled once)
    summed = _epilogue(g)
    last = 2 * q1 * lanes  # (with ``tail``, the odd last vector's first channel)
    if pixels == 1:
        a = base + wt[0]
        # (widths as run-time ints: one compiled _vectors1, not one per constant; LLVM
        # unswitches its loops on the width)
        two, one = np.int64(2), np.int64(1)
        for q in range(q0, q1):
            _vectors1(xp, wp, bp, runs, op, rp, g, low, high, a, o, 2 * q * lanes, two, summed)
        if tail:
            _vectors1(xp, wp, bp, runs, op, rp, g, low, high, a, o, last, one, summed)
    elif _WIDE and pixels > 4:
        for q in range(q0, q1):
            c0 = 2 * q * lanes
            _pair8(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, p0, p1, c0, has_residual)
        if tail:
            _single8(
                xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, p0, p1, last, has_residual
            )
    else:  # (AVX2, or a tiny image: only its pixels computed)
        for q in range(q0, q1):
            c0 = 2 * q * lanes
            _pair4(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, p0, p1, c0, summed)
        if tail:
            _single4(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, p0, p1, last, summed)


# [r0, r1): the input rows output rows [o0, o1) read
_rows_read = _call(geometry.rows_read)


@njit(cache=True, error_model="numpy")  # (cached: called by symbol, below)
def _dense_job(sp, xp, wp, bp, runs, wt, op, rp, g, low, high, has_residual, job):  # noqa: ANN001, ANN202
    """Job (image, strip, group) of a dense convolution: strips split an image's tiles of 8
    output pixels evenly, groups its output vector pairs (the last group also taking an
    odd last vector). With _BANDED (serial: jobs in order), the strip's first group first
    copies the input rows it reads (from sp to xp) that the strip before has not: they are
    read from L1 right after."""
    strips, groups = g[_STRIPS], g[_GROUPS]
    pixels = g[_OH] * g[_OW]
    n, k = 0, job  # (integer divisions cost tens of cycles: only where needed)
    if g[_N] > 1:
        n = job // (strips * groups)
        k = job - n * strips * groups
    strip, group = k, 0
    if groups > 1:
        strip = k // groups
        group = k - strip * groups
    tiles = (pixels + 7) // 8
    p0 = 8 * _div(strip * tiles, strips)
    p1 = min(pixels, 8 * _div((strip + 1) * tiles, strips))
    lanes = simd.lanes_of(op)
    vectors = (g[_COUT] + lanes - 1) // lanes
    pairs = vectors // 2
    q0, q1 = _div(group * pairs, groups), _div((group + 1) * pairs, groups)
    tail = vectors % 2 == 1 and group == groups - 1
    if g[_BANDED] != 0 and group == 0:  # (serial: the strip's first group copies)
        out_w = g[_OW]
        oh0, oh1 = p0 // out_w, (p1 + out_w - 1) // out_w
        geometry = (g[_H], g[_KH], g[_SH], g[_PH], g[_DH])
        r0, r1 = _rows_read(oh0, oh1, *geometry)
        if strip > 0:  # only rows the strip before did not copy (a 3x3 filter's two of three)
            r0 = max(r0, _rows_read(oh0, (p0 + out_w - 1) // out_w, *geometry)[1])
        _pad_rows(sp, xp, g, n, r0, r1)
    _dense_strip(xp, wp, bp, runs, wt, op, rp, g, low, high, n, p0, p1, q0, q1, tail, has_residual)


# A job is called, not inlined: the parallel loop's code and the kernel's around it then do
# not optimise the job's again (most of a cold load's compile time; see jit.symbol_calls).
_DENSE_JOB = symbol_calls.by_symbol(symbol_calls.callee_of(_dense_job))


def _dense(x, wp, bias, runs, windows, geometry, scalars, residual, out, planes, buffer):  # noqa: ANN001, ANN201
    """out (N, OH, OW, C_out) = conv2d(x, W) + bias, + residual, clamped: a direct
    convolution over tiles of 8 output pixels, every window inside what is read (an input
    with padding first copied into ``buffer``, _COPY; with _BANDED by the jobs, each the
    rows it reads), read as runs: offsets ``runs`` of
    _RUN_LEN weight units _RUN_STEP elements apart from each pixel's window start
    (``windows``, per pixel of an image). The strides _XS_* are those of what is read.
    With _TO_PLANES, ``out`` is a buffer for the NCHW ``planes``."""
    g = geometry
    to_planes = g[_TO_PLANES] != 0
    has_residual = _epilogue(simd.pointer(g))  # (by pointer, as the jobs ask)
    lo, hi = scalars[_LOW], scalars[_HIGH]
    low = simd.splat(scalars[_NO_LOW] if to_planes else lo)
    high = simd.splat(scalars[_NO_HIGH] if to_planes else hi)
    if g[_COPY] != 0 and g[_BANDED] == 0:
        _pad_input(x, buffer, g)
    xp = simd.pointer(buffer) if g[_COPY] != 0 else simd.pointer(x)
    wpp, bp, runp, wtp = (
        simd.pointer(wp),
        simd.pointer(bias),
        simd.pointer(runs),
        simd.pointer(windows),
    )
    op, rp, gp = simd.pointer(out), simd.pointer(residual), simd.pointer(geometry)
    for job in prange(g[_N] * g[_STRIPS] * g[_GROUPS]):  # (its index unsigned in parallel)
        _DENSE_JOB(
            simd.pointer(x), xp, wpp, bp, runp, wtp, op, rp, gp, low, high, has_residual,
            np.int64(job),
        )  # fmt: skip
    if to_planes:
        pixels = g[_OH] * g[_OW]
        _to_planes(out, planes, residual, g[_HAS_RESIDUAL] != 0, lo, hi, g[_N], pixels, g[_COUT])
    return out


DENSE = serial_and_parallel(_dense, "nhwc_dense")
