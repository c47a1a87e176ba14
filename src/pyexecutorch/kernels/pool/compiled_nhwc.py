"""Compiled (numba) steps of the operators between a CNN's convolutions on channels-last
activations: max, average and adaptive average pooling, the spatial mean, and cat and
split along the channels.

A channels-last tensor keeps its logical (N, C, H, W) shape over (N, H, W, C) memory
(``jit.arrays.channels_last``), so every pixel's channels are one contiguous run:
these kernels hold vectors of channels (``jit.simd``), up to four at a time in
registers, and walk a window's taps as whole channel runs. Channels past the last full
vector go through masked loads and stores. A window's taps are tabled at load, per
output row and column (first input row or column inside the image, how many taps lie
inside), so the loops do no bounds test and no division.

Each function below returns ``(function, args)``, the call a whole method makes: a
numba dispatcher defined at this module's top level (``cache=True``, its serial or
its ``prange`` variant by the work, :data:`PARALLEL_ELEMENTS`), and arguments made at
load (C-contiguous memory-order views of the arrays given, tables, plain ints) -- or
None for a case it leaves to the caller (who then keeps the tensor NCHW). Every array
given is 4-D and logically (N, C, H, W) unless said otherwise, float32 or float64, one
dtype throughout; ``input`` must be channels-last, and ``out`` channels-last too, which
an out of one pixel a plane (H = W = 1: both layouts' memory) always is. A C-contiguous
input that is not also channels-last, overlapping input and out, empty tensors and
other dtypes give None.

* ``max_pool2d_step(input, out, kernel, stride, padding, dilation, ceil_mode)``: the
  values of ``aten::max_pool2d_with_indices`` (not the indices). The first maximum of a
  window in row-major order wins (-0.0 before 0.0 stays -0.0) and NaN propagates, as
  torch picks (the reference kernel's tap-by-tap ``np.maximum`` keeps the later of
  -0.0 and 0.0); a window with no tap inside the image is -inf.
* ``avg_pool2d_step(input, out, kernel, stride, padding, ceil_mode, count_include_pad,
  divisor_override)``: ``aten::avg_pool2d``; window sums from +0.0 in the input's dtype
  (as torch sums), divided by the reference's divisors.
* ``adaptive_avg_pool2d_step(input, out)``: ``aten::_adaptive_avg_pool2d`` to out's H, W.
* ``mean_hw_step(input, out)``: ``aten::mean.dim`` over H and W; ``out`` (N, C, 1, 1)
  (keepdim) or 2-D (N, C) C-contiguous.
* ``cat_channels_step(inputs, out)``: ``aten::cat`` of 2 to 4 channels-last ``inputs``
  along dim 1; ``split_channels_step(input, outs)``: ``aten::split_with_sizes`` /
  ``split`` of ``input`` along dim 1 into 2 to 4 channels-last ``outs``. Per pixel,
  each piece is a contiguous run of channels.

Window sums run in the input's dtype; float32 windows of more than :data:`FLOAT32_RUN`
pixels (a spatial mean over a large image) sum float32 runs of that many pixels and add
the runs' sums in float64, so
the result stays as accurate as the reference's pairwise sums; the sum is rounded to
the input's dtype and divided in it, as the reference divides. Sums start from +0.0: a
mean of -0.0 is 0.0, as in torch and the reference. Imported only by the compiled tier.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange

from pyexecutorch.jit import simd
from pyexecutorch.jit.arrays import FLOATS, channels_last
from pyexecutorch.jit.link_only import link_only
from pyexecutorch.jit.variants import can_thread, serial_and_parallel
from pyexecutorch.kernels.pool import pool
from pyexecutorch.kernels.registry import KernelError

# Pixels a float32 window sum adds in float32 before the run's sum goes into float64.
FLOAT32_RUN = 64

# Helpers inlined by LLVM (alwaysinline), not by numba, whose IR-level inlining copies and
# retypes a helper at every call site (ResNet-18 cold: the two pooling kernels 3.7 and 3.1
# s of CPU that way, 3.4 and 2.8 this way, load 15).
_inline = link_only(error_model="numpy", forceinline=True)

# ---------------------------------------------------------------------------
# window folds. A window's taps: rn rows ``rstep`` elements apart, cn columns ``cstep``
# apart, from a flat element t. Four vectors fold at once where they can, so that four
# independent chains of compares or adds are in flight (one chain waits 4-6 cycles a
# tap): four consecutive output pixels whose windows have one pattern of taps (a batch,
# planned at load: :func:`_batched`) one channel vector at a time, else one pixel's
# channel vectors four at a time. Vectors are masked to the channels there are (as
# cheap as whole ones with AVX-512). The row walks stay in the kernels themselves: an
# array handed to an inlined helper that loops costs a reference count pair per call.

_SUM, _MAX = 0, 1  # what a fold computes (a constant in each kernel)


@_inline
def _tap(acc, v, mode):  # noqa: ANN001, ANN202
    """One tap into a fold: a sum, or max pooling's running maximum."""
    return simd.add(acc, v) if mode == _SUM else simd.running_max(acc, v)


