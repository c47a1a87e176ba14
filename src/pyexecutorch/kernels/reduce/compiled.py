"""Compiled (numba) forms of softmax, log-softmax, mean, sum, amax, amin, var, prod, max.dim
and cumsum.

Every one of these reduces a run of consecutive axes, so the input is viewed
as ``(a, k, b)`` (``k`` the reduced elements, ``b`` what follows them) and one
loop per ``a`` walks it (a mean or sum over two runs of axes, ``(0, 2)`` of a
3-D tensor, views it as ``(a, k, m, l, b)``): softmax in three passes where numpy makes five to
seven calls, a mean in one where numpy makes two. Sums accumulate in float64
from +0.0 (a mean: a running sum in the input's dtype, as the official kernel's), as numpy's and torch's do (a sum of -0.0 is 0.0); maxima propagate NaN as ``np.maximum`` does. Each pass reads an
element before it writes the same element, so an output may alias its input.
Imported only by the compiled tier; the kernels in ``reduce.py`` and
``norm/norm.py`` stay the reference.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit, prange

from pyexecutorch.jit.arrays import FLOATS, contiguous, dense
from pyexecutorch.jit.math_functions import exp_of
from pyexecutorch.jit.variants import choose, pick, serial_and_parallel
from pyexecutorch.kernels.reduce import compiled_select  # noqa: F401 - its forms register
from pyexecutorch.kernels.registry import compiled_form, fast_path_of, offer

_MAX_DTYPES = (*FLOATS, np.dtype(np.int32), np.dtype(np.int64))
_HALF = np.dtype(np.float16)


def _softmax(x, out, log):  # noqa: ANN001, ANN201
    """Softmax (``log``: log-softmax) of x (a, k, b) along axis 1, into out."""
    a, k, b = x.shape
    if b == 1:  # the usual last-axis softmax: each row's statistics in scalars
        for i in prange(a):  # noqa: B020 - prange is range when serial
            top = _row_top(x, i)
            if log:  # out may be x's memory: x is read again after the sum
                total = 0.0
                for kk in range(k):
                    total += exp_of(x[i, kk, 0] - top)
                shift = np.log(total)
                for kk in range(k):
                    out[i, kk, 0] = (x[i, kk, 0] - top) - shift
            else:
                # the exponentials in a loop of their own (it vectorizes), then summed in
                # eight partial sums: one running sum would wait on each add
                for kk in range(k):
                    out[i, kk, 0] = exp_of(x[i, kk, 0] - top)
                total = _column_sum(out, i)
                for kk in range(k):
                    out[i, kk, 0] = out[i, kk, 0] / total
        return out
    for i in prange(a):  # noqa: B020
        top = np.empty(b, x.dtype)
        total = np.zeros(b, np.float64)
        for jb in range(b):
            top[jb] = x[i, 0, jb]
        for kk in range(1, k):
            for jb in range(b):
                v = x[i, kk, jb]
                if v > top[jb] or v != v:
                    top[jb] = v
        for kk in range(k):
            for jb in range(b):
                e = exp_of(x[i, kk, jb] - top[jb])
                total[jb] += e
                if not log:
                    out[i, kk, jb] = e
        for kk in range(k):
            for jb in range(b):
                if log:
                    out[i, kk, jb] = (x[i, kk, jb] - top[jb]) - np.log(total[jb])
                else:
                    out[i, kk, jb] = out[i, kk, jb] / total[jb]
    return out


@njit(inline="always", error_model="numpy")
def _row_top(x, i):  # noqa: ANN001, ANN201
    """The first of x[i, :, 0]'s largest values, or its first NaN, as one running maximum
    (replaced by a greater value or a NaN) finds it, over eight interleaved maxima (one
    waited on each compare: a ViT-S attention's 6 x 197 rows of 197 took 0.23 ms)."""
    k = x.shape[1]
    first = x[i, 0, 0]
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = first
    nan = first != first
    j = 0
    while j + 8 <= k:
        v0, v1, v2, v3 = x[i, j, 0], x[i, j + 1, 0], x[i, j + 2, 0], x[i, j + 3, 0]
        v4, v5, v6, v7 = x[i, j + 4, 0], x[i, j + 5, 0], x[i, j + 6, 0], x[i, j + 7, 0]
        m0 = v0 if v0 > m0 else m0
        m1 = v1 if v1 > m1 else m1
        m2 = v2 if v2 > m2 else m2
        m3 = v3 if v3 > m3 else m3
        m4 = v4 if v4 > m4 else m4
        m5 = v5 if v5 > m5 else m5
        m6 = v6 if v6 > m6 else m6
        m7 = v7 if v7 > m7 else m7
        nan |= (v0 != v0) | (v1 != v1) | (v2 != v2) | (v3 != v3)
        nan |= (v4 != v4) | (v5 != v5) | (v6 != v6) | (v7 != v7)
        j += 8
    while j < k:
        v = x[i, j, 0]
        m0 = v if v > m0 else m0
        nan |= v != v
        j += 1
    top = max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))
    if nan or top == 0:  # which NaN, or which zero (-0.0 == 0.0): the first, as a scan
        for j in range(k):
            v = x[i, j, 0]
            if v != v or (not nan and v == top):
                return v
    return top


