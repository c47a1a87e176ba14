"""Shape and view-copy kernels: views materialised into their planned outputs.

Every kernel here is "compute a numpy view of the input that has the output's
logical shape, then copy it into ``out`` once". Inputs and outputs may be
strided views (non-default dim orders are presented that way), so the views
are always built from the arrays' own strides and never assume contiguity.

The helpers at the top (:func:`assign`, :func:`cast_scalar`, :func:`infer_size`,
:func:`check_sizes`) are shared with the copy, creation and padding modules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pyexecutorch.kernels.bounds import bounded_fit
from pyexecutorch.kernels.common import fit, quiet_fp
from pyexecutorch.kernels.registry import KernelError, kernel

# --------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------

# (source dtype, destination dtype) -> True when the cast can produce NaN/inf
# casting warnings or drops an imaginary part (computed once per pair).
_LOSSY: dict[tuple[np.dtype, np.dtype], bool] = {}


def _lossy(src: np.dtype, dst: np.dtype) -> bool:
    key = (src, dst)
    lossy = _LOSSY.get(key)
    if lossy is None:
        lossy = _LOSSY[key] = not np.can_cast(src, dst, casting="safe")
    return lossy


def assign(out: np.ndarray, src: np.ndarray | object) -> None:
    """``out[...] = src`` with broadcasting and torch's conversion rules.

    Same-dtype and widening copies are one numpy assignment. Narrowing casts
    follow torch: to bool is ``!= 0`` (complex included), complex to real
    keeps the real part, float to int truncates toward zero; out-of-range
    values wrap or saturate silently as the C casts do, without warnings.
    """
    if type(src) is not np.ndarray:
        src = np.asarray(src)
    if src.dtype == out.dtype or not _lossy(src.dtype, out.dtype):
        out[...] = src
        return
    if out.dtype == np.bool_:
        np.not_equal(src, 0, out=out)
        return
    if src.dtype.kind == "c" and out.dtype.kind != "c":
        src = src.real
    with quiet_fp():
        out[...] = src


def _int_limits(dtype: np.dtype) -> tuple[int, int, int]:
    info = np.iinfo(dtype)
    # An unsigned type also takes negatives down to -max (two's complement wrap).
    low = int(info.min) if dtype.kind == "i" else -int(info.max)
    return low, int(info.max), 1 << (8 * dtype.itemsize)


_INT_LIMITS = {
    np.dtype(t): _int_limits(np.dtype(t))
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
}
# torch refuses finite values beyond the type's largest finite value.
_FLOAT_SAFE = {2: 65504.0, 4: float(np.finfo(np.float32).max), 8: math.inf}


def cast_scalar(value: int | float | bool, dtype: np.dtype, what: str = "value") -> object:
    """A Scalar argument converted to ``dtype`` the way torch's fill does.

    Raises :class:`KernelError` where torch refuses the conversion ("cannot be
    converted ... without overflow"): integers outside the type's range (an
    unsigned type also takes negatives down to ``-max`` and wraps them, as
    two's complement), non-finite or out-of-range floats into integer types,
    and finite values beyond the largest finite value of a float type.
    """
    kind = dtype.kind
    if kind == "f":
        value = float(value)
        if -_FLOAT_SAFE[dtype.itemsize] <= value <= _FLOAT_SAFE[dtype.itemsize]:
            return value
        if math.isnan(value) or math.isinf(value):
            return value
        raise KernelError(f"{what} {value!r} cannot be converted to {dtype} without overflow")
    if kind == "b":
        return bool(value)
    if kind in "iu":
        low, high, wrap = _INT_LIMITS[dtype]
        if isinstance(value, float):
            if not (dtype.kind == "i" or value >= 0) or not (low <= value <= high):
                raise KernelError(
                    f"{what} {value!r} cannot be converted to {dtype} without overflow"
                )
            return math.trunc(value)
        value = int(value)
        if not low <= value <= high:
            raise KernelError(f"{what} {value!r} cannot be converted to {dtype} without overflow")
        return value + wrap if value < 0 and kind == "u" else value
    if kind == "c":
        return dtype.type(value)
    raise KernelError(f"{what}: unsupported output dtype {dtype}")


def check_sizes(size: tuple[int, ...], what: str = "size") -> tuple[int, ...]:
    """``size`` as a tuple of non-negative ints, or :class:`KernelError`."""
    size = tuple(size)
    for s in size:
        if s < 0:
            raise KernelError(f"{what} {list(size)} has a negative dimension {s}")
    return size


_INFERRED: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}


def infer_size(size: tuple[int, ...], numel: int) -> tuple[int, ...]:
    """A view's target shape: ``size`` with at most one ``-1`` inferred from ``numel``."""
    size = tuple(size)
    if -1 in size:
        shape = _INFERRED.get((size, numel))
        if shape is None:
            if len(_INFERRED) > 4096:
                _INFERRED.clear()
            shape = _INFERRED[(size, numel)] = _infer_minus_one(size, numel)
        return shape
    if math.prod(size) == numel and min(size, default=0) >= 0:
        return size
    for s in size:
        if s < 0:
            raise KernelError(f"size {list(size)} has an invalid dimension {s}")
    raise KernelError(f"shape {list(size)} is invalid for input of size {numel}")


def _infer_minus_one(size: tuple[int, ...], numel: int) -> tuple[int, ...]:
    if -1 not in size:
        for s in size:
            if s < 0:
                raise KernelError(f"size {list(size)} has an invalid dimension {s}")
        if math.prod(size) != numel:
            raise KernelError(f"shape {list(size)} is invalid for input of size {numel}")
        return size
    if size.count(-1) > 1:
        raise KernelError(f"size {list(size)}: only one dimension can be inferred")
    known = 1
    for s in size:
        if s < -1:
            raise KernelError(f"size {list(size)} has an invalid dimension {s}")
        if s != -1:
            known *= s
    if known == 0 or numel % known:
        raise KernelError(f"shape {list(size)} is invalid for input of size {numel}")
    return tuple(numel // known if s == -1 else s for s in size)


def _axis(ndim: int, dim: int, what: str = "dim") -> int:
    """``dim`` as a non-negative axis (a 0-dim tensor takes 0 and -1)."""
    if 0 <= dim < ndim:
        return dim
    n = ndim or 1
    if -n <= dim < n:
        return dim % n
    raise KernelError(
        f"{what} {dim} is out of range for a tensor of rank {ndim} (expected [{-n}, {n - 1}])"
    )


def _require_dims(x: np.ndarray, op: str) -> None:
    if x.ndim == 0:
        raise KernelError(f"{op}() cannot be applied to a 0-dim tensor")


# --------------------------------------------------------------------------
# Pure views
# --------------------------------------------------------------------------


@kernel("aten::view_copy.out")
def view_copy(self, size, out):
    shape = infer_size(size, self.size)
    out = fit(out, shape)
    if self.flags.c_contiguous:
        assign(out, self.reshape(shape))
    elif out.flags.c_contiguous:
        assign(out.reshape(self.shape), self)  # one pass: the strided input read once
    else:
        assign(out, self.reshape(shape))
    return out


_PERMUTATIONS: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}


def _permutation(dims: tuple[int, ...], n: int) -> tuple[int, ...]:
    axes = _PERMUTATIONS.get((dims, n))
    if axes is None:
        if len(dims) != n:
            raise KernelError(
                f"permute dims {list(dims)} must have one entry per dimension of the input "
                f"(rank {n})"
            )
        axes = tuple(_axis(n, d, "permute dim") for d in dims)
        if len(set(axes)) != n:
            raise KernelError(f"permute dims {list(dims)} repeat a dimension")
        _PERMUTATIONS[(dims, n)] = axes
    return axes


@kernel("aten::permute_copy.out")
def permute_copy(self, dims, out):
    src = self.transpose(_permutation(tuple(dims), self.ndim))
    out = fit(out, src.shape)
    assign(out, src)
    return out


@kernel("aten::transpose_copy.int_out")
def transpose_copy(self, dim0, dim1, out):
    a = _axis(self.ndim, dim0, "dim0")
    b = _axis(self.ndim, dim1, "dim1")
    src = self.swapaxes(a, b) if self.ndim >= 2 else self
    out = fit(out, src.shape)
    assign(out, src)
    return out


@kernel("aten::t_copy.out")
def t_copy(self, out):
    if self.ndim > 2:
        raise KernelError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
    src = self.T
    out = fit(out, src.shape)
    assign(out, src)
    return out


@kernel("aten::expand_copy.out")
def expand_copy(self, size, implicit, out):
    out = bounded_fit(out, expand_shape(self, size), "expand_copy")
    assign(out, self)
    return out


def expand_shape(self: np.ndarray, size: Sequence[int]) -> tuple[int, ...]:
    """The result shape of expand_copy, or KernelError (the family's argument check, see
    kernels.shape.checks)."""
    n, k = self.ndim, len(size)
    if k < n:
        raise KernelError(
            f"expand size {list(size)} has fewer dimensions than the input's shape {list(self.shape)}"
        )
    shape = list(size)
    lead = k - n
    for i, s in enumerate(size):
        if i < lead:
            if s < 0:
                raise KernelError(
                    f"expand size {list(size)}: the new leading dimension {i} cannot be {s}"
                )
            continue
        have = self.shape[i - lead]
        if s == -1:
            shape[i] = have
        elif s != have and have != 1:
            raise KernelError(
                f"expand size {list(size)}: dimension {i} of size {have} can only be expanded "
                f"from size 1 (got {s})"
            )
        elif s < 0:
            raise KernelError(f"expand size {list(size)} has an invalid dimension {s}")
    return tuple(shape)


@kernel("aten::squeeze_copy.dim_out")
def squeeze_copy_dim(self, dim, out):
    a = _axis(self.ndim, dim)
    shape = self.shape
    if self.ndim and shape[a] == 1:
        shape = shape[:a] + shape[a + 1 :]
    out = fit(out, shape)
    assign(out, self.reshape(shape))
    return out


_SQUEEZED: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, ...]] = {}


