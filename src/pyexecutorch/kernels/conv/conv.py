"""Convolution kernels (1-D, 2-D and 3-D; grouped, depthwise, dilated, strided, transposed).

A forward convolution is one matrix product in NCHW order: the input is
unfolded into a column buffer of shape ``(C*kh*kw, OH*OW)`` by one strided
slice copy per kernel tap, and ``weight (OC, C*kh*kw) @ columns`` lands
directly in the output. Padding never materialises: each tap copies only the
rectangle of outputs whose input lies inside the image, and the rest of the
column buffer stays zero from its allocation. With constant weights the
bias rides in the product too (a ones row under each group's columns and a
bias column in the weights). Grouped and depthwise convolutions are one
batched product over the groups. A 1x1 convolution skips the unfolding and
multiplies the input itself. A channels-last input is copied to NCHW once
before unfolding. Transposed convolutions run the product the other way
round (``weight^T @ input``) and scatter-add each tap into the output.

Column buffers and temporaries come from :mod:`pyexecutorch.kernels.scratch`
(reused per thread), arrays derived from constant weights from its
:func:`~pyexecutorch.kernels.scratch.derived`; validated call signatures are
kept in a dict, so a method that runs repeatedly allocates nothing and
re-checks nothing after its first execution.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from pyexecutorch.kernels.common import fit, float_compute_dtype, view_as
from pyexecutorch.kernels.conv import geometry
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.kernels.scratch import derived, scratch, scratch_object

_PLAN_IDS = itertools.count()


def expand_param(value: Sequence[int] | int, n: int, name: str, op: str) -> tuple[int, ...]:
    """An int-list parameter with one entry per spatial dim (a single entry repeats)."""
    if isinstance(value, int):
        return (value,) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise KernelError(
            f"{op}: {name} must have 1 or {n} entries for {n} spatial dims, got {list(value)}"
        )
    return value


# ---------------------------------------------------------------------------
# Unfolding and folding plans (the window arithmetic is geometry's).


@lru_cache(maxsize=256)
def _unfold_plan(
    in_sp: tuple[int, ...],
    k_sp: tuple[int, ...],
    stride: tuple[int, ...],
    pad: tuple[int, ...],
    dil: tuple[int, ...],
    out_sp: tuple[int, ...],
    r0: int,
    r1: int,
    zero_rows: bool,
) -> tuple[tuple[tuple, tuple | None], ...]:
    """Copies that unfold output rows ``[r0, r1)`` (first spatial dim) into columns.

    Each item is ``(dst, src)``: ``dst`` indexes the column view
    ``(n, C, taps, rows, *rest)`` (leading ``n, C`` omitted), ``src`` the
    input's spatial dims. With ``zero_rows`` the plan also zeroes rows a tap
    does not cover (``src`` is ``None``): needed when several row blocks
    share one buffer.
    """
    ops: list[tuple[tuple, tuple | None]] = []
    nd = len(in_sp)
    for tap, ts in enumerate(np.ndindex(*k_sp)):
        ranges = [
            geometry.outputs_reading(in_sp[i], out_sp[i], stride[i], pad[i], dil[i], ts[i])
            for i in range(nd)
        ]
        lo0, hi0 = max(ranges[0][0], r0), min(ranges[0][1], r1)
        empty = lo0 >= hi0 or any(lo >= hi for lo, hi in ranges[1:])
        if empty:
            if zero_rows:
                ops.append(((tap,), None))
            continue
        dst = [slice(lo0 - r0, hi0 - r0)]
        src = []
        for i, (lo, hi) in enumerate(ranges):
            if i == 0:
                lo, hi = lo0, hi0
            else:
                dst.append(slice(lo, hi))
            start = lo * stride[i] - pad[i] + ts[i] * dil[i]
            src.append(slice(start, start + (hi - lo - 1) * stride[i] + 1, stride[i]))
        ops.append(((tap, *dst), tuple(src)))
        if zero_rows:
            if lo0 > r0:
                ops.append(((tap, slice(0, lo0 - r0)), None))
            if hi0 < r1:
                ops.append(((tap, slice(hi0 - r0, r1 - r0)), None))
    return tuple(ops)


@lru_cache(maxsize=256)
def _fold_plan(
    in_sp: tuple[int, ...],
    k_sp: tuple[int, ...],
    stride: tuple[int, ...],
    pad: tuple[int, ...],
    dil: tuple[int, ...],
    out_sp: tuple[int, ...],
) -> tuple[tuple[tuple, tuple], ...]:
    """Scatter-adds of a transposed convolution: ``(src, dst)`` per tap.

    ``src`` indexes the column view ``(taps, *in_sp)`` and ``dst`` the
    output's spatial dims; input position ``i`` of tap ``t`` lands at output
    ``i*s - p + t*d``.
    """
    ops = []
    nd = len(in_sp)
    for tap, ts in enumerate(np.ndindex(*k_sp)):
        src = [tap]
        dst = []
        for i in range(nd):
            lo, hi = geometry.inputs_landing(in_sp[i], out_sp[i], stride[i], pad[i], dil[i], ts[i])
            if lo >= hi:
                break
            src.append(slice(lo, hi))
            start = lo * stride[i] + ts[i] * dil[i] - pad[i]
            dst.append(slice(start, start + (hi - lo - 1) * stride[i] + 1, stride[i]))
        else:
            ops.append((tuple(src), tuple(dst)))
    return tuple(ops)


# Column buffers above this many elements are split into row blocks.
_COL_LIMIT = 1 << 23


class _Unfold:
    """The column-buffer plan of one forward geometry.

    The column buffer is ``(nb, groups * (Kg + extra), rows * rest)`` with
    ``Kg = C/groups * taps``: per group its unfolded input rows, then (with
    ``extra``) a row of ones that multiplies the bias column of the fused
    weight matrix. ``blocks`` lists, per block of batch items and output
    rows: the batch slice of the input (``None`` for all), the copies that
    unfold it (full index tuples into the ``(nb, G, Cg, taps, rows, *rest)``
    view and the ``(n, G, Cg, *in)`` input; a ``None`` source zeroes), and
    the output's batch and column range.
    """

    def __init__(self, n, c, in_sp, k_sp, stride, pad, dil, out_sp, groups, extra, char, limit):
        taps = math.prod(k_sp)
        rest = math.prod(out_sp[1:])
        rows = out_sp[0]
        cg = c // groups
        kg = cg * taps
        per_row = groups * (kg + extra) * rest
        if n * per_row * rows <= limit:
            nb, blk = n, rows
        else:
            nb, blk = 1, max(1, min(rows, limit // per_row))
        zero_rows = -(-rows // blk) > 1
        self.nb = nb
        self.groups = groups
        self.kdim = kg + extra
        self.kg = kg
        self.x_shape = (n, groups, cg, *in_sp)
        self.shape = (nb, groups * (kg + extra), blk * rest)
        self.view_shape = (nb, groups, cg, taps, blk, *out_sp[1:])
        self.extra = extra
        self.dtype = np.dtype(char)
        self.key = ("unfold", next(_PLAN_IDS))
        full = (slice(None),) * 3
        blocks = []
        for n0 in range(0, n, nb):
            xsl = None if nb == n else slice(n0, n0 + nb)
            for r0 in range(0, rows, blk):
                r1 = min(rows, r0 + blk)
                ops = tuple(
                    (full + dst, None if src is None else full + src)
                    for dst, src in _unfold_plan(
                        in_sp, k_sp, stride, pad, dil, out_sp, r0, r1, zero_rows
                    )
                )
                blocks.append((xsl, ops, n0, n0 + nb, r0 * rest, r1 * rest, (r1 - r0) * rest))
        self.blocks = tuple(blocks)
        self.single = len(blocks) == 1
        # Per block: the last input seen and its source views (the runtime
        # passes the same planned array every execution).
        self._sources: list[tuple | None] = [None] * len(blocks)

    def _make(self):
        # Zero from allocation: cells no tap covers (the padding) stay zero,
        # because only this plan ever writes this buffer; so do the ones rows.
        nb, g, kg = self.nb, self.groups, self.kg
        col = np.zeros(self.shape, self.dtype)
        per_group = col.reshape(nb, g, kg + self.extra, -1)
        if self.extra:
            per_group[:, :, kg, :] = 1
        cview = np.reshape(per_group[:, :, :kg], self.view_shape, copy=False)
        per_block = []
        for _, ops, _, _, _, _, npx in self.blocks:
            dsts = tuple(cview[dst] for dst, _ in ops)
            b = col[:, :, :npx]
            if g > 1:
                b = np.reshape(b, (nb, g, self.kdim, npx), copy=False)
            elif nb == 1:
                b = b[0]
            per_block.append((dsts, b))
        return tuple(per_block), col.nbytes

    def buffers(self) -> tuple:
        """Per block, this thread's destination views and the product's column operand."""
        return scratch_object(self.key, self._make)

    def sources(self, i: int, x: np.ndarray) -> tuple:
        cached = self._sources[i]
        if cached is not None and cached[0] is x:
            return cached[1]
        xsl = self.blocks[i][0]
        xs = x.reshape(self.x_shape)
        if xsl is not None:
            xs = xs[xsl]
        views = tuple(None if src is None else xs[src] for _, src in self.blocks[i][1])
        self._sources[i] = (x, views)
        return views


@lru_cache(maxsize=512)
def _unfold(n, c, in_sp, k_sp, stride, pad, dil, out_sp, groups, extra, char, limit) -> _Unfold:
    return _Unfold(n, c, in_sp, k_sp, stride, pad, dil, out_sp, groups, extra, char, limit)


# ---------------------------------------------------------------------------
# Forward convolution on compute-dtype arrays.


def _weight_matrix(w: np.ndarray, groups: int, cdt: np.dtype) -> np.ndarray:
    """``weight (OC, Cg, *k)`` as ``(OC, Cg*taps)`` (groups == 1) or ``(G, OCg, Cg*taps)``."""
    oc = w.shape[0]
    k = math.prod(w.shape[1:])

    def make() -> np.ndarray:
        m = np.ascontiguousarray(w, dtype=cdt).reshape(oc, k)
        return m if groups == 1 else m.reshape(groups, oc // groups, k)

    if w.dtype == cdt and w.flags.c_contiguous:
        return make()
    return derived(("wmat", groups, cdt.char), (w,), make)


def _fused_weight_matrix(w: np.ndarray, b: np.ndarray, groups: int, cdt: np.dtype) -> np.ndarray:
    """``[weight | bias]`` per group, ``(OC, Kg + 1)`` or ``(G, OCg, Kg + 1)``, for the
    ones rows of the columns."""

    def make() -> np.ndarray:
        oc = w.shape[0]
        kg = math.prod(w.shape[1:])
        m = np.empty((oc, kg + 1), cdt)
        m[:, :-1] = w.reshape(oc, kg)
        m[:, -1] = b
        return m if groups == 1 else m.reshape(groups, oc // groups, kg + 1)

    return derived(("wfused", groups, cdt.char), (w, b), make)


def conv_forward(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    stride: tuple[int, ...],
    pad: tuple[int, ...],
    dil: tuple[int, ...],
    groups: int,
    target: np.ndarray,
    cdt: np.dtype,
) -> None:
    """Convolve ``x (N, C, *in)`` with ``w (OC, C/groups, *k)`` into ``target (N, OC, *out)``.

    ``x``, ``w``, ``b`` may be any float dtype with compute dtype ``cdt``;
    ``target`` has dtype ``cdt`` and any strides.
    """
    n, c = x.shape[:2]
    oc = w.shape[0]
    in_sp, k_sp, out_sp = x.shape[2:], w.shape[2:], target.shape[2:]
    npix = math.prod(out_sp)
    if target.size == 0:
        return
    if c == 0 or w.shape[1] == 0:
        if b is None:
            target[...] = 0
        else:
            target[...] = b.reshape((oc,) + (1,) * len(out_sp))
        return
    t3 = (
        target.reshape(n, oc, npix) if target.flags.c_contiguous else view_as(target, (n, oc, npix))
    )
    if t3 is None or (groups > 1 and not t3.flags.c_contiguous):
        # (grouped products into a channels-last output would leave BLAS)
        tmp = scratch("conv-out", target.shape, cdt)
        conv_forward(x, w, b, stride, pad, dil, groups, tmp, cdt)
        target[...] = tmp
        return
    cg = c // groups
    ocg = oc // groups
    taps = math.prod(k_sp)
    if x.dtype != cdt or (taps > 1 and not x.flags.c_contiguous):
        # Unfolding reads rows of the image: a channels-last (or converted)
        # input is first copied to NCHW in a reused buffer, which costs one
        # pass instead of slow element-strided gathers.
        xc = scratch("conv-in", x.shape, cdt)
        np.copyto(xc, x, casting="unsafe")
        x = xc
    kdim = cg * taps

    pointwise = taps == 1 and all(s == 1 for s in stride) and not any(pad) and in_sp == out_sp
    if pointwise:
        wm = _weight_matrix(w, groups, cdt)
        if groups == 1:
            if n == 1:
                np.matmul(wm, x.reshape(c, npix), out=t3[0])
            else:
                np.matmul(wm, x.reshape(n, c, npix), out=t3)
        else:
            np.matmul(wm, x.reshape(n, groups, cg, npix), out=t3.reshape(n, groups, ocg, npix))
        if b is not None:
            np.add(t3, b.reshape(oc, 1), out=t3)
        return

    # Fuse the bias into the product (a ones row under the columns) when the
    # weights are constants and the extra row is cheap relative to K.
    fuse = (
        b is not None
        and kdim >= (16 if groups == 1 else 8)
        and not w.flags.writeable
        and not b.flags.writeable
    )
    extra = 1 if fuse else 0
    wm = _fused_weight_matrix(w, b, groups, cdt) if fuse else _weight_matrix(w, groups, cdt)

    u = _unfold(n, c, in_sp, k_sp, stride, pad, dil, out_sp, groups, extra, cdt.char, _COL_LIMIT)
    per_block = u.buffers()
    for i, (_, _, n0, n1, a, z, npx) in enumerate(u.blocks):
        dsts, cols = per_block[i]
        for d, v in zip(dsts, u.sources(i, x), strict=True):
            if v is None:
                d[...] = 0
            else:
                d[...] = v
        dst3 = t3 if u.single else t3[n0:n1, :, a:z]
        if groups == 1:
            np.matmul(wm, cols, out=dst3[0] if n1 - n0 == 1 else dst3)
        else:
            np.matmul(wm, cols, out=dst3.reshape(n1 - n0, groups, ocg, npx))
    if b is not None and not fuse:
        np.add(t3, b.reshape(oc, 1), out=t3)


def conv_transpose_forward(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    stride: tuple[int, ...],
    pad: tuple[int, ...],
    dil: tuple[int, ...],
    groups: int,
    target: np.ndarray,
    cdt: np.dtype,
) -> None:
    """Transposed convolution of ``x (N, Cin, *in)`` with ``w (Cin, OC/groups, *k)``."""
    n, cin = x.shape[:2]
    ocg = w.shape[1]
    oc = ocg * groups
    in_sp, k_sp, out_sp = x.shape[2:], w.shape[2:], target.shape[2:]
    if target.size == 0:
        return
    if b is None:
        target[...] = 0
    else:
        target[...] = b.reshape((oc,) + (1,) * len(out_sp))
    if cin == 0 or x.size == 0 or w.size == 0:
        return
    if x.dtype != cdt:
        x = x.astype(cdt)
    cg = cin // groups
    taps = math.prod(k_sp)
    npin = math.prod(in_sp)
    # (G, Cg, OCg*taps) -> its transpose (G, OCg*taps, Cg): numpy passes the
    # transposed view to BLAS without copying.
    wm = _weight_matrix(w, groups, cdt)
    if groups == 1:
        wt = wm.T
    else:
        wt = wm.transpose(0, 2, 1)
    cols = scratch("convT-cols", (n, groups, ocg * taps, npin), cdt)
    xm = x.reshape(n, groups, cg, npin)
    if groups == 1:
        np.matmul(wt, xm[:, 0], out=cols[:, 0])
    else:
        np.matmul(wt, xm, out=cols)
    cview = np.reshape(cols, (n, oc, taps) + tuple(in_sp), copy=False)
    full = (slice(None), slice(None))
    for src, dst in _fold_plan(in_sp, k_sp, stride, pad, dil, out_sp):
        t = target[full + dst]
        np.add(t, cview[full + src], out=t)


# ---------------------------------------------------------------------------
# Argument checking shared by forward and backward.


def _conv_geometry(
    op: str,
    input: np.ndarray,
    weight: np.ndarray,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Validate and return ``(stride, padding, dilation, output_padding, out_shape)``."""
    if weight.ndim not in (3, 4, 5):
        raise KernelError(
            f"{op}: weight must be 3-D, 4-D or 5-D (1-3 spatial dims), got shape {weight.shape}"
        )
    if input.ndim != weight.ndim:
        raise KernelError(
            f"{op}: input must have the weight's rank {weight.ndim} (batch, channels, "
            f"{weight.ndim - 2} spatial dims), got shape {input.shape}"
        )
    nd = weight.ndim - 2
    s = expand_param(stride, nd, "stride", op)
    p = expand_param(padding, nd, "padding", op)
    d = expand_param(dilation, nd, "dilation", op)
    op_ = expand_param(output_padding, nd, "output_padding", op) if transposed else (0,) * nd
    if any(v <= 0 for v in s):
        raise KernelError(f"{op}: stride must be positive, got {list(s)}")
    if any(v < 0 for v in p):
        raise KernelError(f"{op}: padding must be non-negative, got {list(p)}")
    if any(v <= 0 for v in d):
        raise KernelError(f"{op}: dilation must be positive, got {list(d)}")
    if groups <= 0:
        raise KernelError(f"{op}: groups must be positive, got {groups}")
    n, c = input.shape[:2]
    k_sp = weight.shape[2:]
    if transposed:
        if any(v < 0 for v in op_):
            raise KernelError(f"{op}: output_padding must be non-negative, got {list(op_)}")
        if any(o >= max(si, di) for o, si, di in zip(op_, s, d, strict=True)):
            raise KernelError(
                f"{op}: output_padding {list(op_)} must be smaller than stride {list(s)} "
                f"or dilation {list(d)}"
            )
        if weight.shape[0] != c:
            raise KernelError(
                f"{op}: transposed weight of shape {weight.shape} expects {weight.shape[0]} "
                f"input channels, input has {c}"
            )
        if c % groups:
            raise KernelError(f"{op}: input channels {c} are not divisible by groups {groups}")
        out_sp = tuple(
            geometry.transposed_out_size(i, k_sp[j], s[j], d[j], p[j], p[j], op_[j])
            for j, i in enumerate(input.shape[2:])
        )
        oc = weight.shape[1] * groups
    else:
        oc = weight.shape[0]
        if oc % groups:
            raise KernelError(
                f"{op}: weight's output channels {oc} are not divisible by groups {groups}"
            )
        if weight.shape[1] * groups != c:
            raise KernelError(
                f"{op}: weight of shape {weight.shape} with groups={groups} expects "
                f"{weight.shape[1] * groups} input channels, input of shape {input.shape} has {c}"
            )
        for j, i in enumerate(input.shape[2:]):
            if i + 2 * p[j] < geometry.extent(k_sp[j], d[j]):
                raise KernelError(
                    f"{op}: kernel size {tuple(k_sp)} (dilation {list(d)}) is larger than the "
                    f"padded input {tuple(v + 2 * q for v, q in zip(input.shape[2:], p, strict=True))}"
                )
        out_sp = tuple(
            geometry.out_size(i, k_sp[j], s[j], d[j], p[j], p[j])
            for j, i in enumerate(input.shape[2:])
        )
    if any(o <= 0 for o in out_sp):
        raise KernelError(f"{op}: computed output spatial size {out_sp} is not positive")
    return s, p, d, op_, (n, oc, *out_sp)