@njit(inline="always", error_model="numpy")
def _column_sum(x, i):  # noqa: ANN001, ANN201
    """The float64 sum of x[i, :, 0] over eight interleaved partial sums."""
    k = x.shape[1]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    j = 0
    while j + 8 <= k:
        s0 += x[i, j, 0]
        s1 += x[i, j + 1, 0]
        s2 += x[i, j + 2, 0]
        s3 += x[i, j + 3, 0]
        s4 += x[i, j + 4, 0]
        s5 += x[i, j + 5, 0]
        s6 += x[i, j + 6, 0]
        s7 += x[i, j + 7, 0]
        j += 8
    while j < k:
        s0 += x[i, j, 0]
        j += 1
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


def _row_sum(x, i, zero):  # noqa: ANN001, ANN201
    """The sum of row i of x (a, k) over eight interleaved partial sums in x's dtype.

    One running sum waits for each addition to finish (about 4 cycles); eight
    independent ones keep the adder busy and vectorize. Rows are at most
    :data:`MAX_ROW` long, so float32 partial sums round no more than numpy's
    pairwise ones by much. ``zero`` is +0.0 in x's dtype: a row of -0.0
    sums to 0.0, as numpy's and torch's sums do.
    """
    k = x.shape[1]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = zero
    j = 0
    while j + 8 <= k:
        s0 += x[i, j]
        s1 += x[i, j + 1]
        s2 += x[i, j + 2]
        s3 += x[i, j + 3]
        s4 += x[i, j + 4]
        s5 += x[i, j + 5]
        s6 += x[i, j + 6]
        s7 += x[i, j + 7]
        j += 8
    while j < k:
        s0 += x[i, j]
        j += 1
    return np.float64(((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)))


# Rows longer than this are summed by numpy (pairwise: its rounding grows more slowly).
MAX_ROW = 1 << 13


row_sum = njit(cache=True, error_model="numpy")(_row_sum)


def _sum_rows(x, out, divisor, zero):  # noqa: ANN001, ANN201
    """out (a,) = the sums of the rows of x (a, k), divided by ``divisor`` unless 0."""
    for i in prange(x.shape[0]):  # noqa: B020
        acc = row_sum(x, i, zero)
        out[i] = acc / divisor if divisor != 0 else acc
    return out


def _sum(x, out, divisor):  # noqa: ANN001, ANN201
    """out (a, b) = the sums of x (a, k, b) over axis 1, divided by ``divisor`` unless 0."""
    a, k, b = x.shape
    for i in prange(a):  # noqa: B020
        acc = np.zeros(b, np.float64)  # (from +0.0: a sum of -0.0 is 0.0)
        for kk in range(k):
            for jb in range(b):
                acc[jb] += x[i, kk, jb]
        for jb in range(b):
            out[i, jb] = acc[jb] / divisor if divisor != 0 else acc[jb]
    return out


def _mean_sequential(x, out, divisor):  # noqa: ANN001, ANN201
    """out (a, b) = the means of x (a, k, b) over axis 1, each a running sum in x's dtype
    from the first element, then +0.0 (the official sum starts from zero, so a sum of
    -0.0 is +0.0), divided by ``divisor``: the official portable kernel's arithmetic, bit
    for bit (the sums above are wider or pairwise)."""
    a, k, b = x.shape
    for i in prange(a):  # noqa: B020
        acc = x[i, 0].copy()
        for kk in range(1, k):
            for jb in range(b):
                acc[jb] += x[i, kk, jb]
        for jb in range(b):
            out[i, jb] = (acc[jb] + 0.0) / divisor
    return out


