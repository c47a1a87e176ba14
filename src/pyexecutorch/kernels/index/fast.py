"""Load-time fast paths for indexing: embedding, index_select, index.Tensor,
index_put, gather, scatter and masked_fill.

The general kernels in :mod:`pyexecutorch.kernels.index.index` rebuild numpy index
tuples and check index values with two reductions on every call. Here the
layout of the index tuple, flat offsets and lookup tables are built at load,
and a call is one or two ``take``/``put`` calls whose own bounds check
(``mode="raise"``, through a table where torch's range differs from numpy's)
finds bad index values. Whenever an index value is out of range the call
hands over to the general kernel, which raises its precise error, so errors
read the same either way.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pyexecutorch.kernels.elementwise.unary import checked_scalar
from pyexecutorch.kernels.reduce.fast import flat_offsets
from pyexecutorch.kernels.registry import KernelError, get_kernel, specializer

_BOOL = np.dtype(np.bool_)
_I64 = np.dtype(np.int64)
_INDEX_KINDS = (np.dtype(np.int64), np.dtype(np.int32))
# A negative index read as unsigned is huge: one max() checks both ends of [0, size).
_UNSIGNED = {np.dtype(np.int64): np.dtype(np.uint64), np.dtype(np.int32): np.dtype(np.uint32)}

_umax = np.maximum.reduce
_take = np.ndarray.take
_put = np.ndarray.put


def _checked_lut(size: int, step: int = 1, bad: int | None = None) -> np.ndarray:
    """A table mapping each index in ``[0, size)`` to ``index * step``.

    numpy's ``take(mode="raise")`` accepts ``[-n, n)`` for a table of ``n``
    entries, where torch's gather/index_select/embedding accept ``[0, size)``:
    the table has ``2 * size`` entries, the upper half (what ``[-size, 0)``
    and ``[size, 2 * size)`` land on) holding ``bad``, an offset past the end
    of the data, so that the following ``take(mode="raise")`` raises for
    those. Every other index raises in the table's own take.
    """
    table = np.empty(2 * size, dtype=np.intp)
    table[:size] = np.arange(size) * step
    table[size:] = size * step if bad is None else bad
    return table


def _general(name: str) -> Any:
    k = get_kernel(name)
    assert k is not None
    return k.fn


def _is_index(ix: Any) -> bool:
    return isinstance(ix, np.ndarray) and ix.dtype in _INDEX_KINDS


def _arrays(*values: Any) -> bool:
    return all(isinstance(v, np.ndarray) for v in values)


# ---------------------------------------------------------------------------
# embedding, index_select


@specializer("aten::embedding.out")
def _embedding(
    weight: Any, indices: Any, padding_idx: Any, scale_grad: Any, sparse: Any, out: Any
) -> Any:
    if not _arrays(weight, out) or not _is_index(indices) or weight.ndim != 2:
        return None
    if indices.size == 0 or out.shape != indices.shape + weight.shape[1:]:
        return None
    if out.dtype != weight.dtype:
        return None
    lut = _checked_lut(weight.shape[0])
    general = _general("aten::embedding.out")

    def embedding(weight, indices, padding_idx, scale_grad, sparse, out):  # noqa: ANN001, ANN202
        try:
            _take(weight, _take(lut, indices), 0, out, "raise")
        except IndexError:
            return general(weight, indices, padding_idx, scale_grad, sparse, out)
        return out

    return embedding


@specializer("aten::index_select.out")
def _index_select(a: Any, dim: Any, index: Any, out: Any) -> Any:
    if not _arrays(a, out) or not _is_index(index) or index.ndim != 1 or index.size == 0:
        return None
    if not isinstance(dim, int) or a.ndim == 0 or not -a.ndim <= dim < a.ndim:
        return None
    axis = dim % a.ndim
    if out.dtype != a.dtype or out.shape != a.shape[:axis] + index.shape + a.shape[axis + 1 :]:
        return None
    lut = _checked_lut(a.shape[axis])
    general = _general("aten::index_select.out")

    def index_select(a, dim, index, out):  # noqa: ANN001, ANN202
        try:
            _take(a, _take(lut, index), axis, out, "raise")
        except IndexError:
            return general(a, dim, index, out)
        return out

    return index_select


# ---------------------------------------------------------------------------
# index.Tensor, index_put


def _key_builder(indices: Any, ndim: int) -> Any:
    """A function from the run-time index list to a numpy key, for int/None lists.

    ``None`` entries stand for full slices (numpy would read them as new axes).
    Returns ``None`` for masks, other dtypes or too many entries.
    """
    if not isinstance(indices, list) or not indices or len(indices) > ndim:
        return None
    positions = []
    for p, ix in enumerate(indices):
        if ix is None:
            continue
        if not _is_index(ix):
            return None
        positions.append(p)
    if not positions:
        return None
    template = [slice(None)] * len(indices)
    if len(positions) == 1:
        (p,) = positions
        before = tuple(template[:p])

        def one(indices: list) -> tuple:
            return (*before, indices[p])

        return one

    def many(indices: list) -> tuple:
        key = template.copy()
        for p in positions:
            key[p] = indices[p]
        return tuple(key)

    return many


def _zero_indices(indices: list) -> list:
    # Planned index tensors hold garbage at load: shapes are checked with zeros.
    return [None if ix is None else np.zeros(ix.shape, ix.dtype) for ix in indices]


@specializer("aten::index.Tensor_out")
def _index(a: Any, indices: Any, out: Any) -> Any:
    if not _arrays(a, out) or out.dtype != a.dtype or a.ndim == 0:
        return None
    key_of = _key_builder(indices, a.ndim)
    if key_of is None:
        return None
    zeros = _zero_indices(indices)
    key = key_of(zeros)
    try:
        shape = a[key].shape
    except IndexError:
        return None  # an empty dimension: the general kernel decides
    if shape != out.shape or out.size == 0:
        return None
    general = _general("aten::index.Tensor_out")
    arrays = [p for p, ix in enumerate(indices) if ix is not None]
    if len(arrays) == 1:
        # One index tensor among full slices: a take, whose bounds check
        # ([-size, size), raising IndexError) is torch's.
        (axis,) = arrays

        def index_take(a, indices, out):  # noqa: ANN001, ANN202
            try:
                _take(a, indices[axis], axis, out, "raise")
            except IndexError:
                return general(a, indices, out)
            return out

        return index_take

    def index_many(a, indices, out):  # noqa: ANN001, ANN202
        try:
            np.copyto(out, a[key_of(indices)])
        except IndexError:
            return general(a, indices, out)
        return out

    return index_many


def _index_writer(a: Any, indices: Any, values: Any, accumulate: Any) -> Any:
    """``write(target, indices, values)`` doing ``target[indices] = values`` (or ``+=``).

    It raises ``IndexError`` for an index out of range, before writing when
    there is one index tensor (the common cache update). ``None`` when the
    write would not fit for every value of the indices.
    """
    if not _arrays(a, values) or values.dtype != a.dtype or not isinstance(accumulate, bool):
        return None
    if a.ndim == 0:
        return None
    key_of = _key_builder(indices, a.ndim)
    if key_of is None:
        return None
    probe = np.zeros(a.shape, a.dtype)
    key = key_of(_zero_indices(indices))
    try:
        region = probe[key].shape
        if 0 in region:
            return None  # out-of-range indices that select nothing are no error: general
        probe[key] = np.zeros(values.shape, values.dtype)
    except (IndexError, ValueError):
        return None
    if accumulate:
        return lambda target, indices, values: np.add.at(target, key_of(indices), values)
    arrays = [p for p, ix in enumerate(indices) if ix is not None]
    p = arrays[0]
    if len(arrays) > 1 or values.size != math.prod(region) or math.prod(a.shape[:p]) != 1:
        # several index tensors, values broadcast, or a batch in front: numpy's assignment
        def assign(target: np.ndarray, indices: list, values: np.ndarray) -> None:
            target[key_of(indices)] = values

        return assign
    # One index tensor after size-1 dims (the cache update): a table gives the
    # flat offsets of each indexed row, and a put stores values in C order,
    # which is the region's order (values has its shape, up to leading 1s).
    strides = [math.prod(a.shape[d + 1 :]) for d in range(a.ndim)]
    rows = np.arange(a.shape[p], dtype=np.intp) * strides[p]
    lut = rows.reshape((-1,) + (1,) * (a.ndim - p - 1)) + np.zeros((1,) + a.shape[p + 1 :], np.intp)
    for d, g in enumerate(np.indices(a.shape[p + 1 :], sparse=True), start=p + 1):
        lut += g[None] * strides[d]

    def put(target: np.ndarray, indices: list, values: np.ndarray) -> None:
        # take(mode="raise") is torch's bounds rule, [-n, n) with negatives from the
        # end; it raises before anything is written.
        _put(target, _take(lut, indices[p], 0), values, "clip")

    return put


@specializer("aten::index_put.out")
def _index_put(a: Any, indices: Any, values: Any, accumulate: Any, out: Any) -> Any:
    write = _index_writer(a, indices, values, accumulate)
    if write is None or not isinstance(out, np.ndarray):
        return None
    if out.shape != a.shape or out.dtype != a.dtype:
        return None
    general = _general("aten::index_put.out")

    def index_put(a, indices, values, accumulate, out):  # noqa: ANN001, ANN202
        if out is not a:
            np.copyto(out, a)
        try:
            write(out, indices, values)
        except IndexError:
            return general(a, indices, values, accumulate, out)
        return out

    return index_put


@specializer("aten::index_put_")
def _index_put_inplace(
    a: Any, indices: Any, values: Any, accumulate: Any = False, *rest: Any
) -> Any:
    write = _index_writer(a, indices, values, accumulate)
    if write is None:
        return None
    general = _general("aten::index_put_")

    def index_put_(a, indices, values, accumulate=False, *rest):  # noqa: ANN001, ANN202
        try:
            write(a, indices, values)
        except IndexError:
            return general(a, indices, values, accumulate, *rest)
        return None

    return index_put_


# ---------------------------------------------------------------------------
# gather, scatter, scatter_add


def _along_axis_plan(a: Any, dim: Any, index: Any) -> tuple[int, np.ndarray, np.ndarray] | None:
    """``(axis, base, stride)`` of flat offsets for gather/scatter along ``dim``."""
    if not isinstance(a, np.ndarray) or not _is_index(index) or not isinstance(dim, int):
        return None
    if a.ndim == 0 or index.ndim != a.ndim or index.size == 0 or not -a.ndim <= dim < a.ndim:
        return None
    axis = dim % a.ndim
    if any(i > s for d, (i, s) in enumerate(zip(index.shape, a.shape, strict=True)) if d != axis):
        return None
    if index.dtype != _I64 and a.size >= 2**31:
        return None  # int32 offsets could overflow
    base, stride = flat_offsets(a.shape, axis, index.shape)
    return axis, base, np.array(stride, _I64)


@specializer("aten::gather.out")
def _gather(a: Any, dim: Any, index: Any, sparse_grad: Any, out: Any) -> Any:
    plan = _along_axis_plan(a, dim, index)
    if plan is None or not isinstance(out, np.ndarray):
        return None
    if out.shape != index.shape or out.dtype != a.dtype:
        return None
    axis, base, stride = plan
    # index -> index * stride, or past the end of ``a`` for a bad index
    lut = _checked_lut(a.shape[axis], int(stride), a.size)
    general = _general("aten::gather.out")

    def gather(a, dim, index, sparse_grad, out):  # noqa: ANN001, ANN202
        try:
            flat = _take(lut, index)
            np.add(flat, base, out=flat)
            _take(a, flat, None, out, "raise")
        except IndexError:
            return general(a, dim, index, sparse_grad, out)
        return out

    return gather


def _scatter(name: str, kind: str):  # noqa: ANN202
    """A specializer for scatter (``src`` or ``value``) and scatter_add."""

    def specialize(a: Any, dim: Any, index: Any, src: Any, out: Any) -> Any:
        plan = _along_axis_plan(a, dim, index)
        if plan is None or not isinstance(out, np.ndarray):
            return None
        if out.shape != a.shape or out.dtype != a.dtype or not out.flags.c_contiguous:
            return None  # the flat offsets address out's memory through a reshape
        if kind == "value":
            if not isinstance(src, (bool, int, float)):
                return None
        elif (
            not isinstance(src, np.ndarray)
            or src.dtype != a.dtype
            or src.ndim != a.ndim
            or any(i > s for i, s in zip(index.shape, src.shape, strict=True))
        ):
            return None
        axis, base, stride = plan
        size = a.shape[axis]
        unsigned = _UNSIGNED[index.dtype]
        flat = np.empty(index.shape, _I64)
        general = _general(name)
        # src's block of the index's shape (a view): scatter reads src there.
        block = tuple(slice(0, n) for n in index.shape)

        def scatter(a, dim, index, src, out):  # noqa: ANN001, ANN202
            # Checked before anything is written: ``out`` may be ``a`` itself.
            if _umax(index.view(unsigned), None) >= size or not out.flags.c_contiguous:
                return general(a, dim, index, src, out)
            if out is not a:
                np.copyto(out, a)
            # flat = index * stride + base (stride a 0-d array: cheaper than a scalar)
            np.multiply(index, stride, out=flat)
            np.add(flat, base, out=flat)
            target = out.reshape(-1)
            if kind == "add":
                np.add.at(target, flat, src[block])
            elif kind == "src":
                target[flat] = src[block]
            else:
                target[flat] = src
            return out

        return scatter

    return specialize


specializer("aten::scatter.src_out")(_scatter("aten::scatter.src_out", "src"))
specializer("aten::scatter.value_out")(_scatter("aten::scatter.value_out", "value"))
specializer("aten::scatter_add.out")(_scatter("aten::scatter_add.out", "add"))


# ---------------------------------------------------------------------------
# masked_fill


@specializer("aten::masked_fill.Scalar_out")
def _masked_fill(a: Any, mask: Any, value: Any, out: Any) -> Any:
    if not _arrays(a, mask, out) or mask.dtype != _BOOL or out.dtype != a.dtype:
        return None
    if a.dtype.kind not in "biuf":
        return None
    try:
        if np.broadcast_shapes(a.shape, mask.shape) != out.shape:
            return None
        fill = checked_scalar(value, a.dtype, "value")
    except (ValueError, KernelError):
        return None  # the general kernel raises its own error
    if np.shares_memory(out, mask):
        return None

    fill = np.array(fill, dtype=a.dtype)  # numpy broadcasts a 0-d array faster than a scalar

    def masked_fill(a, mask, value, out):  # noqa: ANN001, ANN202
        np.copyto(out, a)
        np.copyto(out, fill, where=mask)
        return out

    return masked_fill