def _check_float_operands(op: str, input: np.ndarray, weight: np.ndarray, bias) -> np.dtype:
    cdt = float_compute_dtype(input, "input", op)
    if weight.dtype != input.dtype:
        raise KernelError(f"{op}: weight dtype {weight.dtype} must match input dtype {input.dtype}")
    if bias is not None and bias.dtype != input.dtype:
        raise KernelError(f"{op}: bias dtype {bias.dtype} must match input dtype {input.dtype}")
    return cdt


def _into(out: np.ndarray, shape: tuple[int, ...], cdt: np.dtype, fn: Callable[[np.ndarray], None]):
    """Run ``fn(target)`` with a ``cdt`` target of ``shape`` and return the filled out view."""
    o = fit(out, shape)
    if o.dtype == cdt:
        fn(o)
    else:
        tmp = scratch("conv-cast", shape, cdt)
        fn(tmp)
        np.copyto(o, tmp, casting="unsafe")
    return o


# Validated signatures: (shapes, dtypes, parameters) -> (stride, padding,
# dilation, out shape, compute dtype), so repeated calls skip the checks.
_SIGNATURES: dict[tuple, tuple] = {}


def signature(
    input: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    stride: Sequence[int] | int,
    padding: Sequence[int] | int,
    dilation: Sequence[int] | int,
    transposed: bool,
    output_padding: Sequence[int] | int,
    groups: int,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], np.dtype]:
    """``(stride, padding, dilation, out_shape, compute_dtype)`` of a convolution call, each
    parameter with one entry per spatial dim; raises the reference kernel's KernelError."""
    op = "convolution"
    s, p, d, _, shape = _conv_geometry(
        op, input, weight, stride, padding, dilation, transposed, output_padding, groups
    )
    cdt = _check_float_operands(op, input, weight, bias)
    oc = shape[1]
    if bias is not None and bias.shape != (oc,):
        raise KernelError(f"{op}: bias must have shape ({oc},), got {bias.shape}")
    return s, p, d, shape, cdt