def _mean_two_sequential(x, out, divisor):  # noqa: ANN001, ANN201
    """out (a, m, b) = the means of x (a, k, m, l, b) over axes 1 and 3, a running sum in
    x's dtype over (k, l) in row-major order (as :func:`_mean_sequential`)."""
    a, k, m, l, b = x.shape  # noqa: E741
    for i in prange(a):  # noqa: B020
        for jm in range(m):
            for jb in range(b):
                acc = x[i, 0, jm, 0, jb]
                for kk in range(k):
                    for ll in range(1 if kk == 0 else 0, l):
                        acc += x[i, kk, jm, ll, jb]
                out[i, jm, jb] = (acc + 0.0) / divisor
    return out


def _amax(x, out):  # noqa: ANN001, ANN201
    """out (a, b) = the maxima of x (a, k, b) over axis 1; NaN wins, as in np.maximum."""
    a, k, b = x.shape
    for i in prange(a):  # noqa: B020
        for jb in range(b):
            out[i, jb] = x[i, 0, jb]
        for kk in range(1, k):
            for jb in range(b):
                v = x[i, kk, jb]
                m = out[i, jb]
                if v > m or v != v:
                    out[i, jb] = v
    return out


def _amin(x, out):  # noqa: ANN001, ANN201
    """out (a, b) = the minima of x (a, k, b) over axis 1; NaN wins, as in np.minimum."""
    a, k, b = x.shape
    for i in prange(a):  # noqa: B020
        for jb in range(b):
            out[i, jb] = x[i, 0, jb]
        for kk in range(1, k):
            for jb in range(b):
                v = x[i, kk, jb]
                m = out[i, jb]
                if v < m or v != v:
                    out[i, jb] = v
    return out


def _max_dim(x, values, indices, largest):  # noqa: ANN001, ANN201
    """values, indices (a, b) = the maxima (``largest``; else minima) of x (a, k, b) over
    axis 1 and where each first occurs; the first NaN wins, as np.argmax finds it."""
    a, k, b = x.shape
    for i in prange(a):  # noqa: B020
        for jb in range(b):
            best = x[i, 0, jb]
            at = 0
            if best == best:
                for kk in range(1, k):
                    v = x[i, kk, jb]
                    if v != v:
                        best, at = v, kk
                        break
                    if (v > best) if largest else (v < best):
                        best, at = v, kk
            values[i, jb] = best
            indices[i, jb] = at
    return values


def _var(x, out, divisor):  # noqa: ANN001, ANN201
    """out (a, b) = the sums of squared deviations from the mean of x (a, k, b) over axis 1,
    divided by ``divisor``; mean and sums in float64."""
    a, k, b = x.shape
    for i in prange(a):  # noqa: B020
        for jb in range(b):
            total = 0.0
            for kk in range(k):
                total += x[i, kk, jb]
            mean = total / k
            sq = 0.0
            for kk in range(k):
                d = x[i, kk, jb] - mean
                sq += d * d
            out[i, jb] = sq / divisor
    return out


def _prod(x, out):  # noqa: ANN001, ANN201
    """out (a, b) = the products of x (a, k, b) over axis 1, in float64."""
    a, k, b = x.shape
    for i in prange(a):  # noqa: B020
        for jb in range(b):
            acc = 1.0
            for kk in range(k):
                acc *= x[i, kk, jb]
            out[i, jb] = acc
    return out


def _sum_two(x, out, divisor):  # noqa: ANN001, ANN201
    """out (a, m, b) = the sums of x (a, k, m, l, b) over axes 1 and 3 (``/ divisor``
    unless 0), in float64 from the first element."""
    a, k, m, l, b = x.shape  # noqa: E741
    for i in prange(a):  # noqa: B020
        for jm in range(m):
            for jb in range(b):
                acc = np.float64(x[i, 0, jm, 0, jb])
                first = True
                for kk in range(k):
                    for ll in range(l):
                        if first:
                            first = False
                            continue
                        acc += x[i, kk, jm, ll, jb]
                out[i, jm, jb] = (acc + 0.0) / divisor if divisor != 0 else acc
    return out