@kernel("aten::squeeze_copy.dims_out")
def squeeze_copy_dims(self, dim, out):
    key = (self.shape, tuple(dim))
    shape = _SQUEEZED.get(key)
    if shape is None:
        axes = {_axis(self.ndim, d) for d in dim}
        shape = tuple(s for i, s in enumerate(self.shape) if not (i in axes and s == 1))
        if len(_SQUEEZED) > 4096:
            _SQUEEZED.clear()
        _SQUEEZED[key] = shape
    out = fit(out, shape)
    assign(out, self.reshape(shape))
    return out


@kernel("aten::unsqueeze_copy.out")
def unsqueeze_copy(self, dim, out):
    n = self.ndim + 1
    if not -n <= dim < n:
        raise KernelError(
            f"dim {dim} is out of range for unsqueeze of a tensor of rank {self.ndim} "
            f"(expected [{-n}, {n - 1}])"
        )
    a = dim % n
    shape = self.shape[:a] + (1,) + self.shape[a:]
    out = fit(out, shape)
    assign(out, self.reshape(shape))
    return out


@kernel("aten::alias_copy.out", "aten::detach_copy.out", "aten::lift_fresh_copy.out")
def alias_copy(self, out):
    out = fit(out, self.shape)
    assign(out, self)
    return out


