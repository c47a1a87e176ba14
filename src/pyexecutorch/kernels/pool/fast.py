"""Load-time fast paths for pooling, resampling and constant padding.

Each specializer runs the same numpy operations, in the same order, as its
general kernel (so results are bit-identical), but with every view, index
table, weight table and buffer prepared at load: a call is only the ufuncs.

* average pooling: the general kernel's separable row/column sums over a
  zero-padded copy, or its one reduction over non-overlapping windows;
* max pooling, when nothing reads the indices: a separable running maximum;
* adaptive average pooling: one reduction over a window view, or one sum per
  output row and column for uneven windows;
* nearest upsampling: one broadcasting copy (integer factors) or one gather;
* bilinear upsampling: per axis one gather of both neighbours, one product
  with both weights and one sum (six calls instead of ten); small resizes
  gather all four neighbours of each output at once (five calls), with the
  same arithmetic;
* constant padding: one fill and one copy.

Outputs are captured at load as views of the planned array; a call that passes
another ``out`` runs the general kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pyexecutorch.kernels.pool import pad as pad_mod
from pyexecutorch.kernels.pool import pool, upsample
from pyexecutorch.kernels.registry import KernelError, offer, specializer
from pyexecutorch.kernels.shape.shape import cast_scalar

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# Bilinear resizes up to this many outputs gather all four neighbours at once.
_SMALL_RESIZE = 1 << 14


def _arrays(*a: Any) -> bool:
    return all(isinstance(v, np.ndarray) for v in a)


def _bound(ufunc: np.ufunc, steps: list) -> Callable[[], None]:
    """The ufunc calls of a separable reduction on fixed arrays, as one function."""
    steps = tuple(steps)

    def run() -> None:
        for a, b, o in steps:
            ufunc(a, b, out=o)

    return run


# ---------------------------------------------------------------------------
# Average pooling.


@specializer("aten::avg_pool2d.out")
def _avg_pool2d(
    x: Any,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    divisor_override: Any,
    out: Any,
) -> Callable[..., Any] | None:
    if not _arrays(x, out) or x.dtype not in _FLOATS or out.dtype != x.dtype:
        return None
    if divisor_override is not None and (
        divisor_override == 0 or isinstance(divisor_override, bool)
    ):
        return None
    try:
        k, s, p, _, ohw = pool._pool_geometry(
            "avg_pool2d", x, kernel_size, stride, padding, 1, ceil_mode, False
        )
    except (KernelError, TypeError, ValueError):
        return None
    lead, (h, w) = x.shape[:-2], x.shape[-2:]
    if lead + ohw != out.shape or out.size == 0:
        return None
    general = pool.avg_pool2d
    out0 = out
    if s == k and p == (0, 0) and ohw[0] * k[0] <= h and ohw[1] * k[1] <= w:
        # The general kernel's reduction over non-overlapping windows.
        key = (..., slice(0, ohw[0] * k[0]), slice(0, ohw[1] * k[1]))
        whole = ohw[0] * k[0] == h and ohw[1] * k[1] == w
        vshape = lead + (ohw[0], k[0], ohw[1], k[1])
        axes = (len(lead) + 1, len(lead) + 3)
        div = k[0] * k[1] if divisor_override is None else divisor_override

        def windows(x, kernel_size, stride, padding, ceil_mode, cip, divisor, out):  # noqa: ANN001, ANN202
            if out is not out0:
                return general(x, kernel_size, stride, padding, ceil_mode, cip, divisor, out)
            xv = (x if whole else x[key]).reshape(vshape)
            np.add.reduce(xv, axis=axes, out=out, dtype=out.dtype)
            np.divide(out, div, out=out)
            return out

        return windows

    if divisor_override is not None:
        div = divisor_override
    else:
        div = pool._avg_divisor((h, w), k, s, p, ohw, bool(count_include_pad), x.dtype.char)
    _, _, _, cols, rows = pool.separable_geometry((h, w), k, s, p, (1, 1), ohw)
    xp, tmp = pool.avg_pool_buffers(lead, (h, w), k, s, p, ohw, x.dtype)
    interior = xp[..., p[0] : p[0] + h, p[1] : p[1] + w]
    steps, res = pool.separable_steps(np.add, xp, cols, rows, tmp, out)
    fold = _bound(np.add, steps)

    def separable(x, kernel_size, stride, padding, ceil_mode, cip, divisor, out):  # noqa: ANN001, ANN202
        if out is not out0:
            return general(x, kernel_size, stride, padding, ceil_mode, cip, divisor, out)
        np.add(x, 0.0, out=interior)  # (+ 0.0: sums start from +0, as in torch)
        fold()
        np.divide(res, div, out=out)
        return out

    return separable


# ---------------------------------------------------------------------------
# Max pooling, values only.


def _window_steps(src: np.ndarray, cols, kw: int, dw: int, buf):  # noqa: ANN001, ANN202
    """The row pass of :func:`pool.separable_steps` on a C-contiguous ``src``, as
    ``(a, b, out)`` operands, run over the flattened image: ``buf[t] = f(src[t + dw],
    src[t])`` for every flat position ``t`` is one long contiguous run (numpy's vector
    loop; a strided run is several times slower), and the window starts are picked out
    of ``buf`` by the column pass. Positions whose taps would cross into the next row
    are never picked. Same operands in the same order: the same values. Returns the
    view the column pass reads and the steps.
    """
    steps = []
    if kw > 1:
        sf, bf = src.reshape(-1), buf.reshape(-1)
        m = src.size - (kw - 1) * dw
        steps.append((sf[dw : dw + m], sf[:m], bf[:m]))
        steps += [(sf[j * dw : j * dw + m], bf[:m], bf[:m]) for j in range(2, kw)]
        r = buf[..., cols[0]]
    else:
        r = src[..., cols[0]]
    return r, steps


def _fold_rows(r: np.ndarray, rows, out: np.ndarray):  # noqa: ANN001, ANN202
    """The column pass of :func:`pool.separable_steps` over ``r``; returns (steps, result)."""
    if len(rows) == 1:
        return [], r[..., rows[0], :]
    steps = [(r[..., rows[1], :], r[..., rows[0], :], out)]
    steps += [(r[..., q, :], out, out) for q in rows[2:]]
    return steps, out


@specializer("aten::max_pool2d_with_indices.out")
def max_pool_values(
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
) -> Callable[..., Any] | None:
    """A max-pool fast path for when nothing reads the indices: a separable running
    maximum (2(k-1) calls for a k x k window, the row pass over the flattened image)
    over the input, or over a copy padded with the lowest value when windows reach
    outside it. ``indices`` is left as is.
    """
    if 1 not in unused_outputs or not _arrays(x, out) or out.dtype != x.dtype:
        return None
    if x.dtype.kind not in "fiu":
        return None
    try:
        k, s, p, d, ohw, shape, _ = pool._maxpool_signature(
            x, kernel_size, stride, padding, dilation, ceil_mode
        )
    except (KernelError, TypeError, ValueError):
        return None
    if shape != out.shape or out.size == 0:
        return None
    lead, (h, w) = x.shape[:-2], x.shape[-2:]
    hp, wp, padded, cols, rows = pool.separable_geometry((h, w), k, s, p, d, ohw)
    out0 = out
    general = pool.max_pool2d_with_indices

    if padded:
        xp = np.full(lead + (hp, wp), pool._lowest(x.dtype), x.dtype)
        interior = xp[..., p[0] : p[0] + h, p[1] : p[1] + w]
        buf = np.empty_like(xp) if k[1] > 1 else None
        r, steps = _window_steps(xp, cols, k[1], d[1], buf)
        more, res = _fold_rows(r, rows, out)
        fold = _bound(np.maximum, steps + more)
        copy_res = res is not out

        def max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, out, indices):  # noqa: ANN001, ANN202
            if out is not out0:
                return general(x, kernel_size, stride, padding, dilation, ceil_mode, out, indices)
            np.copyto(interior, x)
            fold()
            if copy_res:
                np.copyto(out, res)
            return out, indices

        return offer(max_pool, fills_outputs=True)  # out stays the planned array

    buf = np.empty(x.shape, x.dtype) if k[1] > 1 else None

    def plan(x: np.ndarray) -> tuple:
        # The flat row pass needs a C-contiguous source; another layout is copied.
        src = x if x.flags.c_contiguous else np.ascontiguousarray(x)
        r, steps = _window_steps(src, cols, k[1], d[1], buf)
        more, res = _fold_rows(r, rows, out0)
        return tuple(steps + more), res

    # The calls for the last input seen (the runtime passes the same planned array
    # every call; another array gets its own).
    last: list = [x, *plan(x)] if x.flags.c_contiguous else [None, None, None]

    def max_pool_unpadded(x, kernel_size, stride, padding, dilation, ceil_mode, out, indices):  # noqa: ANN001, ANN202
        if out is not out0:
            return general(x, kernel_size, stride, padding, dilation, ceil_mode, out, indices)
        if last[0] is x:
            _, steps, res = last
        elif x.flags.c_contiguous:
            last[:] = x, *plan(x)
            _, steps, res = last
        else:
            steps, res = plan(x)
        for a, b, o in steps:
            np.maximum(a, b, out=o)
        if res is not out:
            np.copyto(out, res)
        return out, indices

    return offer(max_pool_unpadded, fills_outputs=True)  # out stays the planned array


# ---------------------------------------------------------------------------
# Adaptive average pooling.


@specializer("aten::_adaptive_avg_pool2d.out")
def _adaptive_avg_pool2d(x: Any, output_size: Any, out: Any) -> Callable[..., Any] | None:
    if not _arrays(x, out) or x.dtype not in _FLOATS or out.dtype != x.dtype:
        return None
    if x.ndim not in (3, 4) or out.size == 0:
        return None
    try:
        oh, ow = pool._pair(output_size, "output_size", "_adaptive_avg_pool2d")
    except (KernelError, TypeError, ValueError):
        return None
    lead, (h, w) = x.shape[:-2], x.shape[-2:]
    if lead + (oh, ow) != out.shape or h == 0 or w == 0:
        return None
    general = pool.adaptive_avg_pool2d
    out0 = out
    # The general kernel's cases, with their shapes fixed.
    if (oh, ow) == (h, w):

        def same_size(x, output_size, out):  # noqa: ANN001, ANN202
            if out is not out0:
                return general(x, output_size, out)
            np.add(x, 0.0, out=out)
            return out

        return same_size
    if h % oh == 0 and w % ow == 0:
        if oh == 1 and ow == 1:
            vshape, axes, keep = x.shape, (-2, -1), True
        else:
            vshape, axes, keep = lead + (oh, h // oh, ow, w // ow), (-3, -1), False
        div = (h // oh) * (w // ow)

        def windows(x, output_size, out):  # noqa: ANN001, ANN202
            if out is not out0:
                return general(x, output_size, out)
            np.add.reduce(x.reshape(vshape), axis=axes, keepdims=keep, out=out)
            np.divide(out, div, out=out)
            return out

        return windows
    # The general kernel's window sums; the input's row windows are sliced per call.
    tmp = np.empty(lead + (oh, w), x.dtype)
    steps = pool.adaptive_steps(x, tmp, out)
    row_keys = tuple(
        ((..., r, slice(None)), o)
        for r, (_, _, o) in zip(pool._adaptive_windows(h, oh), steps[:oh], strict=True)
    )
    cols = tuple((a, o) for a, _, o in steps[oh:])
    cnt = pool.adaptive_counts((h, w), (oh, ow), x.dtype.char)

    def uneven(x, output_size, out):  # noqa: ANN001, ANN202
        if out is not out0:
            return general(x, output_size, out)
        for key, o in row_keys:
            np.add.reduce(x[key], axis=-2, out=o)
        for a, o in cols:
            np.add.reduce(a, axis=-1, out=o)
        np.divide(out, cnt, out=out)
        return out

    return uneven


# ---------------------------------------------------------------------------
# Upsampling.


def upsample_geometry(op: str, x: Any, output_size: Any, scale_factors: Any, out: Any):  # noqa: ANN202
    """``(oh, ow, sh, sw)`` as the general kernel resolves them, or None to decline."""
    if not _arrays(x, out) or out.dtype != x.dtype or x.ndim != 4 or out.size == 0:
        return None
    try:
        (oh, ow), (sh, sw) = upsample._resolve_size(op, x, output_size, scale_factors)
    except (KernelError, TypeError, ValueError):
        return None
    if x.shape[:2] + (oh, ow) != out.shape:
        return None
    return oh, ow, sh, sw


@specializer("aten::upsample_nearest2d.vec_out")
def _upsample_nearest2d(
    x: Any, output_size: Any, scale_factors: Any, out: Any
) -> Callable[..., Any] | None:
    geom = upsample_geometry("upsample_nearest2d", x, output_size, scale_factors, out)
    if geom is None or not out.flags.c_contiguous:
        return None
    oh, ow, sh, sw = geom
    n, c, h, w = x.shape
    ch = upsample._opmath(x.dtype).char if x.dtype.kind == "f" else "f"
    ih = upsample._nearest_index(h, oh, sh, ch)
    iw = upsample._nearest_index(w, ow, sw, ch)
    kh, kw = upsample._integer_factor(ih, h), upsample._integer_factor(iw, w)
    general = upsample.upsample_nearest2d
    out0 = out
    if kh and kw:
        o6 = out.reshape(n, c, h, kh, w, kw)

        def repeat(x, output_size, scale_factors, out):  # noqa: ANN001, ANN202
            if out is not out0:
                return general(x, output_size, scale_factors, out)
            np.copyto(o6, x[:, :, :, None, :, None])
            return out

        return repeat
    flat = (ih[:, None] * w + iw[None, :]).reshape(-1)
    o3 = out.reshape(n, c, oh * ow)
    xshape = (n, c, h * w)

    def gather(x, output_size, scale_factors, out):  # noqa: ANN001, ANN202
        if out is not out0:
            return general(x, output_size, scale_factors, out)
        np.take(x.reshape(xshape), flat, axis=2, out=o3, mode="clip")
        return out

    return gather


@specializer("aten::upsample_bilinear2d.vec_out")
def _upsample_bilinear2d(
    x: Any, output_size: Any, align_corners: Any, scale_factors: Any, out: Any
) -> Callable[..., Any] | None:
    geom = upsample_geometry("upsample_bilinear2d", x, output_size, scale_factors, out)
    if geom is None or x.dtype not in _FLOATS:
        return None
    oh, ow, sh, sw = geom
    n, c, h, w = x.shape
    dt = x.dtype
    ac = bool(align_corners)
    h0, h1, lh0, lh1 = upsample._linear_weights(h, oh, ac, sh, dt.char)
    w0, w1, lw0, lw1 = upsample._linear_weights(w, ow, ac, sw, dt.char)
    general = upsample.upsample_bilinear2d
    out0 = out
    if n * c * oh * ow <= _SMALL_RESIZE and out.flags.c_contiguous:
        return _bilinear_gather4(x, out, (h0, h1, lh0, lh1), (w0, w1, lw0, lw1), general)
    # Both neighbours in one gather, both weights in one product, then their sum: the
    # general kernel's x[w0]*l0 + x[w1]*l1 per axis (W, then H), value for value.
    iw = np.stack([w0, w1])  # (2, OW)
    lw = np.stack([lw0, lw1])
    ih = np.stack([h0, h1])  # (2, OH)
    lh = np.stack([lh0, lh1])[:, :, None]
    tw2 = np.empty((n, c, h, 2, ow), dt)
    tw = np.empty((n, c, h, ow), dt)
    th2 = np.empty((n, c, 2, oh, ow), dt)
    tw2_0, tw2_1 = tw2[:, :, :, 0], tw2[:, :, :, 1]
    th2_0, th2_1 = th2[:, :, 0], th2[:, :, 1]

    def bilinear(x, output_size, align_corners, scale_factors, out):  # noqa: ANN001, ANN202
        if out is not out0:
            return general(x, output_size, align_corners, scale_factors, out)
        np.take(x, iw, axis=3, out=tw2, mode="clip")
        np.multiply(tw2, lw, out=tw2)
        np.add(tw2_0, tw2_1, out=tw)
        np.take(tw, ih, axis=2, out=th2, mode="clip")
        np.multiply(th2, lh, out=th2)
        np.add(th2_0, th2_1, out=out)
        return out

    return bilinear


def _bilinear_gather4(x, out, hs, ws, general):  # noqa: ANN001, ANN202
    """Small resizes: the four neighbours of every output in one gather (5 calls), with the
    general kernel's arithmetic: (x00*lw0 + x01*lw1)*lh0 + (x10*lw0 + x11*lw1)*lh1."""
    (h0, h1, lh0, lh1), (w0, w1, lw0, lw1) = hs, ws
    n, c, h, w = x.shape
    oh, ow = out.shape[2:]
    dt = x.dtype

    def grid(a, b):  # (OH,) x (OW,) -> (OH*OW,)
        return np.broadcast_to(a[:, None], (oh, ow)) + np.broadcast_to(b[None, :], (oh, ow))

    zh, zw = np.zeros(oh, np.int64), np.zeros(ow, np.int64)
    idx = np.stack([grid(r * w, col) for r in (h0, h1) for col in (w0, w1)]).reshape(4, oh * ow)
    lw4 = np.stack([grid(zh, lw).astype(dt) for lw in (lw0, lw1, lw0, lw1)]).reshape(4, -1)
    lh2 = np.stack([grid(lh, zw).astype(dt) for lh in (lh0, lh1)]).reshape(2, -1)
    g = np.empty((n, c, 4, oh * ow), dt)
    r = np.empty((n, c, 2, oh * ow), dt)
    g_even, g_odd, r0, r1 = g[:, :, 0::2], g[:, :, 1::2], r[:, :, 0], r[:, :, 1]
    o3 = out.reshape(n, c, oh * ow)
    xshape = (n, c, h * w)
    out0 = out

    def bilinear(x, output_size, align_corners, scale_factors, out):  # noqa: ANN001, ANN202
        if out is not out0:
            return general(x, output_size, align_corners, scale_factors, out)
        np.take(x.reshape(xshape), idx, axis=2, out=g, mode="clip")
        np.multiply(g, lw4, out=g)
        np.add(g_even, g_odd, out=r)  # the rows h0 and h1, each interpolated along W
        np.multiply(r, lh2, out=r)
        np.add(r0, r1, out=o3)
        return out

    return bilinear


# ---------------------------------------------------------------------------
# Constant padding.


@specializer("aten::constant_pad_nd.out")
def _constant_pad_nd(x: Any, pad: Any, value: Any, out: Any) -> Callable[..., Any] | None:
    if not _arrays(x, out) or out.dtype != x.dtype or x.dtype.kind not in "fiub":
        return None
    try:
        out_shape, kind, src, dst = pad_mod._constant_plan(x.shape, tuple(pad))
        fill = cast_scalar(value, x.dtype, "value")
    except (KernelError, TypeError, ValueError):
        return None
    if out_shape != out.shape:
        return None
    general = pad_mod.constant_pad_nd
    out0 = out
    inner = out[dst]
    whole = all(sl == slice(0, n) or sl == slice(None) for sl, n in zip(src, x.shape, strict=True))

    def constant_pad(x, pad, value, out):  # noqa: ANN001, ANN202
        if out is not out0:
            return general(x, pad, value, out)
        if kind != "crop":
            out.fill(fill)
        if kind != "fill":
            np.copyto(inner, x if whole else x[src])
        return out

    return constant_pad
