"""Compiled (numba) forms of embedding lookups, index_select and index_put.

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

from pyexecutorch.kernels.compiled_arrays import planned
from pyexecutorch.kernels.index.index import embedding_out, index_put_out, index_select_out
from pyexecutorch.kernels.registry import compiled_form
from pyexecutorch.runtime.compiled import choose, pick, serial_and_parallel

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

    embedding.fills_outputs = True  # the reference fallback writes the same out
    embedding.step = step
    return embedding


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

    index_put.fills_outputs = True  # the reference writes the same out
    # in a whole method: False from the loop makes the runtime call the reference (it raises)
    index_put.step = (choose(PUT_ROWS, out.size), load, True)
    return index_put


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

    index_select.fills_outputs = True  # the reference fallback writes the same out
    return index_select