@_inline
def _fold4(src, t, rn, rstep, cn, cstep, s0, s1, s2, s3, n0, n1, n2, n3, start, mode):  # noqa: ANN001, ANN202
    """Four vectors: the first ``n_q`` lanes at offset ``s_q`` of every tap, folded over
    the taps in row-major order from ``start``."""
    v0 = v1 = v2 = v3 = start
    for i in range(rn):
        at = t + i * rstep
        for _ in range(cn):
            v0 = _tap(v0, simd.load_first(src, at + s0, n0), mode)
            v1 = _tap(v1, simd.load_first(src, at + s1, n1), mode)
            v2 = _tap(v2, simd.load_first(src, at + s2, n2), mode)
            v3 = _tap(v3, simd.load_first(src, at + s3, n3), mode)
            at += cstep
    return v0, v1, v2, v3


@_inline
def _fold1(src, t, rn, rstep, cn, cstep, n, start, mode):  # noqa: ANN001, ANN202
    """One vector (its first ``n`` lanes at every tap from element ``t``), folded."""
    v = start
    for i in range(rn):
        at = t + i * rstep
        for _ in range(cn):
            v = _tap(v, simd.load_first(src, at, n), mode)
            at += cstep
    return v


# ---------------------------------------------------------------------------
# max pooling


def _max_pool_nhwc(x, out, lowest, rows, cols, dh, dw):  # noqa: ANN001, ANN201
    """Max pooling of x (N, H, W, C) into out (N, OH, OW, C).

    ``rows[oh]``: the first input row of a window inside the image and how many of its
    taps (``dh`` apart) are; ``cols[ow]`` the same of columns (``dw`` apart) and the
    batches (:func:`_batched`); ``lowest[0]`` -inf in x's dtype (a step's scalars are
    finite).
    """
    n_n, h, w, c = x.shape
    oh_n, ow_n = out.shape[1], out.shape[2]
    src, dst = x.reshape(-1), out.reshape(-1)
    lanes = simd.lanes_of(src)
    floor = simd.splat(lowest[0])
    rstep, cstep = dh * w * c, dw * c
    for task in prange(n_n * oh_n):  # noqa: B020 - prange is range when serial
        n = task // oh_n
        oh = task - n * oh_n
        rn = rows[oh, 1]
        t_row = (n * h + rows[oh, 0]) * w * c
        o_row = task * ow_n * c
        ow = 0
        while ow < ow_n:
            if cols[ow, 2] == 4:  # pixels b..b+3, one channel vector at a time
                b = cols[ow, 4]
                t, o, gap = t_row + cols[b, 0] * c, o_row + b * c, cols[ow, 3] * c
                for k in range(0, c, lanes):
                    m = min(lanes, c - k)
                    v0, v1, v2, v3 = _fold4(src, t + k, rn, rstep, cols[b, 1], cstep,
                                            0, gap, 2 * gap, 3 * gap, m, m, m, m, floor, _MAX)  # fmt: skip
                    simd.store_first(dst, o + k, v0, m)
                    simd.store_first(dst, o + c + k, v1, m)
                    simd.store_first(dst, o + 2 * c + k, v2, m)
                    simd.store_first(dst, o + 3 * c + k, v3, m)
                ow = b + 4
                continue
            t, o, cn = t_row + cols[ow, 0] * c, o_row + ow * c, cols[ow, 1]
            k = 0
            while k + 4 * lanes <= c:
                v0, v1, v2, v3 = _fold4(src, t, rn, rstep, cn, cstep,
                                        k, k + lanes, k + 2 * lanes, k + 3 * lanes,
                                        lanes, lanes, lanes, lanes, floor, _MAX)  # fmt: skip
                simd.store(dst, o + k, v0)
                simd.store(dst, o + k + lanes, v1)
                simd.store(dst, o + k + 2 * lanes, v2)
                simd.store(dst, o + k + 3 * lanes, v3)
                k += 4 * lanes
            while k < c:
                m = min(lanes, c - k)
                v = _fold1(src, t + k, rn, rstep, cn, cstep, m, floor, _MAX)
                simd.store_first(dst, o + k, v, m)
                k += lanes
            ow += 1
    return out