def _cumsum(x, out):  # noqa: ANN001, ANN201
    """out (a, k, b) = the running sums of x (a, k, b) along axis 1, in out's dtype from the
    first element, as np.cumsum adds (integers wrap as it wraps); out may be x."""
    a, k, b = x.shape
    for i in prange(a):  # noqa: B020
        for jb in range(b):
            acc = out.dtype.type(x[i, 0, jb])
            out[i, 0, jb] = acc
            for kk in range(1, k):
                acc += x[i, kk, jb]
                out[i, kk, jb] = acc
    return out


def _int_sum(x, out):  # noqa: ANN001, ANN201
    """out (a, b) = sum of integer or bool x (a, k, b) over k, in out's integer dtype
    (integer sums wrap: any order of additions gives numpy's result)."""
    for i in prange(x.shape[0]):  # noqa: B020 - prange is range when serial
        dst = out[i]
        for j in range(dst.shape[0]):
            dst[j] = 0
        for t in range(x.shape[1]):
            row = x[i, t]
            for j in range(dst.shape[0]):
                dst[j] += row[j]
    return out


def _any(x, out):  # noqa: ANN001, ANN201
    """out (a, b) = whether any element of x (a, k, b) over k is nonzero (NaN is)."""
    if x.shape[2] == 1:  # the last axis: each row scanned up to its first nonzero
        for i in prange(x.shape[0]):  # noqa: B020 - prange is range when serial
            found = False
            for t in range(x.shape[1]):
                if x[i, t, 0] != 0:
                    found = True
                    break
            out[i, 0] = found
        return out
    for i in prange(x.shape[0]):  # noqa: B020 - prange is range when serial
        dst = out[i]
        for j in range(dst.shape[0]):
            dst[j] = False
        for t in range(x.shape[1]):
            row = x[i, t]
            for j in range(dst.shape[0]):
                if row[j] != 0:
                    dst[j] = True
    return out


SOFTMAX = serial_and_parallel(_softmax, "softmax")
INT_SUM = serial_and_parallel(_int_sum, "int_sum")
ANY = serial_and_parallel(_any, "any_over")
SUM = serial_and_parallel(_sum, "sum")
SUM_ROWS = serial_and_parallel(_sum_rows, "sum_rows")
MEAN = serial_and_parallel(_mean_sequential, "mean_sequential")
MEAN_TWO = serial_and_parallel(_mean_two_sequential, "mean_two_sequential")
AMAX = serial_and_parallel(_amax, "amax")
AMIN = serial_and_parallel(_amin, "amin")
MAX_DIM = serial_and_parallel(_max_dim, "max_dim")
VAR = serial_and_parallel(_var, "var")
PROD = serial_and_parallel(_prod, "prod")
SUM_TWO = serial_and_parallel(_sum_two, "sum_two")
CUMSUM = serial_and_parallel(_cumsum, "cumsum")


def axis_runs(shape: tuple[int, ...], dims: Any) -> tuple[int, int, int, int, int] | None:
    """``(a, k, m, l, b)`` viewing ``shape`` with the axes ``dims`` as two runs of
    consecutive axes (``k`` and ``l``), or None when they are not exactly two runs."""
    ndim = len(shape)
    if dims is None or isinstance(dims, int) or len(dims) < 2 or ndim == 0:
        return None
    if not all(isinstance(d, int) and not isinstance(d, bool) and -ndim <= d < ndim for d in dims):
        return None
    axes = sorted(d % ndim for d in dims)
    if len(set(axes)) != len(axes):
        return None
    gaps = [n for n in range(1, len(axes)) if axes[n] != axes[n - 1] + 1]
    if len(gaps) != 1:
        return None
    end1, start2 = axes[gaps[0] - 1] + 1, axes[gaps[0]]
    first, last = axes[0], axes[-1] + 1
    p = math.prod
    return (
        p(shape[:first]),
        p(shape[first:end1]),
        p(shape[end1:start2]),
        p(shape[start2:last]),
        p(shape[last:]),
    )


