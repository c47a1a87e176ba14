"""Indexing, gather/scatter and masking kernels.

torch's advanced indexing (``index.Tensor``, ``index_put``) follows the same
rules as numpy's: a list of optional index tensors, ``None`` meaning a full
slice, bool masks standing for their ``nonzero()`` coordinates, index tensors
broadcast together, and the indexed dimensions placed where the first index
tensor is when the index tensors are adjacent, in front otherwise. So those
kernels translate the list into a numpy index tuple and let numpy do the work.

Index values are checked before use: numpy wraps negative values in places
where torch refuses them (gather, scatter, index_select, embedding).
"""

from __future__ import annotations

import math

import numpy as np

from pyexecutorch.kernels.bounds import check_output_size
from pyexecutorch.kernels.common import broadcast_shape, fit, normalize_dim
from pyexecutorch.kernels.registry import KernelError, kernel

_BOOL = np.dtype(np.bool_)
_INDEX_KINDS = (np.dtype(np.int64), np.dtype(np.int32))


# ---------------------------------------------------------------------------
# helpers


def _check_index_dtype(index: np.ndarray, name: str, what: str = "index") -> None:
    if not isinstance(index, np.ndarray):
        raise KernelError(f"{name}: {what} must be a tensor, got {type(index).__name__}")
    if index.dtype not in _INDEX_KINDS:
        raise KernelError(f"{name}: {what} must be an int64 or int32 tensor, got {index.dtype}")


def _check_range(index: np.ndarray, size: int, name: str, dim: int, negative: bool) -> None:
    """Raise naming the first index outside ``[0, size)`` (``[-size, size)`` if ``negative``)."""
    if index.size == 0:
        return
    lo = int(index.min())
    hi = int(index.max())
    low_bound = -size if negative else 0
    if lo >= low_bound and hi < size:
        return
    bad = index[(index < low_bound) | (index >= size)].reshape(-1)[0]
    raise KernelError(
        f"{name}: index {int(bad)} is out of bounds for dimension {dim} with size {size}"
    )


def _index_tuple(self: np.ndarray, indices: list, name: str) -> tuple:
    """The numpy index tuple for torch's list of optional index tensors."""
    if not isinstance(indices, list | tuple):
        raise KernelError(f"{name}: indices must be a list of optional tensors")
    if not indices:
        raise KernelError(f"{name}: at least one index must be provided")
    parts = []
    dim = 0
    for pos, ix in enumerate(indices):
        if ix is None:
            parts.append(slice(None))
            dim += 1
            continue
        if not isinstance(ix, np.ndarray):
            raise KernelError(f"{name}: index {pos} must be a tensor or None, got {ix!r}")
        if ix.dtype in _INDEX_KINDS:
            parts.append(ix)
            dim += 1
            continue
        if ix.dtype == np.uint8:
            # torch's deprecated byte masks are masks, not integer indices.
            ix = ix.astype(_BOOL)
        elif ix.dtype != _BOOL:
            raise KernelError(
                f"{name}: index tensor {pos} has dtype {ix.dtype}; tensors used as indices "
                "must be int64, int32, uint8 or bool tensors"
            )
        covered = self.shape[dim : dim + ix.ndim]
        if ix.shape != covered:
            raise KernelError(
                f"{name}: the shape of the mask {ix.shape} at index {pos} does not match the "
                f"shape of the indexed tensor {self.shape} at dimension {dim}"
            )
        parts.append(ix)
        dim += ix.ndim
    return tuple(parts)


def _index_elements(self: np.ndarray, tup: tuple) -> int | None:
    """How many elements ``self[tup]`` has (advanced indices broadcast together, sliced
    dimensions kept), without computing it; None when numpy would refuse the index."""
    shapes, kept, dim = [], 1, 0
    for part in tup:
        if isinstance(part, slice):
            kept *= self.shape[dim] if dim < self.ndim else 1
            dim += 1
        elif part.dtype == _BOOL:
            shapes.append((int(np.count_nonzero(part)),))
            dim += part.ndim
        else:
            shapes.append(part.shape)
            dim += 1
    try:
        return math.prod(np.broadcast_shapes(*shapes)) * kept * math.prod(self.shape[dim:])
    except ValueError:
        return None