def signature_or_none(
    input: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: Any,
    output_padding: Any,
    groups: Any,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], np.dtype] | None:
    """:func:`signature`, or None where the reference kernel would refuse the call (or its
    arguments are malformed): a fast path or compiled form then declines, and the
    reference kernel raises its own error when the call runs."""
    try:
        return signature(
            input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
        )
    except (KernelError, TypeError, ValueError):
        return None


@kernel("aten::convolution.out")
def convolution(
    input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out
):
    try:
        key = (
            input.shape,
            input.dtype,
            weight.shape,
            weight.dtype,
            None if bias is None else (bias.shape, bias.dtype),
            tuple(stride),
            tuple(padding),
            tuple(dilation),
            transposed,
            tuple(output_padding),
            groups,
        )
        sig = _SIGNATURES.get(key)
    except TypeError:  # int parameters instead of lists: no memo
        key = sig = None
    if sig is None:
        sig = signature(
            input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
        )
        if key is not None:
            if len(_SIGNATURES) >= 512:
                _SIGNATURES.clear()
            _SIGNATURES[key] = sig
    s, p, d, shape, cdt = sig
    fwd = conv_transpose_forward if transposed else conv_forward
    o = fit(out, shape)
    if o.dtype == cdt:
        fwd(input, weight, bias, s, p, d, groups, o, cdt)
    else:
        tmp = scratch("conv-cast", shape, cdt)
        fwd(input, weight, bias, s, p, d, groups, tmp, cdt)
        np.copyto(o, tmp, casting="unsafe")
    return o


