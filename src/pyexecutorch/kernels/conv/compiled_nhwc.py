"""Channels-last (NHWC) 2-D convolutions written with explicit SIMD vectors (compiled tier).

The step the runtime's layout pass calls::

    channels_last_conv_step(
        input, weight, bias, stride, padding, dilation, groups, out,
        *, low=-math.inf, high=math.inf, residual=None,
    ) -> tuple[dispatcher, tuple] | None

returns ``(function, args)``; ``function(*args)`` computes, into ``out``,
``clamp(conv2d(input, weight, bias, stride, padding, dilation, groups) + residual, low, high)``
(the residual term only when given; the clamp as torch.clamp's: NaN stays NaN, an infinite
bound clamps nothing). ``function`` is a member of :data:`POINTWISE`, :data:`DENSE` or
:data:`DEPTHWISE` (a serial and a parallel compilation each, importable by name,
``cache=True``, generic in shape); ``args`` are arrays (the weights packed here, flat views
of ``input``, ``out`` and ``residual``, buffers) and nothing else. It is None, and the
existing steps apply, unless:

* ``input`` and ``out`` are 4-D float32/float64 arrays of logical shape (N, C, H, W), each
  C-contiguous (NCHW memory) or channels-last (:func:`compiled_arrays.channels_last`), at
  least one of them channels-last;
* ``weight`` (C_out, C_in/groups, KH, KW) and ``bias`` (C_out,) or None are constants (not
  writeable) of the same dtype: they are packed at load, never in the hot loop;
* ``groups`` is 1 (any kernel size, stride, padding, dilation) or depthwise
  (groups == C_in == C_out);
* ``residual`` is None or an array of ``out``'s shape, dtype and memory layout; it may be
  ``out``'s own memory (same data, same strides: each element's residual is read before
  its store). ``input`` may not overlap ``out``, nor a residual overlap it otherwise; no
  bound is NaN.

The kernels (pointers, not arrays, inside: see :func:`compiled_simd.pointer`):

* :func:`_pointwise` (1x1, stride 1, no padding: a product pixels x C_in @ C_in x C_out)
  and :func:`_dense` (any other dense convolution, directly: no im2col) share one register
  tile, 4 output pixels x 2 vectors of output channels (8 pixels x 1 vector for an odd last
  vector): ``fma(splat(x), w_vec, acc)`` over taps and input channels, starting from the
  bias; the residual is added and the clamp applied in registers before the store (masked
  for the channel tail). Tiles are 8 consecutive output pixels (across rows: small images
  fill them); a tail tile repeats its last pixel and does not store the repeats. Weights
  are packed per output vector (pair) tap-unit by tap-unit, zero-padded to whole vectors.
  The dense kernel runs a tile whose windows all lie inside the image as contiguous runs
  (a whole tap row's (kw, c_in) at once on an NHWC input) and any other tap by tap: a tap
  inside for all its pixels unchecked, else with padding read as zero (a select). Input
  scalars are read through strides, so the input may be NCHW (a stem reading the model's
  input).
* :func:`_depthwise`: vectors over channels, an output row a job; a 3x3 filter's nine
  weight vectors held in registers, interior pixels of full channel vectors read
  unmasked, the others (border pixels, the channel tail) through masked loads in which an
  absent tap reads nothing (zero); other filters four pixels at a time sharing each
  tap's weight load. An NCHW input is first copied channels-last into a buffer made at
  load.

An NCHW ``out`` is computed channels-last into a buffer made at load and copied over with
the residual and clamp applied on the way (a rare case: a layer before a flatten).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import get_num_threads, njit, prange

from pyexecutorch.kernels import compiled_simd as simd
from pyexecutorch.kernels.compiled_arrays import FLOATS, channels_last
from pyexecutorch.runtime.compiled import serial_and_parallel

_inline = njit(inline="always", error_model="numpy")

# Layout of the int64 ``geometry`` argument (see _geometry).
(
    _N,
    _H,
    _W,
    _CIN,
    _XS_IMAGE,  # input element strides: per image, row, column, channel
    _XS_ROW,
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
    _RUNS,  # the dense kernel's interior: runs of _RUN_LEN units, _RUN_STEP elements apart
    _RUN_LEN,
    _RUN_STEP,
    _TAP_UNITS,  # weight unit of (tap, c_in): tap * _TAP_UNITS + c_in * _CHAN_UNITS
    _CHAN_UNITS,
    _HAS_RESIDUAL,
    _TO_PLANES,  # out is a channels-last buffer, copied to the NCHW ``planes``
    _FROM_PLANES,  # (depthwise) the NCHW ``source`` is first copied to the buffer x
    _GEOMETRY_SIZE,
) = range(28)

# The dtype's ``scalars`` argument: the clamp's bounds, then -inf, inf and 0.
_LOW, _HIGH, _NO_LOW, _NO_HIGH, _ZERO = range(5)


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
def _store4(op, o0, o1, o2, o3, stored, count, s0, s1, s2, s3, rp, has_residual, low, high):  # noqa: ANN001, ANN202, E501
    """The first ``stored`` of 4 pixels' vectors (``count`` lanes) at op[o_m:]."""
    n0, n1 = count if stored > 0 else 0, count if stored > 1 else 0
    n2, n3 = count if stored > 2 else 0, count if stored > 3 else 0
    _finish(op, o0, s0, n0, rp, has_residual, low, high)
    _finish(op, o1, s1, n1, rp, has_residual, low, high)
    _finish(op, o2, s2, n2, rp, has_residual, low, high)
    _finish(op, o3, s3, n3, rp, has_residual, low, high)


# ---------------------------------------------------------------------------
# The register tiles' inner products: ``count`` steps; pixel m's scalar at xp[i_m],
# advancing by ``xstep``; the weight vectors at wp[w] (and wp[w + L]), by ``wstep``. In
# the checked forms a pixel whose flag k_m is off reads zero (its i_m must still be a
# valid index).