def _index_error(name: str, e: Exception) -> KernelError:
    msg = str(e).replace("axis", "dimension")
    return KernelError(f"{name}: {msg}")


def _empty_result_shape(self: np.ndarray, tup: tuple) -> tuple[int, ...] | None:
    """The result shape when indexing selects no element at all, else ``None``.

    torch checks index values only for the elements it visits, so an index
    that is out of range but selects nothing (it broadcasts against an empty
    index, or another dimension is empty) is no error.
    """
    expanded: list = []
    for part in tup:
        if isinstance(part, slice):
            expanded.append(part)
        elif part.dtype == _BOOL:
            if part.ndim == 0:
                return None
            expanded.extend(np.nonzero(part))
        else:
            expanded.append(part)
    if len(expanded) > self.ndim:
        return None
    advanced = [i for i, p in enumerate(expanded) if not isinstance(p, slice)]
    if not advanced:
        return None
    try:
        middle = np.broadcast_shapes(*(expanded[i].shape for i in advanced))
    except ValueError:
        return None
    if 0 not in middle and any(self.shape[i] == 0 for i in advanced):
        return None  # torch refuses a non-empty index into an empty dimension
    kept = [self.shape[i] for i, p in enumerate(expanded) if isinstance(p, slice)]
    kept += self.shape[len(expanded) :]
    first = advanced[0]
    if advanced == list(range(first, first + len(advanced))):
        shape = tuple(kept[:first]) + middle + tuple(kept[first:])
    else:
        shape = middle + tuple(kept)
    return shape if 0 in shape else None


def index_result_shape(self: np.ndarray, tup: tuple) -> tuple[int, ...] | None:
    """The shape of ``self[tup]`` where only integer index tensors are given (their values
    do not change it: advanced indices broadcast, sliced dimensions kept, the broadcast
    dimensions in place when the indices are adjacent and first otherwise); None where a
    mask's values decide it, or the index shapes do not broadcast."""
    if len(tup) > self.ndim or any(not isinstance(p, slice) and p.dtype == _BOOL for p in tup):
        return None
    advanced = [i for i, p in enumerate(tup) if not isinstance(p, slice)]
    try:
        middle = np.broadcast_shapes(*(tup[i].shape for i in advanced))
    except ValueError:
        return None
    kept = [self.shape[i] for i, p in enumerate(tup) if isinstance(p, slice)]
    kept += self.shape[len(tup) :]
    first = advanced[0] if advanced else 0
    if advanced == list(range(first, first + len(advanced))):
        return tuple(kept[:first]) + middle + tuple(kept[first:])
    return middle + tuple(kept)


def _single_take(self: np.ndarray, tup: tuple) -> tuple[int, np.ndarray] | None:
    """``(axis, index)`` when ``tup`` is one integer index tensor among full slices."""
    axis = -1
    for i, part in enumerate(tup):
        if isinstance(part, slice):
            continue
        if axis >= 0 or part.dtype == _BOOL:
            return None
        axis = i
    if axis < 0 or len(tup) > self.ndim:
        return None
    return axis, tup[axis]


