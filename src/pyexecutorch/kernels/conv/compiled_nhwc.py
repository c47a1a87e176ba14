"""Channels-last (NHWC) 2-D convolutions written with explicit SIMD vectors (compiled tier).

The step the runtime's layout pass calls::

    channels_last_conv_step(
        input, weight, bias, stride, padding, dilation, groups, out,
        *, low=-math.inf, high=math.inf, residual=None,
    ) -> tuple[dispatcher, tuple] | None

returns ``(function, args)``; ``function(*args)`` computes, into ``out``,
``clamp(conv2d(input, weight, bias, stride, padding, dilation, groups) + residual, low, high)``
(the residual term only when given; the clamp as torch.clamp's: NaN stays NaN, an infinite
bound clamps nothing). ``function`` is a member of :data:`DENSE` or :data:`DEPTHWISE` (a
serial and a parallel compilation each, importable by name, ``cache=True``, generic in
shape: the parallel one only from :data:`PARALLEL_MACS`); ``args`` are arrays (the weights
packed here, flat views of ``input``, ``out`` and ``residual``, buffers) and nothing else.
It is None, and the existing steps apply, unless:

* ``input`` and ``out`` are 4-D float32/float64 arrays of logical shape (N, C, H, W), each
  C-contiguous (NCHW memory) or channels-last (:func:`jit.arrays.channels_last`), at
  least one of them channels-last;
* ``weight`` (C_out, C_in/groups, KH, KW) and ``bias`` (C_out,) or None are constants (not
  writeable) of the same dtype: they are packed at load, never in the hot loop;
* ``groups`` is 1 (any kernel size, stride, padding, dilation) or depthwise
  (groups == C_in == C_out);
* ``residual`` is None or an array of ``out``'s shape, dtype and memory layout; it may be
  ``out``'s own memory (same data, same strides: each element's residual is read before
  its store). ``input`` may not overlap ``out``, nor a residual overlap it otherwise; no
  bound is NaN.

The kernels (pointers, not arrays, inside: see :func:`jit.simd.pointer`):

* :func:`_dense` (any dense convolution, 1x1 included: a product pixels x C_in @ C_in x
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
* :func:`_depthwise`: vectors over channels; jobs of (image, band of output rows, group of
  channel vectors). A 3x3 filter at dilation 1 and stride 1 or 2 over channels that fill
  at least :data:`TILED_VECTORS` vectors reads in place, pixel by pixel over the vectors
  (contiguous: a whole pixel's stride between loads would crowd a few cache sets), 4
  output pixels inside the image at a time, each vector's nine weights loaded once for the
  four and each input column once for the pixels sharing it; border pixels one at a time
  through masked loads (an absent tap's lanes read nothing: zero). Other 3x3 filters on a
  small image read a zero-padded copy, pixel by pixel over all channel vectors (or, with
  fewer channels than a vector's lanes at stride 1, several pixels a vector); on a large
  one they read in place, a vector's nine weight vectors held in registers, with masked
  loads at the borders and in a channel tail. Other filters on small images mostly over
  padding (a 5x5 filter over 2x2 pixels) compute only the taps inside the image, in
  place, pixel by pixel, four channel vectors at a time (:data:`CLIPPED_SHARE`); else they
  read every tap whole (the input copied where it has padding or a channel tail), four
  output pixels at a time sharing each weight vector (5-wide: the pixels' columns loaded
  once). An NCHW input is copied channels-last.

An NCHW ``out`` is computed channels-last into a buffer made at load and copied over with
the residual and clamp applied on the way (a rare case: a layer before a flatten).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from numba import get_num_threads, njit, prange

from pyexecutorch.jit import simd
from pyexecutorch.jit.arrays import FLOATS, channels_last
from pyexecutorch.jit.variants import serial_and_parallel

# Small pieces are inlined where numba builds its IR (_inline), each into a few sites: the
# parts that hold a register tile (_part) are functions of their own, so that no tuple of
# vectors crosses a call and numba's inlining (minutes when it built one function of all)
# stays small. numba's analysis of parallel loops takes no vectors in tuples: each job is
# a part that the (parallel) loop calls. Parts take pointers, not arrays (see
# jit.simd.pointer). The copies, parallel loops over scalars, are inlined into the
# kernels (_loops: there they run in parallel).
_part = njit(error_model="numpy")
_inline = njit(inline="always", error_model="numpy")
_loops = njit(inline="always", error_model="numpy")

# Layout of the int64 ``geometry`` argument (see channels_last_conv_step).
(
    _N,
    _H,  # the input's
    _W,
    _CIN,
    _X_NHWC,  # whether the input is channels-last
    _XS_IMAGE,  # element strides of what the kernel reads (the input or its padded copy):
    _XS_ROW,  # per image, row, column, channel
    _XS_COL,
    _XS_CHAN,
    _OH,
    _OW,
    _COUT,
    _KH,
    _KW,
    _SH,
    _SW,
    _PH,
    _PW,
    _DH,
    _DW,
    _RUNS,  # the dense kernel: runs of _RUN_LEN weight units, _RUN_STEP elements apart,
    _RUN_LEN,  # from the offsets ``runs``
    _RUN_STEP,
    _HAS_RESIDUAL,
    _TO_PLANES,  # out is a channels-last buffer, copied to the NCHW ``planes``
    _COPY,  # 1: the input is first copied zero-padded, in its layout; 2: NCHW into NHWC
    _PIXELS_PER_VECTOR,  # (depthwise) pixels a vector spans (channels fewer than its lanes)
    _BANDS,  # (depthwise) bands of output rows a channel vector's work is split into
    _PAIRED,  # (dense) outputs in half a vector: two input elements a lane pair
    _GROUPS,  # groups of channel vectors (dense: vector pairs) an image's work is split into
    _PIXEL_MAJOR,  # (depthwise) 1: 3x3 copied, pixel by pixel; 2: clipped taps; 3: tiled
    _STRIPS,  # (dense) strips of output pixels an image is split into (whole tiles of 8)
    _BANDED,  # (dense) strips are bands of output rows that copy their input rows
    _GEOMETRY_SIZE,
) = range(34)

# The dtype's ``scalars`` argument: the clamp's bounds, then -inf and inf.
_LOW, _HIGH, _NO_LOW, _NO_HIGH = range(4)


@_inline
def _finish_whole(op, o, acc, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """op[o : o + L] = clamp(acc + rp[o : o + L], low, high)."""
    if has_residual:
        acc = simd.add(acc, simd.load(rp, o))
    simd.store(op, o, simd.clamp(acc, low, high))


@_inline
def _finish(op, o, acc, count, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """op[o : o + count] = clamp(acc + rp[o : o + count], low, high)[:count]; nothing when
    count is 0 (the residual read before the store, so rp may be op)."""
    if count >= simd.lanes_of(op):
        if has_residual:
            acc = simd.add(acc, simd.load(rp, o))
        simd.store(op, o, simd.clamp(acc, low, high))
    elif count > 0:
        if has_residual:
            acc = simd.add(acc, simd.load_first(rp, o, count))
        simd.store_first(op, o, simd.clamp(acc, low, high), count)


@_inline
def _shift8(a, d):  # noqa: ANN001, ANN202
    return a[0] + d, a[1] + d, a[2] + d, a[3] + d, a[4] + d, a[5] + d, a[6] + d, a[7] + d


# ---------------------------------------------------------------------------
# The register tiles' inner products: ``count`` steps; pixel m's scalar at xp[i_m],
# advancing by ``xstep``; the weight vectors at wp[w] (and wp[w + L]), advancing by
# ``wstep``; accumulators ``acc`` in, sums out (pixel by pixel: the first vector's, then
# the second's).


@_inline
def _dot8x2(xp, i, xstep, wp, w, wstep, count, acc):  # noqa: ANN001, ANN202
    lanes = simd.lanes_of(wp)
    i0, i1, i2, i3, i4, i5, i6, i7 = i
    s0, s1, s2, s3, s4, s5, s6, s7, t0, t1, t2, t3, t4, t5, t6, t7 = acc
    for _ in range(count):
        wa = simd.load(wp, w)
        wb = simd.load(wp, w + lanes)
        v = simd.splat(xp[i0])
        s0, t0 = simd.fma(v, wa, s0), simd.fma(v, wb, t0)
        v = simd.splat(xp[i1])
        s1, t1 = simd.fma(v, wa, s1), simd.fma(v, wb, t1)
        v = simd.splat(xp[i2])
        s2, t2 = simd.fma(v, wa, s2), simd.fma(v, wb, t2)
        v = simd.splat(xp[i3])
        s3, t3 = simd.fma(v, wa, s3), simd.fma(v, wb, t3)
        v = simd.splat(xp[i4])
        s4, t4 = simd.fma(v, wa, s4), simd.fma(v, wb, t4)
        v = simd.splat(xp[i5])
        s5, t5 = simd.fma(v, wa, s5), simd.fma(v, wb, t5)
        v = simd.splat(xp[i6])
        s6, t6 = simd.fma(v, wa, s6), simd.fma(v, wb, t6)
        v = simd.splat(xp[i7])
        s7, t7 = simd.fma(v, wa, s7), simd.fma(v, wb, t7)
        i0, i1, i2, i3 = i0 + xstep, i1 + xstep, i2 + xstep, i3 + xstep
        i4, i5, i6, i7 = i4 + xstep, i5 + xstep, i6 + xstep, i7 + xstep
        w += wstep
    return s0, s1, s2, s3, s4, s5, s6, s7, t0, t1, t2, t3, t4, t5, t6, t7


@_inline
def _dot4x2(xp, i, xstep, wp, w, wstep, count, acc):  # noqa: ANN001, ANN202
    lanes = simd.lanes_of(wp)
    i0, i1, i2, i3 = i
    s0, s1, s2, s3, t0, t1, t2, t3 = acc
    for _ in range(count):
        wa = simd.load(wp, w)
        wb = simd.load(wp, w + lanes)
        v = simd.splat(xp[i0])
        s0, t0 = simd.fma(v, wa, s0), simd.fma(v, wb, t0)
        v = simd.splat(xp[i1])
        s1, t1 = simd.fma(v, wa, s1), simd.fma(v, wb, t1)
        v = simd.splat(xp[i2])
        s2, t2 = simd.fma(v, wa, s2), simd.fma(v, wb, t2)
        v = simd.splat(xp[i3])
        s3, t3 = simd.fma(v, wa, s3), simd.fma(v, wb, t3)
        i0, i1, i2, i3 = i0 + xstep, i1 + xstep, i2 + xstep, i3 + xstep
        w += wstep
    return s0, s1, s2, s3, t0, t1, t2, t3


@_inline
def _dot8x1(xp, i, xstep, wp, w, wstep, count, acc):  # noqa: ANN001, ANN202
    i0, i1, i2, i3, i4, i5, i6, i7 = i
    s0, s1, s2, s3, s4, s5, s6, s7 = acc
    for _ in range(count):
        wa = simd.load(wp, w)
        s0 = simd.fma(simd.splat(xp[i0]), wa, s0)
        s1 = simd.fma(simd.splat(xp[i1]), wa, s1)
        s2 = simd.fma(simd.splat(xp[i2]), wa, s2)
        s3 = simd.fma(simd.splat(xp[i3]), wa, s3)
        s4 = simd.fma(simd.splat(xp[i4]), wa, s4)
        s5 = simd.fma(simd.splat(xp[i5]), wa, s5)
        s6 = simd.fma(simd.splat(xp[i6]), wa, s6)
        s7 = simd.fma(simd.splat(xp[i7]), wa, s7)
        i0, i1, i2, i3 = i0 + xstep, i1 + xstep, i2 + xstep, i3 + xstep
        i4, i5, i6, i7 = i4 + xstep, i5 + xstep, i6 + xstep, i7 + xstep
        w += wstep
    return s0, s1, s2, s3, s4, s5, s6, s7


@_inline
def _dot4x1(xp, i, xstep, wp, w, wstep, count, acc):  # noqa: ANN001, ANN202
    i0, i1, i2, i3 = i
    s0, s1, s2, s3 = acc
    for _ in range(count):
        wa = simd.load(wp, w)
        s0 = simd.fma(simd.splat(xp[i0]), wa, s0)
        s1 = simd.fma(simd.splat(xp[i1]), wa, s1)
        s2 = simd.fma(simd.splat(xp[i2]), wa, s2)
        s3 = simd.fma(simd.splat(xp[i3]), wa, s3)
        i0, i1, i2, i3 = i0 + xstep, i1 + xstep, i2 + xstep, i3 + xstep
        w += wstep
    return s0, s1, s2, s3


@_inline
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


@_inline
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


@_inline
def _splat16(ba, bb):  # noqa: ANN001, ANN202
    return ba, ba, ba, ba, ba, ba, ba, ba, bb, bb, bb, bb, bb, bb, bb, bb


@_inline
def _splat8(ba):  # noqa: ANN001, ANN202
    return ba, ba, ba, ba, ba, ba, ba, ba


# ---------------------------------------------------------------------------
# Copies on the way in and out.


@_part
def _copy_run(sp, s, dp, d, count):  # noqa: ANN001, ANN202
    """dp[d : d + count] = sp[s : s + count], by vectors."""
    lanes = simd.lanes_of(dp)
    i = 0
    while i + lanes <= count:
        simd.store(dp, d + i, simd.load(sp, s + i))
        i += lanes
    if i < count:
        simd.store_first(dp, d + i, simd.load_first(sp, s + i, count - i), count - i)


@_inline
def _pad_rows(sp, dp, g, n, r0, r1):  # noqa: ANN001, ANN202
    """Input rows [r0, r1) of image n into the interior of its zero-padded copy (the border
    was zeroed at load): in its own layout (_COPY 1), or NCHW into NHWC (_COPY 2)."""
    height, width, channels = g[_H], g[_W], g[_CIN]
    ph, pw = g[_PH], g[_PW]
    hp, wp = height + 2 * ph, width + 2 * pw
    lanes = simd.lanes_of(dp)
    plane = height * width
    for h in range(r0, r1):
        if g[_COPY] == 2:
            d = ((n * hp + h + ph) * wp + pw) * channels
            src = n * channels * plane + h * width
            done = 0
            if channels == 3:  # (an image's three planes: whole vectors interleaved)
                while done + lanes <= width:
                    x0, x1 = simd.load(sp, src + done), simd.load(sp, src + done + plane)
                    x2 = simd.load(sp, src + done + 2 * plane)
                    simd.store_interleaved3(dp, d + 3 * done, x0, x1, x2)
                    done += lanes
            for w in range(done, width):
                for c in range(channels):
                    dp[d + w * channels + c] = sp[src + w + c * plane]
        elif g[_X_NHWC] != 0:
            d = ((n * hp + h + ph) * wp + pw) * channels
            _copy_run(sp, (n * height + h) * width * channels, dp, d, width * channels)
        else:  # (each channel's plane row)
            for c in range(channels):
                image = n * channels + c
                d = (image * hp + h + ph) * wp + pw
                _copy_run(sp, (image * height + h) * width, dp, d, width)


@_loops
def _pad_input(x, buffer, g):  # noqa: ANN001, ANN202
    """The whole input into the interior of its zero-padded copy (_pad_rows), a row at a
    time (in parallel in the parallel kernels)."""
    height = g[_H]
    sp, dp = simd.pointer(x), simd.pointer(buffer)
    for r in prange(g[_N] * height):
        n = r // height
        h = r - n * height
        _pad_rows(sp, dp, g, n, h, h + 1)


@_loops
def _to_planes(scratch, planes, residual, has_residual, lo, hi, n_batch, pixels, c_out):  # noqa: ANN001, ANN202
    """planes (N, C, P) = clamp(scratch (N, P, C) + residual (N, C, P), lo, hi), scalar by
    scalar (each residual element read before its store: it may be planes itself). Pixels
    outside, so that the NCHW side is accessed at a stride of one plane, never of the
    channel count (a large power of two maps every such access to one cache set)."""
    sp, pp, rp = simd.pointer(scratch), simd.pointer(planes), simd.pointer(residual)
    for job in prange(n_batch * pixels):
        n = job // pixels
        p = job - n * pixels
        src = job * c_out
        dst = n * c_out * pixels + p
        for c in range(c_out):
            v = sp[src + c]
            if has_residual:
                v += rp[dst]
            if v < lo:  # (comparisons false for NaN: it stays)
                v = lo
            if v > hi:
                v = hi
            pp[dst] = v
            dst += pixels


# ---------------------------------------------------------------------------
# Dense convolutions (1x1 included): tiles of 8 consecutive output pixels (across rows),
# their windows' first elements read from a table made at load; blocks of output vectors.


@_inline
def _starts8(wt, p, base):  # noqa: ANN001, ANN202
    """The first elements of the windows of pixels p .. p + 7 (the table repeats its last
    pixel up to whole tiles)."""
    return (base + wt[p], base + wt[p + 1], base + wt[p + 2], base + wt[p + 3],
            base + wt[p + 4], base + wt[p + 5], base + wt[p + 6], base + wt[p + 7])  # fmt: skip


@_inline
def _starts4(wt, p, base):  # noqa: ANN001, ANN202
    return base + wt[p], base + wt[p + 1], base + wt[p + 2], base + wt[p + 3]


@_inline
def _store_pixels8(op, o, step, stored, count, v, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """The first ``stored`` of 8 pixels' vectors v_m (``count`` lanes) at op[o + m * step:]."""
    if stored == 8 and count >= simd.lanes_of(op):  # (the common case, without a test each)
        v0, v1, v2, v3, v4, v5, v6, v7 = v
        _finish_whole(op, o, v0, rp, has_residual, low, high)
        _finish_whole(op, o + step, v1, rp, has_residual, low, high)
        _finish_whole(op, o + 2 * step, v2, rp, has_residual, low, high)
        _finish_whole(op, o + 3 * step, v3, rp, has_residual, low, high)
        _finish_whole(op, o + 4 * step, v4, rp, has_residual, low, high)
        _finish_whole(op, o + 5 * step, v5, rp, has_residual, low, high)
        _finish_whole(op, o + 6 * step, v6, rp, has_residual, low, high)
        _finish_whole(op, o + 7 * step, v7, rp, has_residual, low, high)
    else:
        _store_some8(op, o, step, stored, count, v, rp, has_residual, low, high)


