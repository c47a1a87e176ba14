"""Compiled (numba) forms of max, average and adaptive average pooling.

numpy pools by one shifted maximum or sum over the whole tensor per window tap
(and max pooling's indices by as many compares and masked copies again). Here
values-only max pooling and average pooling fold all planes' rows, then their
columns, in long flat vectorized passes (over a bordered copy when windows reach
outside the image), then gather the window origins: loops per output row run
7-31 elements on a CNN's images and never reach their vector body. Max pooling
with indices reads each output's window once, only the taps inside the image.
Window geometry, divisors and adaptive window bounds are computed at load by the
reference kernels' own helpers. Window averages sum in float64 from 0.0 as torch
does (a window of -0.0 averages to 0.0); a global average (adaptive to 1x1) is a
row sum over each plane with interleaved partial sums, as the reference's one
reduction is. Max pooling propagates NaN and picks as the reference does: the
first maximum in row-major order (rows fold first, so -0.0 against 0.0 as torch),
the last NaN of a NaN window for indices. Each form offers its call on the planned
arrays as a whole-method step. Imported only by the compiled tier; ``pool.py``
stays the reference.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from numba import njit, prange

from pyexecutorch.jit.arrays import FLOATS, contiguous, dense, planned
from pyexecutorch.jit.variants import choose, pick, serial_and_parallel
from pyexecutorch.kernels.pool import (
    compiled_resample,  # noqa: F401 - its steps register
    pool,
)
from pyexecutorch.kernels.reduce.compiled import MAX_ROW, SUM_ROWS
from pyexecutorch.kernels.registry import KernelError, compiled_form, offer


def _first_inside(start, step):  # noqa: ANN001, ANN201
    """The first tap position ``start + n * step`` (n >= 0) that is not negative."""
    if start >= 0:
        return start
    return start + step * ((-start + step - 1) // step)


_first_inside = njit(cache=True)(_first_inside)


def _max_pool(x, out, idx, lowest, kh, kw, sh, sw, ph, pw, dh, dw):  # noqa: ANN001, ANN201
    """Max pooling of x (planes, h, w) into out and idx (planes, oh, ow); indices into h*w.

    ``lowest[0]`` is -inf in x's dtype (a float64 one would make every compare convert).
    """
    planes, h, w = x.shape
    oh_n, ow_n = out.shape[1], out.shape[2]
    for p in prange(planes):  # noqa: B020 - prange is range when serial
        for oh in range(oh_n):
            h0 = oh * sh - ph
            for ow in range(ow_n):
                w0 = ow * sw - pw
                best = lowest[0]
                at = _first_inside(h0, dh) * w + _first_inside(w0, dw)
                for i in range(kh):
                    ih = h0 + i * dh
                    if ih < 0 or ih >= h:
                        continue
                    for j in range(kw):
                        iw = w0 + j * dw
                        if iw < 0 or iw >= w:
                            continue
                        v = x[p, ih, iw]
                        if v > best or v != v:
                            best = v
                            at = ih * w + iw
                out[p, oh, ow] = best
                idx[p, oh, ow] = at
    return out


def _later_max2(a, b, dst):  # noqa: ANN001, ANN201
    """dst = a, replaced by b where b is greater or NaN (the earlier tap wins ties).

    Three distinct arrays of one length: an in-place fold (``dst`` is ``a``) makes
    LLVM's overlap check fail at run time, and the loop runs scalar (3x slower).
    """
    for i in range(dst.size):
        v = b[i]
        m = a[i]
        dst[i] = v if (v > m) | (v != v) else m


def _later_max3(a, b, c, dst):  # noqa: ANN001, ANN201
    """:func:`_later_max2` of three taps in one pass: a, then b, then c."""
    for i in range(dst.size):
        m = a[i]
        v = b[i]
        m = v if (v > m) | (v != v) else m
        v = c[i]
        dst[i] = v if (v > m) | (v != v) else m


_later_max2 = njit(cache=True, error_model="numpy")(_later_max2)
_later_max3 = njit(cache=True, error_model="numpy")(_later_max3)


def _fold_taps(src, n, taps, step, one, two):  # noqa: ANN001, ANN201
    """The running maximum over ``taps`` shifted runs ``src[t * step :][:n]``, earliest
    tap first, as a view of ``one`` or ``two`` (of ``src`` itself for one tap).

    Up to three taps fold in one pass; more fold two at a time, alternating between
    the two buffers so that no pass writes what it reads: the result is in ``two``
    when ``(taps - 2) // 2`` is odd (see :func:`_free_buffer`).
    """
    if taps == 1:
        return src[:n]
    out = one[:n]
    if taps == 2:
        _later_max2(src[:n], src[step : step + n], out)
        return out
    _later_max3(src[:n], src[step : step + n], src[2 * step : 2 * step + n], out)
    spare = two[:n]
    t = 3
    while t < taps:
        o = t * step
        if t + 1 < taps:
            _later_max3(out, src[o : o + n], src[o + step : o + step + n], spare)
            t += 2
        else:
            _later_max2(out, src[o : o + n], spare)
            t += 1
        out, spare = spare, out
    return out


def _free_buffer(taps, one, two):  # noqa: ANN001, ANN201
    """Of :func:`_fold_taps`'s two buffers, the one its result for ``taps`` is not in."""
    return two if taps < 4 or (taps - 2) // 2 % 2 == 0 else one


