"""Resampling kernels: nearest and bilinear upsampling, antialiased bilinear, grid sampling.

Source indices and weights follow torch's CPU kernels formula by formula,
including the arithmetic precision (float32 index math for float32 inputs),
so nearest-neighbour picks the same pixels. Index tables are computed once
per geometry and cached. Bilinear resizing runs separably (width, then
height) with ``np.take`` gathers; the antialiased variant multiplies by
per-axis weight matrices.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from pyexecutorch.kernels.bounds import bounded_fit
from pyexecutorch.kernels.common import float_compute_dtype, quiet_fp, view_as
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.kernels.scratch import scratch

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _opmath(dt: np.dtype) -> np.dtype:
    return _F64 if dt == _F64 else _F32


def _resolve_size(op, x, output_size, scale_factors):
    """Output (OH, OW) and the per-axis scales torch passes to its kernel."""
    if x.ndim != 4:
        raise KernelError(f"{op}: input must be 4-D (N, C, H, W), got shape {x.shape}")
    if (output_size is None) == (scale_factors is None):
        raise KernelError(f"{op}: must specify exactly one of output_size and scale_factors")
    if output_size is not None:
        size = tuple(int(v) for v in output_size)
        if len(size) != 2:
            raise KernelError(f"{op}: output_size must have 2 entries, got {list(size)}")
        scales = (None, None)
    else:
        sf = tuple(float(v) for v in scale_factors)
        if len(sf) != 2:
            raise KernelError(f"{op}: scale_factors must have 2 entries, got {list(sf)}")
        if not all(math.isfinite(v) for v in sf):
            raise KernelError(f"{op}: scale_factors must be finite, got {list(sf)}")
        size = (int(x.shape[2] * sf[0]), int(x.shape[3] * sf[1]))
        scales = sf
    if size[0] <= 0 or size[1] <= 0:
        raise KernelError(f"{op}: output size {list(size)} must be positive")
    if x.shape[2] <= 0 or x.shape[3] <= 0:
        raise KernelError(f"{op}: input of shape {x.shape} has an empty spatial dim")
    return size, scales


def _scale_value(scale, n_in: int, n_out: int, dt: np.dtype):
    """torch's compute_scales_value: 1/scale when given (> 0), else in/out, in ``dt``."""
    if scale is not None and scale > 0:
        return dt.type(1.0 / scale)
    return dt.type(n_in) / dt.type(n_out)


@lru_cache(maxsize=256)
def _nearest_index(n_in: int, n_out: int, scale, char: str) -> np.ndarray:
    if n_out == n_in:
        idx = np.arange(n_out, dtype=np.int64)
    elif n_out == 2 * n_in:
        idx = np.arange(n_out, dtype=np.int64) >> 1
    else:
        dt = np.dtype(char)
        s = _scale_value(scale, n_in, n_out, dt)
        pos = np.arange(n_out, dtype=dt) * s
        idx = np.minimum(np.floor(pos).astype(np.int64), n_in - 1)
    idx.flags.writeable = False
    return idx


