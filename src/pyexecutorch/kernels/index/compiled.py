"""Compiled (numba) forms of embedding lookups, index_select, index, gather and index_put.

numpy gathers rows in two ``take`` calls (one through a lookup table that
turns bad indices into an error, one of the rows); here one loop checks every
index and copies its row. Indices out of range copy nothing: the reference
kernel is then called, and raises the error naming the bad index. Imported
only by the compiled tier; ``index.py`` stays the reference.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import prange

from pyexecutorch.jit.arrays import planned
from pyexecutorch.jit.variants import choose, pick, serial_and_parallel
from pyexecutorch.kernels.index.index import (
    embedding_out,
    gather_out,
    index_put_out,
    index_select_out,
    index_tensor_out,
)
from pyexecutorch.kernels.registry import compiled_form, offer

_VALUES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))
_INDICES = (np.dtype(np.int32), np.dtype(np.int64))


def _gather(src, index, out):  # noqa: ANN001, ANN201
    """out[i, j, :] = src[i, index[j], :] for src (a, n, b); False (nothing written) if an
    index is outside [0, n)."""
    n = src.shape[1]
    for j in range(index.shape[0]):
        if index[j] < 0 or index[j] >= n:
            return False
    a, m, b = out.shape
    for row in prange(a * m):  # noqa: B020 - prange is range when serial
        i = row // m
        j = row - i * m
        r = index[j]
        for t in range(b):
            out[i, j, t] = src[i, r, t]
    return True


GATHER = serial_and_parallel(_gather, "gather_rows")


def _take(flat, i1, n1, s1, i2, n2, s2, before, after, out, lead):  # noqa: ANN001, ANN201
    """Advanced indexing by one or two 1-D index tensors of one length ``m`` (negative
    indices wrap): element ``j`` starts at ``i1[j] * s1 + i2[j] * s2`` in ``flat``, each
    non-indexed position adds ``before[p] + after[q]``; out is (p, m, q), or (m, p, q) when
    ``lead`` (the indexed axes are apart: numpy and torch put their dimension first).
    False (nothing written) if an index is outside [-n, n)."""
    m = i1.shape[0]
    for j in range(m):
        if i1[j] < -n1 or i1[j] >= n1 or i2[j] < -n2 or i2[j] >= n2:
            return False
    for j in range(m):
        r1 = i1[j] + n1 if i1[j] < 0 else i1[j]
        r2 = i2[j] + n2 if i2[j] < 0 else i2[j]
        base = r1 * s1 + r2 * s2
        for p in range(before.shape[0]):
            start = base + before[p]
            for q in range(after.shape[0]):
                if lead:
                    out[j, p, q] = flat[start + after[q]]
                else:
                    out[p, j, q] = flat[start + after[q]]
    return True


def _gather_along(src, index, out):  # noqa: ANN001, ANN201
    """out[i, j, t] = src[i, index[i, j, t], t] for src (a, n, b); False (nothing written)
    if an index is outside [0, n)."""
    a, m, b = out.shape
    n = src.shape[1]
    for i in range(a):
        for j in range(m):
            for t in range(b):
                if index[i, j, t] < 0 or index[i, j, t] >= n:
                    return False
    for i in prange(a):  # noqa: B020
        for j in range(m):
            for t in range(b):
                out[i, j, t] = src[i, index[i, j, t], t]
    return True


TAKE = serial_and_parallel(_take, "take_advanced")
GATHER_ALONG = serial_and_parallel(_gather_along, "gather_along")


def _put_rows(src, index, values, out, accumulate, copy):  # noqa: ANN001, ANN201
    """out = src, then out[i, index[j], :] = values[i, j, :] (``accumulate``: +=) for out
    (a, n, b); False (nothing written) if an index is outside [-n, n)."""
    a, n, b = out.shape
    m = index.shape[0]
    for j in range(m):
        if index[j] < -n or index[j] >= n:
            return False
    if copy:
        for i in range(a):
            for r in range(n):
                for t in range(b):
                    out[i, r, t] = src[i, r, t]
    for i in range(a):
        for j in range(m):
            r = index[j]
            if r < 0:
                r += n
            for t in range(b):
                if accumulate:
                    out[i, r, t] += values[i, j, t]
                else:
                    out[i, r, t] = values[i, j, t]
    return True


PUT_ROWS = serial_and_parallel(_put_rows, "put_rows")


def _index(a: Any) -> bool:
    return (
        isinstance(a, np.ndarray)
        and a.dtype in _INDICES
        and a.size > 0
        and a.flags.c_contiguous  # bound as a view at load: never a stale copy
    )


@compiled_form("aten::embedding.out")
def _embedding_form(
    weight: Any, indices: Any, padding_idx: Any, scale_grad: Any, sparse: Any, out: Any
) -> Any:
    """Rows of a 2-D weight gathered by int32/int64 indices, or None."""
    if not isinstance(weight, np.ndarray) or weight.dtype not in _VALUES or weight.ndim != 2:
        return None
    if not _index(indices) or not planned(out, weight.dtype, indices.shape + weight.shape[1:]):
        return None
    n = indices.size
    src_shape = (1, *weight.shape)
    out_shape = (1, n, weight.shape[1])
    w0, i0, o0 = weight, indices, out
    wv = np.ascontiguousarray(weight).reshape(src_shape)
    iv, ov = indices.reshape(n), out.reshape(out_shape)
    kern = pick(GATHER, out.size, (wv, iv, ov))

    # in a whole method: False from the loop makes the runtime call the reference (it raises)
    step = (choose(GATHER, out.size), (wv, iv, ov), True)

    def embedding(weight, indices, padding_idx, scale_grad, sparse, out):  # noqa: ANN001, ANN202
        if kern(
            wv if weight is w0 else np.ascontiguousarray(weight).reshape(src_shape),
            iv if indices is i0 else np.ascontiguousarray(indices).reshape(n),
            ov if out is o0 else out.reshape(out_shape),
        ):
            return out
        return embedding_out(weight, indices, padding_idx, scale_grad, sparse, out)

    # the reference fallback writes the same out
    return offer(embedding, step=step, fills_outputs=True)


@compiled_form("aten::index_put.out")
def _index_put_form(a: Any, indices: Any, values: Any, accumulate: Any, out: Any) -> Any:
    """``out = a`` with rows along one axis (one 1-D int32/int64 index) put from values, or None."""
    if not isinstance(a, np.ndarray) or a.dtype not in _VALUES or a.ndim == 0:
        return None
    if not isinstance(indices, list) or not 0 < len(indices) <= a.ndim:
        return None
    given = [p for p, ix in enumerate(indices) if ix is not None]
    if len(given) != 1 or not isinstance(accumulate, bool) or not a.flags.c_contiguous:
        return None
    (axis,) = given
    index = indices[axis]
    if not _index(index) or index.ndim != 1 or a.shape[axis] == 0:
        return None
    region = a.shape[:axis] + index.shape + a.shape[axis + 1 :]
    if not (planned(values, a.dtype, values.shape) and planned(out, a.dtype, a.shape)):
        return None
    try:
        fits = np.broadcast_shapes(values.shape, region) == region
    except ValueError:
        return None
    if not fits or values.size != math.prod(region):
        return None  # values that repeat along some axis: numpy's assignment
    if np.shares_memory(values, out) or np.shares_memory(index, out):
        return None
    same = a.ctypes.data == out.ctypes.data
    if not same and np.shares_memory(a, out):
        return None
    before, after = math.prod(a.shape[:axis]), math.prod(a.shape[axis + 1 :])
    a0, i0, v0, o0 = a, index, values, out
    av = a.reshape(before, a.shape[axis], after)
    vv, ov = values.reshape(before, index.size, after), out.reshape(av.shape)
    load = (av, index, vv, ov, accumulate, not same)
    kern = pick(PUT_ROWS, out.size, load)

    def index_put(a, indices, values, accumulate, out):  # noqa: ANN001, ANN202
        if a is a0 and indices[axis] is i0 and values is v0 and out is o0 and kern(*load):
            return out
        return index_put_out(a, indices, values, accumulate, out)

    # the reference writes the same out; in a whole method: False from the loop makes the
    # runtime call the reference (it raises)
    return offer(index_put, step=(choose(PUT_ROWS, out.size), load, True), fills_outputs=True)


@compiled_form("aten::index_select.out")
def _index_select_form(a: Any, dim: Any, index: Any, out: Any) -> Any:
    """Slices of ``a`` along ``dim`` picked by a 1-D int32/int64 index, or None."""
    if not isinstance(a, np.ndarray) or a.dtype not in _VALUES or a.ndim == 0:
        return None
    if not _index(index) or index.ndim != 1 or not isinstance(dim, int):
        return None
    if not -a.ndim <= dim < a.ndim:
        return None
    axis = dim % a.ndim
    if not planned(out, a.dtype, a.shape[:axis] + index.shape + a.shape[axis + 1 :]):
        return None
    before, after = math.prod(a.shape[:axis]), math.prod(a.shape[axis + 1 :])
    src_shape = (before, a.shape[axis], after)
    out_shape = (before, index.size, after)
    a0, i0, o0 = a, index, out
    av, ov = np.ascontiguousarray(a).reshape(src_shape), out.reshape(out_shape)
    kern = pick(GATHER, out.size, (av, index, ov))

    def index_select(a, dim, index, out):  # noqa: ANN001, ANN202
        if kern(
            av if a is a0 else np.ascontiguousarray(a).reshape(src_shape),
            index if index is i0 else np.ascontiguousarray(index),
            ov if out is o0 else out.reshape(out_shape),
        ):
            return out
        return index_select_out(a, dim, index, out)

    # the reference fallback writes the same out
    step = None
    if a.flags.c_contiguous:  # av is a's view: the planned call reads the live array
        step = (choose(GATHER, out.size), (av, index, ov), True)
    return offer(index_select, step=step, fills_outputs=True)


def _offsets(shape: tuple[int, ...], axes: list[int]) -> np.ndarray:
    """The flat element offsets (C order) of every position of ``shape``'s ``axes``."""
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    grid = np.zeros(1, np.int64)
    for d in axes:
        grid = (grid[:, None] + np.arange(shape[d], dtype=np.int64) * strides[d]).reshape(-1)
    return grid