@_inline
def _dot4x2(xp, i0, i1, i2, i3, xstep, wp, w, wstep, count, s0, t0, s1, t1, s2, t2, s3, t3):  # noqa: ANN001, ANN202, E501
    lanes = simd.lanes_of(wp)
    for _ in range(count):
        wa = simd.load(wp, w)
        wb = simd.load(wp, w + lanes)
        v = simd.splat(xp[i0])
        s0 = simd.fma(v, wa, s0)
        t0 = simd.fma(v, wb, t0)
        v = simd.splat(xp[i1])
        s1 = simd.fma(v, wa, s1)
        t1 = simd.fma(v, wb, t1)
        v = simd.splat(xp[i2])
        s2 = simd.fma(v, wa, s2)
        t2 = simd.fma(v, wb, t2)
        v = simd.splat(xp[i3])
        s3 = simd.fma(v, wa, s3)
        t3 = simd.fma(v, wb, t3)
        i0 += xstep
        i1 += xstep
        i2 += xstep
        i3 += xstep
        w += wstep
    return s0, t0, s1, t1, s2, t2, s3, t3


@_inline
def _dot4x2_checked(xp, i0, i1, i2, i3, k0, k1, k2, k3, xstep, wp, w, wstep, count, zero,  # noqa: ANN001, ANN202
                    s0, t0, s1, t1, s2, t2, s3, t3):  # fmt: skip
    lanes = simd.lanes_of(wp)
    for _ in range(count):
        wa = simd.load(wp, w)
        wb = simd.load(wp, w + lanes)
        e0, e1, e2, e3 = xp[i0], xp[i1], xp[i2], xp[i3]
        v = simd.splat(e0 if k0 else zero)
        s0 = simd.fma(v, wa, s0)
        t0 = simd.fma(v, wb, t0)
        v = simd.splat(e1 if k1 else zero)
        s1 = simd.fma(v, wa, s1)
        t1 = simd.fma(v, wb, t1)
        v = simd.splat(e2 if k2 else zero)
        s2 = simd.fma(v, wa, s2)
        t2 = simd.fma(v, wb, t2)
        v = simd.splat(e3 if k3 else zero)
        s3 = simd.fma(v, wa, s3)
        t3 = simd.fma(v, wb, t3)
        i0 += xstep
        i1 += xstep
        i2 += xstep
        i3 += xstep
        w += wstep
    return s0, t0, s1, t1, s2, t2, s3, t3


@_inline
def _dot8x1(xp, i0, i1, i2, i3, i4, i5, i6, i7, xstep, wp, w, wstep, count,  # noqa: ANN001, ANN202
            s0, s1, s2, s3, s4, s5, s6, s7):  # fmt: skip
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
        i0 += xstep
        i1 += xstep
        i2 += xstep
        i3 += xstep
        i4 += xstep
        i5 += xstep
        i6 += xstep
        i7 += xstep
        w += wstep
    return s0, s1, s2, s3, s4, s5, s6, s7


@_inline
def _dot8x1_checked(xp, i0, i1, i2, i3, i4, i5, i6, i7, flags,  # noqa: ANN001, ANN202
                    xstep, wp, w, wstep, count, zero, s0, s1, s2, s3, s4, s5, s6, s7):  # fmt: skip
    # (pixel m's flag is bit m: Python passes over 30 arguments as one tuple, which numba
    # does not take where they are computed with branches)
    k0, k1, k2, k3 = flags & 1 != 0, flags & 2 != 0, flags & 4 != 0, flags & 8 != 0
    k4, k5, k6, k7 = flags & 16 != 0, flags & 32 != 0, flags & 64 != 0, flags & 128 != 0
    for _ in range(count):
        wa = simd.load(wp, w)
        e0, e1, e2, e3 = xp[i0], xp[i1], xp[i2], xp[i3]
        e4, e5, e6, e7 = xp[i4], xp[i5], xp[i6], xp[i7]
        s0 = simd.fma(simd.splat(e0 if k0 else zero), wa, s0)
        s1 = simd.fma(simd.splat(e1 if k1 else zero), wa, s1)
        s2 = simd.fma(simd.splat(e2 if k2 else zero), wa, s2)
        s3 = simd.fma(simd.splat(e3 if k3 else zero), wa, s3)
        s4 = simd.fma(simd.splat(e4 if k4 else zero), wa, s4)
        s5 = simd.fma(simd.splat(e5 if k5 else zero), wa, s5)
        s6 = simd.fma(simd.splat(e6 if k6 else zero), wa, s6)
        s7 = simd.fma(simd.splat(e7 if k7 else zero), wa, s7)
        i0 += xstep
        i1 += xstep
        i2 += xstep
        i3 += xstep
        i4 += xstep
        i5 += xstep
        i6 += xstep
        i7 += xstep
        w += wstep
    return s0, s1, s2, s3, s4, s5, s6, s7


# ---------------------------------------------------------------------------
# Layout copies for the rare NCHW side of a channels-last convolution. Both loop over
# pixels outside and channels inside, so that the NCHW side is accessed at a stride of one
# plane, never of the channel count (a large power of two maps every access to one set).


@_inline
def _to_planes(scratch, planes, rp, has_residual, lo, hi, n_batch, pixels, c_out):  # noqa: ANN001, ANN202
    """planes (N, C, P) = clamp(scratch (N, P, C) + residual (N, C, P), lo, hi), scalar by
    scalar (each residual element read before its store: it may be planes itself)."""
    for job in prange(n_batch * pixels):
        n = job // pixels
        p = job - n * pixels
        src = job * c_out
        dst = n * c_out * pixels + p
        for c in range(c_out):
            v = scratch[src + c]
            if has_residual:
                v += rp[dst]
            if v < lo:  # (comparisons false for NaN: it stays)
                v = lo
            if v > hi:
                v = hi
            planes[dst] = v
            dst += pixels


@_inline
def _from_planes(source, xp, n_batch, pixels, channels):  # noqa: ANN001, ANN202
    """xp (N, P, C) = source (N, C, P)."""
    for job in prange(n_batch * pixels):
        n = job // pixels
        p = job - n * pixels
        src = n * channels * pixels + p
        dst = job * channels
        for c in range(channels):
            xp[dst + c] = source[src]
            src += pixels


# ---------------------------------------------------------------------------
# 1x1, stride 1, no padding.


