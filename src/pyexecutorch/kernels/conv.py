"""Convolution kernels (1-D, 2-D and 3-D; grouped, depthwise, dilated, strided, transposed).

A forward convolution is one matrix product in NCHW order: the input is
unfolded into a column buffer of shape ``(C*kh*kw, OH*OW)`` by one strided
slice copy per kernel tap, and ``weight (OC, C*kh*kw) @ columns`` lands
directly in the output. Padding never materialises: each tap copies only the
rectangle of outputs whose input lies inside the image, and the rest of the
column buffer stays zero from its allocation. A 1x1 convolution skips the
unfolding and multiplies the input itself. Transposed convolutions run the
product the other way round (``weight^T @ input``) and scatter-add each tap
into the output.

Scratch buffers (column buffers, temporaries) are cached per shape and
thread in a small LRU (:func:`scratch`), and arrays derived from constant
weights (reshaped, converted, bias-fused) in another (:func:`derived`), so a
method that runs repeatedly allocates nothing after its first execution.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from pyexecutorch.kernels.common import fit
from pyexecutorch.kernels.registry import KernelError, kernel

# ---------------------------------------------------------------------------
# Caches shared by the kernels of this family.

_SCRATCH: OrderedDict[tuple, np.ndarray] = OrderedDict()
_SCRATCH_MAX_ENTRIES = 64
_SCRATCH_MAX_BYTES = 512 << 20
_scratch_bytes = 0


def scratch(
    key: Any,
    shape: tuple[int, ...],
    dtype: np.dtype | type,
    init: Callable[[np.ndarray], None] | None = None,
) -> np.ndarray:
    """A zero-initialised work buffer reused across calls with the same key.

    Buffers are private to the calling thread. ``init`` runs once when the
    buffer is created (after zeroing); a caller that relies on parts of the
    buffer staying as initialised must never write those parts.
    """
    global _scratch_bytes
    k = (threading.get_ident(), key, shape, np.dtype(dtype).char)
    buf = _SCRATCH.get(k)
    if buf is not None:
        _SCRATCH.move_to_end(k)
        return buf
    buf = np.zeros(shape, dtype)
    if init is not None:
        init(buf)
    _SCRATCH[k] = buf
    _scratch_bytes += buf.nbytes
    while len(_SCRATCH) > 1 and (
        len(_SCRATCH) > _SCRATCH_MAX_ENTRIES or _scratch_bytes > _SCRATCH_MAX_BYTES
    ):
        _, old = _SCRATCH.popitem(last=False)
        _scratch_bytes -= old.nbytes
    return buf


_DERIVED: OrderedDict[tuple, tuple[tuple, Any]] = OrderedDict()
_DERIVED_MAX_ENTRIES = 128


def _dead() -> None:
    return None


def derived(tag: Any, arrays: Sequence[np.ndarray | None], make: Callable[[], Any]) -> Any:
    """``make()``, cached while every array in ``arrays`` is alive and read-only.

    Constant tensors (weights, biases) reach kernels as read-only views that
    live as long as their program, so anything computed from them alone can
    be kept. Writable arrays (activations, planned memory) may change between
    calls: for them ``make()`` runs every time. Entries hold weak references,
    so a cached value never keeps a program's constants alive.
    """
    for a in arrays:
        if a is not None and a.flags.writeable:
            return make()
    key = (tag, *(None if a is None else id(a) for a in arrays))
    entry = _DERIVED.get(key)
    if entry is not None:
        refs, value = entry
        if all(r() is a for r, a in zip(refs, arrays, strict=True)):
            _DERIVED.move_to_end(key)
            return value
    value = make()
    refs = tuple(_dead if a is None else weakref.ref(a) for a in arrays)
    _DERIVED[key] = (refs, value)
    _DERIVED.move_to_end(key)
    if len(_DERIVED) > _DERIVED_MAX_ENTRIES:
        _DERIVED.popitem(last=False)
    return value


def view_as(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``a`` reshaped without copying, or ``None`` when that needs a copy."""
    if a.shape == shape:
        return a
    try:
        return np.reshape(a, shape, copy=False)
    except ValueError:
        return None


_FLOAT_COMPUTE = {
    np.dtype(np.float16): np.dtype(np.float32),
    np.dtype(np.float32): np.dtype(np.float32),
    np.dtype(np.float64): np.dtype(np.float64),
}


def float_compute_dtype(a: np.ndarray, what: str, op: str) -> np.dtype:
    """The dtype ``op`` computes in for a floating input (float16 runs in float32)."""
    cdt = _FLOAT_COMPUTE.get(a.dtype)
    if cdt is None:
        raise KernelError(f"{op}: {what} must be float16, float32 or float64, got {a.dtype}")
    return cdt


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
# Geometry.