def _integer_factor(idx: np.ndarray, n_in: int) -> int:
    """``k`` when ``idx == arange(n_in * k) // k`` (plain replication), else 0."""
    n_out = idx.shape[0]
    if n_out % n_in:
        return 0
    k = n_out // n_in
    return k if np.array_equal(idx, np.arange(n_out) // k) else 0


@kernel("aten::upsample_nearest2d.vec_out")
def upsample_nearest2d(input, output_size, scale_factors, out):
    op = "upsample_nearest2d"
    (oh, ow), (sh, sw) = _resolve_size(op, input, output_size, scale_factors)
    n, c, h, w = input.shape
    o = bounded_fit(out, (n, c, oh, ow), op)
    if o.size == 0:
        return o
    ch = _opmath(input.dtype).char if input.dtype.kind == "f" else "f"
    ih = _nearest_index(h, oh, sh, ch)
    iw = _nearest_index(w, ow, sw, ch)
    kh, kw = _integer_factor(ih, h), _integer_factor(iw, w)
    if kh and kw:
        o6 = view_as(o, (n, c, h, kh, w, kw))
        if o6 is not None:
            o6[...] = input[:, :, :, None, :, None]
            return o
    rows = np.take(input, ih, axis=2)
    np.take(rows, iw, axis=3, out=o) if o.dtype == input.dtype else np.copyto(
        o, np.take(rows, iw, axis=3), casting="unsafe"
    )
    return o


@lru_cache(maxsize=256)
def _linear_weights(n_in: int, n_out: int, align_corners: bool, scale, char: str):
    """(i0, i1, l0, l1) of torch's bilinear source index math along one axis."""
    dt = np.dtype(char)
    if n_out == n_in:
        i0 = np.arange(n_out, dtype=np.int64)
        l0 = np.ones(n_out, dt)
        res = (i0, i0, l0, np.zeros(n_out, dt))
    else:
        if align_corners:
            ratio = dt.type(n_in - 1) / dt.type(n_out - 1) if n_out > 1 else dt.type(0)
            real = ratio * np.arange(n_out, dtype=dt)
        else:
            ratio = _scale_value(scale, n_in, n_out, dt)
            if dt == _F32:
                # torch's float kernel fuses this multiply-add (one rounding): the
                # product is exact in float64, so only the sum rounds. (A lambda of 0
                # instead of 1e-8 would turn an inf neighbour into NaN.)
                half = np.arange(n_out, dtype=np.float64) + 0.5
                real = (np.float64(ratio) * half - 0.5).astype(dt)
            else:
                real = ratio * (np.arange(n_out, dtype=dt) + dt.type(0.5)) - dt.type(0.5)
            real = np.maximum(real, dt.type(0))
        i0 = np.minimum(np.floor(real).astype(np.int64), n_in - 1)
        l1 = np.clip(real - i0.astype(dt), 0, 1).astype(dt)
        i1 = i0 + (i0 < n_in - 1)
        res = (i0, i1, (dt.type(1) - l1).astype(dt), l1)
    for a in res:
        a.flags.writeable = False
    return res


@kernel("aten::upsample_bilinear2d.vec_out")
def upsample_bilinear2d(input, output_size, align_corners, scale_factors, out):
    op = "upsample_bilinear2d"
    cdt = float_compute_dtype(input, "input", op)
    (oh, ow), (sh, sw) = _resolve_size(op, input, output_size, scale_factors)
    n, c, h, w = input.shape
    o = bounded_fit(out, (n, c, oh, ow), op)
    if o.size == 0:
        return o
    ac = bool(align_corners)
    h0, h1, lh0, lh1 = _linear_weights(h, oh, ac, sh, cdt.char)
    w0, w1, lw0, lw1 = _linear_weights(w, ow, ac, sw, cdt.char)
    x = input if input.dtype == cdt else input.astype(cdt)
    # Along W: tw = x[..., w0] * lw0 + x[..., w1] * lw1   (N, C, H, OW)
    tw = scratch("bilinear-w", (n, c, h, ow), cdt)
    tmp = scratch("bilinear-tmp", (n, c, h, ow), cdt)
    np.take(x, w0, axis=3, out=tw)
    np.multiply(tw, lw0, out=tw)
    np.take(x, w1, axis=3, out=tmp)
    np.multiply(tmp, lw1, out=tmp)
    np.add(tw, tmp, out=tw)
    # Along H.
    t = o if o.dtype == cdt else scratch("bilinear-out", o.shape, cdt)
    tmp2 = scratch("bilinear-tmp2", (n, c, oh, ow), cdt)
    np.take(tw, h0, axis=2, out=t)
    np.multiply(t, lh0[:, None], out=t)
    np.take(tw, h1, axis=2, out=tmp2)
    np.multiply(tmp2, lh1[:, None], out=tmp2)
    np.add(t, tmp2, out=t)
    if t is not o:
        np.copyto(o, t, casting="unsafe")
    return o


def _area_scale(n_in: int, n_out: int, align_corners: bool, scale) -> float:
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    if scale is not None and scale > 0:
        return 1.0 / scale
    return n_in / n_out


@lru_cache(maxsize=128)
def _aa_matrix(n_in: int, n_out: int, align_corners: bool, scale, char: str) -> np.ndarray:
    """(n_out, n_in) antialiased (triangle filter) interpolation weights, as torch computes."""
    s = _area_scale(n_in, n_out, align_corners, scale)
    support = s if s >= 1.0 else 1.0
    invscale = 1.0 / s if s >= 1.0 else 1.0
    max_size = int(math.ceil(support)) * 2 + 1
    m = np.zeros((n_out, n_in), np.float64)
    for i in range(n_out):
        center = s * (i + 0.5)
        xmin = max(int(center - support + 0.5), 0)
        xsize = min(int(center + support + 0.5), n_in) - xmin
        xsize = min(max(xsize, 0), max_size)
        j = np.arange(xsize, dtype=np.float64)
        wts = np.maximum(1.0 - np.abs((j + xmin - center + 0.5) * invscale), 0.0)
        total = wts.sum()
        if total != 0.0:
            wts = wts / total
        m[i, xmin : xmin + xsize] = wts
    m = m.astype(char)
    m.flags.writeable = False
    return m


@kernel("aten::_upsample_bilinear2d_aa.out")
def upsample_bilinear2d_aa(self, output_size, align_corners, scales_h, scales_w, out):
    op = "_upsample_bilinear2d_aa"
    cdt = float_compute_dtype(self, "input", op)
    if self.ndim != 4:
        raise KernelError(f"{op}: input must be 4-D (N, C, H, W), got shape {self.shape}")
    size = tuple(int(v) for v in output_size)
    if len(size) != 2 or min(size) <= 0:
        raise KernelError(f"{op}: output_size must be 2 positive sizes, got {list(size)}")
    n, c, h, w = self.shape
    if h <= 0 or w <= 0:
        raise KernelError(f"{op}: input of shape {self.shape} has an empty spatial dim")
    oh, ow = size
    o = bounded_fit(out, (n, c, oh, ow), op)
    if o.size == 0:
        return o
    ac = bool(align_corners)
    mh = _aa_matrix(h, oh, ac, scales_h, cdt.char)
    mw = _aa_matrix(w, ow, ac, scales_w, cdt.char)
    x = self if self.dtype == cdt else self.astype(cdt)
    t = o if o.dtype == cdt else np.empty(o.shape, cdt)
    np.matmul(mh, np.matmul(x, mw.T), out=t)
    if t is not o:
        np.copyto(o, t, casting="unsafe")
    return o


# ---------------------------------------------------------------------------
# grid_sampler_2d


def _reflect(x: np.ndarray, twice_low: int, twice_high: int, dt) -> np.ndarray:
    if twice_low == twice_high:
        return np.zeros_like(x)
    lo = dt.type(twice_low / 2)
    span = dt.type((twice_high - twice_low) / 2)
    x = np.abs(x - lo)
    extra = np.fmod(x, span)
    flips = np.floor(x / span)
    return np.where(np.fmod(flips, 2) == 0, extra + lo, span - extra + lo).astype(dt)


def _pad_coords(x: np.ndarray, size: int, padding_mode: int, align_corners: bool, dt):
    """torch's compute_coordinates: apply border or reflection padding to source coords."""
    if padding_mode == 1:
        return np.clip(x, dt.type(0), dt.type(size - 1))
    if padding_mode == 2:
        if align_corners:
            x = _reflect(x, 0, 2 * (size - 1), dt)
        else:
            x = _reflect(x, -1, 2 * size - 1, dt)
        return np.clip(x, dt.type(0), dt.type(size - 1))
    return x


def _unnormalize(g: np.ndarray, size: int, align_corners: bool, dt) -> np.ndarray:
    if align_corners:
        return (g + dt.type(1)) * dt.type((size - 1) / 2)
    return (g + dt.type(1)) * dt.type(size / 2) - dt.type(0.5)


def _cubic_coeffs(t: np.ndarray, dt):
    a = dt.type(-0.75)
    one = dt.type(1)

    def conv1(v):
        return ((a + 2) * v - (a + 3)) * v * v + one

    def conv2(v):
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    return (conv2(t + one), conv1(t), conv1(one - t), conv2((one - t) + one))


@kernel("aten::grid_sampler_2d.out")
def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners, out):
    op = "grid_sampler_2d"
    cdt = float_compute_dtype(input, "input", op)
    if input.ndim != 4:
        raise KernelError(f"{op}: input must be 4-D (N, C, H, W), got shape {input.shape}")
    if grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != input.shape[0]:
        raise KernelError(
            f"{op}: grid must have shape (N, H_out, W_out, 2) with N={input.shape[0]}, "
            f"got {grid.shape}"
        )
    if grid.dtype != input.dtype:
        raise KernelError(f"{op}: grid dtype {grid.dtype} must match input dtype {input.dtype}")
    if interpolation_mode not in (0, 1, 2):
        raise KernelError(
            f"{op}: interpolation_mode must be 0 (bilinear), 1 (nearest) or 2 (bicubic), "
            f"got {interpolation_mode}"
        )
    if padding_mode not in (0, 1, 2):
        raise KernelError(
            f"{op}: padding_mode must be 0 (zeros), 1 (border) or 2 (reflection), "
            f"got {padding_mode}"
        )
    n, c, h, w = input.shape
    oh, ow = grid.shape[1:3]
    o = bounded_fit(out, (n, c, oh, ow), op)
    if o.size == 0:
        return o
    if h == 0 or w == 0:
        raise KernelError(f"{op}: input of shape {input.shape} has an empty spatial dim")
    ac = bool(align_corners)
    g = grid.astype(cdt, copy=False)
    x = input if input.dtype == cdt else input.astype(cdt)
    flat = x.reshape(n, c, h * w)
    npx = oh * ow
    gx = _unnormalize(g[..., 0].reshape(n, npx), w, ac, cdt)
    gy = _unnormalize(g[..., 1].reshape(n, npx), h, ac, cdt)
    res = np.zeros((n, c, npx), cdt)

    def gather_add(xi, yi, weight):
        """res += weight * input[yi, xi] for in-bounds (integer-valued float) coords."""
        inb = (xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)
        xs = np.where(inb, xi, 0).astype(np.int64)
        ys = np.where(inb, yi, 0).astype(np.int64)
        idx = ys * w + xs
        wt = np.where(inb, weight, 0).astype(cdt)
        for b in range(n):
            vals = flat[b][:, idx[b]]
            vals = np.where(inb[b], vals, 0)
            res[b] += vals * wt[b]

    with quiet_fp():
        if interpolation_mode == 2:
            ix0 = np.floor(gx)
            iy0 = np.floor(gy)
            cx = _cubic_coeffs(gx - ix0, cdt)
            cy = _cubic_coeffs(gy - iy0, cdt)
            for j in range(4):
                yj = _pad_coords(iy0 - 1 + j, h, padding_mode, ac, cdt)
                for i in range(4):
                    xi = _pad_coords(ix0 - 1 + i, w, padding_mode, ac, cdt)
                    gather_add(xi, yj, cx[i] * cy[j])
        else:
            gx = _pad_coords(gx, w, padding_mode, ac, cdt)
            gy = _pad_coords(gy, h, padding_mode, ac, cdt)
            if interpolation_mode == 1:
                gather_add(np.rint(gx), np.rint(gy), np.ones_like(gx))
            else:
                xw = np.floor(gx)
                yn = np.floor(gy)
                we = gx - xw
                ww = cdt.type(1) - we
                ns = gy - yn
                nn = cdt.type(1) - ns
                gather_add(xw, yn, nn * ww)
                gather_add(xw + 1, yn, nn * we)
                gather_add(xw, yn + 1, ns * ww)
                gather_add(xw + 1, yn + 1, ns * we)
    np.copyto(o, res.reshape(n, c, oh, ow), casting="unsafe")
    return o