def _pointwise(x, wp, bias, geometry, scalars, residual, out, planes):  # noqa: ANN001, ANN201
    """out (N, P, C_out) = x (N, P, C_in) @ W + bias, + residual, clamped; x read through its
    strides (pixel _XS_COL, channel _XS_CHAN). With _TO_PLANES, ``out`` is a buffer for
    the NCHW ``planes``."""
    g = geometry
    n_batch, c_in, c_out = g[_N], g[_CIN], g[_COUT]
    pixels = g[_OH] * g[_OW]
    xs_image, xs_pixel, xs_chan = g[_XS_IMAGE], g[_XS_COL], g[_XS_CHAN]
    to_planes = g[_TO_PLANES] != 0
    has_residual = g[_HAS_RESIDUAL] != 0 and not to_planes
    lo, hi = scalars[_LOW], scalars[_HIGH]
    low = simd.splat(scalars[_NO_LOW] if to_planes else lo)
    high = simd.splat(scalars[_NO_HIGH] if to_planes else hi)
    xp, wpp, bp = simd.pointer(x), simd.pointer(wp), simd.pointer(bias)
    op, rp = simd.pointer(out), simd.pointer(residual)
    lanes = simd.lanes_of(out)
    vectors = (c_out + lanes - 1) // lanes
    tiles = (pixels + 7) // 8
    last = pixels - 1
    for job in prange(n_batch * tiles):
        n = job // tiles
        p0 = (job - n * tiles) * 8
        stored = min(8, pixels - p0)
        # the tile's pixels (a tail repeats the last one, computed but not stored)
        q0, q1, q2, q3 = p0, min(p0 + 1, last), min(p0 + 2, last), min(p0 + 3, last)
        q4, q5, q6, q7 = min(p0 + 4, last), min(p0 + 5, last), min(p0 + 6, last), min(p0 + 7, last)
        xb = n * xs_image
        a0, a1, a2, a3 = xb + q0 * xs_pixel, xb + q1 * xs_pixel, xb + q2 * xs_pixel, xb + q3 * xs_pixel
        a4, a5, a6, a7 = xb + q4 * xs_pixel, xb + q5 * xs_pixel, xb + q6 * xs_pixel, xb + q7 * xs_pixel
        ob = n * pixels * c_out
        o0, o1, o2, o3 = ob + q0 * c_out, ob + q1 * c_out, ob + q2 * c_out, ob + q3 * c_out
        o4, o5, o6, o7 = ob + q4 * c_out, ob + q5 * c_out, ob + q6 * c_out, ob + q7 * c_out
        for v in range(0, vectors - 1, 2):
            c0 = v * lanes
            c1 = c0 + lanes
            ba, bb = simd.load(bp, c0), simd.load(bp, c1)
            na, nb = min(lanes, c_out - c0), min(lanes, c_out - c1)
            w = c0 * c_in
            s0, t0, s1, t1, s2, t2, s3, t3 = _dot4x2(
                xp, a0, a1, a2, a3, xs_chan, wpp, w, 2 * lanes, c_in, ba, bb, ba, bb, ba, bb, ba, bb
            )
            _store4(op, o0 + c0, o1 + c0, o2 + c0, o3 + c0, stored, na, s0, s1, s2, s3, rp, has_residual, low, high)  # fmt: skip  # noqa: E501
            _store4(op, o0 + c1, o1 + c1, o2 + c1, o3 + c1, stored, nb, t0, t1, t2, t3, rp, has_residual, low, high)  # fmt: skip  # noqa: E501
            s0, t0, s1, t1, s2, t2, s3, t3 = _dot4x2(
                xp, a4, a5, a6, a7, xs_chan, wpp, w, 2 * lanes, c_in, ba, bb, ba, bb, ba, bb, ba, bb
            )
            _store4(op, o4 + c0, o5 + c0, o6 + c0, o7 + c0, stored - 4, na, s0, s1, s2, s3, rp, has_residual, low, high)  # fmt: skip  # noqa: E501
            _store4(op, o4 + c1, o5 + c1, o6 + c1, o7 + c1, stored - 4, nb, t0, t1, t2, t3, rp, has_residual, low, high)  # fmt: skip  # noqa: E501
        for v in range(vectors - vectors % 2, vectors):  # an odd last vector
            c0 = v * lanes
            ba = simd.load(bp, c0)
            na = min(lanes, c_out - c0)
            s0, s1, s2, s3, s4, s5, s6, s7 = _dot8x1(
                xp, a0, a1, a2, a3, a4, a5, a6, a7, xs_chan, wpp, c0 * c_in, lanes, c_in,
                ba, ba, ba, ba, ba, ba, ba, ba,
            )  # fmt: skip
            _store4(op, o0 + c0, o1 + c0, o2 + c0, o3 + c0, stored, na, s0, s1, s2, s3, rp, has_residual, low, high)  # fmt: skip  # noqa: E501
            _store4(op, o4 + c0, o5 + c0, o6 + c0, o7 + c0, stored - 4, na, s4, s5, s6, s7, rp, has_residual, low, high)  # fmt: skip  # noqa: E501
    if to_planes:
        _to_planes(out, planes, residual, g[_HAS_RESIDUAL] != 0, lo, hi, n_batch, pixels, c_out)
    return out


POINTWISE = serial_and_parallel(_pointwise, "nhwc_pointwise")


# ---------------------------------------------------------------------------
# Any dense convolution.


@_inline
def _next_pixel(oh, ow, out_w, advance):  # noqa: ANN001, ANN202
    """(oh, ow) of the next output pixel in row-major order, or the same when not advancing."""
    if not advance:
        return oh, ow
    if ow + 1 == out_w:
        return oh + 1, 0
    return oh, ow + 1


@_inline
def _inside(y, z, reach_h, reach_w, height, width):  # noqa: ANN001, ANN202
    """Whether the window at input row y, column z lies inside the image."""
    return y >= 0 and y + reach_h < height and z >= 0 and z + reach_w < width