@compiled_form("aten::index.Tensor_out")
def _index_form(a: Any, indices: Any, out: Any) -> Any:
    """``a[indices]`` for one or two 1-D int32/int64 index tensors of one length, or None."""
    if not isinstance(a, np.ndarray) or a.dtype not in _VALUES or a.ndim == 0:
        return None
    if not a.flags.c_contiguous or not isinstance(indices, list) or len(indices) > a.ndim:
        return None
    given = [d for d, ix in enumerate(indices) if ix is not None]
    if not 1 <= len(given) <= 2 or any(not _index(indices[d]) for d in given):
        return None
    ixs = [indices[d] for d in given]
    m = ixs[0].size
    if any(ix.ndim != 1 or ix.size != m or ix.dtype != ixs[0].dtype for ix in ixs):
        return None
    rest = [d for d in range(a.ndim) if d not in given]
    lead = given[-1] - given[0] != len(given) - 1  # apart: the indexed dimension goes first
    before = [d for d in rest if d < given[0]] if not lead else []
    after = [d for d in rest if d not in before]
    sizes = [a.shape[d] for d in before], [a.shape[d] for d in after]
    shape = (m, *sizes[1]) if lead else (*sizes[0], m, *sizes[1])
    if not planned(out, a.dtype, tuple(shape)) or np.shares_memory(out, a):
        return None
    strides = [math.prod(a.shape[d + 1 :]) for d in given]
    i1, i2 = ixs[0], ixs[-1]
    n1, n2 = a.shape[given[0]], a.shape[given[-1]]
    s1, s2 = strides[0], strides[-1] if len(given) == 2 else 0
    b_off, a_off = _offsets(a.shape, before), _offsets(a.shape, after)
    out3 = out.reshape((m, b_off.size, a_off.size) if lead else (b_off.size, m, a_off.size))
    load = (a.reshape(-1), i1, n1, s1, i2, n2, s2, b_off, a_off, out3, lead)
    kern = pick(TAKE, out.size, load)
    a0, o0, given_ixs = a, out, tuple(ixs)

    def index(a, indices, out):  # noqa: ANN001, ANN202
        same = (
            a is a0
            and out is o0
            and all(indices[d] is ix for d, ix in zip(given, given_ixs, strict=True))
        )
        if same and kern(*load):
            return out
        return index_tensor_out(a, indices, out)

    # the reference writes the same out
    return offer(index, step=(choose(TAKE, out.size), load, True), fills_outputs=True)


