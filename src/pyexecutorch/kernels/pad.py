"""Padding kernels: constant_pad_nd, reflection_pad{1,2,3}d, replication_pad{1,2,3}d.

Padding lists run from the last dimension backwards, a (left, right) pair per
dimension, as in torch; negative entries crop. The common case (no negative
padding) writes the input into the middle of ``out`` once and then fills each
border from ``out`` itself with a slice copy, one padded dimension at a time.
"""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.common import fit
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.kernels.shape import assign, cast_scalar


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


@kernel("aten::constant_pad_nd.out")
def constant_pad_nd(self, pad, value, out):
    pairs = _pairs(pad, self.ndim, "constant_pad_nd")
    out = fit(out, _out_shape(self.shape, pairs, "constant_pad_nd"))
    fill = cast_scalar(value, out.dtype, "value")
    src = [slice(None)] * self.ndim
    dst = [slice(None)] * self.ndim
    for axis, lo, hi in pairs:
        n = self.shape[axis]
        begin, end = max(-lo, 0), n - max(-hi, 0)
        if end < begin:
            raise KernelError(
                f"constant_pad_nd: negative padding ({lo}, {hi}) crops more than the input "
                f"size {n} in dimension {axis}"
            )
        if end == begin:
            out[...] = fill
            return out
        src[axis] = slice(begin, end)
        dst[axis] = slice(max(lo, 0), max(lo, 0) + end - begin)
    if all(lo <= 0 and hi <= 0 for _, lo, hi in pairs):
        assign(out, self[tuple(src)])
        return out
    out[...] = fill
    assign(out[tuple(dst)], self[tuple(src)])
    return out


def _check_pad_input(self, padding, dims: int, mode: str, op: str):
    if len(padding) != 2 * dims:
        raise KernelError(f"{op}: padding must have {2 * dims} entries, got {list(padding)}")
    if self.ndim not in (dims + 1, dims + 2):
        raise KernelError(
            f"{op}: expected a {dims + 1}D or {dims + 2}D (batch mode) input, got "
            f"{self.ndim}D of shape {list(self.shape)}"
        )
    pairs = _pairs(padding, self.ndim, op)
    first = 1 if self.ndim == dims + 2 else 0
    for i, s in enumerate(self.shape):
        if i >= first and s == 0:
            raise KernelError(
                f"{op}: expected non-zero sizes for all but the batch dimension, got input "
                f"shape {list(self.shape)}"
            )
    shape = list(self.shape)
    for axis, lo, hi in pairs:
        n = self.shape[axis]
        if mode == "reflect" and (lo >= n or hi >= n):
            raise KernelError(
                f"{op}: padding ({lo}, {hi}) must be less than the input size {n} in "
                f"dimension {axis}"
            )
        shape[axis] = n + lo + hi
        if shape[axis] < 1:
            raise KernelError(
                f"{op}: input size {n} in dimension {axis} is too small for padding "
                f"({lo}, {hi}): the output size would be {shape[axis]}"
            )
    return pairs, tuple(shape)


def _pad_in_place(out, self, pairs, mode: str) -> None:
    """Fill ``out`` from ``self`` with all-non-negative ``pairs``."""
    region = [slice(None)] * out.ndim
    for axis, lo, _ in pairs:
        region[axis] = slice(lo, lo + self.shape[axis])
    assign(out[tuple(region)], self)
    for axis, lo, hi in pairs:
        n = self.shape[axis]
        if lo:
            region[axis] = slice(0, lo)
            dst = out[tuple(region)]
            if mode == "reflect":
                region[axis] = slice(2 * lo, lo, -1)
            else:
                region[axis] = slice(lo, lo + 1)
            dst[...] = out[tuple(region)]
        if hi:
            region[axis] = slice(lo + n, lo + n + hi)
            dst = out[tuple(region)]
            if mode == "reflect":
                stop = lo + n - 2 - hi
                region[axis] = slice(lo + n - 2, stop if stop >= 0 else None, -1)
            else:
                region[axis] = slice(lo + n - 1, lo + n)
            dst[...] = out[tuple(region)]
        region[axis] = slice(None)


def _pad_gather(out, self, pairs, mode: str) -> None:
    """Fill ``out`` from ``self`` by index arrays (any padding, negatives included)."""
    src = self
    for axis, lo, _ in pairs:
        n = self.shape[axis]
        index = np.arange(out.shape[axis]) - lo
        if mode == "reflect":
            index = np.abs(index)
            index = np.where(index >= n, 2 * (n - 1) - index, index)
        else:
            index = np.clip(index, 0, n - 1)
        src = np.take(src, index, axis=axis)
    assign(out, src)


def _pad_kernel(dims: int, mode: str):
    op = f"{'reflection' if mode == 'reflect' else 'replication'}_pad{dims}d"

    def pad(self, padding, out):
        pairs, shape = _check_pad_input(self, padding, dims, mode, op)
        out = fit(out, shape)
        if out.size == 0:
            return out
        if all(lo >= 0 and hi >= 0 for _, lo, hi in pairs):
            _pad_in_place(out, self, pairs, mode)
        else:
            _pad_gather(out, self, pairs, mode)
        return out

    pad.__name__ = pad.__qualname__ = op
    return kernel(f"aten::{op}.out")(pad)


for _dims in (1, 2, 3):
    for _mode in ("reflect", "replicate"):
        _pad_kernel(_dims, _mode)