# ---------------------------------------------------------------------------
# window averages: average pooling, adaptive average pooling, the spatial mean


@_inline
def _long_window(src, dst, run, acc, t, o, rn, rstep, cn, cstep, c, span, share, zero):  # noqa: ANN001, ANN202
    """One output pixel's average over a window of more than ``span`` taps: rectangles of
    at most ``span`` taps sum in registers (into ``run`` (c,), the input's dtype), their
    sums add into ``acc`` (c,) in float64; the total is rounded to the input's dtype,
    then divided by ``share``."""
    lanes = simd.lanes_of(src)
    for q in range(c):
        acc[q] = 0.0
    rows_per = max(1, span // cn)  # whole window rows per rectangle, or
    cols_per = min(cn, span)  # one row's run of columns
    for i in range(0, rn, rows_per):
        rr = min(rows_per, rn - i)
        for j in range(0, cn, cols_per):
            at = t + i * rstep + j * cstep
            jn = min(cols_per, cn - j)
            k = 0
            while k + 4 * lanes <= c:
                v0, v1, v2, v3 = _fold4(src, at, rr, rstep, jn, cstep,
                                        k, k + lanes, k + 2 * lanes, k + 3 * lanes,
                                        lanes, lanes, lanes, lanes, zero, _SUM)  # fmt: skip
                simd.store(run, k, v0)
                simd.store(run, k + lanes, v1)
                simd.store(run, k + 2 * lanes, v2)
                simd.store(run, k + 3 * lanes, v3)
                k += 4 * lanes
            while k < c:
                m = min(lanes, c - k)
                simd.store_first(
                    run, k, _fold1(src, at + k, rr, rstep, jn, cstep, m, zero, _SUM), m
                )
                k += lanes
            for q in range(c):
                acc[q] += run[q]
    for q in range(c):
        dst[o + q] = acc[q]
        dst[o + q] = dst[o + q] / share


def _window_average(x, out, rows, cols, divisor):  # noqa: ANN001, ANN201
    """Window averages of x (N, H, W, C) into out (N, OH, OW, C), each window summed in
    registers (windows of at most :data:`FLOAT32_RUN` taps in float32, any in float64).

    ``rows[oh]`` / ``cols[ow]``: as :func:`_max_pool_nhwc`'s, of consecutive taps;
    ``divisor[oh, ow]`` in x's dtype. Longer float32 windows (a global average) are
    :func:`_long_window_average`'s: a kernel apart, so that a program compiles only the
    one its windows need (each is about a second of a cold load's CPU).
    """
    n_n, h, w, c = x.shape
    oh_n, ow_n = out.shape[1], out.shape[2]
    src, dst = x.reshape(-1), out.reshape(-1)
    lanes = simd.lanes_of(src)
    zero = simd.splat(x.dtype.type(0))
    rstep = w * c
    for task in prange(n_n * oh_n):  # noqa: B020 - prange is range when serial
        n = task // oh_n
        oh = task - n * oh_n
        rn = rows[oh, 1]
        t_row = (n * h + rows[oh, 0]) * rstep
        o_row = task * ow_n * c
        shares = divisor[oh]
        ow = 0
        while ow < ow_n:
            if cols[ow, 2] == 4:  # pixels b..b+3, one channel vector at a time
                b = cols[ow, 4]
                t, o, gap = t_row + cols[b, 0] * c, o_row + b * c, cols[ow, 3] * c
                d0, d1 = simd.splat(shares[b]), simd.splat(shares[b + 1])
                d2, d3 = simd.splat(shares[b + 2]), simd.splat(shares[b + 3])
                for k in range(0, c, lanes):
                    m = min(lanes, c - k)
                    v0, v1, v2, v3 = _fold4(src, t + k, rn, rstep, cols[b, 1], c,
                                            0, gap, 2 * gap, 3 * gap, m, m, m, m, zero, _SUM)  # fmt: skip
                    simd.store_first(dst, o + k, simd.div(v0, d0), m)
                    simd.store_first(dst, o + c + k, simd.div(v1, d1), m)
                    simd.store_first(dst, o + 2 * c + k, simd.div(v2, d2), m)
                    simd.store_first(dst, o + 3 * c + k, simd.div(v3, d3), m)
                ow = b + 4
                continue
            t, o, cn = t_row + cols[ow, 0] * c, o_row + ow * c, cols[ow, 1]
            d = simd.splat(shares[ow])
            k = 0
            while k + 4 * lanes <= c:
                v0, v1, v2, v3 = _fold4(src, t, rn, rstep, cn, c,
                                        k, k + lanes, k + 2 * lanes, k + 3 * lanes,
                                        lanes, lanes, lanes, lanes, zero, _SUM)  # fmt: skip
                simd.store(dst, o + k, simd.div(v0, d))
                simd.store(dst, o + k + lanes, simd.div(v1, d))
                simd.store(dst, o + k + 2 * lanes, simd.div(v2, d))
                simd.store(dst, o + k + 3 * lanes, simd.div(v3, d))
                k += 4 * lanes
            while k < c:
                m = min(lanes, c - k)
                v = _fold1(src, t + k, rn, rstep, cn, c, m, zero, _SUM)
                simd.store_first(dst, o + k, simd.div(v, d), m)
                k += lanes
            ow += 1
    return out


def _long_window_average(x, out, rows, cols, divisor, run, acc, span):  # noqa: ANN001, ANN201
    """:func:`_window_average` of windows of more than ``span`` taps (float32 ones past
    :data:`FLOAT32_RUN`), each through :func:`_long_window`, in ``run`` (of x's dtype) and
    ``acc`` (float64) rows (N * OH, C)."""
    n_n, h, w, c = x.shape
    oh_n, ow_n = out.shape[1], out.shape[2]
    src, dst = x.reshape(-1), out.reshape(-1)
    zero = simd.splat(x.dtype.type(0))
    rstep = w * c
    for task in prange(n_n * oh_n):  # noqa: B020 - prange is range when serial
        n = task // oh_n
        oh = task - n * oh_n
        t_row = (n * h + rows[oh, 0]) * rstep
        o_row = task * ow_n * c
        shares = divisor[oh]
        for ow in range(ow_n):
            _long_window(src, dst, run[task], acc[task], t_row + cols[ow, 0] * c,
                         o_row + ow * c, rows[oh, 1], rstep, cols[ow, 1], c, c, span,
                         shares[ow], zero)  # fmt: skip
    return out


# ---------------------------------------------------------------------------
# cat and split along the channels: per pixel, a run of channels per piece


@_inline
def _copy_run(src, s, dst, d, n):  # noqa: ANN001, ANN202
    """dst[d : d + n] = src[s : s + n], whole vectors then one masked."""
    lanes = simd.lanes_of(src)
    k = 0
    while k + lanes <= n:
        simd.store(dst, d + k, simd.load(src, s + k))
        k += lanes
    if k < n:
        simd.store_first(dst, d + k, simd.load_first(src, s + k, n - k), n - k)


def _cat2(a, b, out):  # noqa: ANN001, ANN201
    """out (P, Ca + Cb) = a (P, Ca) beside b (P, Cb), pixel by pixel."""
    ca, cb, ct = a.shape[1], b.shape[1], out.shape[1]
    fa, fb, fo = a.reshape(-1), b.reshape(-1), out.reshape(-1)
    for p in prange(out.shape[0]):  # noqa: B020
        _copy_run(fa, p * ca, fo, p * ct, ca)
        _copy_run(fb, p * cb, fo, p * ct + ca, cb)
    return out


def _cat3(a, b, c, out):  # noqa: ANN001, ANN201
    """:func:`_cat2` of three pieces."""
    ca, cb, cc, ct = a.shape[1], b.shape[1], c.shape[1], out.shape[1]
    fa, fb, fc, fo = a.reshape(-1), b.reshape(-1), c.reshape(-1), out.reshape(-1)
    for p in prange(out.shape[0]):  # noqa: B020
        _copy_run(fa, p * ca, fo, p * ct, ca)
        _copy_run(fb, p * cb, fo, p * ct + ca, cb)
        _copy_run(fc, p * cc, fo, p * ct + ca + cb, cc)
    return out


def _cat4(a, b, c, d, out):  # noqa: ANN001, ANN201
    """:func:`_cat2` of four pieces."""
    ca, cb, cc, cd, ct = a.shape[1], b.shape[1], c.shape[1], d.shape[1], out.shape[1]
    fa, fb, fc, fd = a.reshape(-1), b.reshape(-1), c.reshape(-1), d.reshape(-1)
    fo = out.reshape(-1)
    for p in prange(out.shape[0]):  # noqa: B020
        _copy_run(fa, p * ca, fo, p * ct, ca)
        _copy_run(fb, p * cb, fo, p * ct + ca, cb)
        _copy_run(fc, p * cc, fo, p * ct + ca + cb, cc)
        _copy_run(fd, p * cd, fo, p * ct + ca + cb + cc, cd)
    return out


def _split2(x, a, b):  # noqa: ANN001, ANN201
    """a (P, Ca), b (P, Cb) = the channel runs of x (P, Ca + Cb), pixel by pixel."""
    ca, cb, ct = a.shape[1], b.shape[1], x.shape[1]
    fx, fa, fb = x.reshape(-1), a.reshape(-1), b.reshape(-1)
    for p in prange(x.shape[0]):  # noqa: B020
        _copy_run(fx, p * ct, fa, p * ca, ca)
        _copy_run(fx, p * ct + ca, fb, p * cb, cb)
    return a


def _split3(x, a, b, c):  # noqa: ANN001, ANN201
    """:func:`_split2` into three pieces."""
    ca, cb, cc, ct = a.shape[1], b.shape[1], c.shape[1], x.shape[1]
    fx, fa, fb, fc = x.reshape(-1), a.reshape(-1), b.reshape(-1), c.reshape(-1)
    for p in prange(x.shape[0]):  # noqa: B020
        _copy_run(fx, p * ct, fa, p * ca, ca)
        _copy_run(fx, p * ct + ca, fb, p * cb, cb)
        _copy_run(fx, p * ct + ca + cb, fc, p * cc, cc)
    return a


def _split4(x, a, b, c, d):  # noqa: ANN001, ANN201
    """:func:`_split2` into four pieces."""
    ca, cb, cc, cd, ct = a.shape[1], b.shape[1], c.shape[1], d.shape[1], x.shape[1]
    fx, fa, fb, fc = x.reshape(-1), a.reshape(-1), b.reshape(-1), c.reshape(-1)
    fd = d.reshape(-1)
    for p in prange(x.shape[0]):  # noqa: B020
        _copy_run(fx, p * ct, fa, p * ca, ca)
        _copy_run(fx, p * ct + ca, fb, p * cb, cb)
        _copy_run(fx, p * ct + ca + cb, fc, p * cc, cc)
        _copy_run(fx, p * ct + ca + cb + cc, fd, p * cd, cd)
    return a


MAX_POOL_NHWC = serial_and_parallel(_max_pool_nhwc, "max_pool_nhwc")
WINDOW_AVERAGE_NHWC = serial_and_parallel(_window_average, "window_average_nhwc")
LONG_WINDOW_AVERAGE_NHWC = serial_and_parallel(_long_window_average, "long_window_average_nhwc")
# by count of pieces (separate names: a whole method imports a pair's items by index)
CAT2_NHWC = serial_and_parallel(_cat2, "cat2_nhwc")
CAT3_NHWC = serial_and_parallel(_cat3, "cat3_nhwc")
CAT4_NHWC = serial_and_parallel(_cat4, "cat4_nhwc")
SPLIT2_NHWC = serial_and_parallel(_split2, "split2_nhwc")
SPLIT3_NHWC = serial_and_parallel(_split3, "split3_nhwc")
SPLIT4_NHWC = serial_and_parallel(_split4, "split4_nhwc")
_CATS = (CAT2_NHWC, CAT3_NHWC, CAT4_NHWC)
_SPLITS = (SPLIT2_NHWC, SPLIT3_NHWC, SPLIT4_NHWC)

Step = tuple[Any, tuple[Any, ...]]

# ---------------------------------------------------------------------------
# load time: checks, memory-order views, tap tables


def _pixels_last(a: Any, dtype: np.dtype | None = None) -> np.ndarray | None:
    """The (N, H, W, C) C-contiguous view of a 4-D channels-last float array (of
    ``dtype`` when given), or None."""
    if not isinstance(a, np.ndarray) or a.dtype not in FLOATS or a.size == 0:
        return None
    if (dtype is not None and a.dtype != dtype) or not channels_last(a):
        return None
    return a.transpose(0, 2, 3, 1)


def _operands(x: Any, out: Any, out_hw: tuple[int, int] | None) -> tuple | None:
    """Memory-order views of ``x`` and a writeable ``out`` of x's N, C and dtype (and
    spatial size ``out_hw`` when given) that shares no memory with it, or None."""
    xv = _pixels_last(x)
    if xv is None:
        return None
    ov = _pixels_last(out, x.dtype)
    if ov is None or not out.flags.writeable or out.shape[:2] != x.shape[:2]:
        return None
    if (out_hw is not None and out.shape[2:] != out_hw) or np.shares_memory(x, out):
        return None
    return xv, ov


def _taps(n_in: int, n_out: int, k: int, s: int, p: int, d: int) -> np.ndarray:
    """Per output position: (the first input position of its window inside the input,
    how many of its k taps, d apart, are inside)."""
    table = np.zeros((n_out, 2), np.int64)
    for o in range(n_out):
        inside = [o * s - p + t * d for t in range(k) if 0 <= o * s - p + t * d < n_in]
        if inside:
            table[o] = (inside[0], len(inside))
    return table


def _spans(n_in: int, n_out: int) -> np.ndarray:
    """Adaptive pooling's windows along one axis as (first position, length)."""
    table = np.zeros((n_out, 2), np.int64)
    for o in range(n_out):
        start, stop = o * n_in // n_out, -(-(o + 1) * n_in // n_out)
        table[o] = (start, stop - start)
    return table


def _batched(cols: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``cols`` (first, count) with three more columns, the batches of four output
    columns whose windows have as many taps, their first ones evenly spaced: 4 where
    one starts (else 1), its step between first columns, and the output column it
    starts at. The last batch of a row may start before the walk reaches it (its first
    pixels computed twice) rather than leave up to three pixels alone. None where a
    pixel of ``x`` (N, H, W, C) fills four vectors: one pixel's four vectors, read from
    one contiguous run, fold faster then (measured: 64 channels 8% faster, 96 12%;
    batches of fewer channels 1.2-1.6x faster than single pixels)."""
    n = len(cols)
    plan = np.zeros((n, 5), np.int64)
    plan[:, :2] = cols
    plan[:, 2] = 1
    plan[:, 4] = np.arange(n)
    if x.shape[3] >= 4 * simd.lanes(x.dtype):
        return plan

    def uniform(b: int) -> bool:
        group = cols[b : b + 4]
        steps = np.diff(group[:, 0])
        return len(group) == 4 and (group[:, 1] == group[0, 1]).all() and (steps == steps[0]).all()

    o = 0
    while o < n:
        if uniform(o):
            plan[o, 2:] = (4, cols[o + 1, 0] - cols[o, 0], o)
            o += 4
        elif n >= 4 and n - 4 < o and uniform(n - 4):
            plan[o, 2:] = (4, cols[n - 3, 0] - cols[n - 4, 0], n - 4)
            o = n
        else:
            o += 1
    return plan


# Work (outputs times taps of a pool, elements a concatenation or split copies) from which a
# step of more than one task takes its parallel compilation: far below
# jit.variants.PARALLEL_WORK, since a serial step between parallel convolutions gathers
# its whole output in one core's cache, which the next convolution's other thread then
# reads from that core. SqueezeNet 1.1 at two threads (its fire modules' concatenations of
# 27x27 and 13x13 were serial: a 1x1 convolution after one took 101 -> 144 us, a max pool
# 35 -> 88): 4.46 -> 3.72 ms a call (3.64 from 4096), one thread 6.92 -> 6.84 (7.15);
# MobileNetV3-Small unchanged. Prioritised runs on the loaded 2-core VM, alternated.
PARALLEL_ELEMENTS = 1 << 14


def _variant(variants: tuple[Any, Any], work: int, tasks: int) -> Any:
    """The serial or parallel compilation: the parallel one from :data:`PARALLEL_ELEMENTS`
    where there is more than one task and numba can run more than one thread."""
    return variants[1] if tasks > 1 and work >= PARALLEL_ELEMENTS and can_thread() else variants[0]


def _average(xv: np.ndarray, ov: np.ndarray, rows: np.ndarray, cols: np.ndarray,
             divisor: np.ndarray) -> Step:  # fmt: skip
    """The window-average step over tap tables (:func:`_taps`, :func:`_spans`) and
    divisors (OH, OW)."""
    tasks = ov.shape[0] * ov.shape[1]
    longest = int(rows[:, 1].max() * cols[:, 1].max())
    # float64 sums whole; float32 ones in runs of FLOAT32_RUN pixels when longer
    divisor = np.ascontiguousarray(divisor, dtype=xv.dtype)
    work = int(ov.size * max(longest, 1))
    if xv.dtype == np.float32 and longest > FLOAT32_RUN:
        shape = (tasks, xv.shape[3])
        run, acc = np.zeros(shape, xv.dtype), np.zeros(shape, np.float64)
        function = _variant(LONG_WINDOW_AVERAGE_NHWC, work, tasks)
        return function, (xv, ov, rows, cols, divisor, run, acc, FLOAT32_RUN)
    function = _variant(WINDOW_AVERAGE_NHWC, work, tasks)
    return function, (xv, ov, rows, _batched(cols, xv), divisor)


# ---------------------------------------------------------------------------
# the steps


def max_pool2d_step(
    input: Any, out: Any, kernel: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: Any
) -> Step | None:
    """Values of ``max_pool2d_with_indices`` of channels-last ``input`` into channels-last
    ``out``, or None."""
    try:
        k, s, p, d, ohw = pool._pool_geometry(
            "max_pool2d_with_indices", input, kernel, stride, padding, dilation, ceil_mode, True
        )
    except (KernelError, TypeError, ValueError, AttributeError):
        return None
    views = _operands(input, out, ohw)
    if views is None:
        return None
    xv, ov = views
    h, w = xv.shape[1:3]
    rows = _taps(h, ohw[0], k[0], s[0], p[0], d[0])
    cols = _batched(_taps(w, ohw[1], k[1], s[1], p[1], d[1]), xv)
    lowest = np.full(1, -np.inf, xv.dtype)
    work = ov.size * k[0] * k[1]
    function = _variant(MAX_POOL_NHWC, work, ov.shape[0] * ov.shape[1])
    return function, (xv, ov, lowest, rows, cols, d[0], d[1])


def avg_pool2d_step(
    input: Any,
    out: Any,
    kernel: Any,
    stride: Any,
    padding: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    divisor_override: Any,
) -> Step | None:
    """``avg_pool2d`` of channels-last ``input`` into channels-last ``out``, or None."""
    if divisor_override is not None and (
        isinstance(divisor_override, bool)
        or not isinstance(divisor_override, int)
        or divisor_override == 0
    ):
        return None
    try:
        k, s, p, _, ohw = pool._pool_geometry(
            "avg_pool2d", input, kernel, stride, padding, 1, ceil_mode, False
        )
    except (KernelError, TypeError, ValueError, AttributeError):
        return None
    views = _operands(input, out, ohw)
    if views is None:
        return None
    xv, ov = views
    h, w = xv.shape[1:3]
    if divisor_override is not None:
        divisor = np.full(ohw, float(divisor_override))
    else:
        divisor = pool._avg_divisor((h, w), k, s, p, ohw, bool(count_include_pad), "d")
    rows = _taps(h, ohw[0], k[0], s[0], p[0], 1)
    cols = _taps(w, ohw[1], k[1], s[1], p[1], 1)
    return _average(xv, ov, rows, cols, divisor)


def adaptive_avg_pool2d_step(input: Any, out: Any) -> Step | None:
    """``_adaptive_avg_pool2d`` of channels-last ``input`` to out's spatial size, or None."""
    views = _operands(input, out, None)
    if views is None:
        return None
    xv, ov = views
    (h, w), (oh, ow) = xv.shape[1:3], ov.shape[1:3]
    rows, cols = _spans(h, oh), _spans(w, ow)
    counts = rows[:, 1][:, None] * cols[:, 1][None, :]
    return _average(xv, ov, rows, cols, counts.astype(np.float64))


def mean_hw_step(input: Any, out: Any) -> Step | None:
    """``mean.dim`` over H and W of channels-last ``input`` into ``out`` (N, C, 1, 1) or
    a C-contiguous (N, C), or None."""
    if isinstance(out, np.ndarray) and out.ndim == 2:
        if not out.flags.c_contiguous or not isinstance(input, np.ndarray) or input.ndim != 4:
            return None
        out = out.reshape(*out.shape, 1, 1)  # (a view: the same memory, (N, C, 1, 1))
    views = _operands(input, out, (1, 1))
    if views is None:
        return None
    xv, ov = views
    h, w = xv.shape[1:3]
    rows, cols = np.array([[0, h]], np.int64), np.array([[0, w]], np.int64)
    return _average(xv, ov, rows, cols, np.full((1, 1), float(h * w)))


def _pixel_rows(a: Any, dtype: np.dtype, n: int, hw: tuple[int, int]) -> np.ndarray | None:
    """A channels-last array of ``dtype``, batch ``n`` and spatial size ``hw`` as its
    (pixels, channels) C-contiguous view, or None."""
    v = _pixels_last(a, dtype)
    if v is None or a.shape[0] != n or a.shape[2:] != hw:
        return None
    return v.reshape(-1, a.shape[1])


def cat_channels_step(inputs: Any, out: Any) -> Step | None:
    """``cat`` along dim 1 of 2 to 4 channels-last ``inputs`` into channels-last ``out``,
    or None."""
    if not isinstance(inputs, (list, tuple)) or not 2 <= len(inputs) <= 4:
        return None
    if not isinstance(out, np.ndarray) or out.ndim != 4 or not out.flags.writeable:
        return None
    n, hw = out.shape[0], out.shape[2:]
    rows = [_pixel_rows(a, out.dtype, n, hw) for a in [*inputs, out]]
    if any(r is None for r in rows) or sum(a.shape[1] for a in inputs) != out.shape[1]:
        return None
    if any(np.shares_memory(a, out) for a in inputs):
        return None
    function = _variant(_CATS[len(inputs) - 2], out.size, rows[-1].shape[0])
    return function, (*rows[:-1], rows[-1])


def split_channels_step(input: Any, outs: Any) -> Step | None:
    """``split_with_sizes`` / ``split`` along dim 1 of channels-last ``input`` into 2 to
    4 channels-last ``outs``, or None."""
    if not isinstance(outs, (list, tuple)) or not 2 <= len(outs) <= 4:
        return None
    if not isinstance(input, np.ndarray) or input.ndim != 4:
        return None
    n, hw = input.shape[0], input.shape[2:]
    rows = [_pixel_rows(a, input.dtype, n, hw) for a in [input, *outs]]
    if any(r is None for r in rows) or sum(o.shape[1] for o in outs) != input.shape[1]:
        return None
    if not all(o.flags.writeable for o in outs) or any(np.shares_memory(input, o) for o in outs):
        return None
    if any(np.shares_memory(a, b) for i, a in enumerate(outs) for b in outs[i + 1 :]):
        return None
    function = _variant(_SPLITS[len(outs) - 2], input.size, rows[0].shape[0])
    return function, tuple(rows)
