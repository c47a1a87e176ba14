"""Whole-method steps (compiled tier) of copies that convert or rearrange elements.

Dim-order copies and ``_to_copy`` (a dtype cast, a dim-order or layout change, or
both) and ``repeat``. Alone each stays on its numpy fast path (one numpy call); inside
a whole method it is a loop on the planned arrays, so that the method can become one
compiled call:

- dense arrays of one shape copy flat; others (a permuted source, a strided
  destination) element by element over the shape;
- a repeat copies a broadcast view of the input (zero strides over each repeated
  dimension) into the output split into (repeats, size) pairs, both made at load.

Casts are the ones numpy and numba convert alike, those the numpy fast path takes too
(widening, integer to float, float to a narrower float, integer to integer: rounding
to nearest, wrapping); casts to bool and from float to integer keep their kernels.
Imported by ``compiled.py``; ``copy.py`` stays the reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from pyexecutorch.jit.arrays import dense
from pyexecutorch.kernels.registry import compiled_form, whole_step

_KINDS = "biuf"
_HALF = np.dtype(np.float16)  # numba has no float16 arithmetic to convert through


@njit(cache=True, error_model="numpy")
def convert_flat(src, dst):  # noqa: ANN001, ANN201
    """dst = src, 1-D arrays of one length, converted to dst's dtype."""
    for i in range(dst.shape[0]):
        dst[i] = src[i]


@njit(cache=True, error_model="numpy")
def convert_strided(src, dst):  # noqa: ANN001, ANN201
    """dst = src, arrays of one shape and any strides, converted to dst's dtype."""
    for index in np.ndindex(dst.shape):
        dst[index] = src[index]


def _convertible(src: np.dtype, dst: np.dtype) -> bool:
    """Whether numba's conversion of ``src`` elements to ``dst`` is numpy's."""
    if src.kind not in _KINDS or dst.kind not in _KINDS or _HALF in (src, dst):
        return False
    if src == dst:
        return True
    return dst.kind in "iuf" and np.can_cast(src, dst, "same_kind")


def _copy(src: Any, out: Any) -> Any:
    """``out[...] = src`` (one shape, convertible dtypes) as a step, or None."""
    if not (isinstance(src, np.ndarray) and isinstance(out, np.ndarray)):
        return None
    if src.shape != out.shape or out.size == 0 or not out.flags.writeable:
        return None
    if not _convertible(src.dtype, out.dtype) or np.shares_memory(src, out):
        return None
    if dense(src) and dense(out):
        return whole_step(convert_flat, (src.reshape(-1), out.reshape(-1)))
    return whole_step(convert_strided, (src, out))


@compiled_form("dim_order_ops::_to_dim_order_copy.out", "dim_order_ops::_clone_dim_order.out")
def _dim_order_copy_form(
    a: Any, non_blocking: Any, dim_order: Any, out: Any, *, whole: bool = False
) -> Any:
    """Inside a whole method: a dim-order copy, with its cast, as a copy step."""
    if not whole or not isinstance(a, np.ndarray):
        return None
    if dim_order is not None and sorted(dim_order) != list(range(a.ndim)):
        return None  # the reference raises
    return _copy(a, out)


@compiled_form("aten::_to_copy.out")
def _to_copy_form(
    a: Any, non_blocking: Any, memory_format: Any, out: Any, *, whole: bool = False
) -> Any:
    """Inside a whole method: a cast (or a plain copy) as a copy step."""
    return _copy(a, out) if whole else None


@compiled_form("aten::repeat.out")
def _repeat_form(a: Any, repeats: Any, out: Any, *, whole: bool = False) -> Any:
    """Inside a whole method: a repeat as one copy of a broadcast view of the input."""
    if not whole or not (isinstance(a, np.ndarray) and dense(out)) or a.dtype != out.dtype:
        return None
    try:
        repeats = tuple(int(r) for r in repeats)
    except TypeError:
        return None
    if len(repeats) < a.ndim or min(repeats, default=0) < 1 or a.size == 0:
        return None
    shape = (1,) * (len(repeats) - a.ndim) + a.shape
    if tuple(r * n for r, n in zip(repeats, shape, strict=True)) != out.shape:
        return None
    if a.dtype.kind not in _KINDS or a.dtype == _HALF or np.shares_memory(a, out):
        return None
    if not out.flags.writeable:
        return None
    split = tuple(x for pair in zip(repeats, shape, strict=True) for x in pair)
    spread = tuple(x for n in shape for x in (1, n))
    try:
        source = np.reshape(a, spread, copy=False)  # a view: reads the live input
    except ValueError:
        return None
    source = np.broadcast_to(source, split)
    return whole_step(convert_strided, (source, out.reshape(split)))
