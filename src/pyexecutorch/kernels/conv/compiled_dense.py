"""Dense (not depthwise) convolutions as compiled steps, with no im2col per output row.

The im2col this replaces copied every input pixel kh*kw times, one output row (a few
pixels) at a time, and then BLAS packed the weights again on every call: on a CNN's
small images the copies cost as much as the product. Here the input is copied once,
zero-padded and split into its stride phases (:func:`_fill_group`), each phase a flat
image ``Wq`` pixels wide, so tap ``k`` (channel, kh, kw) of output pixel
``q = oh*Wq + ow`` sits at ``q + offsets[k]`` for every output pixel at once: a
convolution is a sum of shifted runs times constant weights, packed once at load.
Five ways to sum them (``KINDS``), each best somewhere on this project's CNNs:

* runs: loops, two output channels' rows at the padded width at a time, four taps a
  pass, vectorized over pixels, then cropped with the bias (few output channels,
  large images: a ResNet stem 3->8 7x7/2 took 50 us against im2col's 130-260);
* pixels: loops, per output pixel all output channels, vectorized over channels
  (tiny images with many channels, 2x2 to 4x4);
* columns: each tap's run copied whole into a column matrix (no per-row copies), one
  BLAS product, then cropped;
* wrapped: as columns at the output's own width (stride 1 across, "same" padding):
  runs wrap into the next row where a tap reaches past the image, those few entries
  are zeroed, the bias is a row of ones in the product, which lands in ``out``;
* gathered: as wrapped, the columns gathered from the image in one flat loop through
  an index built at load, with no stride phases (tiny or strided images, where the
  other kinds' per-row and per-tap loops run a few elements each: a 32->128 3x3 conv
  at 3x3 pixels 20 -> 15 us, a 1x1/2 projection 7 -> 2 us).

:func:`choose_kind` picks one by a cost model fitted at one thread. All take any
stride, dilation, padding (even wider than the image), groups and batch; the loops
have parallel variants for large convolutions (``PARALLEL_MACS``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import get_num_threads, njit, prange

from pyexecutorch.jit.blas import gemm
from pyexecutorch.jit.variants import njit_renamed


@njit(cache=True, inline="always", error_model="numpy")
def _fill_group(x, buf, ph, pw):  # noqa: ANN001, ANN202
    """Copy images x (C, H, W) into their zero-padded stride phases buf (C, sh, sw, Hq, Wq):
    padded pixel (i, j) goes to phase (i % sh, j % sw), at (i // sh, j // sw). The
    padding cells are never written (zero since load)."""
    channels, height, width = x.shape
    sh, sw = buf.shape[1], buf.shape[2]
    for c in range(channels):
        for h in range(height):
            line = x[c, h]
            i = h + ph
            for b in range(sw):
                first = (b - pw) % sw  # the first image column of phase column b
                if first >= width:
                    continue
                dst = buf[c, i % sh, b, i // sh, (first + pw) // sw :]
                for q in range((width - first + sw - 1) // sw):
                    dst[q] = line[first + q * sw]


@njit(cache=True, inline="always", error_model="numpy")
def _crop(rows, bias, dst, wq):  # noqa: ANN001, ANN202
    """dst (OC, OH, OW) = the first OW columns of each row, wq wide, of rows + bias."""
    out_h, out_w = dst.shape[1], dst.shape[2]
    for o in range(dst.shape[0]):
        b = bias[o]
        for oh in range(out_h):
            src = rows[o, oh * wq : oh * wq + out_w]
            line = dst[o, oh]
            for ow in range(out_w):
                line[ow] = src[ow] + b


def _dense_runs(x, buf, flat, offsets, wp, bias, rows, out, ph, pw):  # noqa: ANN001, ANN201
    """out (N, G, OCg, OH, OW) = bias + conv of x (N, G, Cg, H, W), two output channels'
    padded-width rows (``rows`` (OCg2, R)) at a time.

    wp (G, OCg2, K4) and offsets (K4,) are padded at load to even channels and whole
    groups of four taps: padding taps read the zero channel at the end of ``buf`` (a view
    of ``flat``) with weight 0, padding channels' rows are never cropped into ``out``.
    The rows' length R is OH*Wq rounded up to whole vector iterations (no scalar tail);
    ``flat`` has room for the runs past the end.
    """
    n_batch, groups = x.shape[0], x.shape[1]
    taps = offsets.shape[0]
    length = rows.shape[1]
    wq = buf.shape[4]
    for n in range(n_batch):
        for g in range(groups):
            _fill_group(x[n, g], buf, ph, pw)
            for pair in prange(rows.shape[0] // 2):  # noqa: B020 - prange is range when serial
                r0, r1 = rows[2 * pair], rows[2 * pair + 1]
                v0, v1 = wp[g, 2 * pair], wp[g, 2 * pair + 1]
                for q in range(length):
                    r0[q] = 0.0
                    r1[q] = 0.0
                for k in range(0, taps, 4):
                    t0, t1, t2, t3 = offsets[k], offsets[k + 1], offsets[k + 2], offsets[k + 3]
                    s0, s1 = flat[t0 : t0 + length], flat[t1 : t1 + length]
                    s2, s3 = flat[t2 : t2 + length], flat[t3 : t3 + length]
                    a0, a1, a2, a3 = v0[k], v0[k + 1], v0[k + 2], v0[k + 3]
                    b0, b1, b2, b3 = v1[k], v1[k + 1], v1[k + 2], v1[k + 3]
                    for q in range(length):
                        x0, x1, x2, x3 = s0[q], s1[q], s2[q], s3[q]
                        r0[q] += a0 * x0 + a1 * x1 + a2 * x2 + a3 * x3
                        r1[q] += b0 * x0 + b1 * x1 + b2 * x2 + b3 * x3
            _crop(rows, bias[g], out[n, g], wq)
    return out


def _dense_pixels(x, buf, offsets, wt, bias, acc, out, ph, pw):  # noqa: ANN001, ANN201
    """As :func:`_dense_runs`, one valid output pixel's channels (``acc`` (OH*OW, OCg)) at
    a time; wt (G, K4, OCg) (padding taps as there)."""
    n_batch, groups = x.shape[0], x.shape[1]
    ocg, out_h, out_w = out.shape[2], out.shape[3], out.shape[4]
    taps = offsets.shape[0]
    wq = buf.shape[4]
    flat = buf.reshape(buf.size)
    for n in range(n_batch):
        for g in range(groups):
            _fill_group(x[n, g], buf, ph, pw)
            bg = bias[g]
            for p in prange(out_h * out_w):  # noqa: B020 - prange is range when serial
                oh = p // out_w
                s = flat[oh * wq + p - oh * out_w :]
                a = acc[p]
                for o in range(ocg):
                    a[o] = bg[o]
                for k in range(0, taps, 4):
                    x0, x1 = s[offsets[k]], s[offsets[k + 1]]
                    x2, x3 = s[offsets[k + 2]], s[offsets[k + 3]]
                    w0, w1, w2, w3 = wt[g, k], wt[g, k + 1], wt[g, k + 2], wt[g, k + 3]
                    for o in range(ocg):
                        a[o] += x0 * w0[o] + x1 * w1[o] + x2 * w2[o] + x3 * w3[o]
            dst = out[n, g].reshape(ocg, out_h * out_w)
            for o in range(ocg):
                line = dst[o]
                for p in range(out_h * out_w):
                    line[p] = acc[p, o]
    return out


def _dense_columns(x, buf, offsets, wm, bias, col, rows, out, ph, pw):  # noqa: ANN001, ANN201
    """As :func:`_dense_runs`, as one BLAS product wm (G, OCg, K) @ col (K, OH*Wq): each
    row of the columns is one contiguous run of ``buf``."""
    n_batch, groups = x.shape[0], x.shape[1]
    length = col.shape[1]
    flat = buf.reshape(buf.size)
    for n in range(n_batch):
        for g in range(groups):
            _fill_group(x[n, g], buf, ph, pw)
            for k in range(col.shape[0]):
                src = flat[offsets[k] :]
                dst = col[k]
                for q in range(length):  # (a slice assignment checks for overlap first)
                    dst[q] = src[q]
            gemm(wm[g], col, rows)
            _crop(rows, bias[g], out[n, g], buf.shape[4])
    return out


def _dense_wrapped(x, buf, flat, offsets, edges, wm, col, out, ph):  # noqa: ANN001, ANN201
    """out (N, G, OCg, OH*OW) = wm (G, OCg, K+1) @ col (K+1, OH*OW): im2col with no
    padding columns computed, the bias folded into the product.

    ``buf`` (Cg, sh, 1, Hq, OW) is a view of ``flat`` (which has zero margins before and
    after it) holding each channel's row phases at width OW, the image's columns first:
    tap k of output ``q = oh*OW + ow`` is ``flat[q + offsets[k]]`` except where the tap
    reaches left or right of the image, where a run wraps into the neighbouring row; those
    columns (``ow < edges[k, 0]`` or ``ow >= edges[k, 1]``) are zeroed after the copy. The
    last row of ``col`` is ones (set at load), the last column of ``wm`` the bias.
    """
    n_batch, groups = x.shape[0], x.shape[1]
    taps = offsets.shape[0]
    length = col.shape[1]
    out_w = buf.shape[4]
    for n in range(n_batch):
        for g in range(groups):
            _fill_group(x[n, g], buf, ph, 0)
            for k in range(taps):
                src = flat[offsets[k] :]
                dst = col[k]
                for q in range(length):
                    dst[q] = src[q]
                for ow in range(edges[k, 0]):
                    for r in range(ow, length, out_w):
                        dst[r] = 0.0
                for ow in range(edges[k, 1], out_w):
                    for r in range(ow, length, out_w):
                        dst[r] = 0.0
            gemm(wm[g], col, out[n, g])
    return out


def _dense_gathered(x, src, index, wm, col, out):  # noqa: ANN001, ANN201
    """out (N, G, OCg, OH*OW) = wm (G, OCg, K+1) @ col (K+1, OH*OW), col's first K rows
    gathered in one flat loop through ``index`` (K*OH*OW,) from ``src``, a copy of one
    image and group (Cg*H*W) followed by a zero that taps in the padding read.

    For tiny images, where the other kinds' loops (one per tap, or per row and tap) run
    a few elements each: one gather costs a few cycles an element, a loop start tens.
    The last row of ``col`` is ones (set at load), the last column of ``wm`` the bias.
    """
    n_batch, groups = x.shape[0], x.shape[1]
    size = src.size - 1
    cells = col.reshape(col.size)
    for n in range(n_batch):
        for g in range(groups):
            image = x[n, g].reshape(size)
            for i in range(size):
                src[i] = image[i]
            for m in range(index.size):
                cells[m] = src[index[m]]
            gemm(wm[g], col, out[n, g])
    return out


def _jit(fn: Any, name: str, parallel: bool = False) -> Any:
    """``fn`` compiled under its own ``name`` (numba names its cache files after the
    function, and whole-method functions import it by that name), with fastmath
    "contract" only: multiply-adds become FMAs (one rounding instead of two); NaN,
    infinity and -0.0 come out as without it."""
    return njit_renamed(fn, name, parallel=parallel, error_model="numpy", fastmath={"contract"})


# (serial, parallel) pairs, and the products, whose threads are BLAS's own.
RUNS = (_jit(_dense_runs, "dense_runs"), _jit(_dense_runs, "dense_runs_parallel", True))
PIXELS = (_jit(_dense_pixels, "dense_pixels"), _jit(_dense_pixels, "dense_pixels_parallel", True))
dense_columns = _jit(_dense_columns, "dense_columns")
dense_wrapped = _jit(_dense_wrapped, "dense_wrapped")
dense_gathered = _jit(_dense_gathered, "dense_gathered")


def tap_offsets(cg: int, kernel: tuple, s: tuple, d: tuple, hq: int, wq: int) -> np.ndarray:
    """Each tap's (channel, kh, kw) position in a flat phase buffer (Cg, sh, sw, hq, wq),
    relative to its output pixel's ``oh*wq + ow``."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, s, d
    c, i, j = np.meshgrid(np.arange(cg), np.arange(kh), np.arange(kw), indexing="ij")
    ih, iw = i * dh, j * dw
    phase = (c * sh + ih % sh) * sw + iw % sw
    return (phase * hq * wq + (ih // sh) * wq + iw // sw).reshape(-1).astype(np.int64)


# Loops run in parallel from this many multiply-adds (about 300 us on one thread). A
# parallel region wakes a thread per call: on a busy machine that thread may not run for
# a while, and a CNN's small convolutions then wait far longer than they compute (at two
# threads here, ResNet-18's 1.2M multiply-add stem took 243 us in parallel, 50 serially).
PARALLEL_MACS = 1 << 23

# Elements per iteration of a vectorized loop (LLVM's interleaving of 8-float vectors)
_VECTOR = 32

KINDS = ("runs", "pixels", "columns", "wrapped", "gathered")

# Cost model (microseconds, one thread), fitted on this project's CNN shapes: multiply-
# adds per microsecond of each loop, the overhead of one pass of four taps over a row
# (runs) or a pixel (pixels); BLAS's multiply-adds per microsecond on long rows (short
# rows of n columns get n / (n + _BLAS_HALF) of it), the cost of copying one element,
# of one short loop (a row of columns, a row filled into a stride phase or cropped),
# of gathering one element, and of one BLAS call.
_LOOP_MACS_US = {"runs": 25e3, "pixels": 20e3}
_PASS_US = 0.025
_BLAS_MACS_US, _BLAS_HALF = 30e3, 8
_COPY_US, _ROW_US, _GATHER_US, _CALL_US = 0.0005, 0.01, 0.0008, 2.0


def cost(
    kind: str, x_shape: tuple, weight_shape: tuple, out_shape: tuple, s: tuple, p: tuple
) -> float:
    """Estimated microseconds of one image and group of the ``kind`` step."""
    _, _, cg, h, w = x_shape
    ocg, out_h, out_w = out_shape[2:]
    taps = cg * weight_shape[2] * weight_shape[3]
    taps4 = -(-taps // 4) * 4
    wq = -(-(w + 2 * p[1]) // s[1])
    image = cg * h * w
    if kind == "gathered":
        length = out_h * out_w
        rate = _BLAS_MACS_US * length / (length + _BLAS_HALF)
        gather = taps * length * _GATHER_US + image * _COPY_US
        return gather + ocg * (taps + 1) * length / rate + _CALL_US
    # _fill_group: a loop per image row and stride phase column (one for wrapped)
    fill = cg * h * (1 if kind == "wrapped" else s[1]) * _ROW_US + image * _COPY_US
    crop = ocg * out_h * _ROW_US if kind in ("runs", "columns") else 0.0
    if kind == "runs":
        pairs = -(-ocg // 2)
        length = -(-out_h * wq // _VECTOR) * _VECTOR
        loops = 2 * pairs * taps4 * length / _LOOP_MACS_US[kind] + pairs * taps4 / 4 * _PASS_US
        return fill + crop + loops
    if kind == "pixels":
        pixels = out_h * out_w
        loops = pixels * taps4 * ocg / _LOOP_MACS_US[kind] + pixels * taps4 / 4 * _PASS_US
        return fill + loops
    length = out_h * (out_w if kind == "wrapped" else wq)
    copy = taps * (length * _COPY_US + _ROW_US)
    rate = _BLAS_MACS_US * length / (length + _BLAS_HALF)
    return fill + crop + copy + ocg * (taps + 1) * length / rate + _CALL_US


def choose_kind(x_shape: tuple, weight_shape: tuple, out_shape: tuple, s: tuple, p: tuple) -> str:
    """The cheapest kind by :func:`cost` (wrapped only where :func:`wraps`)."""
    kinds = [k for k in KINDS if k != "wrapped" or wraps(x_shape[4], out_shape[4], s)]
    return min(kinds, key=lambda k: cost(k, x_shape, weight_shape, out_shape, s, p))


def wraps(w: int, out_w: int, s: tuple) -> bool:
    """Whether the wrapped layout takes this geometry: stride 1 across, the output at
    least as wide as the image."""
    return s[1] == 1 and out_w >= w


def _plan_wrapped(x, weight, bias, out, s, p, d) -> tuple[Any, tuple]:  # noqa: ANN001
    _, groups, cg, h, w = x.shape
    ocg, out_h, out_w = out.shape[2:]
    kh, kw = weight.shape[2:]
    (sh, _), (ph, pw), (dh, dw) = s, p, d
    dt = x.dtype
    hq = -(-(h + 2 * ph) // sh)
    size = cg * sh * hq * out_w
    reach = (kw - 1) * dw - pw  # rightmost tap's column offset
    margin = max(pw, 0)
    flat = np.zeros(margin + size + out_w + max(reach, 0) + 1, dt)
    buf = flat[margin : margin + size].reshape(cg, sh, 1, hq, out_w)
    c, i, j = np.meshgrid(np.arange(cg), np.arange(kh), np.arange(kw), indexing="ij")
    ih, e = i * dh, j * dw - pw
    offsets = margin + ((c * sh + ih % sh) * hq + ih // sh) * out_w + e
    e = e.reshape(-1)
    edges = np.stack([np.clip(-e, 0, out_w), np.clip(w - e, 0, out_w)], axis=1).astype(np.int64)
    taps = cg * kh * kw
    wm = np.empty((groups, ocg, taps + 1), dt)
    wm[:, :, :taps] = weight.reshape(groups, ocg, taps)
    wm[:, :, taps] = bias.reshape(groups, ocg)
    col = np.empty((taps + 1, out_h * out_w), dt)
    col[taps] = 1.0
    o4 = out.reshape(out.shape[0], groups, ocg, out_h * out_w)
    args = (x, buf, flat, offsets.reshape(-1).astype(np.int64), edges, wm, col, o4, int(ph))
    return dense_wrapped, args


def _plan_gathered(x, weight, bias, out, s, p, d) -> tuple[Any, tuple]:  # noqa: ANN001
    _, groups, cg, h, w = x.shape
    ocg, out_h, out_w = out.shape[2:]
    kh, kw = weight.shape[2:]
    (sh, sw), (ph, pw), (dh, dw) = s, p, d
    dt = x.dtype
    c, i, j, oh, ow = np.meshgrid(
        np.arange(cg), np.arange(kh), np.arange(kw), np.arange(out_h), np.arange(out_w),
        indexing="ij",
    )  # fmt: skip
    ih, iw = oh * sh - ph + i * dh, ow * sw - pw + j * dw
    inside = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w)
    index = np.where(inside, (c * h + ih) * w + iw, cg * h * w).reshape(-1).astype(np.int64)
    taps = cg * kh * kw
    wm = np.empty((groups, ocg, taps + 1), dt)
    wm[:, :, :taps] = weight.reshape(groups, ocg, taps)
    wm[:, :, taps] = bias.reshape(groups, ocg)
    col = np.empty((taps + 1, out_h * out_w), dt)
    col[taps] = 1.0
    src = np.zeros(cg * h * w + 1, dt)
    o4 = out.reshape(out.shape[0], groups, ocg, out_h * out_w)
    return dense_gathered, (x, src, index, wm, col, o4)


def plan(
    kind: str,
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray,
    out: np.ndarray,
    s: tuple,
    p: tuple,
    d: tuple,
    parallel: bool,
) -> tuple[Any, tuple]:
    """The step (function, arguments) computing ``out`` (N, G, OCg, OH, OW) from
    ``x`` (N, G, Cg, H, W) the ``kind`` way, with its buffers and packed weights.

    weight is (G*OCg, Cg, kh, kw), bias (G*OCg,).
    """
    _, groups, cg, h, w = x.shape
    ocg, out_h, out_w = out.shape[2:]
    kh, kw = weight.shape[2:]
    (sh, sw), (ph, pw) = s, p
    if kind == "wrapped":
        return _plan_wrapped(x, weight, bias, out, s, p, d)
    if kind == "gathered":
        return _plan_gathered(x, weight, bias, out, s, p, d)
    dt = x.dtype
    hq, wq = -(-(h + 2 * ph) // sh), -(-(w + 2 * pw) // sw)
    # one zero row past each phase (the padded-width runs of the last output row reach
    # into it) and one zero channel, which padding taps read
    phases = (cg + 1, sh, sw, hq + 1, wq)
    flat = np.zeros(math.prod(phases) + _VECTOR, dt)
    buf = flat[: math.prod(phases)].reshape(phases)
    length = out_h * wq
    wm = weight.reshape(groups, ocg, cg * kh * kw)
    b = np.ascontiguousarray(bias.reshape(groups, ocg))
    geometry = (int(ph), int(pw))
    offsets = tap_offsets(cg, (kh, kw), s, d, hq + 1, wq)
    if kind == "columns":
        col = np.empty((offsets.size, length), dt)
        rows = np.empty((ocg, length), dt)
        wm = np.ascontiguousarray(wm)
        return dense_columns, (x, buf, offsets, wm, b, col, rows, out, *geometry)
    taps = offsets.size
    padded = -(-taps // 4) * 4
    offsets = np.concatenate([offsets, np.full(padded - taps, buf[0].size * cg, np.int64)])
    if kind == "runs":
        wp = np.zeros((groups, ocg + ocg % 2, padded), dt)
        wp[:, :ocg, :taps] = wm
        rows = np.empty((wp.shape[1], -(-length // _VECTOR) * _VECTOR), dt)
        return RUNS[parallel], (x, buf, flat, offsets, wp, b, rows, out, *geometry)
    wt = np.zeros((groups, padded, ocg), dt)
    wt[:, :taps] = wm.transpose(0, 2, 1)
    acc = np.empty((out_h * out_w, ocg), dt)
    return PIXELS[parallel], (x, buf, offsets, wt, b, acc, out, *geometry)


def dense_step(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray,
    out: np.ndarray,
    s: tuple,
    p: tuple,
    d: tuple,
) -> tuple[Any, tuple]:
    """The step for :func:`plan` of the kind :func:`choose_kind` picks, its loops parallel
    from PARALLEL_MACS multiply-adds."""
    kind = choose_kind(x.shape, weight.shape, out.shape, s, p)
    parallel = out.size * weight[0].size >= PARALLEL_MACS and get_num_threads() > 1
    return plan(kind, x, weight, bias, out, s, p, d, parallel)