def _copy_self(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    out = fit(out, self.shape)
    if out is not self:
        np.copyto(out, self, casting="unsafe")
    return out


def _as_1d(a: np.ndarray) -> np.ndarray:
    return a.reshape(1) if a.ndim == 0 else a


# ---------------------------------------------------------------------------
# index, index_put


@kernel("aten::index.Tensor_out")
def index_tensor_out(self, indices, out):
    tup = _index_tuple(self, indices, "index")
    single = _single_take(self, tup)
    if single is not None:
        axis, ix = single
        out = fit(out, self.shape[:axis] + ix.shape + self.shape[axis + 1 :])
        if out.size or (ix.size and not self.shape[axis]):
            _check_range(ix, self.shape[axis], "index", axis, True)
            np.take(self, ix, axis=axis, out=out, mode="wrap")
        return out
    count = _index_elements(self, tup)
    if count is not None:  # the gather below allocates its result: bound it first
        check_output_size(out, (count,), "index")
    try:
        result = self[tup]
    except IndexError as e:
        shape = _empty_result_shape(self, tup)
        if shape is None:
            raise _index_error("index", e) from None
        return fit(out, shape)
    out = fit(out, result.shape)
    np.copyto(out, result, casting="unsafe")
    return out


def index_put_arguments(
    target: np.ndarray, indices: object, values: object, accumulate: object, name: str
) -> tuple:
    """The numpy index tuple of index_put, or KernelError (see kernels.index.checks)."""
    if not isinstance(values, np.ndarray):
        raise KernelError(f"{name}: values must be a tensor, got {type(values).__name__}")
    if values.dtype != target.dtype:
        raise KernelError(
            f"{name}: requires the values and destination dtypes to match, got {target.dtype} "
            f"for the destination and {values.dtype} for the values"
        )
    if not isinstance(accumulate, bool):
        raise KernelError(f"{name}: accumulate must be a bool, got {accumulate!r}")
    return _index_tuple(target, indices, name)


def _index_put(target, indices, values, accumulate, name):
    tup = index_put_arguments(target, indices, values, accumulate, name)
    try:
        if accumulate:
            np.add.at(target, tup, values)
        else:
            target[tup] = values
    except IndexError as e:
        if _empty_result_shape(target, tup) is None:
            raise _index_error(name, e) from None
    except ValueError as e:
        raise KernelError(
            f"{name}: values of shape {values.shape} do not fit the indexed shape: {e}"
        ) from None


@kernel("aten::index_put.out")
def index_put_out(self, indices, values, accumulate, out):
    out = _copy_self(self, out)
    _index_put(out, indices, values, accumulate, "index_put")
    return out


@kernel("aten::index_put_", n_outs=0)
def index_put_inplace(self, indices, values, accumulate=False, *_returned):
    # Any trailing argument is the slot of the returned alias of ``self``.
    _index_put(self, indices, values, accumulate, "index_put_")
    return None


# ---------------------------------------------------------------------------
# index_select, embedding


def index_select_arguments(self: np.ndarray, dim: object, index: np.ndarray) -> int:
    """The axis index_select takes from, or KernelError (see kernels.index.checks)."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise KernelError(f"index_select(): dim must be an int, got {dim!r}")
    axis = normalize_dim(dim, self.ndim)
    _check_index_dtype(index, "index_select")
    if index.ndim > 1:
        raise KernelError(
            f"index_select(): index is supposed to be a vector, got shape {index.shape}"
        )
    return axis


@kernel("aten::index_select.out")
def index_select_out(self, dim, index, out):
    axis = index_select_arguments(self, dim, index)
    if self.ndim == 0:
        _check_range(index, 1, "index_select", dim, False)
        if index.size != 1:
            raise KernelError(
                f"index_select(): a 0-dim input takes exactly one index, got {index.size}"
            )
        out = fit(out, ())
        np.copyto(out, self, casting="unsafe")
        return out
    size = self.shape[axis]
    _check_range(index, size, "index_select", axis, False)
    ix = _as_1d(index)
    out = fit(out, self.shape[:axis] + ix.shape + self.shape[axis + 1 :])
    if out.size:
        np.take(self, ix, axis=axis, out=out, mode="clip")
    return out


def embedding_arguments(weight: np.ndarray, indices: np.ndarray) -> tuple[int, ...]:
    """The result shape of embedding, or KernelError (see kernels.index.checks)."""
    if not isinstance(weight, np.ndarray) or weight.ndim != 2:
        raise KernelError(f"embedding: weight must be a 2-D tensor, got {_described(weight)}")
    _check_index_dtype(indices, "embedding", "indices")
    return indices.shape + weight.shape[1:]


def _described(a: object) -> str:
    return f"shape {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__


@kernel("aten::embedding.out")
def embedding_out(weight, indices, padding_idx, scale_grad_by_freq, sparse, out):
    embedding_arguments(weight, indices)
    rows = weight.shape[0]
    if indices.size:
        lo = int(indices.min())
        hi = int(indices.max())
        if lo < 0 or hi >= rows:
            bad = lo if lo < 0 else hi
            raise KernelError(
                f"embedding: index {bad} is out of range for a weight with {rows} rows"
            )
    out = fit(out, indices.shape + weight.shape[1:])
    if out.size:
        np.take(weight, indices, axis=0, out=out, mode="clip")
    return out


# ---------------------------------------------------------------------------
# gather, scatter, scatter_add


def _scatter_checks(self, dim, index, src, name):
    """Validate torch's gather/scatter shape rules; return the normalized axis."""
    scatter_shapes(self, dim, index, src, name)
    axis = normalize_dim(dim, self.ndim)
    if index.size:
        _check_range(index, _as_1d(self).shape[axis], name, axis, False)
    return axis


def scatter_shapes(self: np.ndarray, dim: object, index: np.ndarray, src: object, name: str) -> int:
    """gather/scatter's rules on dims, dtypes and shapes (not the index values): the
    normalized axis, or KernelError (see kernels.index.checks)."""
    if not isinstance(self, np.ndarray):
        raise KernelError(f"{name}: the input must be a tensor, got {type(self).__name__}")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise KernelError(f"{name}: dim must be an int, got {dim!r}")
    axis = normalize_dim(dim, self.ndim)
    _check_index_dtype(index, name)
    nd = max(self.ndim, 1)
    if max(index.ndim, 1) != nd and index.size:
        raise KernelError(
            f"{name}: index tensor must have the same number of dimensions as the input "
            f"tensor, got {index.ndim} and {self.ndim}"
        )
    ishape = _as_1d(index).shape
    sshape = _as_1d(self).shape
    if index.size:
        for d in range(nd):
            if d != axis and ishape[d] > sshape[d]:
                raise KernelError(
                    f"{name}: expected index {index.shape} to be no larger than self "
                    f"{self.shape} apart from dimension {axis}"
                )
        if src is not None:
            if max(src.ndim, 1) != nd:
                raise KernelError(
                    f"{name}: src must have the same number of dimensions as the input tensor, "
                    f"got {src.ndim} and {self.ndim}"
                )
            srcshape = _as_1d(src).shape
            if any(i > s for i, s in zip(ishape, srcshape, strict=True)):
                raise KernelError(
                    f"{name}: expected index {index.shape} to be no larger than src {src.shape}"
                )
    return axis


def _leading(a: np.ndarray, ishape: tuple[int, ...], axis: int | None) -> np.ndarray:
    """``a`` sliced to ``ishape`` in every dimension except ``axis`` (a view)."""
    if all(d == axis or a.shape[d] == n for d, n in enumerate(ishape)):
        return a
    return a[tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(ishape))]