@_part
def _store_some8(op, o, step, stored, count, v, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """_store_pixels8 of a tail tile or a channel tail: a function of its own (its masked
    stores inlined into every tile would multiply the kernels' compile time)."""
    v0, v1, v2, v3, v4, v5, v6, v7 = v
    _store_some4(op, o, step, stored, count, (v0, v1, v2, v3), rp, has_residual, low, high)
    o4 = o + 4 * step
    _store_some4(op, o4, step, stored - 4, count, (v4, v5, v6, v7), rp, has_residual, low, high)


@_inline
def _store_pixels4(op, o, step, stored, count, v, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """The first ``stored`` of 4 pixels' vectors v_m (``count`` lanes) at op[o + m * step:]."""
    if stored >= 4 and count >= simd.lanes_of(op):
        v0, v1, v2, v3 = v
        _finish_whole(op, o, v0, rp, has_residual, low, high)
        _finish_whole(op, o + step, v1, rp, has_residual, low, high)
        _finish_whole(op, o + 2 * step, v2, rp, has_residual, low, high)
        _finish_whole(op, o + 3 * step, v3, rp, has_residual, low, high)
    else:
        _store_some4(op, o, step, stored, count, v, rp, has_residual, low, high)


@_part
def _store_some4(op, o, step, stored, count, v, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """_store_pixels4 of fewer pixels or a channel tail (see _store_some8)."""
    v0, v1, v2, v3 = v
    _finish(op, o, v0, count if stored > 0 else 0, rp, has_residual, low, high)
    _finish(op, o + step, v1, count if stored > 1 else 0, rp, has_residual, low, high)
    _finish(op, o + 2 * step, v2, count if stored > 2 else 0, rp, has_residual, low, high)
    _finish(op, o + 3 * step, v3, count if stored > 3 else 0, rp, has_residual, low, high)


@_part
def _pair8(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, p0, p1, c0, has_residual):  # noqa: ANN001, ANN202
    """Output channels [c0, c0 + 2L) of pixels [p0, p1) of an image (its windows at
    ``base`` + the table's starts, its outputs at op[o:]), 8 at a time: the runs'
    products summed onto the bias, the epilogue."""
    lanes = simd.lanes_of(op)
    n_runs, run_len, run_step, c_out = g[_RUNS], g[_RUN_LEN], g[_RUN_STEP], g[_COUT]
    ba, bb = simd.load(bp, c0), simd.load(bp, c0 + lanes)
    na, nb = min(lanes, c_out - c0), min(lanes, c_out - c0 - lanes)
    for p in range(p0, p1, 8):
        acc = _splat16(ba, bb)
        a = _starts8(wt, p, base)
        w = c0 * n_runs * run_len
        for r in range(n_runs):
            acc = _dot8x2(xp, _shift8(a, runs[r]), run_step, wp, w, 2 * lanes, run_len, acc)
            w += 2 * lanes * run_len
        q, stored = o + p * c_out + c0, min(8, p1 - p)
        _store_pixels8(op, q, c_out, stored, na, acc[:8], rp, has_residual, low, high)
        _store_pixels8(op, q + lanes, c_out, stored, nb, acc[8:], rp, has_residual, low, high)


@_part
def _single8(xp, wp, bp, runs, wt, op, rp, g, low, high, base, o, p0, p1, c0, has_residual):  # noqa: ANN001, ANN202
    """As _pair8 for one vector of output channels from c0 (an odd last one)."""
    lanes = simd.lanes_of(op)
    n_runs, run_len, run_step, c_out = g[_RUNS], g[_RUN_LEN], g[_RUN_STEP], g[_COUT]
    b = simd.load(bp, c0)
    for p in range(p0, p1, 8):
        acc = _splat8(b)
        a = _starts8(wt, p, base)
        w = c0 * n_runs * run_len
        for r in range(n_runs):
            acc = _dot8x1(xp, _shift8(a, runs[r]), run_step, wp, w, lanes, run_len, acc)
            w += lanes * run_len
        q, stored = o + p * c_out + c0, min(8, p1 - p)
        _store_pixels8(op, q, c_out, stored, c_out - c0, acc, rp, has_residual, low, high)


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
            d = runs[r]
            i = (a[0] + d, a[1] + d, a[2] + d, a[3] + d)
            acc = _dot4x2(xp, i, run_step, wp, w, 2 * lanes, run_len, acc)
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
            d = runs[r]
            i = (a[0] + d, a[1] + d, a[2] + d, a[3] + d)
            acc = _dot4x1(xp, i, run_step, wp, w, lanes, run_len, acc)
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
    summed = g[_HAS_RESIDUAL] != 0 and g[_TO_PLANES] == 0
    last = 2 * q1 * lanes  # (with ``tail``, the odd last vector's first channel)
    if pixels == 1:
        a = base + wt[0]
        for q in range(q0, q1):
            _vectors1(xp, wp, bp, runs, op, rp, g, low, high, a, o, 2 * q * lanes, 2, summed)
        if tail:
            _vectors1(xp, wp, bp, runs, op, rp, g, low, high, a, o, last, 1, summed)
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


@_part
def _dense_job(sp, xp, wp, bp, runs, wt, op, rp, g, low, high, has_residual, job):  # noqa: ANN001, ANN202
    """Job (image, strip, group) of a dense convolution: strips split an image's tiles of 8
    output pixels evenly, groups its output vector pairs (the last group also taking an
    odd last vector). With _BANDED, the strip first copies the input rows it reads (from
    sp to xp): they are read from L1 right after."""
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
    if g[_BANDED] != 0:
        out_w = g[_OW]
        oh0, oh1 = p0 // out_w, (p1 + out_w - 1) // out_w
        r0 = max(0, oh0 * g[_SH] - g[_PH])
        r1 = min(g[_H], (oh1 - 1) * g[_SH] - g[_PH] + (g[_KH] - 1) * g[_DH] + 1)
        _pad_rows(sp, xp, g, n, r0, max(r0, r1))
    if has_residual:  # (twice, the residual's test compiled away in each)
        _dense_strip(xp, wp, bp, runs, wt, op, rp, g, low, high, n, p0, p1, q0, q1, tail, True)
    else:
        _dense_strip(xp, wp, bp, runs, wt, op, rp, g, low, high, n, p0, p1, q0, q1, tail, False)


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
    has_residual = g[_HAS_RESIDUAL] != 0 and not to_planes
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
        _dense_job(
            simd.pointer(x), xp, wpp, bp, runp, wtp, op, rp, gp, low, high, has_residual,
            np.int64(job),
        )  # fmt: skip
    if to_planes:
        pixels = g[_OH] * g[_OW]
        _to_planes(out, planes, residual, g[_HAS_RESIDUAL] != 0, lo, hi, g[_N], pixels, g[_COUT])
    return out


DENSE = serial_and_parallel(_dense, "nhwc_dense")


# ---------------------------------------------------------------------------
# Depthwise: one filter a channel, vectors over channels.
#
# What is read is the input itself or its zero-padded copy (_COPY, made first). Filters
# other than 3x3 always read every tap in whole vectors: the input has no padding and whole
# channel vectors, or it is copied, with room after its end (a channel tail's vector reads
# on into the next pixel's channels, lanes never stored). A 3x3 filter on a large image
# reads it uncopied (the copy would cost a third as much as the filter at stride 2): its
# border pixels and channel tails through masked loads, an absent tap's lanes reading
# nothing (zero).


@_inline
def _div(a, b):  # noqa: ANN001, ANN202
    """a // b, without dividing by 1 (a division costs tens of cycles)."""
    return a if b == 1 else a // b


@_part
def _read_geometry(g):  # noqa: ANN001, ANN202
    """(channels, height, width, row elements, pad top, pad left) of what a depthwise
    kernel reads: the input, or its padded copy (then padded already)."""
    copied = g[_COPY] != 0
    ph, pw = (0, 0) if copied else (g[_PH], g[_PW])
    height, width = g[_H] + 2 * (g[_PH] - ph), g[_W] + 2 * (g[_PW] - pw)
    return g[_CIN], height, width, width * g[_CIN], ph, pw


@_part
def _dw3x3_rows(xp, wp, op, rp, g, low, high, n, c0, count, ba, oh0, oh1, has_residual):  # noqa: ANN001, ANN202
    """Output rows [oh0, oh1) of image n, channel vector from c0 (``count`` lanes stored),
    of a 3x3 filter, its nine weight vectors held in registers. Interior pixels read whole
    vectors (past the channels where the input was copied); the others masked. With
    _PIXELS_PER_VECTOR P > 1 (a few channels, stride 1, copied) a vector holds P pixels."""
    lanes = simd.lanes_of(wp)
    channels, height, width, row, ph, pw = _read_geometry(g)
    out_h, out_w, sh, sw, dh, dw = g[_OH], g[_OW], g[_SH], g[_SW], g[_DH], g[_DW]
    per_vector = g[_PIXELS_PER_VECTOR]
    wb = c0 * 9
    w00, w01, w02 = simd.load(wp, wb), simd.load(wp, wb + lanes), simd.load(wp, wb + 2 * lanes)
    w10, w11 = simd.load(wp, wb + 3 * lanes), simd.load(wp, wb + 4 * lanes)
    w12, w20 = simd.load(wp, wb + 5 * lanes), simd.load(wp, wb + 6 * lanes)
    w21, w22 = simd.load(wp, wb + 7 * lanes), simd.load(wp, wb + 8 * lanes)
    step = dw * channels
    whole = g[_COPY] != 0 or count == lanes
    # output columns [lo, hi) whose windows lie inside
    lo = min(out_w, _div(pw + sw - 1, sw))
    hi = max(lo, min(out_w, _div(width - 1 - 2 * dw + pw, sw) + 1))
    xb = n * height * row + c0
    for oh in range(oh0, oh1):
        top = oh * sh - ph
        y1, y2 = top + dh, top + 2 * dh
        r0, r1, r2 = 0 <= top < height, 0 <= y1 < height, 0 <= y2 < height
        x0, x1, x2 = xb + top * row, xb + y1 * row, xb + y2 * row
        o_row = ((n * out_h + oh) * out_w) * channels + c0
        first, end = (lo, hi) if r0 and r1 and r2 and whole else (out_w, out_w)
        ow = first
        while ow < end:  # (a range of run-time step divides to count its steps)
            i = (ow * sw - pw) * channels
            a, b, c = x0 + i, x1 + i, x2 + i
            # (three chains of three: a chain of nine waits nine latencies a pixel)
            top_row = simd.fma(w00, simd.load(xp, a), ba)
            mid_row = simd.mul(w10, simd.load(xp, b))
            low_row = simd.mul(w20, simd.load(xp, c))
            top_row = simd.fma(w01, simd.load(xp, a + step), top_row)
            mid_row = simd.fma(w11, simd.load(xp, b + step), mid_row)
            low_row = simd.fma(w21, simd.load(xp, c + step), low_row)
            top_row = simd.fma(w02, simd.load(xp, a + 2 * step), top_row)
            mid_row = simd.fma(w12, simd.load(xp, b + 2 * step), mid_row)
            low_row = simd.fma(w22, simd.load(xp, c + 2 * step), low_row)
            acc = simd.add(top_row, simd.add(mid_row, low_row))
            stored = min(count, (out_w - ow) * channels)
            if stored >= lanes:
                _finish_whole(op, o_row + ow * channels, acc, rp, has_residual, low, high)
            else:
                _finish(op, o_row + ow * channels, acc, stored, rp, has_residual, low, high)
            ow += per_vector
        for k in range(out_w - (end - first)):  # the others: masked
            ow = k if k < first else k + end - first
            left = ow * sw - pw
            i = left * channels
            a, b, c = x0 + i, x1 + i, x2 + i
            e0 = count if 0 <= left < width else 0
            e1 = count if 0 <= left + dw < width else 0
            e2 = count if 0 <= left + 2 * dw < width else 0
            a0, a1, a2 = (e0, e1, e2) if r0 else (0, 0, 0)
            b0, b1, b2 = (e0, e1, e2) if r1 else (0, 0, 0)
            c0_, c1, c2 = (e0, e1, e2) if r2 else (0, 0, 0)
            acc = simd.fma(w00, simd.load_first(xp, a, a0), ba)
            acc = simd.fma(w01, simd.load_first(xp, a + step, a1), acc)
            acc = simd.fma(w02, simd.load_first(xp, a + 2 * step, a2), acc)
            acc = simd.fma(w10, simd.load_first(xp, b, b0), acc)
            acc = simd.fma(w11, simd.load_first(xp, b + step, b1), acc)
            acc = simd.fma(w12, simd.load_first(xp, b + 2 * step, b2), acc)
            acc = simd.fma(w20, simd.load_first(xp, c, c0_), acc)
            acc = simd.fma(w21, simd.load_first(xp, c + step, c1), acc)
            acc = simd.fma(w22, simd.load_first(xp, c + 2 * step, c2), acc)
            _finish(op, o_row + ow * channels, acc, count, rp, has_residual, low, high)


@_part
def _dw3x3_pixels(xp, wp, bp, op, rp, g, low, high, n, v0, v1, oh0, oh1, has_residual):  # noqa: ANN001, ANN202
    """Output rows [oh0, oh1) of image n, channel vectors [v0, v1), of a 3x3 filter on a
    tiny copied image: pixel by pixel, every vector's weights read again (from L1) rather
    than held, which costs less than setting up each vector for a few pixels."""
    lanes = simd.lanes_of(wp)
    channels, height, _, row, _, _ = _read_geometry(g)
    out_h, out_w, sh, sw, dh, dw = g[_OH], g[_OW], g[_SH], g[_SW], g[_DH], g[_DW]
    step, row_step = dw * channels, dh * row
    for oh in range(oh0, oh1):
        x_row = (n * height + oh * sh) * row
        o_row = ((n * out_h + oh) * out_w) * channels
        for ow in range(out_w):
            a = x_row + ow * sw * channels + v0 * lanes
            b, c = a + row_step, a + 2 * row_step
            o = o_row + ow * channels + v0 * lanes
            w = v0 * lanes * 9
            for v in range(v0, v1):
                top_row = simd.fma(simd.load(wp, w), simd.load(xp, a), simd.load(bp, v * lanes))
                mid_row = simd.mul(simd.load(wp, w + 3 * lanes), simd.load(xp, b))
                low_row = simd.mul(simd.load(wp, w + 6 * lanes), simd.load(xp, c))
                top_row = simd.fma(simd.load(wp, w + lanes), simd.load(xp, a + step), top_row)
                mid_row = simd.fma(simd.load(wp, w + 4 * lanes), simd.load(xp, b + step), mid_row)
                low_row = simd.fma(simd.load(wp, w + 7 * lanes), simd.load(xp, c + step), low_row)
                top_row = simd.fma(
                    simd.load(wp, w + 2 * lanes), simd.load(xp, a + 2 * step), top_row
                )
                mid_row = simd.fma(
                    simd.load(wp, w + 5 * lanes), simd.load(xp, b + 2 * step), mid_row
                )
                low_row = simd.fma(
                    simd.load(wp, w + 8 * lanes), simd.load(xp, c + 2 * step), low_row
                )
                acc = simd.add(top_row, simd.add(mid_row, low_row))
                count = min(lanes, channels - v * lanes)
                _finish(op, o, acc, count, rp, has_residual, low, high)
                a, b, c, o, w = a + lanes, b + lanes, c + lanes, o + lanes, w + 9 * lanes


@_inline
def _dw3x3_weights(wp, w):  # noqa: ANN001, ANN202
    lanes = simd.lanes_of(wp)
    return (
        simd.load(wp, w), simd.load(wp, w + lanes), simd.load(wp, w + 2 * lanes),
        simd.load(wp, w + 3 * lanes), simd.load(wp, w + 4 * lanes), simd.load(wp, w + 5 * lanes),
        simd.load(wp, w + 6 * lanes), simd.load(wp, w + 7 * lanes), simd.load(wp, w + 8 * lanes),
    )  # fmt: skip


@_inline
def _row4(xp, a, step, two, ta, tb, tc, s0, s1, s2, s3):  # noqa: ANN001, ANN202
    """Sums s_p of 4 output pixels, plus one filter row (taps ta, tb, tc) over the input
    row whose first window column is xp[a] (columns ``step`` apart; with ``two`` the
    pixels 2 columns apart, else 1: each column loaded once)."""
    c0, c1, c2 = simd.load(xp, a), simd.load(xp, a + step), simd.load(xp, a + 2 * step)
    s0 = simd.fma(tc, c2, simd.fma(tb, c1, simd.fma(ta, c0, s0)))
    if two:
        c3, c4 = simd.load(xp, a + 3 * step), simd.load(xp, a + 4 * step)
        s1 = simd.fma(tc, c4, simd.fma(tb, c3, simd.fma(ta, c2, s1)))
        c5, c6 = simd.load(xp, a + 5 * step), simd.load(xp, a + 6 * step)
        s2 = simd.fma(tc, c6, simd.fma(tb, c5, simd.fma(ta, c4, s2)))
        c7, c8 = simd.load(xp, a + 7 * step), simd.load(xp, a + 8 * step)
        s3 = simd.fma(tc, c8, simd.fma(tb, c7, simd.fma(ta, c6, s3)))
    else:
        c3 = simd.load(xp, a + 3 * step)
        s1 = simd.fma(tc, c3, simd.fma(tb, c2, simd.fma(ta, c1, s1)))
        c4 = simd.load(xp, a + 4 * step)
        s2 = simd.fma(tc, c4, simd.fma(tb, c3, simd.fma(ta, c2, s2)))
        c5 = simd.load(xp, a + 5 * step)
        s3 = simd.fma(tc, c5, simd.fma(tb, c4, simd.fma(ta, c3, s3)))
    return s0, s1, s2, s3


@_part
def _dw3x3_tile4(xp, wp, bp, op, rp, low, high, a, row, o, channels, v0, v1, two, has_residual):  # noqa: ANN001, ANN202, E501
    """4 consecutive output pixels inside the image (the first window's top left at xp[a],
    outputs at op[o:], input rows ``row`` elements apart, pixels ``channels``), channel
    vectors [v0, v1) in turn: each vector's nine weights loaded once for the four pixels,
    each input column once for the pixels sharing it (stride 1, or 2 with ``two``)."""
    lanes = simd.lanes_of(wp)
    for v in range(v0, v1):
        c = v * lanes
        t00, t01, t02, t10, t11, t12, t20, t21, t22 = _dw3x3_weights(wp, 9 * c)
        b = simd.load(bp, c)
        s0, s1, s2, s3 = _row4(xp, a + c, channels, two, t00, t01, t02, b, b, b, b)
        s0, s1, s2, s3 = _row4(xp, a + row + c, channels, two, t10, t11, t12, s0, s1, s2, s3)
        s0, s1, s2, s3 = _row4(xp, a + 2 * row + c, channels, two, t20, t21, t22, s0, s1, s2, s3)
        _finish_whole(op, o + c, s0, rp, has_residual, low, high)
        _finish_whole(op, o + channels + c, s1, rp, has_residual, low, high)
        _finish_whole(op, o + 2 * channels + c, s2, rp, has_residual, low, high)
        _finish_whole(op, o + 3 * channels + c, s3, rp, has_residual, low, high)


@_inline
def _masked_row3(xp, wp, w, x, step, e, acc):  # noqa: ANN001, ANN202
    """acc + one filter row (weight vectors at wp[w:]) over the columns xp[x], xp[x + step],
    xp[x + 2 step], column k read in its first e[k] lanes (0: none, a zero)."""
    lanes = simd.lanes_of(wp)
    acc = simd.fma(simd.load(wp, w), simd.load_first(xp, x, e[0]), acc)
    acc = simd.fma(simd.load(wp, w + lanes), simd.load_first(xp, x + step, e[1]), acc)
    return simd.fma(simd.load(wp, w + 2 * lanes), simd.load_first(xp, x + 2 * step, e[2]), acc)


@_part
def _dw3x3_pixel(xp, wp, bp, op, rp, low, high, x0, x1, x2, e, o, channels, v0, v1, has_residual):  # noqa: ANN001, ANN202, E501
    """One output pixel, channel vectors [v0, v1) (whole vectors): its window's rows at
    xp[x_r:] (columns ``channels`` apart), tap (r, k) read where e[r][k] (else zero, masked
    loads reading nothing); the rows summed apart (a chain of nine waits nine latencies)."""
    lanes = simd.lanes_of(wp)
    for v in range(v0, v1):
        c = v * lanes
        w = 9 * c
        b = simd.load(bp, c)
        zero = simd.zeros_like(b)
        top = _masked_row3(xp, wp, w, x0 + c, channels, e[0], b)
        mid = _masked_row3(xp, wp, w + 3 * lanes, x1 + c, channels, e[1], zero)
        bottom = _masked_row3(xp, wp, w + 6 * lanes, x2 + c, channels, e[2], zero)
        _finish_whole(op, o + c, simd.add(top, simd.add(mid, bottom)), rp, has_residual, low, high)


@_part
def _dw3x3_tiled(xp, wp, bp, op, rp, g, low, high, n, v0, v1, oh0, oh1, has_residual):  # noqa: ANN001, ANN202
    """Output rows [oh0, oh1) of image n, channel vectors [v0, v1) (whole: the channels
    fill them) of a 3x3 filter at dilation 1, stride 1 or 2, read in place: pixel by
    pixel over the vectors, 4 pixels at a time inside the image (:func:`_dw3x3_tile4`),
    the others one at a time with masked loads at the borders. Each pixel's vectors are
    contiguous: no stride of a whole pixel between loads, whose cache sets a large
    channel count would crowd."""
    lanes = simd.lanes_of(wp)
    channels, height, width, row, ph, pw = _read_geometry(g)
    out_h, out_w, sh, sw = g[_OH], g[_OW], g[_SH], g[_SW]
    two = sw == 2
    # output columns [lo, hi) whose windows lie inside
    lo = min(out_w, _div(pw + sw - 1, sw))
    hi = max(lo, min(out_w, _div(width - 3 + pw, sw) + 1))
    xb = n * height * row
    for oh in range(oh0, oh1):
        top = oh * sh - ph
        r0, r1, r2 = 0 <= top < height, 0 <= top + 1 < height, 0 <= top + 2 < height
        x0, x1, x2 = xb + top * row, xb + (top + 1) * row, xb + (top + 2) * row
        o_row = ((n * out_h + oh) * out_w) * channels
        first, end = (lo, hi) if r0 and r1 and r2 else (out_w, out_w)
        ow = first
        while ow + 4 <= end:
            i = (ow * sw - pw) * channels
            q = o_row + ow * channels
            _dw3x3_tile4(
                xp, wp, bp, op, rp, low, high, x0 + i, row, q, channels, v0, v1, two, has_residual
            )
            ow += 4
        for k in range(out_w - (ow - first)):  # the rest, one at a time (masked)
            ow_k = k if k < first else k + ow - first
            left = ow_k * sw - pw
            i = left * channels
            e0 = lanes if 0 <= left < width else 0
            e1 = lanes if 0 <= left + 1 < width else 0
            e2 = lanes if 0 <= left + 2 < width else 0
            e = (
                (e0, e1, e2) if r0 else (0, 0, 0),
                (e0, e1, e2) if r1 else (0, 0, 0),
                (e0, e1, e2) if r2 else (0, 0, 0),
            )
            q = o_row + ow_k * channels
            _dw3x3_pixel(
                xp, wp, bp, op, rp, low, high, x0 + i, x1 + i, x2 + i, e, q, channels, v0, v1,
                has_residual,
            )  # fmt: skip


@_inline
def _tap_range(start, step, count, size):  # noqa: ANN001, ANN202
    """[k0, k1): the taps k < count whose position start + k * step lies in [0, size)."""
    k0 = 0 if start >= 0 else _div(step - 1 - start, step)
    k1 = min(count, _div(size - start + step - 1, step)) if size > start else 0
    return k0, max(k0, k1)


@_inline
def _dw_clipped4(xp, wp, op, rp, g, low, high, x, o, c0, taps, b, has_residual):  # noqa: ANN001, ANN202
    """Four whole channel vectors from c0 of one output pixel (its window's first valid
    input at xp[x], its output at op[o]) over the taps (kh0, kh1, kw0, kw1): four chains,
    sums from the bias vectors ``b``."""
    lanes = simd.lanes_of(wp)
    kh0, kh1, kw0, kw1 = taps
    channels, kw_n, size = g[_CIN], g[_KW], g[_KH] * g[_KW]
    step, row_step = g[_DW] * channels, g[_DH] * _read_geometry(g)[3]
    wstep = size * lanes  # (between vectors' filters)
    s0, s1, s2, s3 = b
    xr, wr = x + c0, (c0 * size + (kh0 * kw_n + kw0) * lanes)
    for _ in range(kh0, kh1):
        for k in range(kw1 - kw0):
            xi, wi = xr + k * step, wr + k * lanes
            s0 = simd.fma(simd.load(wp, wi), simd.load(xp, xi), s0)
            s1 = simd.fma(simd.load(wp, wi + wstep), simd.load(xp, xi + lanes), s1)
            s2 = simd.fma(simd.load(wp, wi + 2 * wstep), simd.load(xp, xi + 2 * lanes), s2)
            s3 = simd.fma(simd.load(wp, wi + 3 * wstep), simd.load(xp, xi + 3 * lanes), s3)
        xr += row_step
        wr += kw_n * lanes
    _finish_whole(op, o + c0, s0, rp, has_residual, low, high)
    _finish_whole(op, o + c0 + lanes, s1, rp, has_residual, low, high)
    _finish_whole(op, o + c0 + 2 * lanes, s2, rp, has_residual, low, high)
    _finish_whole(op, o + c0 + 3 * lanes, s3, rp, has_residual, low, high)


@_inline
def _dw_clipped1(xp, wp, op, rp, g, low, high, x, o, c0, taps, b, count, has_residual):  # noqa: ANN001, ANN202
    """As _dw_clipped4 for one channel vector of ``count`` lanes (masked when fewer than a
    vector: a channel tail)."""
    lanes = simd.lanes_of(wp)
    kh0, kh1, kw0, kw1 = taps
    channels, kw_n, size = g[_CIN], g[_KW], g[_KH] * g[_KW]
    step, row_step = g[_DW] * channels, g[_DH] * _read_geometry(g)[3]
    acc = b
    xr, wr = x + c0, (c0 * size + (kh0 * kw_n + kw0) * lanes)
    for _ in range(kh0, kh1):
        for k in range(kw1 - kw0):
            xv = simd.load_first(xp, xr + k * step, count)
            acc = simd.fma(simd.load(wp, wr + k * lanes), xv, acc)
        xr += row_step
        wr += kw_n * lanes
    _finish(op, o + c0, acc, count, rp, has_residual, low, high)


@_part
def _dw_clipped(xp, wp, bp, op, rp, g, low, high, n, v0, v1, oh0, oh1, has_residual):  # noqa: ANN001, ANN202
    """Output rows [oh0, oh1) of image n, channel vectors [v0, v1), of any filter on a
    small image: pixel by pixel, four whole vectors at a time (then one at a time, a
    channel tail masked), reading only the taps whose inputs lie inside the image (a 5x5
    filter over 2x2 pixels reads 4 taps of 25 a pixel; a copy with padding would be read
    whole), in place."""
    lanes = simd.lanes_of(wp)
    channels, height, width, row, ph, pw = _read_geometry(g)
    out_h, out_w, sh, sw, dh, dw = g[_OH], g[_OW], g[_SH], g[_SW], g[_DH], g[_DW]
    kh_n, kw_n = g[_KH], g[_KW]
    fours = v0 + (min(v1, channels // lanes) - v0) // 4 * 4
    for oh in range(oh0, oh1):
        top = oh * sh - ph
        kh0, kh1 = _tap_range(top, dh, kh_n, height)
        for ow in range(out_w):
            left = ow * sw - pw
            kw0, kw1 = _tap_range(left, dw, kw_n, width)
            taps = (kh0, kh1, kw0, kw1)
            x = (n * height + top + kh0 * dh) * row + (left + kw0 * dw) * channels
            o = ((n * out_h + oh) * out_w + ow) * channels
            for v in range(v0, fours, 4):
                c0 = v * lanes
                b = (simd.load(bp, c0), simd.load(bp, c0 + lanes),
                     simd.load(bp, c0 + 2 * lanes), simd.load(bp, c0 + 3 * lanes))  # fmt: skip
                _dw_clipped4(xp, wp, op, rp, g, low, high, x, o, c0, taps, b, has_residual)
            for v in range(fours, v1):
                c0 = v * lanes
                count = min(lanes, channels - c0)
                b = simd.load(bp, c0)
                _dw_clipped1(xp, wp, op, rp, g, low, high, x, o, c0, taps, b, count, has_residual)


@_inline
def _taps5(t0, t1, t2, t3, t4, x0, x1, x2, x3, x4, acc):  # noqa: ANN001, ANN202
    """acc + t0 x0 + t1 x1 + ... + t4 x4."""
    acc = simd.fma(t4, x4, acc)
    acc = simd.fma(t3, x3, acc)
    acc = simd.fma(t2, x2, acc)
    acc = simd.fma(t1, x1, acc)
    return simd.fma(t0, x0, acc)


@_part
def _dw5_columns(xp, p, channels, sw, t0, t1, t2, t3, t4, s0, s1, s2, s3):  # noqa: ANN001, ANN202
    """One tap row of a 5-wide filter (dilation 1) for 4 consecutive output pixels at
    stride ``sw`` (1 or 2), the row's first window column at element p: the columns the
    pixels share loaded once (8 at stride 1, 11 at stride 2), each weight vector once."""
    x0, x1, x2 = simd.load(xp, p), simd.load(xp, p + channels), simd.load(xp, p + 2 * channels)
    x3, x4 = simd.load(xp, p + 3 * channels), simd.load(xp, p + 4 * channels)
    x5, x6 = simd.load(xp, p + 5 * channels), simd.load(xp, p + 6 * channels)
    x7 = simd.load(xp, p + 7 * channels)
    if sw == 1:  # pixel m, tap k: column m + k
        s0 = _taps5(t0, t1, t2, t3, t4, x0, x1, x2, x3, x4, s0)
        s1 = _taps5(t0, t1, t2, t3, t4, x1, x2, x3, x4, x5, s1)
        s2 = _taps5(t0, t1, t2, t3, t4, x2, x3, x4, x5, x6, s2)
        s3 = _taps5(t0, t1, t2, t3, t4, x3, x4, x5, x6, x7, s3)
        return s0, s1, s2, s3
    x8, x9 = simd.load(xp, p + 8 * channels), simd.load(xp, p + 9 * channels)
    x10 = simd.load(xp, p + 10 * channels)
    # pixel m, tap k: column 2m + k
    s0 = _taps5(t0, t1, t2, t3, t4, x0, x1, x2, x3, x4, s0)
    s1 = _taps5(t0, t1, t2, t3, t4, x2, x3, x4, x5, x6, s1)
    s2 = _taps5(t0, t1, t2, t3, t4, x4, x5, x6, x7, x8, s2)
    s3 = _taps5(t0, t1, t2, t3, t4, x6, x7, x8, x9, x10, s3)
    return s0, s1, s2, s3


@_part
def _dw_rows(xp, wp, op, rp, g, low, high, n, c0, count, ba, oh0, oh1, has_residual):  # noqa: ANN001, ANN202
    """As _dw3x3_rows for any filter, every tap inside what is read: four output pixels at
    a time sharing each tap's weight vector (a tail group repeats the row's last pixel);
    for a 5-wide one at dilation 1 and stride 1 or 2, columns shared between pixels."""
    lanes = simd.lanes_of(wp)
    channels, height, _, row, _, _ = _read_geometry(g)
    out_h, out_w, sh, sw, dh, dw = g[_OH], g[_OW], g[_SH], g[_SW], g[_DH], g[_DW]
    kh_n, kw_n = g[_KH], g[_KW]
    pixel, step, row_step = sw * channels, dw * channels, dh * row
    last = out_w - 1
    shared = kw_n == 5 and dw == 1 and sw <= 2
    for oh in range(oh0, oh1):
        xr = (n * height + oh * sh) * row + c0
        o_row = ((n * out_h + oh) * out_w) * channels + c0
        for ow in range(0, out_w, 4):
            s0, s1, s2, s3 = ba, ba, ba, ba
            w = c0 * kh_n * kw_n
            if shared and ow + 4 <= out_w:
                p = xr + ow * pixel
                for _ in range(kh_n):
                    t0, t1 = simd.load(wp, w), simd.load(wp, w + lanes)
                    t2, t3 = simd.load(wp, w + 2 * lanes), simd.load(wp, w + 3 * lanes)
                    t4 = simd.load(wp, w + 4 * lanes)
                    s0, s1, s2, s3 = _dw5_columns(
                        xp, p, channels, sw, t0, t1, t2, t3, t4, s0, s1, s2, s3
                    )
                    p += row_step
                    w += 5 * lanes
            else:
                i0, i1 = xr + ow * pixel, xr + min(ow + 1, last) * pixel
                i2, i3 = xr + min(ow + 2, last) * pixel, xr + min(ow + 3, last) * pixel
                for kh in range(kh_n):
                    off = kh * row_step
                    for _ in range(kw_n):
                        tap = simd.load(wp, w)
                        s0 = simd.fma(tap, simd.load(xp, i0 + off), s0)
                        s1 = simd.fma(tap, simd.load(xp, i1 + off), s1)
                        s2 = simd.fma(tap, simd.load(xp, i2 + off), s2)
                        s3 = simd.fma(tap, simd.load(xp, i3 + off), s3)
                        off += step
                        w += lanes
            o = o_row + ow * channels
            _store_pixels4(
                op, o, channels, out_w - ow, count, (s0, s1, s2, s3), rp, has_residual, low, high
            )


@_part
def _depthwise_job(xp, wp, bp, op, rp, g, low, high, has_residual, job):  # noqa: ANN001, ANN202
    """Job (image, band of output rows, group of channel vectors) of a depthwise
    convolution; a vector's weights and its lanes of the band's rows stay in cache across
    the rows, the band's rows across the vectors."""
    lanes = simd.lanes_of(op)
    vectors = (g[_CIN] * g[_PIXELS_PER_VECTOR] + lanes - 1) // lanes
    bands, groups, out_h = g[_BANDS], g[_GROUPS], g[_OH]
    n, group, band = 0, job, 0  # (integer divisions cost tens of cycles: only where needed)
    if g[_N] > 1:
        n = job // (bands * groups)
        group = job - n * bands * groups
    if bands > 1:
        band = group // groups
        group -= band * groups
    rows = _div(out_h + bands - 1, bands)
    oh0, oh1 = band * rows, min(out_h, (band + 1) * rows)
    per_group = _div(vectors + groups - 1, groups)
    v0, v1 = group * per_group, min(vectors, (group + 1) * per_group)
    if g[_PIXEL_MAJOR] == 2:  # (the residual's test at run time: compiled once)
        summed = g[_HAS_RESIDUAL] != 0 and g[_TO_PLANES] == 0
        _dw_clipped(xp, wp, bp, op, rp, g, low, high, n, v0, v1, oh0, oh1, summed)
        return
    if g[_PIXEL_MAJOR] == 3:
        _dw3x3_tiled(xp, wp, bp, op, rp, g, low, high, n, v0, v1, oh0, oh1, has_residual)
        return
    if g[_PIXEL_MAJOR] != 0:
        _dw3x3_pixels(xp, wp, bp, op, rp, g, low, high, n, v0, v1, oh0, oh1, has_residual)
        return
    for v in range(v0, v1):
        c0 = v * lanes
        count = min(lanes, g[_CIN] * g[_PIXELS_PER_VECTOR] - c0)
        ba = simd.load(bp, c0)
        if g[_KH] == 3 and g[_KW] == 3:
            _dw3x3_rows(xp, wp, op, rp, g, low, high, n, c0, count, ba, oh0, oh1, has_residual)
        else:
            _dw_rows(xp, wp, op, rp, g, low, high, n, c0, count, ba, oh0, oh1, has_residual)


@_part
def _depthwise_jobs(xp, wp, bp, op, rp, g, low, high, has_residual, job):  # noqa: ANN001, ANN202
    if has_residual:  # (twice, the residual's test compiled away in each)
        _depthwise_job(xp, wp, bp, op, rp, g, low, high, True, job)
    else:
        _depthwise_job(xp, wp, bp, op, rp, g, low, high, False, job)


def _depthwise(x, wp, bias, geometry, scalars, residual, out, planes, buffer):  # noqa: ANN001, ANN201
    """out (N, OH, OW, C) = depthwise conv2d(x, W) + bias, + residual, clamped. With _COPY,
    x (NHWC, or NCHW for _COPY 2) is first copied into the zero-padded NHWC ``buffer``;
    with _TO_PLANES, ``out`` is a buffer for the NCHW ``planes``."""
    g = geometry
    to_planes = g[_TO_PLANES] != 0
    has_residual = g[_HAS_RESIDUAL] != 0 and not to_planes
    lo, hi = scalars[_LOW], scalars[_HIGH]
    low = simd.splat(scalars[_NO_LOW] if to_planes else lo)
    high = simd.splat(scalars[_NO_HIGH] if to_planes else hi)
    if g[_COPY] != 0:
        _pad_input(x, buffer, g)
        xp = simd.pointer(buffer)
    else:
        xp = simd.pointer(x)
    wpp, bp = simd.pointer(wp), simd.pointer(bias)
    op, rp, gp = simd.pointer(out), simd.pointer(residual), simd.pointer(geometry)
    for job in prange(g[_N] * g[_BANDS] * g[_GROUPS]):  # (its index unsigned in parallel)
        _depthwise_jobs(xp, wpp, bp, op, rp, gp, low, high, has_residual, np.int64(job))
    if to_planes:
        pixels = g[_OH] * g[_OW]
        _to_planes(out, planes, residual, g[_HAS_RESIDUAL] != 0, lo, hi, g[_N], pixels, g[_CIN])
    return out


DEPTHWISE = serial_and_parallel(_depthwise, "nhwc_depthwise")


# ---------------------------------------------------------------------------
# The step, built at load.

# Multiply-adds from which a step takes its parallel compilation (with more than one
# thread): a parallel region costs a few microseconds, so a dense convolution pays for it
# from about 10 us on one thread (us, 1 -> 2 threads: 64 -> 64 channels 1x1 at 14x14, 20
# -> 16; 16 -> 16 3x3 at 14x14, 0.45M, 8.5 -> 9.6) and a depthwise one, split into bands and
# channel groups, from a little more (1024 channels 3x3 at 7x7, 0.45M, 32 -> 29; 672, 0.3M,
# 18 -> 21).
PARALLEL_MACS = 600_000
DEPTHWISE_PARALLEL_MACS = 400_000

# Input bytes a depthwise job's band of rows reads at most (held in L2 across the channel
# vectors that read it in turn).
BAND_BYTES = 64 * 1024

# Input pixels up to which a 3x3 depthwise convolution with padding (or a channel tail)
# reads a zero-padded copy rather than the input with masked loads at its borders; at
# stride 1 (where the copy costs a ninth of the filter) up to the larger number.
COPY_PIXELS_3X3 = 64
COPY_PIXELS_3X3_STRIDE_1 = 256

# Channel vectors from which a 3x3 depthwise convolution runs pixel by pixel over them
# (see _dw3x3_tiled) rather than vector by vector.
TILED_VECTORS = 2

# The share of a depthwise filter's taps (over all output pixels) inside the image below
# which only those are computed (us, 1 thread: 288 channels 5x5 at 2x2, 4 of 25 taps a
# pixel, 2.76 -> 0.58; 120 at 4x4, 12 of 25, 1.45 -> 1.50, so not then).
CLIPPED_SHARE = 0.45

# Bytes of padded input rows a dense band copies and then reads (see _dense_job): well
# inside L1.
BAND_COPY_BYTES = 16 * 1024

# Input bytes a serial dense strip reads about (see _dense_jobs): its pixels stay in L2 while
# each block of output vectors reads them.
STRIP_BYTES = 128 * 1024


def _aligned(values: np.ndarray) -> np.ndarray:
    """A copy of 1-D ``values`` starting on a 64-byte boundary (a cache line): a vector read
    across two lines costs two."""
    raw = np.empty(values.size * values.itemsize + 64, np.uint8)
    start = -raw.ctypes.data % 64
    out = raw[start : start + values.size * values.itemsize].view(values.dtype)
    out[:] = values
    return out


def _zeros(size: int, dtype: Any) -> np.ndarray:
    return _aligned(np.zeros(size, dtype))


def _flat(a: np.ndarray, nhwc: bool) -> np.ndarray:
    """The 1-D view of a 4-D array's memory, read as NHWC or NCHW."""
    return (a.transpose(0, 2, 3, 1) if nhwc else a).reshape(-1)


def _data(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _pack_vectors(units: np.ndarray, lanes: int) -> np.ndarray:
    """Weights (C_out, U) in the tiles' order: output channels zero-padded to whole vectors;
    vector pairs (v, v + 1) at element v * lanes * U, unit by unit, the pair's 2 * lanes
    values of a unit together; an odd last vector unit by unit alone."""
    c_out, count = units.shape
    vectors = -(-c_out // lanes)
    padded = np.zeros((vectors * lanes, count), units.dtype)
    padded[:c_out] = units
    parts = []
    for v in range(0, vectors - 1, 2):
        pair = padded[v * lanes : (v + 2) * lanes].reshape(2, lanes, count)
        parts.append(pair.transpose(2, 0, 1).reshape(-1))
    if vectors % 2:
        parts.append(padded[(vectors - 1) * lanes :].T.reshape(-1))
    return _aligned(np.concatenate(parts))


def _pack_paired(
    units: np.ndarray, bias: np.ndarray, lanes: int, run_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """Weights (C_out <= lanes / 2, units in runs of ``run_len``) and bias for the paired
    tile: a run's unit pair j in one vector, output k's weights of units 2j, 2j + 1 in
    lanes 2k, 2k + 1 (of an odd run's last unit in lane 2k, lane 2k + 1 zero); the bias in
    the even lanes."""
    c_out, count = units.shape
    runs = count // run_len
    pairs = -(-run_len // 2)
    even = np.zeros((c_out, runs, 2 * pairs), units.dtype)
    even[:, :, :run_len] = units.reshape(c_out, runs, run_len)
    packed = np.zeros((runs, pairs, lanes), units.dtype)
    for e in range(2):
        packed[:, :, e : 2 * c_out : 2] = even[:, :, e::2].transpose(1, 2, 0)
    b = np.zeros(lanes, bias.dtype)
    b[0 : 2 * c_out : 2] = bias
    return _aligned(packed.reshape(-1)), _aligned(b)


def _padded(values: np.ndarray, lanes: int) -> np.ndarray:
    """``values`` zero-padded to whole vectors, aligned."""
    out = np.zeros(-(-len(values) // lanes) * lanes, values.dtype)
    out[: len(values)] = values
    return _aligned(out)


def _strides(nhwc: bool, c: int, h: int, w: int) -> tuple[int, int, int, int]:
    """Element strides (image, row, column, channel) of an (N, C, H, W) array's memory."""
    return (h * w * c, w * c, c, 1) if nhwc else (c * h * w, w, 1, h * w)


def _dense_plan(
    weight: np.ndarray, geometry: np.ndarray, lanes: int
) -> tuple[np.ndarray, np.ndarray]:
    """(weights as (C_out, units) in the runs' order, run offsets) of the dense kernel;
    sets geometry's run fields.

    NHWC memory holds a tap row's (kw, c_in) contiguous at dilation 1: a run per kh.
    Otherwise a run per tap over c_in, or, on NCHW memory with filters as wide as its
    channels (a stem: 3 channels, 3x3 or 7x7) or outputs in half a vector (paired: runs
    of contiguous elements), a run per (c_in, kh) over kw.
    """
    c_out, c_in, kh_n, kw_n = weight.shape
    g = geometry
    xs_row, xs_col, xs_chan = int(g[_XS_ROW]), int(g[_XS_COL]), int(g[_XS_CHAN])
    dh, dw = int(g[_DH]), int(g[_DW])
    nhwc = xs_chan == 1 and c_in > 1
    over_kw = kw_n >= c_in or (c_out <= lanes // 2 and dw * xs_col == 1)
    if not nhwc and kw_n > 1 and over_kw:  # units (c_in, kh, kw)
        units = weight.reshape(c_out, c_in * kh_n * kw_n)
        runs = [c * xs_chan + kh * dh * xs_row for c in range(c_in) for kh in range(kh_n)]
        g[_RUN_LEN], g[_RUN_STEP] = kw_n, dw * xs_col
    else:  # units (kh, kw, c_in)
        units = weight.transpose(0, 2, 3, 1).reshape(c_out, kh_n * kw_n * c_in)
        if nhwc and dw == 1:
            runs = [kh * dh * xs_row for kh in range(kh_n)]
            g[_RUN_LEN], g[_RUN_STEP] = kw_n * c_in, 1
        else:
            runs = [kh * dh * xs_row + kw * dw * xs_col for kh in range(kh_n) for kw in range(kw_n)]
            g[_RUN_LEN], g[_RUN_STEP] = c_in, xs_chan
    g[_RUNS] = len(runs)
    return units, np.array(runs, np.int64)


def _taps_inside(size: int, out: int, k: int, stride: int, pad: int, dilation: int) -> int:
    """The taps of a filter's k along one dimension, summed over the ``out`` outputs,
    that lie inside an input of ``size``."""
    starts = np.arange(out)[:, None] * stride - pad + np.arange(k)[None, :] * dilation
    return int(((starts >= 0) & (starts < size)).sum())


def _window_starts(oh: int, ow: int, row_step: int, col_step: int) -> np.ndarray:
    """The first element of each output pixel's window in what the dense kernel reads
    (relative to its image), row by row; the last repeated for 8 more and up to whole
    tiles of 8 (a tail tile, of an image or a band of rows, computes copies of pixels
    past its end, not stored)."""
    h, w = np.divmod(np.arange(-(-oh * ow // 8) * 8 + 8), ow)
    starts = np.minimum(h, oh - 1) * row_step + np.where(h < oh, w, ow - 1) * col_step
    return starts.astype(np.int64)


def _depthwise_weights(
    weight: np.ndarray, bias: np.ndarray, lanes: int, per_vector: int
) -> tuple[np.ndarray, np.ndarray]:
    """(packed weights, bias) of the depthwise kernel: channel vector by vector, its taps'
    vectors in order, zero-padded; with ``per_vector`` pixels a vector, the channels
    repeated that many times across one vector."""
    c, _, kh, kw = weight.shape
    taps = weight.reshape(c, kh * kw)
    if per_vector > 1:
        return _aligned(np.tile(taps.T, (1, per_vector)).reshape(-1)), _aligned(
            np.tile(bias, per_vector)
        )
    vectors = -(-c // lanes)
    packed = np.zeros((vectors * lanes, kh * kw), weight.dtype)
    packed[:c] = taps
    packed = packed.reshape(vectors, lanes, kh * kw).transpose(0, 2, 1)
    return _aligned(packed.reshape(-1)), _padded(bias, lanes)


def _dense_jobs(
    parallel: bool, input_bytes: int, weight_bytes: int, pixels: int, c_out: int, lanes: int
) -> tuple[int, int]:
    """(strips, groups) an image's dense convolution is split into: jobs of whole tiles of
    8 pixels by groups of output vector pairs.

    Serially, strips whose input (about :data:`STRIP_BYTES`) stays in cache while every
    block of output vectors reads it in turn. In parallel (the loop's threads each take an
    equal run of jobs), a number of jobs a multiple of the threads: by output channels where
    the weights outweigh the input (each thread then reads only its share of the weights:
    small late images), else by pixels.
    """
    tiles = -(-pixels // 8)
    strips = min(tiles, max(1, input_bytes // STRIP_BYTES))
    if not parallel:
        return strips, 1
    threads = get_num_threads()
    pairs = -(-c_out // lanes) // 2
    even = pairs % threads == 0 or pairs >= 4 * threads
    if (weight_bytes > input_bytes or tiles < threads) and pairs >= threads and even:
        return 1, threads
    if tiles < threads:
        return tiles, 1
    strips = max(strips, 4 * threads if tiles >= 16 * threads else threads)
    return min(tiles // threads, -(-strips // threads)) * threads, 1


def channels_last_conv_step(
    input: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: Any,
    out: Any,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    residual: Any = None,
) -> tuple[Any, tuple[Any, ...]] | None:
    """``(function, args)``: ``function(*args)`` writes
    ``clamp(conv2d(input, weight, bias, stride, padding, dilation, groups) + residual, low,
    high)`` into ``out``; or None where this module does not apply (see the module's
    docstring)."""
    from pyexecutorch.kernels.conv.conv import signature_or_none  # noqa: PLC0415

    arrays = (input, weight, out)
    if not all(isinstance(a, np.ndarray) for a in arrays) or input.ndim != 4 or out.ndim != 4:
        return None
    dt = input.dtype
    if dt not in FLOATS or weight.dtype != dt or out.dtype != dt or weight.flags.writeable:
        return None
    if bias is not None and not (
        isinstance(bias, np.ndarray) and bias.dtype == dt and not bias.flags.writeable
    ):
        return None
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups <= 0:
        return None
    groups = int(groups)
    if not (isinstance(low, numbers.Real) and isinstance(high, numbers.Real)):
        return None
    low, high = float(low), float(high)
    if math.isnan(low) or math.isnan(high) or not out.flags.writeable:
        return None
    nhwc_in, nhwc_out = channels_last(input), channels_last(out)
    if not (nhwc_in or input.flags.c_contiguous) or not (nhwc_out or out.flags.c_contiguous):
        return None
    if not (nhwc_in or nhwc_out):
        return None  # both NCHW: the existing steps
    sig = signature_or_none(input, weight, bias, stride, padding, dilation, False, (0, 0), groups)
    if sig is None:
        return None
    s, p, d, shape, _ = sig
    if tuple(shape) != out.shape or out.size == 0 or input.size == 0 or weight.size == 0:
        return None
    if np.shares_memory(input, out):
        return None
    if residual is not None:
        if not (
            isinstance(residual, np.ndarray)
            and residual.dtype == dt
            and residual.shape == out.shape
            and (channels_last(residual) if nhwc_out else residual.flags.c_contiguous)
        ):
            return None
        same = _data(residual) == _data(out) and residual.strides == out.strides
        if not same and np.shares_memory(residual, out):
            return None
    n, c_in, h, w = input.shape
    c_out, cg, kh, kw = weight.shape
    oh, ow = out.shape[2:]
    depthwise = groups == c_in == c_out and cg == 1 and groups > 1
    if groups != 1 and not depthwise:
        return None
    lanes = simd.lanes(dt)
    (sh, sw), (ph, pw) = s, p
    hp, wp = h + 2 * ph, w + 2 * pw
    x_flat = _flat(input, nhwc_in)
    out_flat = _flat(out, nhwc_out)
    # What the kernels write: out itself, or a channels-last buffer copied to NCHW out.
    target = out_flat if nhwc_out else _zeros(out.size, dt)
    res_flat = out_flat if residual is None else _flat(residual, nhwc_out)
    b = np.zeros(c_out, dt) if bias is None else np.asarray(bias)

    g = np.zeros(_GEOMETRY_SIZE, np.int64)
    g[_N], g[_H], g[_W], g[_CIN], g[_X_NHWC] = n, h, w, c_in, nhwc_in
    g[_OH], g[_OW], g[_COUT], g[_KH], g[_KW] = oh, ow, c_out, kh, kw
    g[_SH], g[_SW], g[_PH], g[_PW], g[_DH], g[_DW] = sh, sw, ph, pw, *d
    g[_HAS_RESIDUAL], g[_TO_PLANES], g[_PIXELS_PER_VECTOR] = residual is not None, not nhwc_out, 1
    scalars = np.array([low, high, -math.inf, math.inf], dt)
    macs = out.size * cg * kh * kw

    def pick(variants: tuple[Any, Any]) -> Any:
        least = DEPTHWISE_PARALLEL_MACS if depthwise else PARALLEL_MACS
        return variants[1] if macs >= least and get_num_threads() > 1 else variants[0]

    if depthwise:
        # (a few channels at stride 1: several pixels a vector)
        few = (kh, kw) == (3, 3) and sw == 1 and c_in < lanes and lanes % c_in == 0
        per_vector = lanes // c_in if few else 1
        g[_PIXELS_PER_VECTOR] = per_vector
        uneven = ph > 0 or pw > 0 or c_in % lanes != 0
        # (a 3x3 filter reads large images uncopied, through masked loads at the borders)
        limit = COPY_PIXELS_3X3_STRIDE_1 if s == (1, 1) else COPY_PIXELS_3X3
        small = (kh, kw) != (3, 3) or h * w <= limit
        g[_COPY] = 2 if not nhwc_in else int(few or (uneven and small))
        vectors = -(-c_in * per_vector // lanes)
        # Filters other than 3x3 on small images, mostly over padding, or at most 3
        # pixels wide (the 4-pixel groups would compute repeats): only their taps
        # inside the image (3x3 keeps its unrolled forms).
        inside = _taps_inside(h, oh, kh, sh, ph, d[0]) * _taps_inside(w, ow, kw, sw, pw, d[1])
        if (kh, kw) != (3, 3) and (inside < CLIPPED_SHARE * kh * kw * oh * ow or ow < 4):
            g[_COPY] = 2 if not nhwc_in else 0
            g[_PIXEL_MAJOR] = 2
        # On a copied image with several channel vectors, pixel by pixel over all vectors
        # rather than vector by vector with the weights held, whose setup costs as much as
        # ten pixels (us, one thread: 240 channels at 2x2 0.65 -> 0.40, 96 at 6x6 1.40 ->
        # 1.18, 48 at 16x16 5.3 -> 4.4; one vector of 16 at 32x32 5.0 -> 6.7, so not then).
        if g[_PIXEL_MAJOR] != 2:
            g[_PIXEL_MAJOR] = (
                (kh, kw) == (3, 3) and g[_COPY] != 0 and per_vector == 1 and vectors > 1
            )
        # Whole channel vectors, at least TILED_VECTORS, dilation 1, stride 1 or 2: in
        # place, pixel by pixel over the vectors, 4 pixels at a time (us, one thread: 512
        # channels at 14x14 45 -> 29, 256 at 28x28 79 -> 52, 64 at 112x112 stride 2 208 ->
        # 139; one vector of 16 at 112x112 49 -> 61, so not then).
        if (
            (kh, kw) == (3, 3)
            and nhwc_in
            and tuple(d) == (1, 1)
            and sw in (1, 2)
            and per_vector == 1
            and c_in % lanes == 0
            and vectors >= TILED_VECTORS
        ):
            g[_COPY], g[_PIXEL_MAJOR] = 0, 3
        g[_XS_IMAGE], g[_XS_ROW], g[_XS_COL], g[_XS_CHAN] = _strides(True, c_in, hp, wp)
        # (room after the padded image for a last vector's lanes past its channels)
        buffer = _zeros(n * hp * wp * c_in + lanes, dt) if g[_COPY] else x_flat
        wd, bd = _depthwise_weights(weight, b, lanes, per_vector)
        fn = pick(DEPTHWISE)
        # Bands of output rows whose input rows fit in L2 (each channel vector's job strides
        # over its lanes of every pixel of the band); one job a band serially, in parallel
        # the vectors split into groups, at least four jobs a thread.
        band_rows = max(1, BAND_BYTES // (w * c_in * dt.itemsize * sh))
        g[_BANDS] = bands = min(oh, -(-oh // band_rows))
        g[_GROUPS] = 1
        if fn is DEPTHWISE[1]:
            jobs = 4 * get_num_threads()
            g[_GROUPS] = groups = min(vectors, -(-jobs // (n * bands)))
            g[_BANDS] = min(oh, max(bands, -(-jobs // (n * groups))))
        return fn, (x_flat, wd, bd, g, scalars, res_flat, target, out_flat, buffer)

    def packed(units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # outputs in half a vector, runs of contiguous elements: paired
        g[_PAIRED] = c_out <= lanes // 2 and g[_RUN_STEP] == 1
        if g[_PAIRED]:
            return _pack_paired(units, b, lanes, int(g[_RUN_LEN]))
        return _pack_vectors(units, lanes), _padded(b, lanes)

    # An NCHW input of a few channels and a filter wider than one (a stem over the model's
    # input) is read from an NHWC copy: runs of (kw, c_in) contiguous, a few per window.
    stem = not nhwc_in and c_in <= 4 and kw > 1 and d[1] == 1
    g[_COPY] = 2 if stem else int(ph > 0 or pw > 0)
    g[_XS_IMAGE], g[_XS_ROW], g[_XS_COL], g[_XS_CHAN] = _strides(nhwc_in or stem, c_in, hp, wp)
    buffer = _zeros(n * c_in * hp * wp, dt) if g[_COPY] else x_flat
    units, runs = _dense_plan(weight, g, lanes)
    wm, bm = packed(units)
    g[_STRIPS], g[_GROUPS] = _dense_jobs(
        pick(DENSE) is DENSE[1], c_in * h * w * dt.itemsize, weight.nbytes, oh * ow, c_out, lanes
    )
    # A copied input larger than L1 is copied band by band, each band of output pixels
    # (whole tiles) copying the input rows it reads just before.
    row_bytes = int(g[_XS_ROW]) * dt.itemsize * (c_in if not (nhwc_in or stem) else 1)
    band = max(1, (BAND_COPY_BYTES // row_bytes - kh) // sh)
    if g[_COPY] and band < oh and pick(DENSE) is DENSE[0]:
        g[_BANDED], g[_STRIPS] = 1, -(-oh * ow // max(8, band * ow // 8 * 8))
    windows = _window_starts(oh, ow, sh * int(g[_XS_ROW]), sw * int(g[_XS_COL]))
    args = (x_flat, wm, bm, runs, windows, g, scalars, res_flat, target, out_flat, buffer)
    return pick(DENSE), args
