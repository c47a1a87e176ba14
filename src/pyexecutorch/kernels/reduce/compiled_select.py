"""Compiled (numba) forms of argmax, argmin and topk along one axis.

The tensor is viewed as (before, n, after) around the axis. argmax and argmin keep
the first extreme, and the first NaN where there is one (numpy's and torch's rule).
topk picks its k entries one at a time, each the best entry not yet picked in a scan
of ascending index with a strict comparison, so that the values come sorted and equal
values in ascending index order, NaN counting as larger than every number: the
reference kernel's stable-sort order. k scans of the row beat a sort for the small k
these programs take. Each form offers its call on the planned arrays as a
whole-method step. Imported by ``compiled.py``; ``reduce.py`` stays the reference.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

from pyexecutorch.jit.arrays import dense
from pyexecutorch.jit.deferral import form_entry_point
from pyexecutorch.kernels.registry import compiled_form, get_kernel, offer

_INT64 = np.dtype(np.int64)
_VALUES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64, np.uint8))
_MOST_K = 16  # beyond, the reference's sort is cheaper than k scans


@njit(cache=True, inline="always", error_model="numpy")
def _better(v, best, largest):  # noqa: ANN001, ANN202
    """Whether ``v`` ranks strictly before ``best`` (NaN above every number)."""
    if largest:
        return v > best or (v != v and best == best)
    return v < best or (best != best and v == v)


@njit(cache=True, error_model="numpy")
def arg_extreme(x, out, largest):  # noqa: ANN001, ANN201
    """out (a, b) = the index along n of x (a, n, b)'s first maximum (``largest``) or
    minimum, or of its first NaN."""
    for i in range(x.shape[0]):
        for j in range(x.shape[2]):
            best = 0
            value = x[i, 0, j]
            if value == value:
                for t in range(1, x.shape[1]):
                    v = x[i, t, j]
                    if v != v:
                        best = t
                        break
                    if _better(v, value, largest):
                        best = t
                        value = v
            out[i, j] = best
    return out


@njit(cache=True, error_model="numpy")
def top_k(x, values, indices, picked, largest):  # noqa: ANN001, ANN201
    """values, indices (a, k, b) = the k best of x (a, n, b) along n, best first, ties in
    ascending index; ``picked`` (n,) is scratch."""
    k = values.shape[1]
    for i in range(x.shape[0]):
        for j in range(x.shape[2]):
            for t in range(x.shape[1]):
                picked[t] = False
            for r in range(k):
                best = -1
                value = x[i, 0, j]
                for t in range(x.shape[1]):
                    if picked[t]:
                        continue
                    v = x[i, t, j]
                    if best < 0 or _better(v, value, largest):
                        best = t
                        value = v
                picked[best] = True
                values[i, r, j] = value
                indices[i, r, j] = best
    return True


def _layout(x: np.ndarray, dim: Any) -> tuple[int, int, int] | None:
    """(before, n, after) around axis ``dim`` (None: all of x as one row), or None."""
    if dim is None:
        return 1, x.size, 1
    if isinstance(dim, bool) or not isinstance(dim, int) or not -x.ndim <= dim < x.ndim:
        return None
    axis = dim % x.ndim
    return math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1 :])


def _arg_form(name: str, largest: bool) -> Any:
    def form(x: Any, dim: Any, keepdim: Any, out: Any) -> Any:
        if not dense(x) or x.dtype not in _VALUES or x.ndim == 0 or x.size == 0:
            return None
        layout = _layout(x, dim)
        if layout is None or not dense(out) or out.dtype != _INT64:
            return None
        a, _, b = layout
        if out.size != a * b or not out.flags.writeable:
            return None
        args = (x.reshape(layout), out.reshape(a, b), largest)
        kern = form_entry_point(arg_extreme, args)
        reference = get_kernel(name).fn
        x0, o0 = x, out

        def run(x, dim, keepdim, out):  # noqa: ANN001, ANN202
            if x is x0 and out is o0:
                kern(*args)
                return out
            return reference(x, dim, keepdim, out)

        return offer(run, step=(arg_extreme, args), fills_outputs=True)  # (as the reference)

    form.__doc__ = f"{name} of a dense tensor along one axis (or all of it), or None."
    return form


compiled_form("aten::argmax.out")(_arg_form("aten::argmax.out", True))
compiled_form("aten::argmin.out")(_arg_form("aten::argmin.out", False))


@compiled_form("aten::topk.values")
def _topk_form(
    x: Any, k: Any, dim: Any, largest: Any, sorted: Any, values: Any, indices: Any
) -> Any:
    """The k largest (smallest) entries along one axis and their indices, or None."""
    if not dense(x) or x.dtype not in _VALUES or x.ndim == 0 or x.size == 0:
        return None
    if not isinstance(largest, bool) or isinstance(k, bool) or not isinstance(k, int):
        return None
    layout = None if dim is None else _layout(x, dim)
    if layout is None or not 0 < k <= min(layout[1], _MOST_K):
        return None
    a, n, b = layout
    axis = dim % x.ndim
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
    if not (dense(values) and dense(indices)) or values.shape != shape or indices.shape != shape:
        return None
    if values.dtype != x.dtype or indices.dtype != _INT64 or np.shares_memory(values, x):
        return None
    args = (
        x.reshape(layout),
        values.reshape(a, k, b),
        indices.reshape(a, k, b),
        np.zeros(n, np.bool_),
        largest,
    )
    kern = form_entry_point(top_k, args)
    reference = get_kernel("aten::topk.values").fn
    x0, v0, i0 = x, values, indices

    def run(x, k, dim, largest, sorted, values, indices):  # noqa: ANN001, ANN202
        if x is x0 and values is v0 and indices is i0:
            kern(*args)
            return values, indices
        return reference(x, k, dim, largest, sorted, values, indices)

    return offer(run, step=(top_k, args), fills_outputs=True)  # (the reference writes them too)
