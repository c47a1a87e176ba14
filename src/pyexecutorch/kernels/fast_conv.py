"""Load-time fast paths for 1-D and 2-D convolutions (regular, grouped, depthwise, pointwise,
transposed with non-overlapping taps).

A forward convolution is one matrix product ``weight (OC, Cg*taps [+1]) @ columns`` whose
column buffer is filled by one strided copy, so a call is a handful of numpy calls whatever
the kernel size. At load the specializer allocates the buffers, builds every view of them
and packs the weights (taps reordered to the buffer's order, the bias as an extra column
that multiplies a row of ones kept in the buffer), so at run time only the copies and the
product remain. Two layouts of the columns:

* direct: the input is copied into a zero-padded buffer once, and one strided view of it,
  ``(N, G, Cg, kh, kw, OH, OW)``, is copied into the columns; the product lands in ``out``.
  Fewest calls: best for small images.
* flat: the padded image of each stride phase is a flat row per channel, so the tap
  ``(i, j)`` of every output ``(oh, ow)`` sits at a fixed offset from ``oh*Wh + ow`` and a
  tap's columns are one contiguous run (``Wh`` is the phase width; the ``Wh - OW`` extra
  outputs per row are computed and dropped). Contiguous copies run several times faster
  than the direct layout's short strided rows, and the columns are filled and multiplied
  in chunks of outputs small enough to stay in cache. Best for large images.

Anything else (float16, 3-D, overlapping transposed taps, empty tensors, a channels-last
``out``) keeps the general kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pyexecutorch.kernels.conv import _signature, convolution
from pyexecutorch.kernels.registry import KernelError, specializer

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# Column chunks of the flat layout are kept near this size so they stay in L2.
_CHUNK_BYTES = 512 << 10
# Below this many column elements the direct layout (fewer calls) wins.
_DIRECT_MAX = 1 << 15
# ... and, at stride 1, when its copy has at most this many rows.
_DIRECT_ROWS = 128


def _tensor(a: Any) -> bool:
    return isinstance(a, np.ndarray)


@specializer("aten::convolution.out")
def _convolution(
    input: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: Any,
    output_padding: Any,
    groups: Any,
    out: Any,
) -> Callable[..., Any] | None:
    """A fast path for float32/float64 1-D and 2-D convolutions with a contiguous ``out``."""
    if not (_tensor(input) and _tensor(weight) and _tensor(out)):
        return None
    if bias is not None and not _tensor(bias):
        return None
    dt = input.dtype
    if dt not in _FLOATS or weight.dtype != dt or out.dtype != dt:
        return None
    if input.ndim not in (3, 4) or not out.flags.c_contiguous or not isinstance(groups, int):
        return None
    try:
        s, p, d, shape, _ = _signature(
            input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
        )
    except (KernelError, TypeError, ValueError):
        return None
    if shape != out.shape or out.size == 0 or input.size == 0 or weight.size == 0:
        return None
    if input.ndim == 3:  # 1-D: a 2-D convolution of height 1
        s, p, d = (1, *s), (0, *p), (1, *d)
    if transposed:
        if not isinstance(output_padding, (list, tuple)):
            return None
        return _transposed(input, weight, bias, s, p, d, tuple(output_padding), groups, out)
    return _forward(input, weight, bias, s, p, d, groups, out)


def _fallback(x, w, b, stride, padding, dilation, transposed, output_padding, groups, out):  # noqa: ANN001, ANN202
    return convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups, out)


class _PackedWeights:
    """The weight matrix (and fused bias) a plan multiplies by, packed once for constants.

    Constant tensors reach kernels read-only and are passed as the same objects every
    call; weights computed at run time are repacked on each call.
    """

    def __init__(self, w: np.ndarray, b: np.ndarray | None, pack: Callable[..., np.ndarray]):
        self.pack = pack
        self.w, self.b = w, b
        const = not w.flags.writeable and (b is None or not b.flags.writeable)
        self.packed = pack(w, b) if const else None

    def get(self, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        if self.packed is not None and w is self.w and b is self.b:
            return self.packed
        return self.pack(w, b)


# ---------------------------------------------------------------------------
# Forward convolution.


def _axis_phases(k: int, s: int, d: int) -> tuple[list[int], list[int]]:
    """Per tap: its stride phase and its offset (in phase pixels) from the output position."""
    return [(i * d) % s for i in range(k)], [(i * d) // s for i in range(k)]


def _forward(x, w, b, s, p, d, groups, out):  # noqa: ANN001, ANN202
    n, c = x.shape[:2]
    in_sp = x.shape[2:] if x.ndim == 4 else (1, x.shape[2])
    k_sp = w.shape[2:] if w.ndim == 4 else (1, w.shape[2])
    o_sp = out.shape[2:] if out.ndim == 4 else (1, out.shape[2])
    taps = k_sp[0] * k_sp[1]
    if taps == 1 and s == (1, 1) and p == (0, 0):
        return _pointwise(x, w, b, groups, out)
    # The direct layout's single copy walks N*C*taps*OH short rows; the flat layout's
    # copies are contiguous but there are more of them (stride phases, the crop).
    cols = n * (c * taps + groups * (b is not None)) * o_sp[0] * o_sp[1]
    rows = n * c * taps * o_sp[0]
    small = cols <= _DIRECT_MAX and (s != (1, 1) or rows <= _DIRECT_ROWS)
    build = _direct if small else _flat
    return build(x, w, b, s, p, d, groups, out, in_sp, k_sp, o_sp)


def _pack_forward(groups: int, order: list[int] | None):  # noqa: ANN202
    """``w (OC, Cg, *k)`` as ``(OC, Cg*taps [+1])`` or ``(G, OCg, Cg*taps [+1])``, taps in
    ``order``, the bias as the last column."""

    def pack(w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        oc, cg = w.shape[:2]
        taps = math.prod(w.shape[2:])
        wt = w.reshape(oc, cg, taps)
        if order is not None:
            wt = wt[:, :, order]
        m = np.empty((oc, cg * taps + (b is not None)), w.dtype)
        m[:, : cg * taps] = wt.reshape(oc, cg * taps)
        if b is not None:
            m[:, -1] = b
        m = m if groups == 1 else m.reshape(groups, oc // groups, m.shape[1])
        m.flags.writeable = False
        return m

    return pack


def _pointwise(x, w, b, groups, out):  # noqa: ANN001, ANN202
    """1x1 convolution, stride 1, no padding: the product on the input itself."""
    n, c = x.shape[:2]
    oc = w.shape[0]
    npix = math.prod(x.shape[2:])
    weights = _PackedWeights(w, None, _pack_forward(groups, None))
    out0 = out
    if groups == 1 and n == 1:
        xshape, o3 = (c, npix), out.reshape(oc, npix)
    elif groups == 1:
        xshape, o3 = (n, c, npix), out.reshape(n, oc, npix)
    else:
        xshape = (n, groups, c // groups, npix)
        o3 = out.reshape(n, groups, oc // groups, npix)
    bshape = (oc, 1) if groups == 1 else (groups, oc // groups, 1)

    def conv(x, w, b, stride, padding, dilation, transposed, output_padding, groups_, out):  # noqa: ANN001, ANN202
        if out is not out0:
            return _fallback(
                x, w, b, stride, padding, dilation, transposed, output_padding, groups_, out
            )
        np.matmul(weights.get(w, None), x.reshape(xshape), out=o3)
        if b is not None:
            np.add(o3, b.reshape(bshape), out=o3)
        return out

    return conv


def _direct(x, w, b, s, p, d, groups, out, in_sp, k_sp, o_sp):  # noqa: ANN001, ANN202
    """Columns by one strided copy of a padded copy of the input; the product into out."""
    n, c = x.shape[:2]
    oc = w.shape[0]
    g, cg, ocg = groups, c // groups, oc // groups
    (h, wd), (kh, kw), (oh, ow) = in_sp, k_sp, o_sp
    taps = kh * kw
    kg = cg * taps
    e = int(b is not None)
    dt = x.dtype
    hp, wp = h + 2 * p[0], wd + 2 * p[1]
    xp = np.zeros((n, c, hp, wp), dt)
    interior = xp[:, :, p[0] : p[0] + h, p[1] : p[1] + wd]
    if x.ndim == 3:
        interior = interior[:, :, 0]
    col = np.zeros((n, g, kg + e, oh * ow), dt)
    if e:
        col[:, :, kg] = 1  # the row that multiplies the bias column
    dst = col[:, :, :kg].reshape(n, g, cg, kh, kw, oh, ow)
    sn, sc, sh, sw = xp.strides
    src = as_strided(
        xp,
        (n, g, cg, kh, kw, oh, ow),
        (sn, cg * sc, sc, d[0] * sh, d[1] * sw, s[0] * sh, s[1] * sw),
        writeable=False,
    )
    weights = _PackedWeights(w, b, _pack_forward(groups, None))
    if g == 1 and n == 1:
        lhs, o3 = col[0, 0], out.reshape(oc, oh * ow)
    elif g == 1:
        lhs, o3 = col[:, 0], out.reshape(n, oc, oh * ow)
    else:
        lhs, o3 = col, out.reshape(n, g, ocg, oh * ow)
    out0 = out

    def conv(x, w, b, stride, padding, dilation, transposed, output_padding, groups_, out):  # noqa: ANN001, ANN202
        if out is not out0:
            return _fallback(
                x, w, b, stride, padding, dilation, transposed, output_padding, groups_, out
            )
        np.copyto(interior, x)
        np.copyto(dst, src)
        np.matmul(weights.get(w, b), lhs, out=o3)
        return out

    return conv


def _flat(x, w, b, s, p, d, groups, out, in_sp, k_sp, o_sp):  # noqa: ANN001, ANN202
    """Columns as contiguous runs of per-phase flat padded images, in cache-sized chunks.

    Work is cut into chunks of groups (depthwise: of channels) and, when one group's
    columns are still too large, of output rows. The column and product buffers are
    chunk-sized and the phase images hold one chunk of groups, so what a chunk touches
    stays in cache and buffers of layers run earlier are not read back from memory.
    """
    n, c = x.shape[:2]
    oc = w.shape[0]
    g, cg, ocg = groups, c // groups, oc // groups
    (h, wd), (kh, kw), (oh, ow) = in_sp, k_sp, o_sp
    taps = kh * kw
    kg = cg * taps
    e = int(b is not None)
    dt = x.dtype
    it = dt.itemsize
    ph_h, u_h = _axis_phases(kh, s[0], d[0])
    ph_w, u_w = _axis_phases(kw, s[1], d[1])
    wh = ow + max(u_w)  # phase row length; outputs [ow, wh) of each row are dropped
    hh = oh + max(u_h) + 1  # one spare zero row keeps every tap's run inside the buffer

    # Taps grouped by phase pair; within a pair the offsets step evenly in each axis.
    order: list[int] = []
    pairs = []
    for a in sorted(set(ph_h)):
        rows = [i for i in range(kh) if ph_h[i] == a]
        for bb in sorted(set(ph_w)):
            cols_ = [j for j in range(kw) if ph_w[j] == bb]
            step_i = u_h[rows[1]] - u_h[rows[0]] if len(rows) > 1 else 0
            step_j = u_w[cols_[1]] - u_w[cols_[0]] if len(cols_) > 1 else 0
            pairs.append(
                (a, bb, len(order), len(rows), len(cols_), u_h[rows[0]], u_w[cols_[0]])
                + (step_i, step_j)
            )
            order += [i * kw + j for i in rows for j in cols_]

    # Chunk sizes: groups per chunk, then output rows per chunk.
    per_group_row = n * (kg + e) * wh * it
    gc = max(1, min(g, _CHUNK_BYTES // (per_group_row * oh)))
    rc = oh if gc > 1 else max(1, min(oh, _CHUNK_BYTES // per_group_row))
    rc = -(-oh // -(-oh // rc))  # even out the row chunks

    # Phase buffers for one chunk of groups (zero: the padding, never written) and the
    # copies that fill them from the input.
    cc = gc * cg
    phases = {}
    fills = []  # (phase interior view, input index without the channel range)
    for a, bb, *_ in pairs:
        buf = np.zeros((n, cc, hh * wh), dt)
        phases[a, bb] = buf
        r0 = (a - p[0]) % s[0]  # first input row that lands in phase a
        q0 = (bb - p[1]) % s[1]
        y0 = (r0 + p[0] - a) // s[0]
        x0 = (q0 + p[1] - bb) // s[1]
        nr = min(-(-(h - r0) // s[0]) if r0 < h else 0, hh - y0)
        nc = min(-(-(wd - q0) // s[1]) if q0 < wd else 0, wh - x0)
        if nr <= 0 or nc <= 0:
            continue
        dst = buf.reshape(n, cc, hh, wh)[:, :, y0 : y0 + nr, x0 : x0 + nc]
        csl = slice(q0, q0 + (nc - 1) * s[1] + 1, s[1])
        if x.ndim == 3:
            fills.append((dst[:, :, 0], (csl,)))
        else:
            fills.append((dst, (slice(r0, r0 + (nr - 1) * s[0] + 1, s[0]), csl)))

    col = np.zeros((n, gc, kg + e, rc * wh), dt)
    if e:
        col[:, :, kg] = 1  # the row that multiplies the bias column
    colv = col[:, :, :kg].reshape(n, gc, cg, taps, rc * wh)
    direct_out = wh == ow
    acc = None if direct_out else np.empty((n, gc * ocg, rc * wh), dt)
    o4 = out.reshape(n, oc, oh, ow)
    o3 = out.reshape(n, oc, oh * ow)

    def row_step(gn: int, r0: int, r1: int) -> tuple:
        """Column copies, product operands and crop of output rows [r0, r1), gn groups."""
        ln = (r1 - r0) * wh
        copies = []
        for a, bb, t0, ni, nj, u0, v0, step_i, step_j in pairs:
            buf = phases[a, bb]
            sn, sc, _ = buf.strides
            src = as_strided(
                buf[:, :, u0 * wh + v0 + r0 * wh :],
                (n, gn, cg, ni, nj, ln),
                (sn, cg * sc, sc, step_i * wh * it, step_j * it, it),
                writeable=False,
            )
            dst = colv[:, :gn, :, t0 : t0 + ni * nj, :ln].reshape(n, gn, cg, ni, nj, ln)
            copies.append((dst, src))
        lhs = col[:, :gn, :, :ln]
        if direct_out:
            tgt, crop = o3[:, : gn * ocg, r0 * ow : r1 * ow], None
        else:
            tgt = acc[:, : gn * ocg, :ln]
            crop = tgt.reshape(n, gn * ocg, r1 - r0, wh)[..., :ow]
        if g == 1 and n == 1:
            lhs, tgt = lhs[0, 0], tgt[0]
        elif g == 1:
            lhs = lhs[:, 0]
        else:
            tgt = tgt.reshape(n, gn, ocg, ln)
        return tuple(copies), lhs, tgt, crop, (r0, r1)

    chunks = []
    for g0 in range(0, g, gc):
        g1 = min(g, g0 + gc)
        gn = g1 - g0
        csl = slice(g0 * cg, g1 * cg)
        gfills = tuple((dst[:, : gn * cg], (slice(None), csl, *key)) for dst, key in fills)
        osl = slice(g0 * ocg, g1 * ocg)
        steps = []
        for r0 in range(0, oh, rc):
            r1 = min(oh, r0 + rc)
            copies, lhs, tgt, crop, _ = row_step(gn, r0, r1)
            if not direct_out:
                tgt_out = o4[:, osl, r0:r1, :]
                steps.append((copies, lhs, tgt, crop, tgt_out))
            else:
                tgt = o3[:, osl, r0 * ow : r1 * ow]
                if g == 1 and n == 1:
                    tgt = tgt[0]
                elif g > 1:
                    tgt = tgt.reshape(n, gn, ocg, (r1 - r0) * ow)
                steps.append((copies, lhs, tgt, None, None))
        chunks.append((gfills, slice(g0, g1) if g > 1 else None, tuple(steps)))
    chunks = tuple(chunks)
    weights = _PackedWeights(w, b, _pack_forward(groups, order))
    out0 = out

    def conv(x, w, b, stride, padding, dilation, transposed, output_padding, groups_, out):  # noqa: ANN001, ANN202
        if out is not out0:
            return _fallback(
                x, w, b, stride, padding, dilation, transposed, output_padding, groups_, out
            )
        wm = weights.get(w, b)
        for gfills, gsl, steps in chunks:
            for dst, key in gfills:
                np.copyto(dst, x[key])
            wg = wm if gsl is None else wm[gsl]
            for copies, lhs, tgt, crop, tgt_out in steps:
                for dst, src in copies:
                    np.copyto(dst, src)
                np.matmul(wg, lhs, out=tgt)
                if crop is not None:
                    np.copyto(tgt_out, crop)
        return out

    return conv


# ---------------------------------------------------------------------------
# Transposed convolution whose taps do not overlap (kernel == stride): one product and
# one scatter that also adds the bias.


def _transposed(x, w, b, s, p, d, output_padding, groups, out):  # noqa: ANN001, ANN202
    k_sp = w.shape[2:] if w.ndim == 4 else (1, w.shape[2])
    if tuple(k_sp) != s or d != (1, 1) or p != (0, 0) or any(output_padding):
        return None
    n, c = x.shape[:2]
    h, wd = x.shape[2:] if x.ndim == 4 else (1, x.shape[2])
    kh, kw = k_sp
    ocg = w.shape[1]
    g, cg = groups, c // groups
    oc = ocg * g
    npix = h * wd
    dt = x.dtype
    e = int(b is not None)
    rows = ocg * kh * kw

    def pack(w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        # (C, OCg, kh, kw) -> per group (OCg*kh*kw, Cg [+ the bias column])
        m = np.empty((g, rows, cg + e), dt)
        m[:, :, :cg] = w.reshape(g, cg, rows).transpose(0, 2, 1)
        if e:
            m[:, :, cg] = np.repeat(b.reshape(g, ocg), kh * kw, axis=1)
        m = m[0] if g == 1 else m
        m.flags.writeable = False
        return m

    weights = _PackedWeights(w, b, pack)
    tmp = np.empty((n, g, rows, npix), dt)
    # The input with a row of ones per group under it (multiplies the bias column).
    xb = np.ones((n, g, cg + e, npix), dt)
    xb_in = xb[:, :, :cg]
    if g == 1 and n == 1:
        lhs, tgt = xb[0, 0], tmp[0, 0]
    else:
        lhs, tgt = xb, tmp
    xshape = lhs.shape
    xin_shape = xb_in.shape
    # tmp (N, OC, kh, kw, H, W) -> out (N, OC, H, kh, W, kw)
    spread = tmp.reshape(n, oc, kh, kw, h, wd).transpose(0, 1, 4, 2, 5, 3)
    o6 = out.reshape(n, oc, h, kh, wd, kw)
    out0 = out

    def conv(x, w, b, stride, padding, dilation, transposed, output_padding, groups_, out):  # noqa: ANN001, ANN202
        if out is not out0:
            return _fallback(
                x, w, b, stride, padding, dilation, transposed, output_padding, groups_, out
            )
        if e:
            np.copyto(xb_in, x.reshape(xin_shape))
            np.matmul(weights.get(w, b), lhs, out=tgt)
        else:
            np.matmul(weights.get(w, None), x.reshape(xshape), out=tgt)
        np.copyto(o6, spread)
        return out

    return conv