_fold_taps = njit(cache=True, error_model="numpy")(_fold_taps)
_free_buffer = njit(cache=True, error_model="numpy")(_free_buffer)


def _copy_inside_border(x, padded, p0, p1, ph, pw):  # noqa: ANN001, ANN201
    """Planes p0..p1 of x (planes, h, w) into ``padded`` inside its border of ph rows and
    pw columns, converted to its dtype: one short loop per image row."""
    h, w = x.shape[1], x.shape[2]
    for p in range(p0, p1):
        for ih in range(h):
            dst = padded[p, ph + ih, pw : pw + w]
            src = x[p, ih]
            for iw in range(w):
                dst[iw] = src[iw]


_copy_inside_border = njit(cache=True, error_model="numpy")(_copy_inside_border)


def _max_pool_values(x, out, padded, rows, cols, spare, block, kh, kw, sh, sw, ph, pw, dh, dw):  # noqa: ANN001, ANN201, E501
    """Max pooling of x (planes, h, w) into out (planes, oh, ow), values only.

    Each block of ``block`` planes folds as flat runs: a row pass (the kw taps of every
    position, into ``rows``), a column pass over its result (the kh taps, ``wp`` apart,
    into ``cols``), then a strided gather at the window origins. Each pass is one long
    loop over the block's planes laid end to end, which vectorizes (per-row loops of
    7-31 elements never reach the vector body). Positions whose taps cross into the
    next plane are computed but never gathered, and a block stops short of taps past
    its end. ``padded`` (planes, hp, wp) is x with a -inf border (set at load, its
    interior copied per call) when windows reach outside the image, else x itself.
    ``spare`` is a third buffer for kernels over 3 wide. Rows first, then columns: of
    equal maxima the first in row-major order wins (-0.0 against 0.0, as torch), and
    NaN propagates.
    """
    planes, h, w = x.shape
    hp, wp = padded.shape[1], padded.shape[2]
    oh_n, ow_n = out.shape[1], out.shape[2]
    plane_size = hp * wp
    flat = padded.reshape(-1)
    for b in prange((planes + block - 1) // block):  # noqa: B020 - prange is range when serial
        p0 = b * block
        p1 = min(p0 + block, planes)
        if hp != h or wp != w:  # (padded is a bordered copy: x only when the shapes match)
            _copy_inside_border(x, padded, p0, p1, ph, pw)
        start = p0 * plane_size
        n = (p1 - p0) * plane_size - (kw - 1) * dw
        one, two = rows[start:], spare[start:]
        across = _fold_taps(flat[start:], n, kw, dw, one, two)
        down = _fold_taps(
            across, n - (kh - 1) * dh * wp, kh, dh * wp, cols[start:], _free_buffer(kw, one, two)
        )
        for p in range(p0, p1):
            for oh in range(oh_n):
                o = (p - p0) * plane_size + oh * sh * wp
                taps = down[o : o + (ow_n - 1) * sw + 1 : sw]
                line = out[p, oh]
                for ow in range(ow_n):
                    line[ow] = taps[ow]
    return out


def _sum_taps(src, n, taps, step, dst):  # noqa: ANN001, ANN201
    """dst[:n] = 0.0 + the ``taps`` shifted runs ``src[t * step :][:n]``, in tap order
    (from 0.0 as torch: a sum of -0.0 is 0.0), one vectorized pass a tap."""
    out = dst[:n]
    run = src[:n]
    for i in range(n):
        out[i] = 0.0 + run[i]
    for t in range(1, taps):
        run = src[t * step : t * step + n]
        for i in range(n):
            out[i] += run[i]
    return out


_sum_taps = njit(cache=True, error_model="numpy")(_sum_taps)


def _avg_pool(x, out, padded, rows, cols, divisor, block, kh, kw, sh, sw, ph, pw):  # noqa: ANN001, ANN201
    """Window sums of x (planes, h, w) / divisor (oh, ow) into out (planes, oh, ow).

    As :func:`_max_pool_values`: flat row and column passes over blocks of planes,
    then a gather at the window origins, here in float64 over ``padded`` (planes, hp,
    wp), x converted with a zero border (padding and ceil-mode overhang add nothing).
    """
    planes, h, w = x.shape
    hp, wp = padded.shape[1], padded.shape[2]
    oh_n, ow_n = out.shape[1], out.shape[2]
    plane_size = hp * wp
    flat = padded.reshape(-1)
    for b in prange((planes + block - 1) // block):  # noqa: B020
        p0 = b * block
        p1 = min(p0 + block, planes)
        _copy_inside_border(x, padded, p0, p1, ph, pw)
        start = p0 * plane_size
        n = (p1 - p0) * plane_size - (kw - 1)
        across = _sum_taps(flat[start:], n, kw, 1, rows[start:])
        down = _sum_taps(across, n - (kh - 1) * wp, kh, wp, cols[start:])
        for p in range(p0, p1):
            for oh in range(oh_n):
                o = (p - p0) * plane_size + oh * sh * wp
                taps = down[o : o + (ow_n - 1) * sw + 1 : sw]
                line = out[p, oh]
                share = divisor[oh]
                for ow in range(ow_n):
                    line[ow] = taps[ow] / share[ow]
    return out


def _adaptive_avg_pool(x, out, rows, cols, counts):  # noqa: ANN001, ANN201
    """Adaptive windows: output (oh, ow) averages rows[oh]..rows[oh+1] x cols[ow]..cols[ow+1]."""
    planes = x.shape[0]
    oh_n, ow_n = out.shape[1], out.shape[2]
    for p in prange(planes):  # noqa: B020
        for oh in range(oh_n):
            for ow in range(ow_n):
                acc = 0.0
                for ih in range(rows[oh, 0], rows[oh, 1]):
                    for iw in range(cols[ow, 0], cols[ow, 1]):
                        acc += x[p, ih, iw]
                out[p, oh, ow] = acc / counts[oh, ow]
    return out


MAX_POOL = serial_and_parallel(_max_pool, "max_pool")
MAX_POOL_VALUES = serial_and_parallel(_max_pool_values, "max_pool_values")
AVG_POOL = serial_and_parallel(_avg_pool, "avg_pool")
ADAPTIVE_AVG_POOL = serial_and_parallel(_adaptive_avg_pool, "adaptive_avg_pool")


def _planes(a: np.ndarray) -> tuple[int, int, int]:
    return (math.prod(a.shape[:-2]), a.shape[-2], a.shape[-1])


def _block(planes: int, work: int, variants: tuple[Any, Any]) -> int:
    """Planes per block of a flat-pass pooling kernel: all of them (one run a pass) when
    serial; when parallel, a few blocks per thread."""
    if choose(variants, work) is variants[0]:
        return planes
    return max(1, -(-planes // (4 * numba.get_num_threads())))


def _max_pool_values_form(xv, ov, x0, o0, xs, os_, k, s, p, d, ohw) -> Any:  # noqa: ANN001
    """The values-only call and step of :func:`_max_pool_values` on planes views."""
    planes, h, w = xs
    hp, wp, bordered, _, _ = pool.separable_geometry((h, w), k, s, p, d, ohw)
    size = planes * hp * wp
    padded = np.full((planes, hp, wp), -np.inf, xv.dtype) if bordered else xv
    rows, cols = np.empty(size, xv.dtype), np.empty(size, xv.dtype)
    spare = np.empty(size if max(k) > 3 else 0, xv.dtype)
    work = ov.size * k[0] * k[1]
    variant = choose(MAX_POOL_VALUES, work)
    geometry = (_block(planes, work, MAX_POOL_VALUES), *k, *s, *p, *d)
    load = (xv, ov, padded, rows, cols, spare, *geometry)
    kern = pick(MAX_POOL_VALUES, work, load)

    def max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, out, indices):  # noqa: ANN001, ANN202
        src = xv if x is x0 else contiguous(x, xs)
        kern(src, ov if out is o0 else out.reshape(os_), padded if bordered else src,
             rows, cols, spare, *geometry)  # fmt: skip
        return out, indices

    return offer(max_pool, step=(variant, load), fills_outputs=True)  # (on the planned arrays)


@compiled_form("aten::max_pool2d_with_indices.out")
def _max_pool_form(
    x: Any,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: Any,
    out: Any,
    indices: Any,
    *,
    unused_outputs: frozenset[int] = frozenset(),
) -> Any:
    """Max pooling of float32/float64 (C, H, W) or (N, C, H, W) tensors, or None.

    When nothing reads the indices they are not computed (``indices`` is left as is)
    and the flat separable passes of :func:`_max_pool_values` run instead.
    """
    if not dense(x) or x.dtype not in FLOATS:
        return None
    try:
        k, s, p, d, ohw = pool._pool_geometry(
            "max_pool2d_with_indices", x, kernel_size, stride, padding, dilation, ceil_mode, True
        )
    except (KernelError, TypeError, ValueError):
        return None
    shape = x.shape[:-2] + ohw
    values_only = 1 in unused_outputs
    if not planned(out, x.dtype, shape):
        return None
    if not values_only and not planned(indices, np.dtype(np.int64), shape):
        return None
    xs = _planes(x)
    os_ = (xs[0], *ohw)
    x0, o0, i0 = x, out, indices
    xv, ov = x.reshape(xs), out.reshape(os_)
    work = out.size * k[0] * k[1]
    if values_only:
        return _max_pool_values_form(xv, ov, x0, o0, xs, os_, k, s, p, d, ohw)
    lowest = np.full(1, -np.inf, x.dtype)  # (an array: a step's constants are finite)
    load = (xv, ov, indices.reshape(os_), lowest, *k, *s, *p, *d)
    variants = MAX_POOL
    kern = pick(variants, work, load)
    geometry = load[3:]

    def max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, out, indices):  # noqa: ANN001, ANN202
        kern(
            xv if x is x0 else contiguous(x, xs),
            ov if out is o0 else out.reshape(os_),
            load[2] if indices is i0 else indices.reshape(os_),
            *geometry,
        )
        return out, indices

    # the step: the call on the planned arrays
    return offer(max_pool, step=(choose(variants, work), load), fills_outputs=True)


@compiled_form("aten::avg_pool2d.out")
def _avg_pool_form(
    x: Any,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    divisor_override: Any,
    out: Any,
) -> Any:
    """Average pooling of float32/float64 tensors, or None."""
    if not dense(x) or x.dtype not in FLOATS:
        return None
    if divisor_override is not None and (
        not isinstance(divisor_override, int) or divisor_override == 0
    ):
        return None
    try:
        k, s, p, _, ohw = pool._pool_geometry(
            "avg_pool2d", x, kernel_size, stride, padding, 1, ceil_mode, False
        )
    except (KernelError, TypeError, ValueError):
        return None
    shape = x.shape[:-2] + ohw
    if not planned(out, x.dtype, shape):
        return None
    if divisor_override is not None:
        divisor = np.full(ohw, float(divisor_override))
    else:
        divisor = pool._avg_divisor(x.shape[-2:], k, s, p, ohw, bool(count_include_pad), "d")
    xs = _planes(x)
    os_ = (xs[0], *ohw)
    x0, o0 = x, out
    xv, ov = x.reshape(xs), out.reshape(os_)
    hp, wp, _, _, _ = pool.separable_geometry(x.shape[-2:], k, s, p, (1, 1), ohw)
    padded = np.zeros((xs[0], hp, wp))  # float64 sums, as the reference's
    rows, cols = np.empty(padded.size), np.empty(padded.size)
    work = out.size * k[0] * k[1]
    geometry = (_block(xs[0], work, AVG_POOL), *k, *s, *p)
    load = (xv, ov, padded, rows, cols, divisor, *geometry)
    kern = pick(AVG_POOL, work, load)

    def avg_pool(
        x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out
    ):  # noqa: ANN001, ANN202, E501
        kern(
            xv if x is x0 else contiguous(x, xs),
            ov if out is o0 else out.reshape(os_),
            padded, rows, cols, divisor, *geometry,
        )  # fmt: skip
        return out

    # the step: the call on the planned arrays
    return offer(avg_pool, step=(choose(AVG_POOL, work), load), fills_outputs=True)


@compiled_form("aten::_adaptive_avg_pool2d.out")
def _adaptive_avg_pool_form(x: Any, output_size: Any, out: Any) -> Any:
    """Adaptive average pooling of float32/float64 tensors, or None."""
    if not dense(x) or x.dtype not in FLOATS or x.ndim not in (3, 4):
        return None
    try:
        oh, ow = pool._pair(output_size, "output_size", "_adaptive_avg_pool2d")
    except (KernelError, TypeError, ValueError):
        return None
    h, w = x.shape[-2:]
    if oh <= 0 or ow <= 0 or h == 0 or w == 0 or x.size == 0:
        return None
    if not planned(out, x.dtype, x.shape[:-2] + (oh, ow)):
        return None
    planes = math.prod(x.shape[:-2])
    x0, o0 = x, out
    if (oh, ow) == (1, 1) and h * w <= MAX_ROW:
        # A global average: each plane is one contiguous row.
        variants = SUM_ROWS
        xs, os_, consts = (planes, h * w), (planes,), (float(h * w), x.dtype.type(-0.0))
    else:

        def bounds(n_in: int, n_out: int) -> np.ndarray:
            return np.array(
                [(o * n_in // n_out, -(-(o + 1) * n_in // n_out)) for o in range(n_out)]
            )

        rows, cols = bounds(h, oh), bounds(w, ow)
        counts = (rows[:, 1] - rows[:, 0])[:, None] * (cols[:, 1] - cols[:, 0])[None, :]
        variants = ADAPTIVE_AVG_POOL
        xs, os_ = (planes, h, w), (planes, oh, ow)
        consts = (rows, cols, counts.astype(np.float64))
    xv, ov = x.reshape(xs), out.reshape(os_)
    load = (xv, ov, *consts)
    kern = pick(variants, x.size, load)

    def adaptive_avg_pool(x, output_size, out):  # noqa: ANN001, ANN202
        kern(xv if x is x0 else contiguous(x, xs), ov if out is o0 else out.reshape(os_), *consts)
        return out

    step = (choose(variants, x.size), load)  # the call on the planned arrays
    return offer(adaptive_avg_pool, step=step, fills_outputs=True)