# --------------------------------------------------------------------------
# Indexing along one dimension
# --------------------------------------------------------------------------


@kernel("aten::slice_copy.Tensor_out")
def slice_copy(self, dim, start, end, step, out):
    _require_dims(self, "slice")
    a = _axis(self.ndim, dim)
    if step <= 0:
        raise KernelError(f"slice step must be positive, got {step}")
    index = (slice(None),) * a + (slice(start, end, step),)
    src = self[index]
    out = fit(out, src.shape)
    assign(out, src)
    return out


@kernel("aten::select_copy.int_out")
def select_copy(self, dim, index, out):
    _require_dims(self, "select")
    a = _axis(self.ndim, dim)
    n = self.shape[a]
    if not -n <= index < n:
        raise KernelError(
            f"select(): index {index} out of range for tensor of size {list(self.shape)} "
            f"at dimension {dim}"
        )
    src = self[(slice(None),) * a + (index,)]
    out = fit(out, src.shape)
    assign(out, src)
    return out


@kernel("aten::narrow_copy.out")
def narrow_copy(self, dim, start, length, out):
    _require_dims(self, "narrow")
    a = _axis(self.ndim, dim)
    n = self.shape[a]
    if not -n <= start <= n:
        raise KernelError(f"narrow(): start {start} is out of bounds for dimension of size {n}")
    if start < 0:
        start += n
    if length < 0 or start + length > n:
        raise KernelError(
            f"narrow(): start ({start}) + length ({length}) exceeds dimension size ({n})"
        )
    src = self[(slice(None),) * a + (slice(start, start + length),)]
    out = fit(out, src.shape)
    assign(out, src)
    return out