@kernel("aten::gather.out")
def gather_out(self, dim, index, sparse_grad, out):
    axis = _scatter_checks(self, dim, index, None, "gather")
    out = fit(out, index.shape)
    if out.size == 0:
        return out
    ix = _as_1d(index)
    src = _leading(_as_1d(self), ix.shape, axis)
    np.copyto(out, np.take_along_axis(src, ix, axis=axis).reshape(index.shape), casting="unsafe")
    return out


def _scatter(self, dim, index, src, value, out, name, add=False):
    if src is not None and src.dtype != self.dtype:
        raise KernelError(
            f"{name}: expected self.dtype to be equal to src.dtype, got {self.dtype} and "
            f"{src.dtype}"
        )
    axis = _scatter_checks(self, dim, index, src, name)
    out = _copy_self(self, out)
    if index.size == 0:
        return out
    ix = _as_1d(index)
    target = _leading(_as_1d(out), ix.shape, axis)
    vals = value if src is None else _leading(_as_1d(src), ix.shape, None)
    if add:
        coords = list(np.indices(ix.shape, sparse=True))
        coords[axis] = ix
        np.add.at(target, tuple(coords), vals)
    else:
        np.put_along_axis(target, ix, vals, axis=axis)
    return out


@kernel("aten::scatter.src_out")
def scatter_src_out(self, dim, index, src, out):
    return _scatter(self, dim, index, src, None, out, "scatter")


@kernel("aten::scatter.value_out")
def scatter_value_out(self, dim, index, value, out):
    return _scatter(self, dim, index, None, value, out, "scatter")


