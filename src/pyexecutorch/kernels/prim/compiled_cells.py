"""Whole-method steps on scalars computed at run time, which live in "cells".

A scalar read from a tensor's data at run time (``item()`` of an LLM's ``input_pos``) and
the scalars computed from it have no value at load. Inside a method compiled whole
(:mod:`pyexecutorch.runtime.whole_method`) each lives in a cell, a 1-element int64 array
bound at load: the step computing it writes its cell and each step taking it reads the
cell per call, so nothing is fixed at the value the load saw. Here are the steps of the
operators computing such scalars (``_local_scalar_dense``; executorch_prim's integer
``add``, ``sub``, ``mul``) and of ``slice_copy`` at bounds read from cells (the rotary
tables at an LLM's start position); the KV-cache operators' are in
``kernels/llm/compiled.py``.

Each maker (registered with :func:`~pyexecutorch.kernels.registry.cell_step`) takes the
instruction's arguments, its computed scalars given as their cells, and returns a
callable offering its ``step`` (see :func:`~pyexecutorch.kernels.registry.offer`), or
None. A checked step returns False, having written nothing, where the kernel would raise
or would give another shape than the plan's; the callable, given the arguments with the
cells' values, then raises the error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from pyexecutorch.kernels.registry import KernelError, cell_step, offer

_I64 = np.dtype(np.int64)


def _is_cell(a: Any) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == _I64 and a.shape == (1,)


@njit(cache=True, error_model="numpy")
def scalar_of(source, cell):  # noqa: ANN001, ANN201
    """``item()`` of a one-element integer tensor (as a 1-D view) into ``cell``."""
    cell[0] = source[0]


@njit(cache=True, error_model="numpy")
def cell_add(a, b, out):  # noqa: ANN001, ANN201
    out[0] = a[0] + b[0]


@njit(cache=True, error_model="numpy")
def cell_sub(a, b, out):  # noqa: ANN001, ANN201
    out[0] = a[0] - b[0]


@njit(cache=True, error_model="numpy")
def cell_mul(a, b, out):  # noqa: ANN001, ANN201
    out[0] = a[0] * b[0]


@njit(cache=True, error_model="numpy")
def slice_at(source, start, end, step, out):  # noqa: ANN001, ANN201
    """``out`` (outer, n, inner) = ``source`` (outer, size, inner)[:, start:end:step], the
    bounds wrapped once when negative and clamped as torch's slice does; False (nothing
    written) when that gives another length than ``n``."""
    size = source.shape[1]
    s, e = start[0], end[0]
    if s < 0:
        s += size
    if e < 0:
        e += size
    s = min(max(s, 0), size)
    e = min(max(e, s), size)
    n = (e - s + step - 1) // step
    if n != out.shape[1]:
        return False
    for o in range(out.shape[0]):
        for i in range(n):
            out[o, i, :] = source[o, s + i * step, :]
    return True


@cell_step("aten::_local_scalar_dense")
def _item_step(source: Any, cell: Any) -> Any:
    if not (isinstance(source, np.ndarray) and source.size == 1 and source.dtype.kind in "iu"):
        return None  # (a float or bool scalar: no int64 cell holds it)
    if not _is_cell(cell):
        return None
    return offer(lambda *args: None, step=(scalar_of, (source.reshape(1), cell)))


def _cell_of(value: Any) -> np.ndarray | None:
    """A cell for an operand: a cell as it is, an int constant in a cell of its own."""
    if _is_cell(value):
        return value
    if type(value) is int and -(1 << 63) <= value < 1 << 63:
        return np.array([value], _I64)
    return None


_ARITHMETIC = {
    "executorch_prim::add.Scalar": cell_add,
    "executorch_prim::sub.Scalar": cell_sub,
    "executorch_prim::mul.Scalar": cell_mul,
}


def _arithmetic(name: str) -> None:
    function = _ARITHMETIC[name]

    @cell_step(name)
    def make(a: Any, b: Any, out: Any) -> Any:
        # int64 arithmetic, as the official runtime's EValue ints (no Python big ints)
        cells = (_cell_of(a), _cell_of(b))
        if cells[0] is None or cells[1] is None or not _is_cell(out):
            return None
        return offer(lambda *args: None, step=(function, (*cells, out)))


for _name in _ARITHMETIC:
    _arithmetic(_name)


@cell_step("aten::slice_copy.Tensor_out")
def _slice_step(source: Any, dim: Any, start: Any, end: Any, step: Any, out: Any) -> Any:
    """A slice whose bounds are read from cells, along any dim of dense arrays."""
    if not (isinstance(source, np.ndarray) and isinstance(out, np.ndarray)):
        return None
    if type(dim) is not int or type(step) is not int or step < 1 or source.ndim == 0:
        return None
    if source.dtype != out.dtype or source.dtype.kind not in "biuf" or source.ndim != out.ndim:
        return None
    if not (source.flags.c_contiguous and out.flags.c_contiguous):
        return None
    d = dim + source.ndim if dim < 0 else dim
    if not 0 <= d < source.ndim:
        return None
    size = source.shape[d]
    first = _cell_of(0 if start is None else start)
    last = _cell_of(size if end is None else end)
    if first is None or last is None:
        return None
    outer = int(np.prod(source.shape[:d], dtype=np.int64))
    if (
        source.shape[:d] != out.shape[:d]
        or source.shape[d + 1 :] != out.shape[d + 1 :]
        or out.size == 0
    ):
        return None
    source3 = source.reshape(outer, size, -1)
    out3 = out.reshape(outer, out.shape[d], -1)
    length = out.shape[d]

    def refuse(source: Any, dim: Any, start: Any, end: Any, step: Any, out: Any) -> None:
        s = 0 if start is None else start
        e = size if end is None else end
        raise KernelError(
            f"slice_copy: the bounds read from the inputs ({s}, {e}) give another length "
            f"than the {length} elements of dim {d} (size {size}) that the other tensors of "
            "this call's shapes have"
        )

    # (bool is 1 byte: numba copies it as any integer)
    return offer(refuse, step=(slice_at, (source3, first, last, step, out3), True))