# --------------------------------------------------------------------------
# Joining and splitting
# --------------------------------------------------------------------------


def cat_parts(tensors: Any, dim: int) -> tuple[list[np.ndarray], int, tuple[int, ...]]:
    """The tensors cat joins, its axis and its result shape, or KernelError: the argument
    check (see shape.checks)."""
    kept = []
    first = None
    total = a = 0
    for i, t in enumerate(tensors):
        if not hasattr(t, "shape"):
            raise KernelError(f"cat(): expected tensors, got {type(t).__name__} at position {i}")
        shape = t.shape
        if shape == (0,):
            continue  # torch's legacy rule: 1-D empty tensors take no part
        if not shape:
            raise KernelError(
                f"cat(): zero-dimensional tensor (at position {i}) cannot be concatenated"
            )
        if first is None:
            first = shape
            a = _axis(len(shape), dim)
        elif len(shape) != len(first):
            raise KernelError(
                f"cat(): tensors must have the same number of dimensions: got {len(first)} "
                f"and {len(shape)} (tensor {i})"
            )
        elif shape[:a] != first[:a] or shape[a + 1 :] != first[a + 1 :]:
            raise KernelError(
                f"cat(): sizes of tensors must match except in dimension {a}: "
                f"{list(first)} vs {list(shape)} (tensor {i})"
            )
        total += shape[a]
        kept.append(t)
    if first is None:
        if not tensors:
            raise KernelError("cat(): expected a non-empty list of tensors")
        return kept, 0, (0,)
    return kept, a, first[:a] + (total,) + first[a + 1 :]


@kernel("aten::cat.out")
def cat(tensors, dim, out):
    kept, a, shape = cat_parts(tensors, dim)
    out = fit(out, shape)
    if not kept:
        return out
    same_dtype = all(t.dtype == out.dtype for t in kept)
    if len(kept) == 1:
        assign(out, kept[0])
    elif same_dtype:
        np.concatenate(kept, axis=a, out=out)
    else:
        offset = 0
        lead = (slice(None),) * a
        for t in kept:
            size = t.shape[a]
            assign(out[lead + (slice(offset, offset + size),)], t)
            offset += size
    return out


@kernel("aten::stack.out")
def stack(tensors, dim, out):
    if not tensors:
        raise KernelError("stack(): expected a non-empty list of tensors")
    shape = tensors[0].shape
    for i, t in enumerate(tensors):
        if t.shape != shape:
            raise KernelError(
                f"stack(): all tensors must have the same shape; tensor 0 is {list(shape)} "
                f"but tensor {i} is {list(t.shape)}"
            )
    n = len(shape) + 1
    if not -n <= dim < n:
        raise KernelError(
            f"stack(): dim {dim} is out of range for tensors of rank {n - 1} "
            f"(expected [{-n}, {n - 1}])"
        )
    a = dim % n
    out = fit(out, shape[:a] + (len(tensors),) + shape[a:])
    if len(tensors) > 16 and all(t.dtype == out.dtype for t in tensors):
        np.stack(tensors, axis=a, out=out)
        return out
    lead = (slice(None),) * a
    for i, t in enumerate(tensors):
        assign(out[lead + (i, ...)], t)
    return out


def _split_into(self, a, sizes, outs, op):
    if len(outs) != len(sizes):
        raise KernelError(
            f"{op}: the input splits into {len(sizes)} tensors along dimension {a} "
            f"but {len(outs)} outputs were given"
        )
    lead = (slice(None),) * a
    result = []
    offset = 0
    for size, o in zip(sizes, outs, strict=True):
        src = self[lead + (slice(offset, offset + size),)]
        o = fit(o, src.shape)
        assign(o, src)
        result.append(o)
        offset += size
    return result