@kernel("aten::scatter_add.out")
def scatter_add_out(self, dim, index, src, out):
    return _scatter(self, dim, index, src, None, out, "scatter_add", add=True)


# ---------------------------------------------------------------------------
# select_scatter, slice_scatter


@kernel("aten::select_scatter.out")
def select_scatter_out(self, src, dim, index, out):
    if self.ndim == 0:
        raise KernelError("select_scatter: select() cannot be applied to a 0-dim tensor")
    axis = normalize_dim(dim, self.ndim)
    size = self.shape[axis]
    if not -size <= index < size:
        raise KernelError(
            f"select_scatter: index {index} out of range for tensor of size {self.shape} at "
            f"dimension {axis}"
        )
    expected = self.shape[:axis] + self.shape[axis + 1 :]
    if src.shape != expected:
        raise KernelError(
            f"select_scatter: expected src to have a size equal to the slice of self. "
            f"src size = {src.shape}, slice size = {expected}"
        )
    out = _copy_self(self, out)
    out[(slice(None),) * axis + (index % size,)] = src
    return out


@kernel("aten::slice_scatter.out")
def slice_scatter_out(self, src, dim, start, end, step, out):
    axis = normalize_dim(dim, self.ndim)
    if self.ndim == 0:
        raise KernelError("slice_scatter: slice() cannot be applied to a 0-dim tensor")
    if step <= 0:
        raise KernelError(f"slice_scatter: slice step must be positive, got {step}")
    size = self.shape[axis]
    lo = 0 if start is None else start
    hi = size if end is None else end
    if lo < 0:
        lo += size
    if hi < 0:
        hi += size
    lo = min(max(lo, 0), size)
    hi = min(max(hi, lo), size)
    key = (slice(None),) * axis + (slice(lo, hi, step),)
    expected = self.shape[:axis] + (len(range(lo, hi, step)),) + self.shape[axis + 1 :]
    if src.shape != expected:
        raise KernelError(
            f"slice_scatter: expected src to have a size equal to the slice of self. "
            f"src size = {src.shape}, slice size = {expected}"
        )
    out = _copy_self(self, out)
    out[key] = src
    return out


# ---------------------------------------------------------------------------
# masked_scatter, masked_select, nonzero


def _check_mask(mask: np.ndarray, name: str) -> None:
    if mask.dtype != _BOOL:
        raise KernelError(
            f"{name}: only boolean masks are supported, got mask of dtype {mask.dtype}"
        )


@kernel("aten::masked_scatter.out")
def masked_scatter_out(self, mask, source, out):
    _check_mask(mask, "masked_scatter")
    if source.dtype != self.dtype:
        raise KernelError(
            f"masked_scatter: expected self and source to have the same dtype, got {self.dtype} "
            f"and {source.dtype}"
        )
    shape = broadcast_shape(self.shape, mask.shape)
    m = mask if mask.shape == shape else np.broadcast_to(mask, shape)
    count = int(np.count_nonzero(m))
    if source.size < count:
        raise KernelError(
            f"masked_scatter: source has {source.size} elements, fewer than the {count} "
            "true elements of the mask"
        )
    out = fit(out, shape)
    np.copyto(out, self, casting="unsafe")
    if count:
        out[m] = source.reshape(-1)[:count]
    return out


@kernel("aten::masked_select.out")
def masked_select_out(self, mask, out):
    _check_mask(mask, "masked_select")
    shape = broadcast_shape(self.shape, mask.shape)
    a = self if self.shape == shape else np.broadcast_to(self, shape)
    m = mask if mask.shape == shape else np.broadcast_to(mask, shape)
    result = a[m]
    out = fit(out, result.shape)
    np.copyto(out, result, casting="unsafe")
    return out


@kernel("aten::nonzero.out")
def nonzero_out(self, out):
    if self.ndim == 0:
        out = fit(out, (1 if self.item() != 0 else 0, 0))
        return out
    coords = np.nonzero(self)
    out = fit(out, (coords[0].shape[0], self.ndim))
    for d, c in enumerate(coords):
        out[:, d] = c
    return out
