"""Padding kernels: constant_pad_nd, reflection_pad{1,2,3}d, replication_pad{1,2,3}d.

Padding lists run from the last dimension backwards, a (left, right) pair per
dimension, as in torch; negative entries crop. Each kernel first turns (input
shape, padding) into a plan of slice copies, cached, so that a call is only
the copies. Without negative padding the plan writes the input into the
middle of ``out`` once and then fills each border from ``out`` itself, one
padded dimension at a time; with cropping it gathers through index arrays.
"""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.bounds import bounded_fit
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.kernels.shape.shape import assign, cast_scalar

_Index = tuple[slice, ...]
_PLAN_LIMIT = 1024


def _pairs(pad, ndim: int, op: str) -> list[tuple[int, int, int]]:
    """``(axis, left, right)`` for each padded dimension."""
    if len(pad) % 2:
        raise KernelError(f"{op}: padding length must be even, got {len(pad)} ({list(pad)})")
    k = len(pad) // 2
    if k > ndim:
        raise KernelError(
            f"{op}: padding {list(pad)} covers {k} dimensions but the input has only {ndim}"
        )
    return [(ndim - 1 - i, pad[2 * i], pad[2 * i + 1]) for i in range(k)]


def _out_shape(shape, pairs, op: str) -> tuple[int, ...]:
    out = list(shape)
    for axis, lo, hi in pairs:
        out[axis] = shape[axis] + lo + hi
        if out[axis] < 0:
            raise KernelError(
                f"{op}: the input size {shape[axis]} plus padding {lo} and {hi} gives a "
                f"negative output size {out[axis]} in dimension {axis}"
            )
    return tuple(out)


# --------------------------------------------------------------------------
# constant_pad_nd
# --------------------------------------------------------------------------

# (input shape, pad) -> (output shape, kind, source index, destination index)
# with kind "fill" (nothing of the input survives), "crop" (no border to fill)
# or "pad".
_CONSTANT_PLANS: dict[tuple, tuple[tuple[int, ...], str, _Index, _Index]] = {}


def _constant_plan(shape: tuple[int, ...], pad: tuple[int, ...]):
    plan = _CONSTANT_PLANS.get((shape, pad))
    if plan is not None:
        return plan
    op = "constant_pad_nd"
    pairs = _pairs(pad, len(shape), op)
    out_shape = _out_shape(shape, pairs, op)
    src = [slice(None)] * len(shape)
    dst = [slice(None)] * len(shape)
    kind = "crop" if all(lo <= 0 and hi <= 0 for _, lo, hi in pairs) else "pad"
    for axis, lo, hi in pairs:
        n = shape[axis]
        begin, end = max(-lo, 0), n - max(-hi, 0)
        if end < begin:
            raise KernelError(
                f"{op}: negative padding ({lo}, {hi}) crops more than the input size {n} in "
                f"dimension {axis}"
            )
        if end == begin:
            kind = "fill"
        src[axis] = slice(begin, end)
        dst[axis] = slice(max(lo, 0), max(lo, 0) + end - begin)
    if len(_CONSTANT_PLANS) > _PLAN_LIMIT:
        _CONSTANT_PLANS.clear()
    plan = _CONSTANT_PLANS[(shape, pad)] = (out_shape, kind, tuple(src), tuple(dst))
    return plan


def constant_pad_shape(self: np.ndarray, pad: object, value: object) -> tuple[int, ...]:
    """The result shape of constant_pad_nd, or KernelError (the family's argument check,
    see kernels.pool.checks)."""
    if not isinstance(value, (int, float)):
        raise KernelError(f"constant_pad_nd: value must be a number, got {value!r}")
    return _constant_plan(self.shape, tuple(pad))[0]


@kernel("aten::constant_pad_nd.out")
def constant_pad_nd(self, pad, value, out):
    constant_pad_shape(self, pad, value)
    out_shape, kind, src, dst = _constant_plan(self.shape, tuple(pad))
    out = bounded_fit(out, out_shape, "constant_pad_nd")
    if kind == "crop":
        assign(out, self[src])
        return out
    out[...] = cast_scalar(value, out.dtype, "value")
    if kind == "pad":
        assign(out[dst], self[src])
    return out


# --------------------------------------------------------------------------
# reflection / replication padding
# --------------------------------------------------------------------------

# (input shape, padding, dims, mode) -> (output shape, center, border copies
# within out) for non-negative padding, or (output shape, None, gather index
# arrays) when some padding is negative.
_EDGE_PLANS: dict[tuple, tuple] = {}