def split_parts(self: np.ndarray, split_size: int, dim: int) -> tuple[int, list[int]]:
    """split's axis and the sizes of its parts (the argument check, see shape.checks)."""
    _require_dims(self, "split")
    a = _axis(self.ndim, dim)
    n = self.shape[a]
    if isinstance(split_size, bool) or not isinstance(split_size, int):
        raise KernelError(f"split(): split_size must be an int, got {split_size!r}")
    if split_size < 0:
        raise KernelError(f"split(): split_size must be non-negative, got {split_size}")
    if split_size == 0:
        if n != 0:
            raise KernelError(
                f"split(): split_size can only be 0 if the dimension size is 0, but got size {n}"
            )
        return a, [0]
    count = max(-(-n // split_size), 1)
    return a, [split_size] * (count - 1) + [n - split_size * (count - 1)]


def split_with_sizes_parts(self: np.ndarray, split_sizes: Any, dim: int) -> tuple[int, list[int]]:
    """split_with_sizes's axis and the sizes of its parts (the argument check)."""
    _require_dims(self, "split_with_sizes")
    a = _axis(self.ndim, dim)
    n = self.shape[a]
    if any(isinstance(s, bool) or not isinstance(s, int) for s in split_sizes):
        raise KernelError(f"split_with_sizes(): split sizes {list(split_sizes)} must be ints")
    if any(s < 0 for s in split_sizes):
        raise KernelError(f"split_with_sizes(): split sizes {list(split_sizes)} must be >= 0")
    if sum(split_sizes) != n:
        raise KernelError(
            f"split_with_sizes(): split sizes {list(split_sizes)} must sum to the dimension "
            f"size {n}"
        )
    return a, list(split_sizes)


@kernel("aten::split_copy.Tensor_out")
def split_copy(self, split_size, dim, out):
    a, sizes = split_parts(self, split_size, dim)
    return _split_into(self, a, sizes, out, "split_copy")


@kernel("aten::split_with_sizes_copy.out")
def split_with_sizes_copy(self, split_sizes, dim, out):
    a, sizes = split_with_sizes_parts(self, split_sizes, dim)
    return _split_into(self, a, sizes, out, "split_with_sizes_copy")


@kernel("aten::unbind_copy.int_out")
def unbind_copy(self, dim, out):
    _require_dims(self, "unbind")
    a = _axis(self.ndim, dim)
    n = self.shape[a]
    if len(out) != n:
        raise KernelError(
            f"unbind_copy: dimension {a} has size {n} but {len(out)} outputs were given"
        )
    lead = (slice(None),) * a
    result = []
    for i, o in enumerate(out):
        src = self[lead + (i,)]
        o = fit(o, src.shape)
        assign(o, src)
        result.append(o)
    return result


# --------------------------------------------------------------------------
# Rearrangements
# --------------------------------------------------------------------------


@kernel("aten::flip.out")
def flip(self, dims, out):
    axes = [_axis(self.ndim, d) for d in dims]
    if len(set(axes)) != len(axes):
        raise KernelError(f"flip(): dims {list(dims)} contain a dimension more than once")
    out = fit(out, self.shape)
    if self.ndim == 0:
        assign(out, self)
        return out
    index = [slice(None)] * self.ndim
    for a in axes:
        index[a] = slice(None, None, -1)
    assign(out, self[tuple(index)])
    return out


@kernel("aten::roll.out")
def roll(self, shifts, dims, out):
    out = fit(out, self.shape)
    if not dims:
        if len(shifts) != 1:
            raise KernelError(
                f"roll(): without dims, shifts must have one entry, got {list(shifts)}"
            )
        if self.size:
            assign(out, np.roll(self.reshape(-1), shifts[0]).reshape(self.shape))
        return out
    if len(shifts) != len(dims):
        raise KernelError(
            f"roll(): shifts {list(shifts)} and dims {list(dims)} must have the same length"
        )
    if self.ndim == 0:
        raise KernelError(f"roll(): dims {list(dims)} given but the tensor has no dimensions")
    axes = [_axis(self.ndim, d) for d in dims]
    if self.size == 0:
        assign(out, self)
        return out
    if len(axes) == 1:
        a = axes[0]
        n = self.shape[a]
        s = shifts[0] % n
        lead = (slice(None),) * a
        if s == 0:
            assign(out, self)
        else:
            assign(out[lead + (slice(s, None),)], self[lead + (slice(None, n - s),)])
            assign(out[lead + (slice(None, s),)], self[lead + (slice(n - s, None),)])
        return out
    assign(out, np.roll(self, tuple(shifts), tuple(axes)))
    return out


@kernel("aten::repeat.out")
def repeat(self, repeats, out):
    out = bounded_fit(out, repeat_shape(self, repeats), "repeat")
    if out.size == 0:
        return out
    shape = (1,) * (len(repeats) - self.ndim) + self.shape
    # Split each output dimension d into (repeats[d], shape[d]) -- always a
    # view, whatever out's strides -- and broadcast the input over it.
    split = tuple(x for pair in zip(repeats, shape, strict=True) for x in pair)
    view = out.reshape(split, copy=False)
    src = self.reshape(tuple(x for s in shape for x in (1, s)))
    assign(view, src)
    return out


def repeat_shape(self: np.ndarray, repeats: Sequence[int]) -> tuple[int, ...]:
    """The result shape of repeat, or KernelError (see kernels.shape.checks)."""
    k, n = len(repeats), self.ndim
    if k < n:
        raise KernelError(
            f"repeat(): number of repeat dims ({k}) cannot be smaller than the number of "
            f"dimensions of the tensor ({n})"
        )
    for r in repeats:
        if r < 0:
            raise KernelError(f"repeat(): repeats {list(repeats)} must be non-negative")
    shape = (1,) * (k - n) + self.shape
    return tuple(r * s for r, s in zip(repeats, shape, strict=True))


@kernel("aten::repeat_interleave.Tensor_out")
def repeat_interleave(repeats, output_size, out):
    if repeats.dtype not in (np.int32, np.int64):
        raise KernelError(
            f"repeat_interleave(): repeats must be int32 or int64, got {repeats.dtype}"
        )
    if repeats.ndim != 1:
        raise KernelError(
            f"repeat_interleave(): repeats must be 1-D, got shape {list(repeats.shape)}"
        )
    if repeats.size and repeats.min() < 0:
        raise KernelError("repeat_interleave(): repeats cannot be negative")
    total = int(repeats.sum())
    if output_size is not None and output_size != total:
        raise KernelError(
            f"repeat_interleave(): output_size {output_size} must equal repeats.sum() = {total}"
        )
    out = bounded_fit(out, (total,), "repeat_interleave")
    assign(out, np.repeat(np.arange(repeats.shape[0], dtype=out.dtype), repeats))
    return out


def _split_axis(a: np.ndarray, axis: int, sizes: tuple[int, ...]) -> np.ndarray:
    """``a`` with dimension ``axis`` split into ``sizes`` (a view for any strides)."""
    axis %= a.ndim
    return a.reshape(a.shape[:axis] + sizes + a.shape[axis + 1 :], copy=False)


def _check_pixel_args(self, r: int, op: str, what: str) -> None:
    if self.ndim < 3:
        raise KernelError(f"{op} expects input to have at least 3 dimensions, but got {self.ndim}")
    if r <= 0:
        raise KernelError(f"{op} expects a positive {what}, but got {r}")


# Both pixel shuffles copy r*r strided planes: much faster than one copy
# through a 6-D transposed view, whose innermost dimension is only r long.


@kernel("aten::pixel_shuffle.out")
def pixel_shuffle(self, upscale_factor, out):
    r = upscale_factor
    _check_pixel_args(self, r, "pixel_shuffle", "upscale_factor")
    *batch, c, h, w = self.shape
    if c % (r * r):
        raise KernelError(
            f"pixel_shuffle expects its input's 'channel' dimension ({c}) to be divisible by "
            f"the square of upscale_factor ({r * r})"
        )
    oc = c // (r * r)
    out = fit(out, (*batch, oc, h * r, w * r))
    if out.size == 0:
        return out
    src = _split_axis(self, -3, (oc, r, r))  # (*, oc, r, r, h, w)
    for i in range(r):
        for j in range(r):
            assign(out[..., i::r, j::r], src[..., i, j, :, :])
    return out


@kernel("aten::pixel_unshuffle.out")
def pixel_unshuffle(self, downscale_factor, out):
    r = downscale_factor
    _check_pixel_args(self, r, "pixel_unshuffle", "downscale_factor")
    *batch, c, h, w = self.shape
    if h % r or w % r:
        raise KernelError(
            f"pixel_unshuffle expects height ({h}) and width ({w}) to be divisible by "
            f"downscale_factor ({r})"
        )
    out = fit(out, (*batch, c * r * r, h // r, w // r))
    if out.size == 0:
        return out
    dst = _split_axis(out, -3, (c, r, r))  # (*, c, r, r, h / r, w / r)
    for i in range(r):
        for j in range(r):
            assign(dst[..., i, j, :, :], self[..., i::r, j::r])
    return out


_TRIL_MASKS: dict[tuple[int, int, int], np.ndarray] = {}


@kernel("aten::tril.out")
def tril(self, diagonal, out):
    if self.ndim < 2:
        raise KernelError(f"tril: input tensor must have at least 2 dimensions, got {self.ndim}")
    out = fit(out, self.shape)
    h, w = self.shape[-2:]
    key = (h, w, diagonal)
    upper = _TRIL_MASKS.get(key)
    if upper is None:
        if len(_TRIL_MASKS) > 256:
            _TRIL_MASKS.clear()
        upper = _TRIL_MASKS[key] = ~np.tri(h, w, diagonal, dtype=np.bool_)
    assign(out, self)
    np.copyto(out, out.dtype.type(0), where=upper)
    return out


@kernel("aten::diagonal_copy.out")
def diagonal_copy(self, offset, dim1, dim2, out):
    if self.ndim < 2:
        raise KernelError(f"diagonal: input must have at least 2 dimensions, got {self.ndim}")
    a = _axis(self.ndim, dim1, "dim1")
    b = _axis(self.ndim, dim2, "dim2")
    if a == b:
        raise KernelError(f"diagonal dimensions cannot be identical: {dim1}, {dim2}")
    src = np.diagonal(self, offset, a, b)
    out = fit(out, src.shape)
    assign(out, src)
    return out


@kernel("aten::unfold_copy.out")
def unfold_copy(self, dimension, size, step, out):
    x = self.reshape(1) if self.ndim == 0 else self
    a = _axis(self.ndim, dimension, "dimension")
    n = x.shape[a]
    if size < 0:
        raise KernelError(f"unfold(): size is {size} but must be >= 0")
    if size > n:
        raise KernelError(
            f"unfold(): maximum size for tensor at dimension {a} is {n} but size is {size}"
        )
    if step <= 0:
        raise KernelError(f"unfold(): step is {step} but must be > 0")
    count = (n - size) // step + 1
    if self.ndim == 0:
        shape, strides = (size,), (x.strides[0],)
    else:
        shape = x.shape[:a] + (count,) + x.shape[a + 1 :] + (size,)
        st = x.strides
        strides = st[:a] + (st[a] * step,) + st[a + 1 :] + (st[a],)
    out = fit(out, shape)
    if out.size:
        assign(out, as_strided(x, shape, strides, writeable=False))
    return out


@kernel("aten::as_strided_copy.out")
def as_strided_copy(self, size, stride, storage_offset, out):
    size = check_sizes(size)
    if len(stride) != len(size):
        raise KernelError(
            f"as_strided: size {list(size)} and stride {list(stride)} must have the same length"
        )
    if any(s < 0 for s in stride):
        raise KernelError(f"as_strided: negative strides are not supported: {list(stride)}")
    offset = 0 if storage_offset is None else storage_offset
    if offset < 0:
        raise KernelError(f"as_strided: storage_offset must be >= 0, got {offset}")
    out = fit(out, size)
    if out.size == 0:
        return out
    flat = self.reshape(-1)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    if last >= flat.size:
        raise KernelError(
            f"as_strided: size {list(size)}, stride {list(stride)} and storage offset {offset} "
            f"reach element {last}, beyond the input's {flat.size} elements"
        )
    item = flat.strides[0]
    src = as_strided(flat[offset:], size, tuple(s * item for s in stride), writeable=False)
    assign(out, src)
    return out


_REAL_OF = {
    np.dtype(np.complex64): np.dtype(np.float32),
    np.dtype(np.complex128): np.dtype(np.float64),
}


@kernel("aten::view_as_real_copy.out")
def view_as_real_copy(self, out):
    real = _REAL_OF.get(self.dtype)
    if real is None:
        raise KernelError(f"view_as_real is only supported for complex tensors, got {self.dtype}")
    out = fit(out, self.shape + (2,))
    if self.ndim and self.flags.c_contiguous:
        assign(out, self.view(real).reshape(out.shape))
    else:
        assign(out[..., 0], self.real)
        assign(out[..., 1], self.imag)
    return out