def axis_run(shape: tuple[int, ...], dims: Any) -> tuple[int, int, int] | None:
    """``(a, k, b)`` viewing ``shape`` with the axes ``dims`` (consecutive) in the middle.

    ``dims`` None or empty means every axis; None is returned when the axes
    are not one consecutive run or not valid for ``shape``.
    """
    ndim = len(shape)
    if dims is None or (not isinstance(dims, int) and len(dims) == 0):
        return 1, math.prod(shape), 1
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if ndim == 0 or not all(isinstance(d, int) and -ndim <= d < ndim for d in dims):
        return None
    axes = sorted(d % ndim for d in dims)
    if len(set(axes)) != len(axes) or axes[-1] - axes[0] != len(axes) - 1:
        return None
    first, last = axes[0], axes[-1] + 1
    return math.prod(shape[:first]), math.prod(shape[first:last]), math.prod(shape[last:])


def _planned(a: Any, dtype: np.dtype, size: int) -> bool:
    return (
        isinstance(a, np.ndarray) and a.dtype == dtype and a.size == size and a.flags.c_contiguous
    )


def _bind(
    variants: tuple,
    x0: np.ndarray,
    o0: np.ndarray,
    x_shape: tuple,
    o_shape: tuple,
    *consts: Any,
    cost: int = 1,
):  # noqa: ANN202
    """``run(x, out)``: a kernel on views of x and out shaped ``x_shape``, ``o_shape`` (made
    at load for the planned ones); its variant chosen for ``cost`` times x's elements."""
    xv, ov = x0.reshape(x_shape), o0.reshape(o_shape)
    load = (xv, ov, *consts)
    work = x0.size * cost
    kern = pick(variants, work, load)

    def run(x: np.ndarray, out: np.ndarray) -> np.ndarray:
        kern(
            xv if x is x0 else contiguous(x, x_shape),
            ov if out is o0 else out.reshape(o_shape),
            *consts,
        )
        return out

    return offer(run, step=(choose(variants, work), load))  # (on the planned arrays)


def _as_kernel(run: Any, out_at: int) -> Any:
    """``run(x, out)`` called as the kernel is: ``x`` first, its out array at ``out_at``.

    The planned call (``step``) is ``run``'s, and the kernel fills its out array.
    """

    def call(*args: Any) -> Any:
        return run(args[0], args[out_at])

    return offer(call, step=fast_path_of(run).step, fills_outputs=True)


def sum_over(x: np.ndarray, out: np.ndarray, layout: tuple[int, int, int], divisor: float):  # noqa: ANN201
    """``run(x, out)`` summing planned ``x`` over the middle of ``layout`` (``/ divisor``),
    or None for rows longer than :data:`MAX_ROW`."""
    a, k, b = layout
    if b == 1 and k > MAX_ROW:
        return None
    if b == 1:
        return _bind(SUM_ROWS, x, out, (a, k), (a,), divisor, x.dtype.type(0.0))
    return _bind(SUM, x, out, layout, (a, b), divisor)


# An element of a softmax (an exponential, a division, two more passes) costs what about
# eight of a sum do: its threads start from an eighth of the sums' size (a ViT-S
# attention's 6 x 197 x 197 took 0.57 ms on one thread, below the sums' threshold).
SOFTMAX_COST = 8


def _softmax_form(log: bool):  # noqa: ANN202
    def form(x: Any, dim: Any, half_to_float: Any, out: Any) -> Any:
        """Softmax of a float32/float64 tensor along one axis, or None."""
        if not dense(x) or x.dtype not in FLOATS or half_to_float:
            return None
        if not isinstance(dim, int) or x.ndim == 0 or x.size == 0:
            return None
        layout = axis_run(x.shape, dim)
        if layout is None or not _planned(out, x.dtype, x.size) or out.shape != x.shape:
            return None
        return _as_kernel(_bind(SOFTMAX, x, out, layout, layout, log, cost=SOFTMAX_COST), 3)

    return form


compiled_form("aten::_softmax.out")(_softmax_form(False))
compiled_form("aten::_log_softmax.out")(_softmax_form(True))


def _reduction(x: Any, dim: Any, out: Any, dtypes: tuple[np.dtype, ...]) -> tuple | None:
    """``(a, k, b)`` of a reduction of ``x`` over ``dim`` into ``out``, or None."""
    if not dense(x) or x.dtype not in dtypes or x.size == 0:
        return None
    layout = axis_run(x.shape, dim)
    if layout is None or not _planned(out, x.dtype, layout[0] * layout[2]):
        return None
    return layout