@_inline
def _tile4x2(xp, wp, wv, runs, g, zero, y0, y1, y2, y3, z0, z1, z2, z3, a0, a1, a2, a3, inside,  # noqa: ANN001, ANN202, E501
             ba, bb):  # fmt: skip
    """A 4 pixel x 2 vector tile's sums: pixel m's window at input row y_m, column z_m,
    element a_m; the pair's weights from wp[wv]."""
    lanes = simd.lanes_of(wp)
    pair = 2 * lanes
    s0, t0, s1, t1, s2, t2, s3, t3 = ba, bb, ba, bb, ba, bb, ba, bb
    if inside:
        run_len, run_step = g[_RUN_LEN], g[_RUN_STEP]
        for r in range(g[_RUNS]):
            off = runs[r]
            s0, t0, s1, t1, s2, t2, s3, t3 = _dot4x2(
                xp, a0 + off, a1 + off, a2 + off, a3 + off, run_step,
                wp, wv + r * run_len * pair, pair, run_len, s0, t0, s1, t1, s2, t2, s3, t3,
            )  # fmt: skip
        return s0, t0, s1, t1, s2, t2, s3, t3
    height, width, c_in = g[_H], g[_W], g[_CIN]
    xs_row, xs_col, xs_chan = g[_XS_ROW], g[_XS_COL], g[_XS_CHAN]
    kw_n, dh, dw = g[_KW], g[_DH], g[_DW]
    tap_units, wstep = g[_TAP_UNITS] * pair, g[_CHAN_UNITS] * pair
    for kh in range(g[_KH]):
        dy = kh * dh
        r0, r1 = 0 <= y0 + dy < height, 0 <= y1 + dy < height
        r2, r3 = 0 <= y2 + dy < height, 0 <= y3 + dy < height
        for kw in range(kw_n):
            dx = kw * dw
            k0, k1 = r0 and 0 <= z0 + dx < width, r1 and 0 <= z1 + dx < width
            k2, k3 = r2 and 0 <= z2 + dx < width, r3 and 0 <= z3 + dx < width
            w = wv + (kh * kw_n + kw) * tap_units
            off = dy * xs_row + dx * xs_col
            if k0 and k1 and k2 and k3:
                s0, t0, s1, t1, s2, t2, s3, t3 = _dot4x2(
                    xp, a0 + off, a1 + off, a2 + off, a3 + off, xs_chan,
                    wp, w, wstep, c_in, s0, t0, s1, t1, s2, t2, s3, t3,
                )  # fmt: skip
            elif k0 or k1 or k2 or k3:
                i0, i1 = a0 + off if k0 else 0, a1 + off if k1 else 0
                i2, i3 = a2 + off if k2 else 0, a3 + off if k3 else 0
                s0, t0, s1, t1, s2, t2, s3, t3 = _dot4x2_checked(
                    xp, i0, i1, i2, i3, k0, k1, k2, k3, xs_chan,
                    wp, w, wstep, c_in, zero, s0, t0, s1, t1, s2, t2, s3, t3,
                )  # fmt: skip
    return s0, t0, s1, t1, s2, t2, s3, t3


@_inline
def _tile8x1(xp, wp, wv, runs, g, zero, y0, y1, y2, y3, y4, y5, y6, y7,  # noqa: ANN001, ANN202
             z0, z1, z2, z3, z4, z5, z6, z7, xb, inside, ba):  # fmt: skip
    """An 8 pixel x 1 vector tile's sums (as _tile4x2; the image at element xb)."""
    lanes = simd.lanes_of(wp)
    xs_row, xs_col = g[_XS_ROW], g[_XS_COL]
    a0, a1 = xb + y0 * xs_row + z0 * xs_col, xb + y1 * xs_row + z1 * xs_col
    a2, a3 = xb + y2 * xs_row + z2 * xs_col, xb + y3 * xs_row + z3 * xs_col
    a4, a5 = xb + y4 * xs_row + z4 * xs_col, xb + y5 * xs_row + z5 * xs_col
    a6, a7 = xb + y6 * xs_row + z6 * xs_col, xb + y7 * xs_row + z7 * xs_col
    s0, s1, s2, s3, s4, s5, s6, s7 = ba, ba, ba, ba, ba, ba, ba, ba
    if inside:
        run_len, run_step = g[_RUN_LEN], g[_RUN_STEP]
        for r in range(g[_RUNS]):
            off = runs[r]
            s0, s1, s2, s3, s4, s5, s6, s7 = _dot8x1(
                xp, a0 + off, a1 + off, a2 + off, a3 + off, a4 + off, a5 + off, a6 + off,
                a7 + off, run_step, wp, wv + r * run_len * lanes, lanes, run_len,
                s0, s1, s2, s3, s4, s5, s6, s7,
            )  # fmt: skip
        return s0, s1, s2, s3, s4, s5, s6, s7
    height, width, c_in = g[_H], g[_W], g[_CIN]
    xs_row, xs_col, xs_chan = g[_XS_ROW], g[_XS_COL], g[_XS_CHAN]
    kw_n, dh, dw = g[_KW], g[_DH], g[_DW]
    tap_units, wstep = g[_TAP_UNITS] * lanes, g[_CHAN_UNITS] * lanes
    for kh in range(g[_KH]):
        dy = kh * dh
        r0, r1 = 0 <= y0 + dy < height, 0 <= y1 + dy < height
        r2, r3 = 0 <= y2 + dy < height, 0 <= y3 + dy < height
        r4, r5 = 0 <= y4 + dy < height, 0 <= y5 + dy < height
        r6, r7 = 0 <= y6 + dy < height, 0 <= y7 + dy < height
        for kw in range(kw_n):
            dx = kw * dw
            k0, k1 = r0 and 0 <= z0 + dx < width, r1 and 0 <= z1 + dx < width
            k2, k3 = r2 and 0 <= z2 + dx < width, r3 and 0 <= z3 + dx < width
            k4, k5 = r4 and 0 <= z4 + dx < width, r5 and 0 <= z5 + dx < width
            k6, k7 = r6 and 0 <= z6 + dx < width, r7 and 0 <= z7 + dx < width
            w = wv + (kh * kw_n + kw) * tap_units
            off = dy * xs_row + dx * xs_col
            if k0 and k1 and k2 and k3 and k4 and k5 and k6 and k7:
                s0, s1, s2, s3, s4, s5, s6, s7 = _dot8x1(
                    xp, a0 + off, a1 + off, a2 + off, a3 + off, a4 + off, a5 + off, a6 + off,
                    a7 + off, xs_chan, wp, w, wstep, c_in, s0, s1, s2, s3, s4, s5, s6, s7,
                )  # fmt: skip
            elif k0 or k1 or k2 or k3 or k4 or k5 or k6 or k7:
                i0, i1 = a0 + off if k0 else 0, a1 + off if k1 else 0
                i2, i3 = a2 + off if k2 else 0, a3 + off if k3 else 0
                i4, i5 = a4 + off if k4 else 0, a5 + off if k5 else 0
                i6, i7 = a6 + off if k6 else 0, a7 + off if k7 else 0
                flags = k0 + 2 * k1 + 4 * k2 + 8 * k3 + 16 * k4 + 32 * k5 + 64 * k6 + 128 * k7
                s0, s1, s2, s3, s4, s5, s6, s7 = _dot8x1_checked(
                    xp, i0, i1, i2, i3, i4, i5, i6, i7, flags, xs_chan, wp, w, wstep, c_in, zero,
                    s0, s1, s2, s3, s4, s5, s6, s7,
                )  # fmt: skip
    return s0, s1, s2, s3, s4, s5, s6, s7


