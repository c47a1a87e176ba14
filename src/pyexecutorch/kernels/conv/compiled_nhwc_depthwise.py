"""Depthwise channels-last 2-D convolutions with explicit SIMD vectors (compiled tier).

:func:`_depthwise`: vectors over channels; jobs of (image, band of output rows, group of
channel vectors). A 3x3 filter at dilation 1 and stride 1 or 2 over channels that fill
at least :data:`TILED_VECTORS` vectors reads in place, pixel by pixel over groups of
vectors whose reads stay in L1 (:data:`TILE_BYTES`; contiguous: a whole pixel's stride
between loads would crowd a few cache sets), 4 output pixels inside the image at a time,
each vector's nine weights loaded once for the four and each input column once for the
pixels sharing it; border pixels one at a time
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

The step that calls it is planned in :mod:`pyexecutorch.kernels.conv.compiled_nhwc`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pyexecutorch.jit import simd, symbol_calls
from pyexecutorch.jit.variants import serial_and_parallel
from pyexecutorch.kernels.conv import geometry
from pyexecutorch.kernels.conv.compiled_nhwc_common import (  # noqa: PLC2701
    _BANDS,
    _CIN,
    _COPY,
    _DH,
    _DW,
    _GROUPS,
    _H,
    _HAS_RESIDUAL,
    _HIGH,
    _KH,
    _KW,
    _LOW,
    _N,
    _NO_HIGH,
    _NO_LOW,
    _OH,
    _OW,
    _PH,
    _PIXEL_MAJOR,
    _PIXELS_PER_VECTOR,
    _PW,
    _SH,
    _SW,
    _TO_PLANES,
    _W,
    _always,
    _div,
    _epilogue,
    _finish,
    _finish_whole,
    _inline,
    _pad_input,
    _part,
    _store_pixels4,
    _to_planes,
)

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


# (_always: a tile called as a function set up its dozens of addresses again at every
# call; us, one thread: 384 channels at 14x14 35 -> 29, 576 at 14x14 stride 2 31 -> 27)
@_always
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


# [k0, k1): the taps k < count whose position start + k * step lies in [0, size)
_tap_range = _inline(geometry.span_inside)


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
        summed = _epilogue(g)
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


@njit(cache=True, error_model="numpy")  # (cached: called by symbol, below)
def _depthwise_jobs(xp, wp, bp, op, rp, g, low, high, has_residual, job):  # noqa: ANN001, ANN202
    _depthwise_job(xp, wp, bp, op, rp, g, low, high, has_residual, job)


# A job is called, not inlined (see compiled_nhwc_dense._DENSE_JOB).
_DEPTHWISE_JOBS = symbol_calls.by_symbol(symbol_calls.callee_of(_depthwise_jobs))


def _depthwise(x, wp, bias, geometry, scalars, residual, out, planes, buffer):  # noqa: ANN001, ANN201
    """out (N, OH, OW, C) = depthwise conv2d(x, W) + bias, + residual, clamped. With _COPY,
    x (NHWC, or NCHW for _COPY 2) is first copied into the zero-padded NHWC ``buffer``;
    with _TO_PLANES, ``out`` is a buffer for the NCHW ``planes``."""
    g = geometry
    to_planes = g[_TO_PLANES] != 0
    has_residual = _epilogue(simd.pointer(g))  # (by pointer, as the jobs ask)
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
        _DEPTHWISE_JOBS(xp, wpp, bp, op, rp, gp, low, high, has_residual, np.int64(job))
    if to_planes:
        pixels = g[_OH] * g[_OW]
        _to_planes(out, planes, residual, g[_HAS_RESIDUAL] != 0, lo, hi, g[_N], pixels, g[_CIN])
    return out


DEPTHWISE = serial_and_parallel(_depthwise, "nhwc_depthwise")