def _sum_two_runs(x: Any, dim: Any, out: Any, mean: bool) -> Any:
    """A sum (``mean``: mean) of floats over two runs of axes, as the kernel is called."""
    if not dense(x) or x.dtype not in FLOATS or x.size == 0:
        return None
    layout = axis_runs(x.shape, dim)
    if layout is None:
        return None
    a, k, m, l, b = layout  # noqa: E741
    if not _planned(out, x.dtype, a * m * b):
        return None
    if mean:
        return _as_kernel(_bind(MEAN_TWO, x, out, layout, (a, m, b), float(k * l)), 4)
    return _as_kernel(_bind(SUM_TWO, x, out, layout, (a, m, b), 0.0), 4)


@compiled_form("aten::mean.out")
def _mean_form(x: Any, dim: Any, keepdim: Any, dtype: Any, out: Any) -> Any:
    """The mean of float32/float64 values over one or two runs of axes, or None."""
    if dtype is not None and (not isinstance(out, np.ndarray) or out.dtype != x.dtype):
        return None
    layout = _reduction(x, dim, out, FLOATS)
    if layout is None:
        return _sum_two_runs(x, dim, out, True)
    return _as_kernel(_bind(MEAN, x, out, layout, (layout[0], layout[2]), float(layout[1])), 4)


@compiled_form("aten::mean.dtype_out")
def _mean_all_form(x: Any, dtype: Any, out: Any) -> Any:
    """The mean of every float32/float64 value, or None."""
    if dtype is not None and (not isinstance(out, np.ndarray) or out.dtype != x.dtype):
        return None
    layout = _reduction(x, None, out, FLOATS)
    if layout is None:
        return None
    return _as_kernel(_bind(MEAN, x, out, layout, (layout[0], layout[2]), float(layout[1])), 2)


@compiled_form("aten::sum.IntList_out")
def _sum_form(x: Any, dim: Any, keepdim: Any, dtype: Any, out: Any) -> Any:
    """The sum of float32/float64 values over one or two runs of axes, of integers and
    bools into an integer dtype over consecutive axes, or None."""
    if isinstance(x, np.ndarray) and x.dtype.kind in "biu":
        return _int_sum_form(x, dim, out)
    if dtype is not None and (not isinstance(out, np.ndarray) or out.dtype != x.dtype):
        return None
    layout = _reduction(x, dim, out, FLOATS)
    if layout is None:
        return _sum_two_runs(x, dim, out, False)
    run = sum_over(x, out, layout, 0.0)
    return None if run is None else _as_kernel(run, 4)


def _int_sum_form(x: Any, dim: Any, out: Any) -> Any:
    """The sum of integers or bools over consecutive axes into an integer out, or None."""
    if not dense(x) or x.size == 0 or not isinstance(out, np.ndarray) or out.dtype.kind not in "iu":
        return None
    layout = axis_run(x.shape, dim)
    if layout is None or not _planned(out, out.dtype, layout[0] * layout[2]):
        return None
    a, _, b = layout
    return _as_kernel(_bind(INT_SUM, x, out, layout, (a, b)), 4)


def _any_over(x: Any, dim: Any, out: Any, out_at: int) -> Any:
    """``any`` over the consecutive axes ``dim`` (None: all) into a bool out, or None."""
    if not dense(x) or x.size == 0 or x.dtype.kind not in "biuf" or x.dtype == _HALF:
        return None
    layout = axis_run(x.shape, dim)
    if layout is None or not _planned(out, np.dtype(np.bool_), layout[0] * layout[2]):
        return None
    a, _, b = layout
    return _as_kernel(_bind(ANY, x, out, layout, (a, b)), out_at)


@compiled_form("aten::any.out")
def _any_form(x: Any, dim: Any, keepdim: Any, out: Any) -> Any:
    """Whether any element along one axis is nonzero, or None."""
    return _any_over(x, dim, out, 3) if isinstance(dim, int) else None


@compiled_form("aten::any.dims_out")
def _any_dims_form(x: Any, dim: Any, keepdim: Any, out: Any) -> Any:
    """``any`` over consecutive axes (an empty list reduces nothing: left to numpy), or None."""
    return None if dim is not None and len(dim) == 0 else _any_over(x, dim, out, 3)