@kernel("aten::convolution_backward.out", n_outs=3)
def convolution_backward(
    grad_output,
    input,
    weight,
    bias_sizes,
    stride,
    padding,
    dilation,
    transposed,
    output_padding,
    groups,
    output_mask,
    out0,
    out1,
    out2,
):
    op = "convolution_backward"
    s, p, d, op_, shape = _conv_geometry(
        op, input, weight, stride, padding, dilation, transposed, output_padding, groups
    )
    cdt = _check_float_operands(op, input, weight, None)
    if grad_output.dtype != input.dtype:
        raise KernelError(
            f"{op}: grad_output dtype {grad_output.dtype} must match input dtype {input.dtype}"
        )
    if tuple(grad_output.shape) != shape:
        raise KernelError(
            f"{op}: grad_output must have the convolution's output shape {shape}, "
            f"got {grad_output.shape}"
        )
    mask = tuple(bool(m) for m in output_mask)
    if len(mask) != 3:
        raise KernelError(f"{op}: output_mask must have 3 entries, got {list(output_mask)}")
    go = grad_output.astype(cdt, copy=False)
    x = input.astype(cdt, copy=False)
    w = weight.astype(cdt, copy=False)
    n, c = input.shape[:2]
    in_sp = input.shape[2:]
    k_sp = weight.shape[2:]
    out_sp = shape[2:]
    nd = len(in_sp)
    r0 = r1 = r2 = None

    if mask[0]:

        def grad_in(t):
            if transposed:
                # The gradient of a transposed convolution is the plain convolution.
                conv_forward(go, w, None, s, p, d, groups, t, cdt)
            else:
                conv_transpose_forward(go, w, None, s, p, d, groups, t, cdt)

        r0 = _into(out0, tuple(input.shape), cdt, grad_in)
    if mask[1]:

        def grad_w(t):
            ng = groups
            if transposed:
                # weight (Cin, OCg, *k): x[g] (Cg, P_in) @ unfold(go)[g]^T (P_in, OCg*taps)
                src, a, ch_a = go, x, c
                unf_out = in_sp
            else:
                # weight (OC, Cg, *k): go[g] (OCg, P_out) @ unfold(x)[g]^T (P_out, Cg*taps)
                src, a, ch_a = x, go, shape[1]
                unf_out = out_sp
            ch_src = src.shape[1]
            taps = math.prod(k_sp)
            npx = math.prod(unf_out)
            col = np.zeros((n, ch_src, taps) + tuple(unf_out), cdt)
            full = (slice(None), slice(None))
            for dst_i, src_i in _unfold_plan(
                tuple(src.shape[2:]), tuple(k_sp), s, p, d, tuple(unf_out), 0, unf_out[0], False
            ):
                col[full + dst_i] = src[full + src_i]
            colm = col.reshape(n, ng, (ch_src // ng) * taps, npx)
            am = np.ascontiguousarray(a).reshape(n, ng, ch_a // ng, npx)
            gw = np.matmul(am, colm.transpose(0, 1, 3, 2)).sum(axis=0)
            t[...] = gw.reshape(t.shape)

        r1 = _into(out1, tuple(weight.shape), cdt, grad_w)
    if mask[2]:
        oc = shape[1]

        def grad_b(t):
            t[...] = go.sum(axis=(0, *range(2, 2 + nd))) if go.size else 0

        r2 = _into(out2, (oc,), cdt, grad_b)
    return (
        out0 if r0 is None else r0,
        out1 if r1 is None else r1,
        out2 if r2 is None else r2,
    )
