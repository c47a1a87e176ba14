"""Compiled (numba) steps of nearest and bilinear upsampling and constant padding.

These are whole-method steps only (forms called with ``whole=True``): alone, an
instruction keeps the numpy fast path (one or a few numpy calls, as fast as a loop
behind a Python call), but inside a whole method a loop on the planned arrays lets
the method become one compiled call. The index tables and weights come from the
reference kernels' own helpers, computed at load, and every output is the
reference's arithmetic in the reference's order:

- nearest: one gather per output row, through the source row and column tables;
- bilinear: along W first into a scratch row per input row (``x[w0]*lw0 + x[w1]*lw1``),
  then along H (``t[h0]*lh0 + t[h1]*lh1``), in float32 or float64 as the reference;
- constant padding of any rank (negative entries crop): the tensors as rows of their
  last dimension; each output row is the fill value or a run of one input row between
  two runs of the fill.

Imported by ``compiled.py`` (the compiled tier only); ``upsample.py`` and ``pad.py``
stay the reference.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import prange

from pyexecutorch.jit.arrays import FLOATS, dense
from pyexecutorch.jit.variants import choose, serial_and_parallel
from pyexecutorch.kernels.pool import pad as pad_mod
from pyexecutorch.kernels.pool import upsample
from pyexecutorch.kernels.pool.fast import upsample_geometry
from pyexecutorch.kernels.registry import KernelError, compiled_form, whole_step
from pyexecutorch.kernels.shape.shape import cast_scalar

_COPY_KINDS = "biuf"  # dtypes the gathers and pads copy bit for bit


def _nearest(x, ih, iw, out):  # noqa: ANN001, ANN201
    """out (P, OH, OW)[p, i, j] = x (P, H, W)[p, ih[i], iw[j]]."""
    for p in prange(out.shape[0]):  # noqa: B020 - prange is range when serial
        for i in range(out.shape[1]):
            src = x[p, ih[i]]
            dst = out[p, i]
            for j in range(dst.shape[0]):
                dst[j] = src[iw[j]]
    return out


def _bilinear(x, h0, h1, lh0, lh1, w0, w1, lw0, lw1, rows, out):  # noqa: ANN001, ANN201
    """out (P, OH, OW) = bilinear resize of x (P, H, W), W first, through ``rows``
    (P, H, OW) of scratch."""
    for p in prange(out.shape[0]):  # noqa: B020 - prange is range when serial
        t = rows[p]
        for r in range(x.shape[1]):
            src = x[p, r]
            dst = t[r]
            for j in range(dst.shape[0]):
                dst[j] = src[w0[j]] * lw0[j] + src[w1[j]] * lw1[j]
        for i in range(out.shape[1]):
            a = t[h0[i]]
            b = t[h1[i]]
            la = lh0[i]
            lb = lh1[i]
            dst = out[p, i]
            for j in range(dst.shape[0]):
                dst[j] = a[j] * la + b[j] * lb
    return out


def _pad_rows(x, source, dst0, src0, length, fill, out):  # noqa: ANN001, ANN201
    """out (R, W') rows: row r is fill[0], with x[source[r], src0 : src0 + length] at
    dst0 where source[r] >= 0."""
    value = fill[0]
    for r in prange(out.shape[0]):  # noqa: B020 - prange is range when serial
        dst = out[r]
        s = source[r]
        if s < 0:
            for j in range(dst.shape[0]):
                dst[j] = value
            continue
        for j in range(dst0):
            dst[j] = value
        src = x[s]
        for j in range(length):
            dst[dst0 + j] = src[src0 + j]
        for j in range(dst0 + length, dst.shape[0]):
            dst[j] = value
    return out


NEAREST = serial_and_parallel(_nearest, "upsample_nearest")
BILINEAR = serial_and_parallel(_bilinear, "upsample_bilinear")
PAD_ROWS = serial_and_parallel(_pad_rows, "constant_pad_rows")


def _planes(x: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N*C, H, W) views of an NCHW input and output."""
    n, c = x.shape[:2]
    return x.reshape(n * c, *x.shape[2:]), out.reshape(n * c, *out.shape[2:])


def _resize_geometry(op: str, x: Any, output_size: Any, scale_factors: Any, out: Any):  # noqa: ANN202
    """(oh, ow, sh, sw) of a resize of dense planned arrays that share no memory, or None
    to decline."""
    if not (dense(x) and dense(out)) or x.size == 0 or not out.flags.writeable:
        return None
    if np.shares_memory(x, out):
        return None
    return upsample_geometry(op, x, output_size, scale_factors, out)


@compiled_form("aten::upsample_nearest2d.vec_out")
def _nearest_form(
    x: Any, output_size: Any, scale_factors: Any, out: Any, *, whole: bool = False
) -> Any:
    """Inside a whole method: the nearest resize of any copyable dtype as a gather step."""
    if not whole:
        return None
    geometry = _resize_geometry("upsample_nearest2d", x, output_size, scale_factors, out)
    if geometry is None or x.dtype.kind not in _COPY_KINDS:
        return None
    oh, ow, sh, sw = geometry
    h, w = x.shape[2:]
    char = upsample._opmath(x.dtype).char if x.dtype.kind == "f" else "f"
    ih = upsample._nearest_index(h, oh, sh, char)
    iw = upsample._nearest_index(w, ow, sw, char)
    xp, op = _planes(x, out)
    return whole_step(choose(NEAREST, out.size), (xp, ih, iw, op))


@compiled_form("aten::upsample_bilinear2d.vec_out")
def _bilinear_form(
    x: Any,
    output_size: Any,
    align_corners: Any,
    scale_factors: Any,
    out: Any,
    *,
    whole: bool = False,
) -> Any:
    """Inside a whole method: a float32/float64 bilinear resize as a separable loop step."""
    if not whole:
        return None
    geometry = _resize_geometry("upsample_bilinear2d", x, output_size, scale_factors, out)
    if geometry is None or x.dtype not in FLOATS:
        return None
    oh, ow, sh, sw = geometry
    h, w = x.shape[2:]
    ac = bool(align_corners)
    hs = upsample._linear_weights(h, oh, ac, sh, x.dtype.char)
    ws = upsample._linear_weights(w, ow, ac, sw, x.dtype.char)
    xp, op = _planes(x, out)
    rows = np.empty((xp.shape[0], h, ow), x.dtype)
    work = out.size * 3 + rows.size * 3
    return whole_step(choose(BILINEAR, work), (xp, *hs, *ws, rows, op))


def _row_sources(in_shape: tuple[int, ...], out_shape: tuple[int, ...], lows: list[int]):  # noqa: ANN202
    """For each row (index over all dims but the last) of the padded output, the flat
    index of its input row, or -1 where that row is all padding."""
    lead_in, lead_out = in_shape[:-1], out_shape[:-1]
    if not lead_out:
        return np.zeros(1, np.int64)
    grids = np.indices(lead_out, dtype=np.int64)
    source = np.zeros(lead_out, np.int64)
    inside = np.ones(lead_out, bool)
    for axis, (n_in, low) in enumerate(zip(lead_in, lows[:-1], strict=True)):
        position = grids[axis] - low
        inside &= (position >= 0) & (position < n_in)
        source = source * n_in + position
    return np.where(inside, source, -1).reshape(-1)


@compiled_form("aten::constant_pad_nd.out")
def _constant_pad_form(x: Any, pad: Any, value: Any, out: Any, *, whole: bool = False) -> Any:
    """Inside a whole method: constant padding (or cropping) of any rank as a row step."""
    if not whole:
        return None
    if not (dense(x) and dense(out)) or x.dtype != out.dtype or x.dtype.kind not in _COPY_KINDS:
        return None
    if x.ndim == 0 or out.size == 0 or not out.flags.writeable or np.shares_memory(x, out):
        return None
    try:
        out_shape, _, _, _ = pad_mod._constant_plan(x.shape, tuple(int(v) for v in pad))
        fill = cast_scalar(value, x.dtype, "value")
    except (KernelError, TypeError, ValueError):
        return None
    if out_shape != out.shape:
        return None
    lows = [0] * x.ndim  # each dimension's leading padding (negative: cropped)
    for k in range(len(pad) // 2):
        lows[x.ndim - 1 - k] = int(pad[2 * k])
    width, low = x.shape[-1], lows[-1]
    start, stop = max(-low, 0), min(width, out.shape[-1] - low)
    length = max(stop - start, 0)
    source = _row_sources(x.shape, out.shape, lows)
    if length == 0:
        source[:] = -1  # nothing of the input survives in any row
    fills = np.empty(1, x.dtype)
    fills[...] = fill  # the conversion the reference's fill makes
    rows_in = x.reshape(math.prod(x.shape[:-1]), width)
    rows_out = out.reshape(-1, out.shape[-1])
    args = (rows_in, source, max(low, 0), start, length, fills, rows_out)
    return whole_step(choose(PAD_ROWS, out.size), args)