@compiled_form("aten::any.all_out")
def _any_all_form(x: Any, out: Any) -> Any:
    """Whether any element is nonzero, or None."""
    return _any_over(x, None, out, 1)


def _extremum_form(loops: tuple[Any, Any], which: str) -> Any:
    def form(x: Any, dim: Any, keepdim: Any, out: Any) -> Any:
        layout = _reduction(x, dim, out, _MAX_DTYPES)
        if layout is None:
            return None
        a, _, b = layout
        return _as_kernel(_bind(loops, x, out, layout, (a, b)), 3)

    form.__doc__ = f"The {which} over consecutive axes (floats and int32/int64), or None."
    return form


_amax_form = compiled_form("aten::amax.out")(_extremum_form(AMAX, "maximum"))
_amin_form = compiled_form("aten::amin.out")(_extremum_form(AMIN, "minimum"))


@compiled_form("aten::var.correction_out")
def _var_form(x: Any, dim: Any, correction: Any, keepdim: Any, out: Any) -> Any:
    """The variance of float32/float64 values over consecutive axes, or None."""
    if correction is None:
        correction = 1
    if isinstance(correction, bool) or not isinstance(correction, (int, float)):
        return None
    layout = _reduction(x, dim, out, FLOATS)
    if layout is None:
        return None
    a, k, b = layout
    divisor = float(max(k - correction, 0))
    return _as_kernel(_bind(VAR, x, out, layout, (a, b), divisor), 4)


@compiled_form("aten::prod.int_out")
def _prod_form(x: Any, dim: Any, keepdim: Any, dtype: Any, out: Any) -> Any:
    """The product of float32/float64 values along one axis, or None."""
    if dtype is not None or not isinstance(dim, int) or isinstance(dim, bool):
        return None
    layout = _reduction(x, dim, out, FLOATS)
    if layout is None:
        return None
    a, _, b = layout
    return _as_kernel(_bind(PROD, x, out, layout, (a, b)), 4)


def _extreme_dim_form(largest: bool):  # noqa: ANN202
    def form(x: Any, dim: Any, keepdim: Any, values: Any, indices: Any) -> Any:
        """The maxima (minima) of floats along one axis and their first indices, or None."""
        if not isinstance(dim, int) or isinstance(dim, bool):
            return None
        layout = _reduction(x, dim, values, FLOATS)
        if layout is None or layout[1] == 0:
            return None
        a, _, b = layout
        if not _planned(indices, np.dtype(np.int64), a * b) or np.shares_memory(indices, x):
            return None
        x0, v0, i0 = x, values, indices
        load = (x.reshape(layout), values.reshape(a, b), indices.reshape(a, b), largest)
        kern = pick(MAX_DIM, x.size, load)

        def run(x, dim, keepdim, values, indices):  # noqa: ANN001, ANN202
            if x is not x0 or values is not v0 or indices is not i0:
                xs = contiguous(x, layout)
                kern(xs, values.reshape(a, b), indices.reshape(a, b), largest)
            else:
                kern(*load)
            return values, indices

        return offer(run, step=(choose(MAX_DIM, x.size), load), fills_outputs=True)

    return form


compiled_form("aten::max.dim_max")(_extreme_dim_form(True))
compiled_form("aten::min.dim_min")(_extreme_dim_form(False))


_INT64 = np.dtype(np.int64)


@compiled_form("aten::cumsum.out")
def _cumsum_form(x: Any, dim: Any, dtype: Any, out: Any) -> Any:
    """Running sums along one axis (floats in their dtype, int32/int64 in int64), or None."""
    if dtype is not None or not isinstance(dim, int) or isinstance(dim, bool):
        return None
    if not dense(x) or x.dtype not in _MAX_DTYPES or x.size == 0:
        return None
    layout = axis_run(x.shape, dim)
    want = x.dtype if x.dtype in FLOATS else _INT64
    if layout is None or not _planned(out, want, x.size) or out.shape != x.shape:
        return None
    if np.shares_memory(x, out) and x.ctypes.data != out.ctypes.data:
        return None
    return _as_kernel(_bind(CUMSUM, x, out, layout, layout), 3)