def _dense(x, wp, bias, runs, geometry, scalars, residual, out, planes):  # noqa: ANN001, ANN201
    """out (N, OH, OW, C_out) = conv2d(x, W) + bias, + residual, clamped: a direct
    convolution over tiles of 8 output pixels; x read through its strides. With
    _TO_PLANES, ``out`` is a buffer for the NCHW ``planes``."""
    g = geometry
    n_batch, height, width = g[_N], g[_H], g[_W]
    out_h, out_w, c_out = g[_OH], g[_OW], g[_COUT]
    sh, sw, ph, pw = g[_SH], g[_SW], g[_PH], g[_PW]
    reach_h, reach_w = (g[_KH] - 1) * g[_DH], (g[_KW] - 1) * g[_DW]
    xs_image, xs_row, xs_col = g[_XS_IMAGE], g[_XS_ROW], g[_XS_COL]
    units = g[_KH] * g[_KW] * g[_CIN]
    to_planes = g[_TO_PLANES] != 0
    has_residual = g[_HAS_RESIDUAL] != 0 and not to_planes
    lo, hi = scalars[_LOW], scalars[_HIGH]
    low = simd.splat(scalars[_NO_LOW] if to_planes else lo)
    high = simd.splat(scalars[_NO_HIGH] if to_planes else hi)
    zero = scalars[_ZERO]
    xp, wpp, bp = simd.pointer(x), simd.pointer(wp), simd.pointer(bias)
    op, rp = simd.pointer(out), simd.pointer(residual)
    gp, runp = simd.pointer(geometry), simd.pointer(runs)
    lanes = simd.lanes_of(out)
    vectors = (c_out + lanes - 1) // lanes
    pixels = out_h * out_w
    tiles = (pixels + 7) // 8
    last = pixels - 1
    for job in prange(n_batch * tiles):
        n = job // tiles
        p0 = (job - n * tiles) * 8
        stored = min(8, pixels - p0)
        q0, q1, q2, q3 = p0, min(p0 + 1, last), min(p0 + 2, last), min(p0 + 3, last)
        q4, q5, q6, q7 = min(p0 + 4, last), min(p0 + 5, last), min(p0 + 6, last), min(p0 + 7, last)
        h0 = p0 // out_w
        w0 = p0 - h0 * out_w
        h1, w1 = _next_pixel(h0, w0, out_w, q1 > q0)
        h2, w2 = _next_pixel(h1, w1, out_w, q2 > q1)
        h3, w3 = _next_pixel(h2, w2, out_w, q3 > q2)
        h4, w4 = _next_pixel(h3, w3, out_w, q4 > q3)
        h5, w5 = _next_pixel(h4, w4, out_w, q5 > q4)
        h6, w6 = _next_pixel(h5, w5, out_w, q6 > q5)
        h7, w7 = _next_pixel(h6, w6, out_w, q7 > q6)
        # each pixel's window: its top-left input row y, column z, element a
        y0, y1, y2, y3 = h0 * sh - ph, h1 * sh - ph, h2 * sh - ph, h3 * sh - ph
        y4, y5, y6, y7 = h4 * sh - ph, h5 * sh - ph, h6 * sh - ph, h7 * sh - ph
        z0, z1, z2, z3 = w0 * sw - pw, w1 * sw - pw, w2 * sw - pw, w3 * sw - pw
        z4, z5, z6, z7 = w4 * sw - pw, w5 * sw - pw, w6 * sw - pw, w7 * sw - pw
        xb = n * xs_image
        a0, a1 = xb + y0 * xs_row + z0 * xs_col, xb + y1 * xs_row + z1 * xs_col
        a2, a3 = xb + y2 * xs_row + z2 * xs_col, xb + y3 * xs_row + z3 * xs_col
        a4, a5 = xb + y4 * xs_row + z4 * xs_col, xb + y5 * xs_row + z5 * xs_col
        a6, a7 = xb + y6 * xs_row + z6 * xs_col, xb + y7 * xs_row + z7 * xs_col
        inside_a = (
            _inside(y0, z0, reach_h, reach_w, height, width)
            and _inside(y1, z1, reach_h, reach_w, height, width)
            and _inside(y2, z2, reach_h, reach_w, height, width)
            and _inside(y3, z3, reach_h, reach_w, height, width)
        )
        inside_b = (
            _inside(y4, z4, reach_h, reach_w, height, width)
            and _inside(y5, z5, reach_h, reach_w, height, width)
            and _inside(y6, z6, reach_h, reach_w, height, width)
            and _inside(y7, z7, reach_h, reach_w, height, width)
        )
        inside = inside_a and inside_b
        ob = n * pixels * c_out
        o0, o1, o2, o3 = ob + q0 * c_out, ob + q1 * c_out, ob + q2 * c_out, ob + q3 * c_out
        o4, o5, o6, o7 = ob + q4 * c_out, ob + q5 * c_out, ob + q6 * c_out, ob + q7 * c_out
        for v in range(0, vectors - 1, 2):
            c0 = v * lanes
            c1 = c0 + lanes
            ba, bb = simd.load(bp, c0), simd.load(bp, c1)
            na, nb = min(lanes, c_out - c0), min(lanes, c_out - c1)
            wv = c0 * units
            s0, t0, s1, t1, s2, t2, s3, t3 = _tile4x2(
                xp, wpp, wv, runp, gp, zero, y0, y1, y2, y3, z0, z1, z2, z3, a0, a1, a2, a3,
                inside_a, ba, bb,
            )  # fmt: skip
            _store4(op, o0 + c0, o1 + c0, o2 + c0, o3 + c0, stored, na, s0, s1, s2, s3, rp, has_residual, low, high)  # fmt: skip  # noqa: E501
            _store4(op, o0 + c1, o1 + c1, o2 + c1, o3 + c1, stored, nb, t0, t1, t2, t3, rp, has_residual, low, high)  # fmt: skip  # noqa: E501
            s0, t0, s1, t1, s2, t2, s3, t3 = _tile4x2(
                xp, wpp, wv, runp, gp, zero, y4, y5, y6, y7, z4, z5, z6, z7, a4, a5, a6, a7,
                inside_b, ba, bb,
            )  # fmt: skip
            _store4(op, o4 + c0, o5 + c0, o6 + c0, o7 + c0, stored - 4, na, s0, s1, s2, s3, rp, has_residual, low, high)  # fmt: skip  # noqa: E501
            _store4(op, o4 + c1, o5 + c1, o6 + c1, o7 + c1, stored - 4, nb, t0, t1, t2, t3, rp, has_residual, low, high)  # fmt: skip  # noqa: E501
        for v in range(vectors - vectors % 2, vectors):  # an odd last vector
            c0 = v * lanes
            ba = simd.load(bp, c0)
            na = min(lanes, c_out - c0)
            s0, s1, s2, s3, s4, s5, s6, s7 = _tile8x1(
                xp, wpp, c0 * units, runp, gp, zero, y0, y1, y2, y3, y4, y5, y6, y7,
                z0, z1, z2, z3, z4, z5, z6, z7, xb, inside, ba,
            )  # fmt: skip
            _store4(op, o0 + c0, o1 + c0, o2 + c0, o3 + c0, stored, na, s0, s1, s2, s3, rp, has_residual, low, high)  # fmt: skip  # noqa: E501
            _store4(op, o4 + c0, o5 + c0, o6 + c0, o7 + c0, stored - 4, na, s4, s5, s6, s7, rp, has_residual, low, high)  # fmt: skip  # noqa: E501
    if to_planes:
        _to_planes(out, planes, residual, g[_HAS_RESIDUAL] != 0, lo, hi, n_batch, pixels, c_out)
    return out