def _tap_range(size_in: int, size_out: int, s: int, p: int, d: int, t: int) -> tuple[int, int]:
    """Outputs ``o`` in ``[lo, hi)`` whose input ``o*s - p + t*d`` lies in ``[0, size_in)``."""
    off = t * d - p
    lo = max(0, -(off // s))  # ceil(-off / s)
    hi = min(size_out, (size_in - 1 - off) // s + 1) if size_in - 1 - off >= 0 else 0
    return lo, max(lo, hi)


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
            _tap_range(in_sp[i], out_sp[i], stride[i], pad[i], dil[i], ts[i]) for i in range(nd)
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
            # Inputs whose output lies inside [0, out): same formula with roles swapped.
            off = ts[i] * dil[i] - pad[i]
            lo = max(0, -(off // stride[i]))
            hi = min(in_sp[i], (out_sp[i] - 1 - off) // stride[i] + 1)
            if out_sp[i] - 1 - off < 0 or lo >= hi:
                break
            src.append(slice(lo, hi))
            start = lo * stride[i] + off
            dst.append(slice(start, start + (hi - lo - 1) * stride[i] + 1, stride[i]))
        else:
            ops.append((tuple(src), tuple(dst)))
    return tuple(ops)


# Column buffers above this many elements are split into row blocks.
_COL_LIMIT = 1 << 23


def _conv_out_size(i: int, k: int, s: int, p: int, d: int) -> int:
    return (i + 2 * p - d * (k - 1) - 1) // s + 1


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


def _fused_weight_matrix(w: np.ndarray, b: np.ndarray, cdt: np.dtype) -> np.ndarray:
    """``[weight | bias]`` of shape ``(OC, C*taps + 1)`` for a ones row in the columns."""

    def make() -> np.ndarray:
        oc = w.shape[0]
        m = np.empty((oc, math.prod(w.shape[1:]) + 1), cdt)
        m[:, :-1] = w.reshape(oc, -1)
        m[:, -1] = b
        return m

    return derived(("wfused", cdt.char), (w, b), make)


def _set_ones_row(buf: np.ndarray) -> None:
    buf[:, -1, :] = 1


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
    t3 = view_as(target, (n, oc, npix))
    if t3 is None:
        tmp = scratch("conv-out", target.shape, cdt)
        conv_forward(x, w, b, stride, pad, dil, groups, tmp, cdt)
        target[...] = tmp
        return
    if x.dtype != cdt:
        x = x.astype(cdt)
    cg = c // groups
    ocg = oc // groups
    taps = math.prod(k_sp)
    kdim = cg * taps

    pointwise = taps == 1 and all(s == 1 for s in stride) and not any(pad)
    if pointwise:
        wm = _weight_matrix(w, groups, cdt)
        if groups == 1:
            if n == 1:
                np.matmul(wm, x.reshape(c, npix), out=t3[0])
            else:
                np.matmul(wm, x.reshape(n, c, npix), out=t3)
        else:
            np.matmul(
                wm, x.reshape(n, groups, cg, npix), out=t3.reshape(n, groups, ocg, npix)
            )
        if b is not None:
            np.add(t3, b.reshape(oc, 1), out=t3)
        return

    # Fuse the bias into the product (a ones row under the columns) when the
    # weights are constants and the extra row is cheap relative to K.
    fuse = (
        b is not None
        and groups == 1
        and kdim >= 16
        and not w.flags.writeable
        and not b.flags.writeable
    )
    extra = 1 if fuse else 0
    wm = _fused_weight_matrix(w, b, cdt) if fuse else _weight_matrix(w, groups, cdt)

    rest = math.prod(out_sp[1:])
    per_row = (c * taps + extra) * rest
    rows = out_sp[0]
    if n * per_row * rows <= _COL_LIMIT:
        nb, blk = n, rows
    else:
        nb, blk = 1, max(1, min(rows, _COL_LIMIT // per_row))
    nblocks = -(-rows // blk)
    zero_rows = nblocks > 1
    col = scratch(
        ("conv-col", c, taps, extra, blk, rest),
        (nb, c * taps + extra, blk * rest),
        cdt,
        _set_ones_row if fuse else None,
    )
    col_data = col[:, : c * taps] if fuse else col
    col_view = np.reshape(col_data, (nb, c, taps, blk) + tuple(out_sp[1:]), copy=False)
    full = (slice(None), slice(None))
    for n0 in range(0, n, nb):
        xs = x[n0 : n0 + nb] if nb != n else x
        for r0 in range(0, rows, blk):
            r1 = min(rows, r0 + blk)
            plan = _unfold_plan(in_sp, k_sp, stride, pad, dil, out_sp, r0, r1, zero_rows)
            for dst, src in plan:
                if src is None:
                    col_view[full + dst] = 0
                else:
                    col_view[full + dst] = xs[full + src]
            npx = (r1 - r0) * rest
            cols = col if r1 - r0 == blk else col[:, :, :npx]
            dst3 = t3[n0 : n0 + nb, :, r0 * rest : r1 * rest]
            if groups == 1:
                if nb == 1:
                    np.matmul(wm, cols[0], out=dst3[0])
                else:
                    np.matmul(wm, cols, out=dst3)
            else:
                np.matmul(
                    wm,
                    cols.reshape(nb, groups, kdim, npx),
                    out=dst3.reshape(nb, groups, ocg, npx),
                )
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
            (i - 1) * s[j] - 2 * p[j] + d[j] * (k_sp[j] - 1) + op_[j] + 1
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
            if i + 2 * p[j] < d[j] * (k_sp[j] - 1) + 1:
                raise KernelError(
                    f"{op}: kernel size {tuple(k_sp)} (dilation {list(d)}) is larger than the "
                    f"padded input {tuple(v + 2 * q for v, q in zip(input.shape[2:], p, strict=True))}"
                )
        out_sp = tuple(
            _conv_out_size(i, k_sp[j], s[j], p[j], d[j]) for j, i in enumerate(input.shape[2:])
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


@kernel("aten::convolution.out")
def convolution(
    input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out
):
    op = "convolution"
    s, p, d, _, shape = _conv_geometry(
        op, input, weight, stride, padding, dilation, transposed, output_padding, groups
    )
    cdt = _check_float_operands(op, input, weight, bias)
    oc = shape[1]
    if bias is not None and bias.shape != (oc,):
        raise KernelError(f"{op}: bias must have shape ({oc},), got {bias.shape}")
    fwd = conv_transpose_forward if transposed else conv_forward
    return _into(out, shape, cdt, lambda t: fwd(input, weight, bias, s, p, d, groups, t, cdt))


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
