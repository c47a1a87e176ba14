"""Pooling kernels: max pool (with indices and its backward), average pool, adaptive average pool.

Window reductions run separably: a row pass folds the kernel's columns into a
buffer of shape (..., rows, OW), then a column pass folds its rows into the
output, so a k x k window costs 2(k-1) ufunc calls instead of k*k. Padding is
a border of the identity (0 for sums, the lowest value for maxima) around a
copy of the input. Max pooling takes the first maximum of each window in
row-major order and propagates NaN (the index of a NaN window is its last NaN),
as torch does; its indices are found tap by tap: for each kernel offset, one
strided slice of the input (only the rectangle of outputs whose input lies
inside the image) is compared with the maxima.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from pyexecutorch.kernels.common import fit
from pyexecutorch.kernels.conv import geometry
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.kernels.scratch import scratch

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


def _pair(value, name: str, op: str, default=None) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    value = tuple(int(v) for v in value)
    if len(value) == 0 and default is not None:
        return default
    if len(value) == 1:
        return (value[0], value[0])
    if len(value) != 2:
        raise KernelError(f"{op}: {name} must have 1 or 2 entries, got {list(value)}")
    return value


def _pool_geometry(op, x, kernel_size, stride, padding, dilation, ceil_mode, max_pool):
    if x.ndim not in (3, 4):
        raise KernelError(f"{op}: input must be 3-D (C, H, W) or 4-D (N, C, H, W), got {x.shape}")
    k = _pair(kernel_size, "kernel_size", op)
    s = _pair(stride, "stride", op, default=k)
    p = _pair(padding, "padding", op)
    d = _pair(dilation, "dilation", op)
    if min(k) <= 0:
        raise KernelError(f"{op}: kernel_size must be positive, got {list(k)}")
    if min(s) <= 0:
        raise KernelError(f"{op}: stride must be positive, got {list(s)}")
    if min(d) <= 0:
        raise KernelError(f"{op}: dilation must be positive, got {list(d)}")
    if min(p) < 0:
        raise KernelError(f"{op}: padding must be non-negative, got {list(p)}")
    for i in range(2):
        limit = ((k[i] - 1) * d[i] + 1) // 2 if max_pool else k[i] // 2
        if p[i] > limit:
            raise KernelError(
                f"{op}: padding {list(p)} must be at most half of the effective kernel size "
                f"{list(k)} (dilation {list(d)})"
            )
    h, w = x.shape[-2:]
    if 0 in x.shape[-3:]:
        raise KernelError(
            f"{op}: input of shape {x.shape} must have non-empty channel and spatial dims"
        )
    oh = geometry.out_size(h, k[0], s[0], d[0], p[0], p[0], ceil_mode)
    ow = geometry.out_size(w, k[1], s[1], d[1], p[1], p[1], ceil_mode)
    if oh <= 0 or ow <= 0:
        raise KernelError(
            f"{op}: output size ({oh}, {ow}) is too small for input {x.shape}, kernel {list(k)}, "
            f"stride {list(s)}, padding {list(p)}, dilation {list(d)}"
        )
    return k, s, p, d, (oh, ow)


@lru_cache(maxsize=256)
def _pool_plan(hw, k, s, p, d, ohw, with_index):
    """Per tap: (output rectangle, input slices, flat input index of each output or None)."""
    h, w = hw
    oh, ow = ohw
    ops = []
    for i in range(k[0]):
        lo_h, hi_h = geometry.outputs_reading(h, oh, s[0], p[0], d[0], i)
        if lo_h >= hi_h:
            continue
        for j in range(k[1]):
            lo_w, hi_w = geometry.outputs_reading(w, ow, s[1], p[1], d[1], j)
            if lo_w >= hi_w:
                continue
            ih0 = lo_h * s[0] - p[0] + i * d[0]
            iw0 = lo_w * s[1] - p[1] + j * d[1]
            src = (
                slice(ih0, ih0 + (hi_h - lo_h - 1) * s[0] + 1, s[0]),
                slice(iw0, iw0 + (hi_w - lo_w - 1) * s[1] + 1, s[1]),
            )
            dst = (slice(lo_h, hi_h), slice(lo_w, hi_w))
            idx = None
            if with_index:
                rows = np.arange(ih0, ih0 + (hi_h - lo_h) * s[0], s[0], dtype=np.int64)
                cols = np.arange(iw0, iw0 + (hi_w - lo_w) * s[1], s[1], dtype=np.int64)
                idx = rows[:, None] * w + cols[None, :]
            ops.append((dst, src, idx))
    return tuple(ops)


@lru_cache(maxsize=256)
def separable_geometry(hw, k, s, p, d, ohw):
    """The padded extent and the tap slices of a separable window reduction.

    Returns ``(hp, wp, padded, cols, rows)``: the padded image extent that
    every window fits in, whether windows reach outside the image (then the
    source is a padded copy, the image at offset ``p``), the column slice of
    each kernel column for the row pass and the row slice of each kernel row
    for the column pass.
    """
    (h, w), (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow) = hw, k, s, p, d, ohw
    hp = max(ph + h, geometry.windows_span(oh, kh, sh, dh))
    wp = max(pw + w, geometry.windows_span(ow, kw, sw, dw))
    padded = (ph, pw) != (0, 0) or hp > h or wp > w
    cols = tuple(slice(j * dw, j * dw + (ow - 1) * sw + 1, sw) for j in range(kw))
    rows = tuple(slice(i * dh, i * dh + (oh - 1) * sh + 1, sh) for i in range(kh))
    return hp, wp, padded, cols, rows


def separable_steps(ufunc, src, cols, rows, tmp, out) -> tuple[list, np.ndarray]:
    """The ``ufunc(a, b, out=o)`` calls that fold every window of ``src`` into ``out``
    (a row pass into ``tmp``, then a column pass), as ``(a, b, o)`` triples, and the
    view that holds the result: ``out``, or a view of ``src`` / ``tmp`` when the kernel
    has a single row or column (nothing to fold: the caller copies it).

    Each call is ``ufunc(later, earlier)``: np.maximum returns its second argument on
    ties, so the first of equal maxima (row-major) wins, as in torch.
    """
    steps = []
    if len(cols) == 1:
        r = src[..., cols[0]]
    else:
        steps.append((src[..., cols[1]], src[..., cols[0]], tmp))
        steps += [(src[..., c], tmp, tmp) for c in cols[2:]]
        r = tmp
    if len(rows) == 1:
        return steps, r[..., rows[0], :]
    steps.append((r[..., rows[1], :], r[..., rows[0], :], out))
    steps += [(r[..., q, :], out, out) for q in rows[2:]]
    return steps, out


def separable_reduce(ufunc, src, cols, rows, tmp, out) -> np.ndarray:
    """Run :func:`separable_steps`; returns the view that holds the result."""
    steps, res = separable_steps(ufunc, src, cols, rows, tmp, out)
    for a, b, o in steps:
        ufunc(a, b, out=o)
    return res


@lru_cache(maxsize=256)
def _first_index(hw, s, p, d, ohw) -> np.ndarray:
    def first(n_out, s_, p_, d_):
        start = np.arange(n_out, dtype=np.int64) * s_ - p_
        neg = start < 0
        start[neg] += d_ * (-(start[neg] // d_))
        return start

    idx = first(ohw[0], s[0], p[0], d[0])[:, None] * hw[1] + first(ohw[1], s[1], p[1], d[1])
    idx.flags.writeable = False
    return idx


def _lowest(dt: np.dtype):
    if dt.kind == "f":
        return -np.inf
    if dt.kind in "iu":
        return np.iinfo(dt).min
    return False


_MAXPOOL_SIGNATURES: dict[tuple, tuple] = {}


def _maxpool_signature(x, kernel_size, stride, padding, dilation, ceil_mode):
    op = "max_pool2d_with_indices"
    if x.dtype.kind not in "fiu" or x.dtype == np.bool_:
        raise KernelError(f"{op}: dtype {x.dtype} is not supported")
    k, s, p, d, ohw = _pool_geometry(op, x, kernel_size, stride, padding, dilation, ceil_mode, True)
    h, w = x.shape[-2:]
    # Non-overlapping windows inside the image: pool by reshaping into windows.
    windows = (
        s == k
        and p == (0, 0)
        and d == (1, 1)
        and ohw[0] * k[0] <= h
        and ohw[1] * k[1] <= w
        and k[0] * k[1] > 1
    )
    win = None
    if windows:
        rows = np.arange(ohw[0], dtype=np.int64) * (k[0] * w)
        cols = np.arange(ohw[1], dtype=np.int64) * k[1]
        base = rows[:, None] + cols[None, :]
        offs = (np.arange(k[0], dtype=np.int64)[:, None] * w + np.arange(k[1])).reshape(-1)
        base.flags.writeable = offs.flags.writeable = False
        win = (base, offs)
    return k, s, p, d, ohw, x.shape[:-2] + ohw, win


def _maxpool_windows(x, k, ohw, shape, win, o, ix) -> bool:
    """Pool non-overlapping windows; False (nothing final) if a window holds NaN."""
    lead = x.shape[:-2]
    nl = len(lead)
    xv = x[..., : ohw[0] * k[0], : ohw[1] * k[1]].reshape(lead + (ohw[0], k[0], ohw[1], k[1]))
    wshape = shape + (k[0] * k[1],)
    buf = scratch("maxpool-win", wshape, x.dtype)
    np.copyto(buf.reshape(shape + k), xv.transpose(*range(nl), nl, nl + 2, nl + 1, nl + 3))
    # (over the taps reversed: the reduction returns its later operand on ties, so the
    # first of equal maxima (-0.0 before 0.0) wins, as in torch)
    np.maximum.reduce(buf[..., ::-1], axis=-1, out=o)
    if x.dtype.kind == "f" and np.isnan(o).any():
        return False  # torch takes the last NaN of a window, argmax the first
    am = scratch("maxpool-argmax", shape, np.intp)
    np.argmax(buf, axis=-1, out=am)
    base, offs = win
    np.take(offs, am, out=ix)
    np.add(ix, base, out=ix)
    return True


@kernel("aten::max_pool2d_with_indices.out", n_outs=2)
def max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode, out, indices):
    try:
        key = (
            self.shape,
            self.dtype,
            tuple(kernel_size),
            tuple(stride),
            tuple(padding),
            tuple(dilation),
            ceil_mode,
        )
        sig = _MAXPOOL_SIGNATURES.get(key)
    except TypeError:
        key = sig = None
    if sig is None:
        sig = _maxpool_signature(self, kernel_size, stride, padding, dilation, ceil_mode)
        if key is not None:
            if len(_MAXPOOL_SIGNATURES) >= 512:
                _MAXPOOL_SIGNATURES.clear()
            _MAXPOOL_SIGNATURES[key] = sig
    k, s, p, d, ohw, shape, win = sig
    o = fit(out, shape)
    ix = fit(indices, shape)
    if o.size == 0:
        return o, ix
    if (
        win is not None
        and o.dtype == self.dtype
        and ix.dtype == np.int64
        and _maxpool_windows(self, k, ohw, shape, win, o, ix)
    ):
        return o, ix
    plan = _pool_plan(self.shape[-2:], k, s, p, d, ohw, True)
    # Values: running maximum over the taps (np.maximum propagates NaN like torch).
    best = o if o.dtype == self.dtype else scratch("maxpool-best", shape, self.dtype)
    best.fill(_lowest(self.dtype))
    for dst, src, _ in plan:
        b = best[..., dst[0], dst[1]]
        np.maximum(self[..., src[0], src[1]], b, out=b)  # ties keep b: the first maximum
    # Indices: the first tap (row-major) equal to the maximum; walk backwards so
    # the earliest match is written last. A window with no element inside the
    # image keeps torch's initial index (its first tap moved inside by dilation).
    t = ix if ix.dtype == np.int64 else scratch("maxpool-idx", shape, np.int64)
    t[...] = _first_index(self.shape[-2:], s, p, d, ohw)
    mask = scratch("maxpool-mask", shape, np.bool_)
    for dst, src, idx in reversed(plan):
        m = mask[..., dst[0], dst[1]]
        np.equal(self[..., src[0], src[1]], best[..., dst[0], dst[1]], out=m)
        np.copyto(t[..., dst[0], dst[1]], idx, where=m)
    if self.dtype.kind == "f" and np.isnan(best).any():
        # A NaN window's index is its last NaN.
        for dst, src, idx in plan:
            m = mask[..., dst[0], dst[1]]
            v = self[..., src[0], src[1]]
            # (v != v, not np.isnan: numpy 2.4's isnan writes a strided
            # 4-D boolean out= to the wrong places)
            np.not_equal(v, v, out=m)
            np.copyto(t[..., dst[0], dst[1]], idx, where=m)
    if best is not o:
        np.copyto(o, best, casting="unsafe")
    if t is not ix:
        np.copyto(ix, t, casting="unsafe")
    return o, ix


@kernel("aten::max_pool2d_with_indices_backward.grad_input")
def max_pool2d_with_indices_backward(
    grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices, grad_input
):
    op = "max_pool2d_with_indices_backward"
    _, _, _, _, ohw = _pool_geometry(
        op, self, kernel_size, stride, padding, dilation, ceil_mode, True
    )
    shape = self.shape[:-2] + ohw
    if grad_output.shape != shape:
        raise KernelError(f"{op}: grad_output must have shape {shape}, got {grad_output.shape}")
    if indices.shape != shape:
        raise KernelError(f"{op}: indices must have shape {shape}, got {indices.shape}")
    if indices.dtype.kind not in "iu":
        raise KernelError(f"{op}: indices must be an integer tensor, got {indices.dtype}")
    if grad_output.dtype.kind != "f":
        raise KernelError(f"{op}: grad_output must be floating point, got {grad_output.dtype}")
    gi = fit(grad_input, self.shape)
    h, w = self.shape[-2:]
    planes = math.prod(self.shape[:-2])
    hw = h * w
    idx = indices.reshape(planes, -1).astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= hw):
        raise KernelError(f"{op}: indices must lie in [0, {hw}) for an input plane of {h}x{w}")
    flat = (idx + (np.arange(planes, dtype=np.int64) * hw)[:, None]).ravel()
    acc = np.bincount(flat, weights=grad_output.reshape(-1), minlength=planes * hw)
    np.copyto(gi, acc.reshape(self.shape), casting="unsafe")
    return gi


@lru_cache(maxsize=256)
def _avg_divisor(hw, k, s, p, ohw, count_include_pad, char):
    """The (OH, OW) divisor of each window (window size, with or without padding)."""
    h, w = hw

    def sizes(n_in, n_out, k_, s_, p_):
        start = np.arange(n_out, dtype=np.int64) * s_ - p_
        end = np.minimum(start + k_, n_in + p_)
        full = end - start
        valid = np.minimum(end, n_in) - np.maximum(start, 0)
        return full, valid

    fh, vh = sizes(h, ohw[0], k[0], s[0], p[0])
    fw, vw = sizes(w, ohw[1], k[1], s[1], p[1])
    div = fh[:, None] * fw[None, :] if count_include_pad else vh[:, None] * vw[None, :]
    div = div.astype(char)
    div.flags.writeable = False
    return div


@kernel("aten::avg_pool2d.out")
def avg_pool2d(
    self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out
):
    op = "avg_pool2d"
    dt = self.dtype
    if dt.kind not in "f" and dt != np.int64:
        raise KernelError(f"{op}: dtype {dt} is not supported (need float or int64)")
    if divisor_override is not None and divisor_override == 0:
        raise KernelError(f"{op}: divisor_override must be non-zero")
    k, s, p, _, ohw = _pool_geometry(op, self, kernel_size, stride, padding, 1, ceil_mode, False)
    shape = self.shape[:-2] + ohw
    o = fit(out, shape)
    if o.size == 0:
        return o
    cdt = _F32 if dt == _F16 else dt
    acc = o if o.dtype == cdt else scratch("avgpool-acc", shape, cdt)
    h, w = self.shape[-2:]
    if cdt.kind == "f" and s == k and p == (0, 0) and ohw[0] * k[0] <= h and ohw[1] * k[1] <= w:
        # Non-overlapping windows inside the image: one reduction over a
        # window view, every divisor the window size (or the override).
        lead = self.shape[:-2]
        xv = self[..., : ohw[0] * k[0], : ohw[1] * k[1]].reshape(
            lead + (ohw[0], k[0], ohw[1], k[1])
        )
        nl = len(lead)
        np.add.reduce(xv, axis=(nl + 1, nl + 3), out=acc, dtype=cdt)
        np.divide(acc, k[0] * k[1] if divisor_override is None else divisor_override, out=acc)
        if acc is not o:
            np.copyto(o, acc, casting="unsafe")
        return o
    if divisor_override is not None:
        div = divisor_override
    else:
        div = _avg_divisor(self.shape[-2:], k, s, p, ohw, bool(count_include_pad), cdt.char)
    if cdt.kind == "f":
        _avg_separable(self, k, s, p, ohw, div, acc)
    else:
        plan = _pool_plan(self.shape[-2:], k, s, p, (1, 1), ohw, False)
        acc.fill(0)
        for dst, src, _ in plan:
            a = acc[..., dst[0], dst[1]]
            np.add(a, self[..., src[0], src[1]], out=a, casting="unsafe")
        # Integer average: C-style division (truncates toward zero).
        q = np.floor_divide(acc, div)
        r = acc - q * div
        q += (r != 0) & ((acc < 0) != (np.asarray(div) < 0))
        acc[...] = q
    if acc is not o:
        np.copyto(o, acc, casting="unsafe")
    return o


def avg_pool_buffers(lead, hw, k, s, p, ohw, cdt, make=None):
    """The padded copy (zero border) and the row-pass buffer of a separable average.

    ``make(key, shape, dtype)`` returns a zeroed buffer (default: a fresh array); a
    buffer keyed by the padded geometry keeps its zero border, since every user of
    it writes the same interior.
    """
    make = make or (lambda key, shape, dt: np.zeros(shape, dt))
    hp, wp, _, cols, _ = separable_geometry(hw, k, s, p, (1, 1), ohw)
    key = ("avgpool-pad", hw, p)
    xp = make(key, lead + (hp, wp), cdt)
    tmp = make("avgpool-rows", lead + (hp, ohw[1]), cdt) if len(cols) > 1 else None
    return xp, tmp


def _avg_separable(x, k, s, p, ohw, div, acc) -> None:
    """Window sums over a zero-padded copy of ``x``, divided by ``div``, into ``acc``."""
    h, w = x.shape[-2:]
    lead = x.shape[:-2]
    _, _, _, cols, rows = separable_geometry((h, w), k, s, p, (1, 1), ohw)
    xp, tmp = avg_pool_buffers(lead, (h, w), k, s, p, ohw, acc.dtype, scratch)
    # (+ 0.0 also turns -0.0 into 0.0: torch's sums start from 0)
    np.add(x, 0.0, out=xp[..., p[0] : p[0] + h, p[1] : p[1] + w])
    r = separable_reduce(np.add, xp, cols, rows, tmp, acc)
    np.divide(r, div, out=acc)


@lru_cache(maxsize=128)
def _adaptive_windows(n_in: int, n_out: int) -> tuple[slice, ...]:
    """The input window of each output of adaptive pooling along one axis."""
    return tuple(slice((o * n_in) // n_out, -((-(o + 1) * n_in) // n_out)) for o in range(n_out))


@lru_cache(maxsize=128)
def adaptive_counts(hw: tuple[int, int], ohw: tuple[int, int], char: str) -> np.ndarray:
    """(OH, OW) element count of each adaptive window."""
    rows, cols = _adaptive_windows(hw[0], ohw[0]), _adaptive_windows(hw[1], ohw[1])
    hs = np.array([r.stop - r.start for r in rows])
    ws = np.array([c.stop - c.start for c in cols])
    cnt = (hs[:, None] * ws[None, :]).astype(char)
    cnt.flags.writeable = False
    return cnt


def adaptive_steps(x, tmp, t) -> list:
    """The reductions summing each (overlapping, uneven) adaptive window of ``x`` into
    ``t``: per output row, a sum over its input rows into ``tmp (..., OH, W)``, then
    per output column a sum over its columns. Sums, not products with averaging
    weights: a weight of 0 times inf would turn other windows NaN."""
    (h, w), (oh, ow) = x.shape[-2:], t.shape[-2:]
    steps = [(x[..., r, :], -2, tmp[..., i, :]) for i, r in enumerate(_adaptive_windows(h, oh))]
    steps += [(tmp[..., c], -1, t[..., j]) for j, c in enumerate(_adaptive_windows(w, ow))]
    return steps


def adaptive_arguments(self: np.ndarray, output_size: object) -> tuple[int, ...]:
    """The result shape of an adaptive average pool, or KernelError (the family's argument
    check, see kernels.pool.checks)."""
    op = "_adaptive_avg_pool2d"
    if self.ndim not in (3, 4):
        raise KernelError(f"{op}: input must be 3-D or 4-D, got shape {self.shape}")
    if self.dtype.kind != "f":
        raise KernelError(f"{op}: dtype {self.dtype} is not supported (need floating point)")
    oh, ow = _pair(output_size, "output_size", op)
    if oh < 0 or ow < 0:
        raise KernelError(f"{op}: output_size must be non-negative, got {list(output_size)}")
    h, w = self.shape[-2:]
    if (h == 0 or w == 0) and oh * ow > 0:
        raise KernelError(f"{op}: input of shape {self.shape} has an empty spatial dim")
    return self.shape[:-2] + (oh, ow)


@kernel("aten::_adaptive_avg_pool2d.out")
def adaptive_avg_pool2d(self, output_size, out):
    shape = adaptive_arguments(self, output_size)
    oh, ow = shape[-2:]
    h, w = self.shape[-2:]
    o = fit(out, shape)
    if o.size == 0:
        return o
    cdt = _F32 if self.dtype == _F16 else self.dtype
    x = self if self.dtype == cdt else self.astype(cdt)
    t = o if o.dtype == cdt else np.empty(shape, cdt)
    if (oh, ow) == (h, w):
        np.add(x, 0.0, out=t)  # (+ 0.0: -0.0 averages to 0.0, as torch's sums start from 0)
    elif oh == 1 and ow == 1:
        np.add.reduce(x, axis=(-2, -1), keepdims=True, out=t)
        np.divide(t, h * w, out=t)
    elif h % oh == 0 and w % ow == 0:
        xr = x.reshape(x.shape[:-2] + (oh, h // oh, ow, w // ow))
        np.add.reduce(xr, axis=(-3, -1), out=t)
        np.divide(t, (h // oh) * (w // ow), out=t)
    else:
        tmp = scratch("adaptive-rows", shape[:-1] + (w,), cdt)
        for a, axis, dst in adaptive_steps(x, tmp, t):
            np.add.reduce(a, axis=axis, out=dst)
        np.divide(t, adaptive_counts((h, w), (oh, ow), cdt.char), out=t)
    if t is not o:
        np.copyto(o, t, casting="unsafe")
    return o