DENSE = serial_and_parallel(_dense, "nhwc_dense")


# ---------------------------------------------------------------------------
# Depthwise: one filter a channel, vectors over channels.


@_inline
def _dw3x3_row(xp, wp, wb, op, ob, rp, has_residual, low, high, ba, count, full,  # noqa: ANN001, ANN202
               top, xb, row, height, width, channels, out_w, sw, pw, dh, dw):  # fmt: skip
    """One output row of one channel vector of a 3x3 depthwise filter: the weights held in
    nine registers; x's rows top, top + dh, top + 2 dh start at element xb + r * row (plus
    the vector's first channel, in xb and ob)."""
    lanes = simd.lanes_of(wp)
    w00, w01, w02 = simd.load(wp, wb), simd.load(wp, wb + lanes), simd.load(wp, wb + 2 * lanes)
    w10, w11 = simd.load(wp, wb + 3 * lanes), simd.load(wp, wb + 4 * lanes)
    w12, w20 = simd.load(wp, wb + 5 * lanes), simd.load(wp, wb + 6 * lanes)
    w21, w22 = simd.load(wp, wb + 7 * lanes), simd.load(wp, wb + 8 * lanes)
    y1, y2 = top + dh, top + 2 * dh
    r0, r1, r2 = 0 <= top < height, 0 <= y1 < height, 0 <= y2 < height
    x0, x1, x2 = xb + top * row, xb + y1 * row, xb + y2 * row
    step = dw * channels
    # output columns [lo, hi) read only inside the image
    lo = min(out_w, (pw + sw - 1) // sw)
    hi = max(lo, min(out_w, (width - 1 - 2 * dw + pw) // sw + 1))
    if not (full and r0 and r1 and r2):
        lo = hi = out_w
    for ow in range(lo, hi):
        i = (ow * sw - pw) * channels
        a, b, c = x0 + i, x1 + i, x2 + i
        acc = simd.fma(w00, simd.load(xp, a), ba)
        acc = simd.fma(w01, simd.load(xp, a + step), acc)
        acc = simd.fma(w02, simd.load(xp, a + 2 * step), acc)
        acc = simd.fma(w10, simd.load(xp, b), acc)
        acc = simd.fma(w11, simd.load(xp, b + step), acc)
        acc = simd.fma(w12, simd.load(xp, b + 2 * step), acc)
        acc = simd.fma(w20, simd.load(xp, c), acc)
        acc = simd.fma(w21, simd.load(xp, c + step), acc)
        acc = simd.fma(w22, simd.load(xp, c + 2 * step), acc)
        _finish(op, ob + ow * channels, acc, lanes, rp, has_residual, low, high)
    for k in range(out_w - (hi - lo)):  # the others: masked, an absent tap's lanes read nothing
        ow = k if k < lo else k + hi - lo
        left = ow * sw - pw
        i = left * channels
        a, b, c = x0 + i, x1 + i, x2 + i
        e0 = count if 0 <= left < width else 0
        e1 = count if 0 <= left + dw < width else 0
        e2 = count if 0 <= left + 2 * dw < width else 0
        acc = simd.fma(w00, simd.load_first(xp, a, e0 if r0 else 0), ba)
        acc = simd.fma(w01, simd.load_first(xp, a + step, e1 if r0 else 0), acc)
        acc = simd.fma(w02, simd.load_first(xp, a + 2 * step, e2 if r0 else 0), acc)
        acc = simd.fma(w10, simd.load_first(xp, b, e0 if r1 else 0), acc)
        acc = simd.fma(w11, simd.load_first(xp, b + step, e1 if r1 else 0), acc)
        acc = simd.fma(w12, simd.load_first(xp, b + 2 * step, e2 if r1 else 0), acc)
        acc = simd.fma(w20, simd.load_first(xp, c, e0 if r2 else 0), acc)
        acc = simd.fma(w21, simd.load_first(xp, c + step, e1 if r2 else 0), acc)
        acc = simd.fma(w22, simd.load_first(xp, c + 2 * step, e2 if r2 else 0), acc)
        _finish(op, ob + ow * channels, acc, count, rp, has_residual, low, high)


@_inline
def _dw_row(xp, wp, wb, op, ob, rp, has_residual, low, high, ba, count, full,  # noqa: ANN001, ANN202
            top, xb, row, height, width, channels, out_w, kh_n, kw_n, sw, pw, dh, dw):  # fmt: skip
    """One output row of one channel vector of any depthwise filter (as _dw3x3_row), four
    output pixels at a time sharing each tap's weight vector."""
    lanes = simd.lanes_of(wp)
    reach_w = (kw_n - 1) * dw
    rows_in = top >= 0 and top + (kh_n - 1) * dh < height
    lo = min(out_w, (pw + sw - 1) // sw)
    hi = max(lo, min(out_w, (width - 1 - reach_w + pw) // sw + 1))
    step = sw * channels
    for ow in range(0, out_w, 4):
        i0 = xb + top * row + (ow * sw - pw) * channels
        i1, i2, i3 = i0 + step, i0 + 2 * step, i0 + 3 * step
        s0, s1, s2, s3 = ba, ba, ba, ba
        if full and rows_in and lo <= ow and ow + 4 <= hi:
            for kh in range(kh_n):
                for kw in range(kw_n):
                    w = simd.load(wp, wb + (kh * kw_n + kw) * lanes)
                    off = kh * dh * row + kw * dw * channels
                    s0 = simd.fma(w, simd.load(xp, i0 + off), s0)
                    s1 = simd.fma(w, simd.load(xp, i1 + off), s1)
                    s2 = simd.fma(w, simd.load(xp, i2 + off), s2)
                    s3 = simd.fma(w, simd.load(xp, i3 + off), s3)
        else:
            left = ow * sw - pw
            for kh in range(kh_n):
                if not 0 <= top + kh * dh < height:
                    continue
                for kw in range(kw_n):
                    w = simd.load(wp, wb + (kh * kw_n + kw) * lanes)
                    off = kh * dh * row + kw * dw * channels
                    col = left + kw * dw
                    e0 = count if 0 <= col < width else 0
                    e1 = count if ow + 1 < out_w and 0 <= col + sw < width else 0
                    e2 = count if ow + 2 < out_w and 0 <= col + 2 * sw < width else 0
                    e3 = count if ow + 3 < out_w and 0 <= col + 3 * sw < width else 0
                    s0 = simd.fma(w, simd.load_first(xp, i0 + off, e0), s0)
                    s1 = simd.fma(w, simd.load_first(xp, i1 + off, e1), s1)
                    s2 = simd.fma(w, simd.load_first(xp, i2 + off, e2), s2)
                    s3 = simd.fma(w, simd.load_first(xp, i3 + off, e3), s3)
        o = ob + ow * channels
        _store4(op, o, o + channels, o + 2 * channels, o + 3 * channels, out_w - ow, count,
                s0, s1, s2, s3, rp, has_residual, low, high)  # fmt: skip


def _depthwise(x, wp, bias, geometry, scalars, residual, out, planes, source):  # noqa: ANN001, ANN201
    """out (N, OH, OW, C) = depthwise conv2d(x (N, H, W, C), W) + bias, + residual, clamped,
    an output row a job. With _FROM_PLANES, ``x`` is a buffer first filled from the NCHW
    ``source``; with _TO_PLANES, ``out`` is a buffer for the NCHW ``planes``."""
    g = geometry
    n_batch, height, width, channels = g[_N], g[_H], g[_W], g[_CIN]
    out_h, out_w = g[_OH], g[_OW]
    kh_n, kw_n, sh, sw, ph, pw, dh, dw = g[_KH], g[_KW], g[_SH], g[_SW], g[_PH], g[_PW], g[_DH], g[_DW]
    to_planes = g[_TO_PLANES] != 0
    has_residual = g[_HAS_RESIDUAL] != 0 and not to_planes
    lo, hi = scalars[_LOW], scalars[_HIGH]
    low = simd.splat(scalars[_NO_LOW] if to_planes else lo)
    high = simd.splat(scalars[_NO_HIGH] if to_planes else hi)
    xp, wpp, bp = simd.pointer(x), simd.pointer(wp), simd.pointer(bias)
    op, rp = simd.pointer(out), simd.pointer(residual)
    if g[_FROM_PLANES] != 0:
        _from_planes(source, x, n_batch, height * width, channels)
    lanes = simd.lanes_of(out)
    blocks = (channels + lanes - 1) // lanes
    taps = kh_n * kw_n
    row = width * channels
    three = kh_n == 3 and kw_n == 3
    for job in prange(n_batch * out_h):
        n = job // out_h
        top = (job - n * out_h) * sh - ph
        for cb in range(blocks):
            c0 = cb * lanes
            count = min(lanes, channels - c0)
            ba = simd.load(bp, c0)
            xb = n * height * row + c0
            ob = job * out_w * channels + c0
            if three:
                _dw3x3_row(xp, wpp, c0 * taps, op, ob, rp, has_residual, low, high, ba, count,
                           count == lanes, top, xb, row, height, width, channels, out_w, sw, pw,
                           dh, dw)  # fmt: skip
            else:
                _dw_row(xp, wpp, c0 * taps, op, ob, rp, has_residual, low, high, ba, count,
                        count == lanes, top, xb, row, height, width, channels, out_w, kh_n, kw_n,
                        sw, pw, dh, dw)  # fmt: skip
    if to_planes:
        _to_planes(out, planes, residual, g[_HAS_RESIDUAL] != 0, lo, hi, n_batch, out_h * out_w, channels)  # fmt: skip  # noqa: E501
    return out


DEPTHWISE = serial_and_parallel(_depthwise, "nhwc_depthwise")


# ---------------------------------------------------------------------------
# The step, built at load.

# Multiply-adds above which a step takes its parallel compilation (with more than one
# thread): a parallel region costs tens of microseconds on a busy machine, so only
# convolutions taking a few hundred microseconds on one thread pay for it.
PARALLEL_MACS = 8_000_000


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
    return np.ascontiguousarray(np.concatenate(parts))


def _padded(values: np.ndarray, lanes: int) -> np.ndarray:
    out = np.zeros(-(-len(values) // lanes) * lanes, values.dtype)
    out[: len(values)] = values
    return out


def _dense_plan(
    weight: np.ndarray, geometry: np.ndarray, nhwc_in: bool, lanes: int
) -> tuple[np.ndarray, np.ndarray]:
    """(packed weights, run offsets) of the dense kernel; sets the run fields of geometry.

    On an NHWC input a tap row's (kw, c_in) are contiguous at dilation 1: one run per kh.
    Otherwise a run per tap over c_in; on an NCHW input with filters wider than its
    channels (a stem: 3 channels, 3x3 or 7x7), a run per (c_in, kh) over kw instead.
    """
    c_out, c_in, kh_n, kw_n = weight.shape
    g = geometry
    taps = kh_n * kw_n
    xs_row, xs_col, xs_chan = int(g[_XS_ROW]), int(g[_XS_COL]), int(g[_XS_CHAN])
    dh, dw = int(g[_DH]), int(g[_DW])
    if not nhwc_in and kw_n > c_in:  # units (c_in, kh, kw)
        units = weight.reshape(c_out, c_in * taps)
        runs = [c * xs_chan + kh * dh * xs_row for c in range(c_in) for kh in range(kh_n)]
        g[_RUN_LEN], g[_RUN_STEP], g[_TAP_UNITS], g[_CHAN_UNITS] = kw_n, dw * xs_col, 1, taps
    else:  # units (kh, kw, c_in)
        units = weight.transpose(0, 2, 3, 1).reshape(c_out, taps * c_in)
        g[_TAP_UNITS], g[_CHAN_UNITS] = c_in, 1
        if nhwc_in and dw == 1:
            runs = [kh * dh * xs_row for kh in range(kh_n)]
            g[_RUN_LEN], g[_RUN_STEP] = kw_n * c_in, 1
        else:
            runs = [kh * dh * xs_row + kw * dw * xs_col for kh in range(kh_n) for kw in range(kw_n)]
            g[_RUN_LEN], g[_RUN_STEP] = c_in, xs_chan
    g[_RUNS] = len(runs)
    return _pack_vectors(units, lanes), np.array(runs, np.int64)


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
    from pyexecutorch.kernels.conv.conv import _signature  # noqa: PLC0415
    from pyexecutorch.kernels.registry import KernelError  # noqa: PLC0415

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
    if not isinstance(groups, int) or isinstance(groups, bool) or groups <= 0:
        return None
    if math.isnan(low) or math.isnan(high) or not out.flags.writeable:
        return None
    nhwc_in, nhwc_out = channels_last(input), channels_last(out)
    if not (nhwc_in or input.flags.c_contiguous) or not (nhwc_out or out.flags.c_contiguous):
        return None
    if not (nhwc_in or nhwc_out):
        return None  # both NCHW: the existing steps
    try:
        s, p, d, shape, _ = _signature(
            input, weight, bias, stride, padding, dilation, False, (0, 0), groups
        )
    except (KernelError, TypeError, ValueError):
        return None
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
    x_flat = _flat(input, nhwc_in)
    out_flat = _flat(out, nhwc_out)
    # What the kernels write: out itself, or a channels-last buffer copied to NCHW out.
    target = out_flat if nhwc_out else np.empty(out.size, dt)
    planes = out_flat  # (only read as the copy's destination when not nhwc_out)
    res_flat = out_flat if residual is None else _flat(residual, nhwc_out)

    g = np.zeros(_GEOMETRY_SIZE, np.int64)
    g[_N], g[_H], g[_W], g[_CIN], g[_OH], g[_OW], g[_COUT] = n, h, w, c_in, oh, ow, c_out
    g[_KH], g[_KW] = kh, kw
    g[_SH], g[_SW], g[_PH], g[_PW], g[_DH], g[_DW] = (*s, *p, *d)
    if nhwc_in:
        g[_XS_IMAGE], g[_XS_ROW], g[_XS_COL], g[_XS_CHAN] = h * w * c_in, w * c_in, c_in, 1
    else:
        g[_XS_IMAGE], g[_XS_ROW], g[_XS_COL], g[_XS_CHAN] = c_in * h * w, w, 1, h * w
    g[_HAS_RESIDUAL] = residual is not None
    g[_TO_PLANES] = not nhwc_out
    scalars = np.array([low, high, -math.inf, math.inf, 0.0], dt)
    b = np.zeros(c_out, dt) if bias is None else np.asarray(bias)
    bias_padded = _padded(b, lanes)
    macs = out.size * cg * kh * kw

    def pick(variants: tuple[Any, Any]) -> Any:
        return variants[1] if macs >= PARALLEL_MACS and get_num_threads() > 1 else variants[0]

    if depthwise:
        wd = weight[:, 0].reshape(c_out, kh * kw)
        blocks = -(-c_out // lanes)
        packed = np.zeros((blocks * lanes, kh * kw), dt)
        packed[:c_out] = wd
        wp = np.ascontiguousarray(packed.reshape(blocks, lanes, kh * kw).transpose(0, 2, 1))
        g[_FROM_PLANES] = not nhwc_in
        x_nhwc = x_flat if nhwc_in else np.empty(input.size, dt)
        args = (x_nhwc, wp.reshape(-1), bias_padded, g, scalars, res_flat, target, planes, x_flat)
        return pick(DEPTHWISE), args
    if (kh, kw) == (1, 1) and s == (1, 1) and p == (0, 0):
        wp = _pack_vectors(weight.reshape(c_out, c_in), lanes)
        args = (x_flat, wp, bias_padded, g, scalars, res_flat, target, planes)
        return pick(POINTWISE), args
    wp, runs = _dense_plan(weight, g, nhwc_in, lanes)
    args = (x_flat, wp, bias_padded, runs, g, scalars, res_flat, target, planes)
    return pick(DENSE), args