@compiled_form("aten::gather.out")
def _gather_form(a: Any, dim: Any, index: Any, sparse_grad: Any, out: Any) -> Any:
    """``gather`` along ``dim`` by an int64 index of ``a``'s shape but there, or None."""
    if not isinstance(a, np.ndarray) or a.dtype not in _VALUES or a.ndim == 0:
        return None
    if not isinstance(dim, int) or isinstance(dim, bool) or not -a.ndim <= dim < a.ndim:
        return None
    if not a.flags.c_contiguous or not _index(index) or index.ndim != a.ndim:
        return None
    axis = dim % a.ndim
    if any(index.shape[d] != a.shape[d] for d in range(a.ndim) if d != axis):
        return None
    if not planned(out, a.dtype, index.shape) or np.shares_memory(out, a):
        return None
    before, after = math.prod(a.shape[:axis]), math.prod(a.shape[axis + 1 :])
    av = a.reshape(before, a.shape[axis], after)
    layout = (before, index.shape[axis], after)
    load = (av, index.reshape(layout), out.reshape(layout))
    kern = pick(GATHER_ALONG, out.size, load)
    a0, i0, o0 = a, index, out

    def gather(a, dim, index, sparse_grad, out):  # noqa: ANN001, ANN202
        if a is a0 and index is i0 and out is o0 and kern(*load):
            return out
        return gather_out(a, dim, index, sparse_grad, out)

    # the reference writes the same out
    return offer(gather, step=(choose(GATHER_ALONG, out.size), load, True), fills_outputs=True)
