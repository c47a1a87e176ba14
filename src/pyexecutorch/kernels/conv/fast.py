"""Load-time fast paths for 1-D and 2-D convolutions (regular, grouped, depthwise, pointwise,
transposed with non-overlapping taps).

A forward convolution is one matrix product ``weight (OC, Cg*taps [+1]) @ columns`` whose
column buffer is filled by a few strided copies, so a call is a handful of numpy calls
whatever the kernel size. At load the specializer allocates the buffers, builds every view
of them and packs the weights (taps reordered to the buffer's order, the bias as an extra
column that multiplies a row of ones kept in the buffer); the calls then run as generated
straight-line code (see :func:`_kernel`). Three layouts of the columns:

* direct: the input is copied into a zero-padded buffer once, and one strided view of it,
  ``(N, G, Cg, kh, kw, OH, OW)``, is copied into the columns; the product lands in ``out``.
  Fewest calls: best for tiny images, whose copies are short anyway.
* wrapped: the padded image of each stride phase has rows exactly ``OW`` wide, so the tap
  ``(i, j)`` of every output ``(oh, ow)`` sits at a fixed offset from ``oh*OW + ow`` and a
  tap's columns are one contiguous run that lands in ``out`` as is. Taps reaching past a
  row's end read the next row's first pixels instead of padding; one strided fill zeroes
  those few columns after the copy. Needs the image no wider than ``OW`` where taps reach
  right of it (padded, "same"-like convolutions).
* flat: as wrapped, but rows ``Wh`` wide with their padding (``Wh - OW`` extra outputs per
  row are computed, then cropped): any geometry, such as unpadded ones.

Contiguous copies run several times faster than the direct layout's short strided rows;
the wrapped and flat columns are filled and multiplied in chunks small enough to stay in
cache. Anything else (float16, 3-D, overlapping transposed taps, empty tensors, a
channels-last ``out``) keeps the general kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pyexecutorch.kernels.conv import geometry
from pyexecutorch.kernels.conv.conv import convolution, signature_or_none
from pyexecutorch.kernels.registry import offer, specializer

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# Column chunks of the wrapped and flat layouts are kept near this size so they stay in L2.
_CHUNK_BYTES = 512 << 10
# Below this many column elements the direct layout (fewer calls) wins.
_DIRECT_MAX = 1 << 15
# ... and, at stride 1, when its copy has at most this many rows.
_DIRECT_ROWS = 128
# Strided convolutions up to this many direct-layout rows keep the direct layout.
_DIRECT_ROWS_STRIDED = 512


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
    sig = signature_or_none(
        input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )
    if sig is None:
        return None
    s, p, d, shape, _ = sig
    if shape != out.shape or out.size == 0 or input.size == 0 or weight.size == 0:
        return None
    if input.ndim == 3:  # 1-D: a 2-D convolution of height 1
        s, p, d = (1, *s), (0, *p), (1, *d)
    if transposed:
        if not isinstance(output_padding, (list, tuple)):
            return None
        fast = _transposed(input, weight, bias, s, p, d, tuple(output_padding), groups, out)
    else:
        fast = _without_padding_taps(input, weight, bias, s, p, d, groups, out)
        if fast is None:
            fast = _forward(input, weight, bias, s, p, d, groups, out)
    if fast is not None:
        # Every plan (and the general kernel it falls back to) writes the out it is given
        # and returns it: out stays the planned array (see runtime.method).
        fast = offer(fast, fills_outputs=True)
    return fast


def _without_padding_taps(x, w, b, s, p, d, groups, out):  # noqa: ANN001, ANN202
    """A 2-D convolution whose outer taps only ever read padding, as the convolution of
    the taps that read the image (a dilated 3x3 with padding wider than the image is a
    1x1): the dropped taps multiply zeros. None when no tap drops or the weight is not
    a constant; the result is the same, without the work on padding."""
    if x.ndim != 4 or w.flags.writeable:
        return None
    spans = [
        geometry.taps_reading(x.shape[2 + a], w.shape[2 + a], s[a], p[a], d[a], out.shape[2 + a])
        or (0, w.shape[2 + a] - 1)  # (no tap reads the image: keep them all)
        for a in (0, 1)
    ]
    if all(lo == 0 and hi == w.shape[2 + a] - 1 for a, (lo, hi) in enumerate(spans)):
        return None
    (h0, h1), (w0, w1) = spans
    pads = (p[0] - h0 * d[0], p[1] - w0 * d[1])
    if min(pads) < 0:
        return None  # the kept taps would need the image cropped: keep every tap
    kept = np.ascontiguousarray(w[:, :, h0 : h1 + 1, w0 : w1 + 1])
    kept.flags.writeable = False
    for a, k in enumerate(kept.shape[2:]):
        if geometry.out_size(x.shape[2 + a], k, s[a], d[a], pads[a], pads[a]) != out.shape[2 + a]:
            return None  # the right side's padding would differ
    inner = _forward(x, kept, b, s, pads, d, groups, out)
    weight = w

    def taps_on_image(x, w, b, stride, padding, dilation, transposed, output_padding, groups, out):  # noqa: ANN001, ANN202
        # the kept taps of the weight, and the padding that goes with them
        w = kept if w is weight else w[:, :, h0 : h1 + 1, w0 : w1 + 1]
        return inner(x, w, b, stride, pads, dilation, transposed, output_padding, groups, out)

    return taps_on_image


def _fallback(x, w, b, stride, padding, dilation, transposed, output_padding, groups, out):  # noqa: ANN001, ANN202
    return convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups, out)


class _PackedWeights:
    """The weight matrix (and fused bias) a plan multiplies by, packed once for constants
    (the pointwise plan packs a pair: the matrix and the bias as a column).

    Constant tensors reach kernels read-only and are passed as the same objects every
    call; weights computed at run time are repacked on each call.
    """

    def __init__(self, w: np.ndarray, b: np.ndarray | None, pack: Callable[..., Any]):
        self.pack = pack
        self.w, self.b = w, b
        const = not w.flags.writeable and (b is None or not b.flags.writeable)
        self.packed = pack(w, b) if const else None

    def get(self, w: np.ndarray, b: np.ndarray | None) -> Any:
        if self.packed is not None and w is self.w and b is self.b:
            return self.packed
        return self.pack(w, b)


# ---------------------------------------------------------------------------
# A plan is a list of numpy calls on fixed buffers and views, ``(fn, args)``. Arguments
# that depend on the call's input or weights are placeholders resolved per call, or once
# at load for the arrays seen then (the planned input, constant weights), in which case
# the calls run as generated straight-line code with no per-call Python work.


class _OfX:
    """An argument that is a view of the input: ``view(x)``."""

    def __init__(self, view: Callable[[np.ndarray], np.ndarray]):
        self.view = view


class _OfW:
    """An argument that is the packed weights, or the slice ``key`` of them."""

    def __init__(self, key: Any = None):
        self.key = key


_PARAMS = "x, w, b, stride, padding, dilation, transposed, output_padding, groups, out"


def _kernel(plan: str, calls: list, weights: _PackedWeights, x: Any, out: np.ndarray):  # noqa: ANN202
    """The fast path running ``calls``: straight-line code for the loaded input and
    constant weights, a loop resolving the placeholders otherwise."""
    out0 = out

    def resolve(a: Any, x: np.ndarray, wm: np.ndarray) -> Any:
        if isinstance(a, _OfX):
            return a.view(x)
        if isinstance(a, _OfW):
            return wm if a.key is None else wm[a.key]
        return a

    def general(x, w, b, stride, padding, dilation, transposed, output_padding, groups, out):  # noqa: ANN001, ANN202
        if out is not out0:
            return _fallback(
                x, w, b, stride, padding, dilation, transposed, output_padding, groups, out
            )
        wm = weights.get(w, b)
        for fn, args in calls:
            fn(*[resolve(a, x, wm) for a in args])
        return out

    general.__qualname__ = f"{plan}.<locals>.conv"
    wm = weights.packed
    if wm is None:
        return general
    ns: dict[str, Any] = {"general": general, "x0": x, "w0": weights.w, "b0": weights.b}
    ns["out0"] = out
    lines = []
    for k, (fn, args) in enumerate(calls):
        names = []
        for m, a in enumerate(args):
            if isinstance(a, _OfX):
                a = a.view(x)
                if not np.may_share_memory(a, x):
                    return general  # a view of the input was a copy: it would go stale
            else:
                a = resolve(a, x, wm)
            ns[f"a{k}_{m}"] = a
            names.append(f"a{k}_{m}")
        ns[f"f{k}"] = fn
        lines.append(f"    f{k}({', '.join(names)})")
    source = (
        f"def conv({_PARAMS}):\n"
        "    if x is not x0 or w is not w0 or b is not b0 or out is not out0:\n"
        f"        return general({_PARAMS})\n" + "\n".join(lines) + "\n    return out\n"
    )
    exec(source, ns)  # noqa: S102 - built from bound names only
    conv = ns["conv"]
    conv.__qualname__ = f"{plan}.<locals>.conv"
    return conv


# ---------------------------------------------------------------------------
# Forward convolution.


def _axis_phases(k: int, s: int, d: int) -> tuple[list[int], list[int]]:
    """Per tap: its stride phase and its offset (in phase pixels) from the output position."""
    phases = [geometry.tap_phase(i, s, d) for i in range(k)]
    return [a for a, _ in phases], [u for _, u in phases]


def _forward(x, w, b, s, p, d, groups, out):  # noqa: ANN001, ANN202
    n, c = x.shape[:2]
    in_sp = x.shape[2:] if x.ndim == 4 else (1, x.shape[2])
    k_sp = w.shape[2:] if w.ndim == 4 else (1, w.shape[2])
    o_sp = out.shape[2:] if out.ndim == 4 else (1, out.shape[2])
    taps = k_sp[0] * k_sp[1]
    if taps == 1 and s == (1, 1) and p == (0, 0):
        return _pointwise(x, w, b, groups, out)
    # The direct layout's single copy walks N*C*taps*OH short rows; the wrapped and flat
    # layouts' copies are long contiguous runs, but they take more calls (a fill, the
    # wrapped columns' fix-up, the flat layout's crop, a copy per stride phase).
    cols = n * (c * taps + groups * (b is not None)) * o_sp[0] * o_sp[1]
    rows = n * c * taps * o_sp[0]
    small = cols <= _DIRECT_MAX
    if small and rows <= (_DIRECT_ROWS if s == (1, 1) else _DIRECT_ROWS_STRIDED):
        return _direct(x, w, b, s, p, d, groups, out, in_sp, k_sp, o_sp)
    plan = _wrapped(x, w, b, s, p, d, groups, out, in_sp, k_sp, o_sp)
    if plan is not None:
        return plan
    build = _direct if small and s != (1, 1) else _flat
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
    g = groups
    if g == 1 and n == 1:
        xshape, o3, prod = (c, npix), out.reshape(oc, npix), np.dot
    elif g == 1:
        xshape, o3, prod = (n, c, npix), out.reshape(n, oc, npix), np.matmul
    else:
        xshape, o3 = (n, g, c // g, npix), out.reshape(n, g, oc // g, npix)
        prod = np.matmul
    bshape = (oc, 1) if g == 1 else (g, oc // g, 1)
    pack_w = _pack_forward(g, None)

    def pack(w: np.ndarray, b: np.ndarray | None) -> tuple:
        return pack_w(w, None), None if b is None else b.reshape(bshape)

    weights = _PackedWeights(w, b, pack)
    calls = [(prod, (_OfW(0), _OfX(lambda x: x.reshape(xshape)), o3))]
    if b is not None:
        calls.append((np.add, (o3, _OfW(1), o3)))
    return _kernel("_pointwise", calls, weights, x, out)


def _geometry(x, w, b, groups, in_sp, k_sp, o_sp):  # noqa: ANN001, ANN202
    """The sizes every layout planner starts from: batch, channels, groups (and channels
    per group), image, kernel and output sizes, taps, columns per group, whether there
    is a bias, and the dtype."""
    n, c = x.shape[:2]
    oc = w.shape[0]
    (h, wd), (kh, kw), (oh, ow) = in_sp, k_sp, o_sp
    taps = kh * kw
    cg = c // groups
    return (
        n,
        c,
        oc,
        groups,
        cg,
        oc // groups,
        h,
        wd,
        kh,
        kw,
        oh,
        ow,
        taps,
        cg * taps,
        int(b is not None),
        x.dtype,
    )


def _product_operands(lhs, tgt, n, g, ocg):  # noqa: ANN001, ANN202
    """The column chunk (N, G, K, L) and output chunk (N, G*OCg, L) shaped for one product:
    2-D for one image and one group (np.dot's cheaper path), batched otherwise."""
    if g == 1 and n == 1:
        return lhs[0, 0], tgt[0]
    if g == 1:
        return lhs[:, 0], tgt
    return lhs, tgt.reshape(n, lhs.shape[1], ocg, lhs.shape[3])


def _direct(x, w, b, s, p, d, groups, out, in_sp, k_sp, o_sp):  # noqa: ANN001, ANN202
    """Columns by one strided copy of a padded copy of the input; the product into out."""
    n, c, oc, g, cg, ocg, h, wd, kh, kw, oh, ow, taps, kg, e, dt = _geometry(
        x, w, b, groups, in_sp, k_sp, o_sp
    )
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
    prod = np.matmul
    if g == 1 and n == 1:
        lhs, o3, prod = col[0, 0], out.reshape(oc, oh * ow), np.dot
    elif g == 1:
        lhs, o3 = col[:, 0], out.reshape(n, oc, oh * ow)
    else:
        lhs, o3 = col, out.reshape(n, g, ocg, oh * ow)
    calls = [
        (np.copyto, (interior, _OfX(lambda x: x))),
        (np.copyto, (dst, src)),
        (prod, (_OfW(), lhs, o3)),
    ]
    return _kernel("_direct", calls, weights, x, out)


def _tap_axis(k: int, s: int, d: int, p: int, size: int):  # noqa: ANN202
    """One axis of the wrapped layout: per tap its stride phase and its shift (in phase
    pixels) from the output position; per phase the number of input pixels in it."""
    phases = [geometry.tap_phase(i, s, d, p) for i in range(k)]
    phase, shift = [a for a, _ in phases], [u for _, u in phases]
    count = {a: len(range(a, size, s)) for a in set(phase)}
    return phase, shift, count


def _ranks(phase: list[int]) -> tuple[list[int], dict[int, list[int]]]:
    """Taps ordered by phase (then index): each tap's rank, and each phase's taps."""
    order = sorted(range(len(phase)), key=lambda i: (phase[i], i))
    rank = [0] * len(phase)
    for r, i in enumerate(order):
        rank[i] = r
    groups: dict[int, list[int]] = {}
    for i in order:
        groups.setdefault(phase[i], []).append(i)
    return rank, groups


def _step(values: list[int]) -> int | None:
    """The common difference of ``values`` (0 for one value), or None if uneven."""
    if len(values) < 2:
        return 0
    step = values[1] - values[0]
    ok = all(b - a == step for a, b in zip(values, values[1:], strict=False))
    return step if ok else None


def _runs(offsets: list[int]) -> list[tuple[int, int, int]]:
    """Sorted ``offsets`` cut greedily into arithmetic runs ``(start, step, length)``."""
    runs: list[tuple[int, int, int]] = []
    for o in sorted(offsets):
        if runs:
            start, step, length = runs[-1]
            if length == 1 or o - start == step * length:
                runs[-1] = (start, o - start if length == 1 else step, length + 1)
                continue
        runs.append((o, 0, 1))
    return runs


def _chunks(row_bytes: int, weight_bytes: int, g: int, oh: int) -> tuple[int, int]:
    """Groups per chunk, then output rows per chunk, of the wrapped and flat layouts.

    ``row_bytes``: one group's columns for one output row; ``weight_bytes``: one group's
    packed weights. Every row chunk reads its group's weights again, so a chunk's columns
    are allowed to grow to the weights' size: a late-CNN 3x3 (960 -> 256 at 8x8, 8.8 MB of
    weights) in cache-sized chunks of one row streamed its weights from memory 8 times and
    ran 2.6x slower than in one product.
    """
    budget = max(_CHUNK_BYTES, weight_bytes)
    gc = max(1, min(g, budget // (row_bytes * oh)))
    rc = oh if gc > 1 else max(1, min(oh, budget // row_bytes))
    return gc, -(-oh // -(-oh // rc))  # even out the row chunks


class _WrappedAxis:
    """One axis of the wrapped layout: per tap its stride phase, shift and rank (taps
    ordered by phase), per phase its taps, their even step and the pixels it holds."""

    def __init__(self, k: int, s: int, d: int, p: int, size: int):
        self.phase, self.shift, self.count = _tap_axis(k, s, d, p, size)
        self.rank, self.taps = _ranks(self.phase)
        self.step = {a: _step([self.shift[t] for t in ts]) for a, ts in self.taps.items()}


def _wrapped(x, w, b, s, p, d, groups, out, in_sp, k_sp, o_sp):  # noqa: ANN001, ANN202
    """Columns as contiguous runs of per-phase padded images whose rows are exactly OW
    long, so the product lands in out with no crop.

    With rows of OW pixels, a tap that reaches left or right of the image reads the
    neighbouring row's pixel instead of padding (the run wraps around). Those columns
    are few (for a 3x3, padding 1: the first and last of each row of two taps), always
    padding, and are zeroed after the copy by one strided fill. Needs every pixel a tap
    reads right of the row to be padding, so declines when an image row is wider than
    OW and a tap reaches right of it (unpadded "valid" convolutions: the flat layout).
    """
    geo = _geometry(x, w, b, groups, in_sp, k_sp, o_sp)
    n, c, oc, g, cg, ocg, h, wd, kh, kw, oh, ow, taps, kg, e, dt = geo
    rows = _WrappedAxis(kh, s[0], d[0], p[0], h)
    cols = _WrappedAxis(kw, s[1], d[1], p[1], wd)
    v = cols.shift
    if max(v) > ow or -min(v) > ow:
        return None  # taps past the guard rows (paddings wider than the output)
    for bb, js in cols.taps.items():
        if max(v[j] for j in js) > 0 and cols.count[bb] > ow:
            return None  # a tap reads image pixels right of the row: they would wrap
    if None in rows.step.values() or None in cols.step.values():
        return None
    plan = _WrappedPlan(geo, rows, cols, s, x.shape)
    order = [0] * taps
    for i in range(kh):
        for j in range(kw):
            order[rows.rank[i] * kw + cols.rank[j]] = i * kw + j
    weights = _PackedWeights(w, b, _pack_forward(groups, order))

    o3 = out.reshape(n, oc, oh * ow)
    calls = []
    for g0 in range(0, g, plan.gc):
        g1 = min(g, g0 + plan.gc)
        gn = g1 - g0
        calls += plan.fills(g0 * cg, g1 * cg)
        for r0 in range(0, oh, plan.rc):
            r1 = min(oh, r0 + plan.rc)
            ln = (r1 - r0) * ow
            calls += [(np.copyto, pair) for pair in plan.copies(gn, r0, r1)]
            calls += [(f.fill, (0,)) for f in plan.fixes(gn, r0, r1)]
            lhs, tgt = _product_operands(
                plan.col[:, :gn, :, :ln], o3[:, g0 * ocg : g1 * ocg, r0 * ow : r1 * ow], n, g, ocg
            )
            # np.dot's 2-D path costs less than matmul's (same BLAS call).
            prod = np.dot if tgt.ndim == 2 and tgt.flags.c_contiguous else np.matmul
            calls.append((prod, (_OfW(slice(g0, g1) if g > 1 else None), lhs, tgt)))
    return _kernel("_wrapped", calls, weights, x, out)


class _WrappedPlan:
    """The buffers of the wrapped layout and the copies that fill them.

    Phase buffers: per (row phase, column phase) pair, a guard row, ``top`` rows of
    padding, the phase image's rows (only those some tap reads), padding below and a guard
    row, each row OW wide. Columns: ``(n, groups in a chunk, Kg [+ the ones row], rows in
    a chunk * OW)``.
    """

    def __init__(self, geo: tuple, rows: _WrappedAxis, cols: _WrappedAxis, s, x_shape):  # noqa: ANN001
        n, c, _, g, cg, ocg, h, wd, kh, kw, oh, ow, taps, kg, e, dt = geo
        u = rows.shift
        self.geo, self.rows, self.cols, self.s = geo, rows, cols, s
        self.x_shape, self.ndim = x_shape, len(x_shape)
        self.top = top = max(0, -min(u))
        lpair = (top + 1 + oh + max(0, max(u)) + 1) * ow
        self.stored_h = {
            a: min(rows.count[a], oh + max(u[i] for i in ts)) for a, ts in rows.taps.items()
        }
        self.stored_w = {bb: min(cols.count[bb], ow) for bb in cols.taps}
        self.pairs = [(a, bb) for a in sorted(rows.taps) for bb in sorted(cols.taps)]
        self.first = (top + 1) * ow
        it = dt.itemsize
        self.gc, self.rc = gc, rc = _chunks(n * (kg + e) * ow * it, ocg * (kg + e) * it, g, oh)
        self.lnmax = rc * ow
        self.buf = np.zeros((n, gc * cg, len(self.pairs), lpair), dt)
        self.col = np.zeros((n, gc, kg + e, self.lnmax), dt)
        if e:
            self.col[:, :, kg] = 1  # the row that multiplies the bias column
        self.colv = self.col[:, :, :kg].reshape(n, gc, cg, kh, kw, self.lnmax)
        # Columns that wrapped around a row: (column rank, output column) pairs.
        self.bad = []
        for j in range(kw):
            vj, rj = cols.shift[j], cols.rank[j] * self.lnmax
            if vj < 0:
                self.bad += [rj + q for q in range(min(-vj, ow))]
            elif vj > 0:
                self.bad += [rj + q for q in range(max(ow - vj, 0), ow)]

    def _single(self) -> bool:
        """Whether one copy fills every phase (always at stride 1; at stride 2 for even
        sizes): every phase there, all of one size."""
        h, wd = self.geo[6], self.geo[7]
        (sh, sw), nr, nc = self.s, set(self.stored_h.values()), set(self.stored_w.values())
        return (
            len(self.pairs) == sh * sw
            and len(nr) == 1
            and len(nc) == 1
            and sh * min(nr) <= h
            and sw * min(nc) <= wd
            and min(nr) > 0
            and min(nc) > 0
        )

    def fills(self, c0: int, c1: int) -> list:
        """Copies filling the phase buffers from the input's channels [c0, c1)."""
        n, c, ow, h, wd = self.geo[0], self.geo[1], self.geo[11], self.geo[6], self.geo[7]
        (sh, sw), buf, first, k = self.s, self.buf, self.first, c1 - c0
        # (A 1-D input is an image of height 1: its row index is a new axis.)
        if self._single():
            r, q = min(self.stored_h.values()), min(self.stored_w.values())
            dst = buf[:, :k, :, first : first + r * ow].reshape(n, k, sh, sw, r, ow)[..., :q]
            if (c0, c1, sh * r, sw * q) == (0, c, h, wd) and sh == sw == 1:
                # The whole input: the destination takes its shape.
                return [(np.copyto, (dst.reshape(self.x_shape), _OfX(lambda x: x)))]
            rows = slice(0, sh * r) if self.ndim == 4 else None
            key = (slice(None), slice(c0, c1), rows, slice(0, sw * q))
            shape, axes = (n, k, r, sh, q, sw), (0, 1, 3, 5, 2, 4)
            view = _OfX(lambda x: x[key].reshape(shape).transpose(axes))
            return [(np.copyto, (dst, view))]
        copies = []
        for pi, (a, bb) in enumerate(self.pairs):
            r, q = self.stored_h[a], self.stored_w[bb]
            if r <= 0 or q <= 0:
                continue
            dst = buf[:, :k, pi, first : first + r * ow].reshape(n, k, r, ow)[..., :q]
            rows = slice(a, a + (r - 1) * sh + 1, sh) if self.ndim == 4 else None
            key = (slice(None), slice(c0, c1), rows, slice(bb, bb + (q - 1) * sw + 1, sw))
            copies.append((np.copyto, (dst, _OfX(lambda x, key=key: x[key]))))
        return copies

    def copies(self, gn: int, r0: int, r1: int) -> tuple:
        """Tap copies of output rows [r0, r1) for gn groups: one strided copy per phase
        pair, into rows ordered by (row rank, column rank) so that each pair's taps are a
        block."""
        n, cg, ow, it = self.geo[0], self.geo[4], self.geo[11], self.geo[15].itemsize
        rows, cols, buf = self.rows, self.cols, self.buf
        ln = (r1 - r0) * ow
        out = []
        sn, sc = buf.strides[:2]
        for pi, (a, bb) in enumerate(self.pairs):
            ri_taps, rj_taps = rows.taps[a], cols.taps[bb]
            off = (rows.shift[ri_taps[0]] + self.top + 1) * ow + cols.shift[rj_taps[0]] + r0 * ow
            src = as_strided(
                buf[:, :, pi, off:],
                (n, gn, cg, len(ri_taps), len(rj_taps), ln),
                (sn, cg * sc, sc, rows.step[a] * ow * it, cols.step[bb] * it, it),
                writeable=False,
            )
            ri, rj = rows.rank[ri_taps[0]], cols.rank[rj_taps[0]]
            dst = self.colv[:, :gn, :, ri : ri + len(ri_taps), rj : rj + len(rj_taps), :ln]
            out.append((dst, src))
        return tuple(out)

    def fixes(self, gn: int, r0: int, r1: int) -> tuple:
        """Strided views of the columns that wrapped around a row (to be zeroed)."""
        n, cg, kh, ow, taps, it = (
            self.geo[0],
            self.geo[4],
            self.geo[8],
            self.geo[11],
            self.geo[12],
            self.geo[15].itemsize,
        )
        flatcol, lnmax = self.col.reshape(-1), self.lnmax
        sn, sg = self.col.strides[:2]
        return tuple(
            as_strided(
                flatcol[start:],
                (n, gn, cg, kh, length, r1 - r0),
                (sn, sg, taps * lnmax * it, self.geo[9] * lnmax * it, step * it, ow * it),
            )
            for start, step, length in _runs(self.bad)
        )


def _flat(x, w, b, s, p, d, groups, out, in_sp, k_sp, o_sp):  # noqa: ANN001, ANN202
    """Columns as contiguous runs of per-phase flat padded images, in cache-sized chunks.

    Work is cut into chunks of groups (depthwise: of channels) and, when one group's
    columns are still too large, of output rows. The column and product buffers are
    chunk-sized and the phase images hold one chunk of groups, so what a chunk touches
    stays in cache and buffers of layers run earlier are not read back from memory.
    """
    n, c, oc, g, cg, ocg, h, wd, kh, kw, oh, ow, taps, kg, e, dt = _geometry(
        x, w, b, groups, in_sp, k_sp, o_sp
    )
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

    gc, rc = _chunks(n * (kg + e) * wh * it, ocg * (kg + e) * it, g, oh)

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
        lhs, tgt = _product_operands(lhs, tgt, n, g, ocg)
        return tuple(copies), lhs, tgt, crop, (r0, r1)

    calls = []
    for g0 in range(0, g, gc):
        g1 = min(g, g0 + gc)
        gn = g1 - g0
        for dst, key in fills:
            key = (slice(None), slice(g0 * cg, g1 * cg), *key)
            calls.append((np.copyto, (dst[:, : gn * cg], _OfX(lambda x, key=key: x[key]))))
        osl = slice(g0 * ocg, g1 * ocg)
        wkey = slice(g0, g1) if g > 1 else None
        for r0 in range(0, oh, rc):
            r1 = min(oh, r0 + rc)
            copies, lhs, tgt, crop, _ = row_step(gn, r0, r1)
            calls += [(np.copyto, pair) for pair in copies]
            if not direct_out:
                calls.append((np.matmul, (_OfW(wkey), lhs, tgt)))
                calls.append((np.copyto, (o4[:, osl, r0:r1, :], crop)))
            else:
                tgt = o3[:, osl, r0 * ow : r1 * ow]
                if g == 1 and n == 1:
                    tgt = tgt[0]
                elif g > 1:
                    tgt = tgt.reshape(n, gn, ocg, (r1 - r0) * ow)
                calls.append((np.matmul, (_OfW(wkey), lhs, tgt)))
    weights = _PackedWeights(w, b, _pack_forward(groups, order))
    return _kernel("_flat", calls, weights, x, out)


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
    if e:
        calls = [
            (np.copyto, (xb_in, _OfX(lambda x: x.reshape(xin_shape)))),
            (np.matmul, (_OfW(), lhs, tgt)),
        ]
    else:
        calls = [(np.matmul, (_OfW(), _OfX(lambda x: x.reshape(xshape)), tgt))]
    calls.append((np.copyto, (o6, spread)))
    return _kernel("_transposed", calls, weights, x, out)