def _edge_plan(shape, padding, dims: int, mode: str, op: str):
    key = (shape, padding, dims, mode)
    plan = _EDGE_PLANS.get(key)
    if plan is not None:
        return plan
    ndim = len(shape)
    if len(padding) != 2 * dims:
        raise KernelError(f"{op}: padding must have {2 * dims} entries, got {list(padding)}")
    if ndim not in (dims + 1, dims + 2):
        raise KernelError(
            f"{op}: expected a {dims + 1}D or {dims + 2}D (batch mode) input, got "
            f"{ndim}D of shape {list(shape)}"
        )
    first = 1 if ndim == dims + 2 else 0
    if any(s == 0 for s in shape[first:]):
        raise KernelError(
            f"{op}: expected non-zero sizes for all but the batch dimension, got input "
            f"shape {list(shape)}"
        )
    pairs = _pairs(padding, ndim, op)
    out_shape = list(shape)
    for axis, lo, hi in pairs:
        n = shape[axis]
        if mode == "reflect" and (lo >= n or hi >= n):
            raise KernelError(
                f"{op}: padding ({lo}, {hi}) must be less than the input size {n} in "
                f"dimension {axis}"
            )
        out_shape[axis] = n + lo + hi
        if out_shape[axis] < 1:
            raise KernelError(
                f"{op}: input size {n} in dimension {axis} is too small for padding "
                f"({lo}, {hi}): the output size would be {out_shape[axis]}"
            )
    out_shape = tuple(out_shape)
    if all(lo >= 0 and hi >= 0 for _, lo, hi in pairs):
        plan = (out_shape, *_border_copies(shape, pairs, mode))
    else:
        plan = (out_shape, None, _gather_indices(shape, out_shape, pairs, mode))
    if len(_EDGE_PLANS) > _PLAN_LIMIT:
        _EDGE_PLANS.clear()
    _EDGE_PLANS[key] = plan
    return plan


def _border_copies(shape, pairs, mode: str):
    """The center index and the (destination, source) slice copies within out."""
    region = [slice(None)] * len(shape)
    for axis, lo, _ in pairs:
        region[axis] = slice(lo, lo + shape[axis])
    center = tuple(region)
    copies = []
    for axis, lo, hi in pairs:
        n = shape[axis]
        if lo:
            region[axis] = slice(0, lo)
            dst = tuple(region)
            if mode == "reflect":
                region[axis] = slice(2 * lo, lo, -1)
            else:
                region[axis] = slice(lo, lo + 1)
            copies.append((dst, tuple(region)))
        if hi:
            region[axis] = slice(lo + n, lo + n + hi)
            dst = tuple(region)
            if mode == "reflect":
                stop = lo + n - 2 - hi
                region[axis] = slice(lo + n - 2, stop if stop >= 0 else None, -1)
            else:
                region[axis] = slice(lo + n - 1, lo + n)
            copies.append((dst, tuple(region)))
        region[axis] = slice(None)
    return center, tuple(copies)


def _gather_indices(shape, out_shape, pairs, mode: str):
    """``(axis, input index per output position)`` for each padded dimension."""
    gathers = []
    for axis, lo, _ in pairs:
        n = shape[axis]
        index = np.arange(out_shape[axis]) - lo
        if mode == "reflect":
            index = np.abs(index)
            index = np.where(index >= n, 2 * (n - 1) - index, index)
        else:
            index = np.clip(index, 0, n - 1)
        gathers.append((axis, index))
    return tuple(gathers)


def _pad_kernel(dims: int, mode: str):
    op = f"{'reflection' if mode == 'reflect' else 'replication'}_pad{dims}d"

    def pad(self, padding, out):
        out_shape, center, copies = _edge_plan(self.shape, tuple(padding), dims, mode, op)
        out = bounded_fit(out, out_shape, op)
        if out.size == 0:
            return out
        if center is None:
            src = self
            for axis, index in copies:
                src = np.take(src, index, axis=axis)
            assign(out, src)
            return out
        assign(out[center], self)
        for dst, src in copies:
            out[dst] = out[src]
        return out

    pad.__name__ = pad.__qualname__ = op
    return kernel(f"aten::{op}.out")(pad)


for _dims in (1, 2, 3):
    for _mode in ("reflect", "replicate"):
        _pad_kernel(_dims, _mode)
