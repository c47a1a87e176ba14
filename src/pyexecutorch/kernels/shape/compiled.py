"""Compiled (numba) forms of concatenation and splitting along one axis, and broadcast copies.

Viewed as (outer, inner) rows, where outer is the product of the dims before
the axis, every piece of a cat or split of C-contiguous tensors is a run of
``inner`` elements per row: one flat copy each (a CNN's cat of branches along
the channels, with a batch of one, is one contiguous copy per branch). A call
alone runs the compiled loop through its entry point (one call for every piece,
against numpy's assignment per piece); inside a whole method it is the step,
where numba's n-d slice copy of the piece views costs about 4x a flat one.
Integer and bool pieces copy bit-exactly. Imported only by the compiled tier;
``shape.py`` stays the reference.

A broadcast copy (``expand_copy``, such as a grouped-query attention's key/value
head repeat) is, inside a whole method, a copy of runs: the trailing dims that do
not repeat are one run of the (C-contiguous) source, and every row of the out
takes its run from a start computed at load.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

from pyexecutorch.jit.arrays import dense
from pyexecutorch.jit.deferral import form_entry_point
from pyexecutorch.kernels.registry import compiled_form, fast_path_of, offer
from pyexecutorch.kernels.shape import (
    compiled_convert,  # noqa: F401 - its steps register
    fast,
)

_KINDS = "biuf"
_MOST_PIECES = 4  # one compiled function per count of pieces, 2 to this


@njit(cache=True, error_model="numpy", inline="always")
def _put(dst, src, start):  # noqa: ANN001, ANN202
    """dst[start : start + src.size] = src, for 1-D rows."""
    run = dst[start : start + src.size]
    for j in range(src.size):
        run[j] = src[j]


@njit(cache=True, error_model="numpy", inline="always")
def _take(src, start, dst):  # noqa: ANN001, ANN202
    """dst = src[start : start + dst.size], for 1-D rows."""
    run = src[start : start + dst.size]
    for j in range(dst.size):
        dst[j] = run[j]


def _cat2(a, b, out):  # noqa: ANN001, ANN202
    for i in range(out.shape[0]):
        _put(out[i], a[i], 0)
        _put(out[i], b[i], a.shape[1])


def _cat3(a, b, c, out):  # noqa: ANN001, ANN202
    for i in range(out.shape[0]):
        _put(out[i], a[i], 0)
        _put(out[i], b[i], a.shape[1])
        _put(out[i], c[i], a.shape[1] + b.shape[1])


def _cat4(a, b, c, d, out):  # noqa: ANN001, ANN202
    for i in range(out.shape[0]):
        _put(out[i], a[i], 0)
        _put(out[i], b[i], a.shape[1])
        _put(out[i], c[i], a.shape[1] + b.shape[1])
        _put(out[i], d[i], a.shape[1] + b.shape[1] + c.shape[1])


def _split2(x, a, b):  # noqa: ANN001, ANN202
    for i in range(x.shape[0]):
        _take(x[i], 0, a[i])
        _take(x[i], a.shape[1], b[i])


def _split3(x, a, b, c):  # noqa: ANN001, ANN202
    for i in range(x.shape[0]):
        _take(x[i], 0, a[i])
        _take(x[i], a.shape[1], b[i])
        _take(x[i], a.shape[1] + b.shape[1], c[i])


def _split4(x, a, b, c, d):  # noqa: ANN001, ANN202
    for i in range(x.shape[0]):
        _take(x[i], 0, a[i])
        _take(x[i], a.shape[1], b[i])
        _take(x[i], a.shape[1] + b.shape[1], c[i])
        _take(x[i], a.shape[1] + b.shape[1] + c.shape[1], d[i])


def _compiled(*fns: Any) -> tuple[Any, ...]:
    return tuple(njit(cache=True, error_model="numpy")(fn) for fn in fns)


# By count of pieces - 2 (a module-level tuple: whole methods import its items by index)
CAT = _compiled(_cat2, _cat3, _cat4)
SPLIT = _compiled(_split2, _split3, _split4)


def _rows(arrays: list[Any], axis: int) -> list[np.ndarray] | None:
    """Each array viewed as (outer, inner) rows around ``axis``, or None when one cannot be."""
    first = arrays[0]
    if not all(dense(a) and a.dtype == first.dtype and a.ndim == first.ndim for a in arrays):
        return None
    if first.dtype.kind not in _KINDS or any(a.size == 0 for a in arrays):
        return None
    outer = math.prod(first.shape[:axis])
    return [a.reshape(outer, a.size // outer) for a in arrays]


def _same(loaded: tuple[Any, ...], given: tuple[Any, ...]) -> bool:
    """Whether a call passes exactly the arrays the form was made for (the planned ones)."""
    return len(loaded) == len(given) and all(a is b for a, b in zip(loaded, given, strict=True))


@compiled_form("aten::cat.out")
def _cat_form(tensors: Any, dim: Any, out: Any) -> Any:
    """Concatenation of 2 to 4 C-contiguous tensors of one dtype, or None."""
    numpy_cat = fast._cat(tensors, dim, out)  # validates the shapes and the axis
    if numpy_cat is None or not 2 <= len(tensors) <= _MOST_PIECES:
        return None
    rows = _rows([*tensors, out], dim % out.ndim)
    if rows is None or any(np.shares_memory(t, out) for t in tensors):
        return None
    function = CAT[len(tensors) - 2]
    kern = form_entry_point(function, tuple(rows))
    loaded = (*tensors, out)

    def cat(tensors, dim, out):  # noqa: ANN001, ANN202
        if not _same(loaded, (*tensors, out)):
            return numpy_cat(tensors, dim, out)
        kern(*rows)
        return out

    # the step: the call on the planned arrays; the pieces: bound to other arrays in a whole
    # method (a load-time view), a copy per piece
    pieces = fast_path_of(numpy_cat).pieces
    return offer(cat, step=(function, tuple(rows)), pieces=pieces, fills_outputs=True)


@compiled_form("aten::split_with_sizes_copy.out", "aten::split_copy.Tensor_out")
def _split_form(x: Any, sizes: Any, dim: Any, outs: Any) -> Any:
    """A split of a C-contiguous tensor into 2 to 4 pieces, or None."""
    numpy_split = fast._split(x, sizes, dim, outs)  # validates the sizes and the axis
    if numpy_split is None or not 2 <= len(outs) <= _MOST_PIECES:
        return None
    rows = _rows([x, *outs], dim % x.ndim)
    if rows is None or any(np.shares_memory(x, o) for o in outs):
        return None
    function = SPLIT[len(outs) - 2]
    kern = form_entry_point(function, tuple(rows))
    loaded = (x, *outs)

    def split(x, sizes, dim, outs):  # noqa: ANN001, ANN202
        if not _same(loaded, (x, *outs)):
            return numpy_split(x, sizes, dim, outs)
        kern(*rows)
        return outs

    pieces = fast_path_of(numpy_split).pieces  # (as cat's)
    return offer(split, step=(function, tuple(rows)), pieces=pieces, fills_outputs=True)


@njit(cache=True, error_model="numpy")
def broadcast_rows(src, starts, out):  # noqa: ANN001, ANN201
    """out[r] = src[starts[r] : starts[r] + out.shape[1]] for a flat src and out (rows, run)."""
    for r in range(out.shape[0]):
        _take(src, starts[r], out[r])


def _run_start(src: np.ndarray, shape: tuple[int, ...]) -> int:
    """The first dim from which ``src`` broadcast to ``shape`` repeats nothing (all dims
    after it are the source's own, so a run of its C-contiguous elements)."""
    view = np.broadcast_to(src, shape)
    start = len(shape)
    while start > 0 and (view.strides[start - 1] != 0 or shape[start - 1] == 1):
        start -= 1
    return start


@compiled_form("aten::expand_copy.out")
def _expand_form(a: Any, size: Any, implicit: Any, out: Any, *, whole: bool = False) -> Any:
    """Inside a whole method, a broadcast copy of a C-contiguous tensor as row runs, or None
    (alone, numpy's broadcasting copy is one call already)."""
    if not whole or fast._expand(a, size, implicit, out) is None:
        return None  # (the specializer checks that a broadcasts to out's shape)
    if not (dense(a) and dense(out) and out.flags.writeable) or a.dtype.kind not in _KINDS:
        return None
    if out.size == 0 or np.shares_memory(a, out):
        return None
    start = _run_start(a, out.shape)
    run = math.prod(out.shape[start:])
    index = np.arange(a.size, dtype=np.int64).reshape(a.shape)
    firsts = np.broadcast_to(index, out.shape)[(Ellipsis, *(0,) * (out.ndim - start))]
    starts = np.ascontiguousarray(firsts).reshape(-1)
    rows = out.reshape(-1, run)
    src = a.reshape(-1)

    def expand(a, size, implicit, out):  # noqa: ANN001, ANN202
        np.copyto(out, a)
        return out

    return offer(expand, step=(broadcast_rows, (src, starts, rows)), fills_outputs=True)
