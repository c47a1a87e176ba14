"""Reductions: sum, mean, prod, var, amax/amin, max/min, argmax/argmin, any,
cumsum, topk, and the p-norm distances cdist/pdist.

Conventions shared by the reductions:

* A dim list of ``None`` (or, for every reduction except ``any.dims``, an
  empty list) reduces every dimension. Negative dims count from the end and a
  dim named twice is an error, as in torch. A 0-dim tensor accepts dims 0 and
  -1 and reduces over nothing.
* The computation dtype follows torch: sum/prod/cumsum of integers and bools
  accumulate in int64 unless ``dtype`` is given; an explicit ``dtype`` casts
  the input first; float16 accumulates in float32 and is rounded once.
* The result is written into the planned output (``out=`` of the numpy
  reduction when the output has the computation dtype, a cast otherwise).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from pyexecutorch.kernels.common import broadcast_shape, fit, normalize_dim, quiet_fp
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.schema.scalar_type import dtype_of

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)


# ---------------------------------------------------------------------------
# helpers


@lru_cache(maxsize=1024, typed=True)  # (typed: keepdim 1 is refused, True is not)
def _plan(
    shape: tuple[int, ...], dim: tuple[int, ...] | None, keepdim: bool, empty_is_all: bool
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Axes to reduce, the result shape and the number of reduced elements; refuses a
    keepdim that is not a bool and dims that are not ints (the family's argument check,
    see kernels.reduce.checks)."""
    if not isinstance(keepdim, bool):
        raise KernelError(f"keepdim must be a bool, got {keepdim!r}")
    ndim = len(shape)
    if dim is None or (empty_is_all and len(dim) == 0):
        axes = tuple(range(ndim))
    else:
        if any(isinstance(d, bool) or not isinstance(d, int) for d in dim):
            raise KernelError(f"dims must be ints, got {list(dim)}")
        axes = tuple(normalize_dim(d, ndim) for d in dim)
        if len(set(axes)) != len(axes):
            seen: set[int] = set()
            for a in axes:
                if a in seen:
                    raise KernelError(f"dim {a} appears multiple times in the list of dims {dim}")
                seen.add(a)
        if ndim == 0:
            axes = ()
    if keepdim:
        out_shape = tuple(1 if i in axes else s for i, s in enumerate(shape))
    else:
        out_shape = tuple(s for i, s in enumerate(shape) if i not in axes)
    count = math.prod(shape[a] for a in axes)
    return axes, out_shape, count


def _dims(dim: object) -> tuple[int, ...] | None:
    if dim is None:
        return None
    if isinstance(dim, int):
        return (dim,)
    if not isinstance(dim, (tuple, list)):
        raise KernelError(f"dim must be an int or a list of ints, got {dim!r}")
    return tuple(dim)


def _requested(dtype: int | None, name: str) -> np.dtype | None:
    if dtype is None:
        return None
    if isinstance(dtype, bool) or not isinstance(dtype, int):
        raise KernelError(f"{name}: dtype must be a scalar type code or None, got {dtype!r}")
    try:
        return dtype_of(dtype)
    except TypeError as e:
        raise KernelError(f"{name}: dtype: {e}") from None


def out_dtype(out: np.ndarray, dt: np.dtype | None, name: str) -> None:
    """An explicit ``dtype`` is the out tensor's dtype (torch and the official kernels
    refuse any other: the result would be computed in one dtype and stored in another)."""
    if dt is not None and out.dtype != dt:
        raise KernelError(f"{name}: dtype {dt} was asked for, but the out tensor is {out.dtype}")


def axis_of(dim: object, ndim: int, name: str) -> int:
    """``dim`` (an int) as a non-negative axis, else KernelError."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise KernelError(f"{name}: dim must be an int, got {dim!r}")
    return normalize_dim(dim, ndim)


def _check_numpy_dtype(a: np.ndarray, name: str) -> None:
    if a.dtype.kind not in "biufc":
        raise KernelError(f"{name}: unsupported input dtype {a.dtype}")


def _source(a: np.ndarray, dt: np.dtype) -> tuple[np.ndarray, np.dtype]:
    """The input as torch sees it for a computation in ``dt``, and the accumulator dtype."""
    if dt == _F16:
        return (a if a.dtype == _F16 else a.astype(_F16)), _F32
    if a.dtype.kind == "c" and dt.kind != "c":
        raise KernelError(f"cannot reduce a complex input of dtype {a.dtype} into {dt}")
    return a, dt


def sequential_sum(a: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """The sum of ``a`` over ``axes``, adding the reduced values in row-major order one
    after the other in ``a``'s dtype (a running sum: ``cumsum``'s last value, plus +0.0 as
    a sum from zero has: sums of -0.0 are +0.0), with the kept axes first in their order."""
    kept = [i for i in range(a.ndim) if i not in axes]
    moved = np.moveaxis(a, [*kept, *sorted(axes)], range(a.ndim))
    rows = moved.reshape(*(a.shape[i] for i in kept), math.prod(a.shape[i] for i in axes))
    if rows.shape[-1] == 0:
        return np.zeros(rows.shape[:-1], a.dtype)
    return np.cumsum(rows, axis=-1, dtype=a.dtype)[..., -1] + a.dtype.type(0)


def _promoted(a: np.ndarray, dtype: int | None, name: str) -> np.dtype:
    """torch's result dtype of sum/prod/cumsum: integers and bools widen to int64."""
    dt = _requested(dtype, name)
    if dt is not None:
        return dt
    if a.dtype.kind in "biu":
        return _I64
    return a.dtype


def _store(out: np.ndarray, result: np.ndarray) -> np.ndarray:
    np.copyto(out, result, casting="unsafe")
    return out


def _ufunc_reduce(
    ufunc: np.ufunc,
    src: np.ndarray,
    axes: tuple[int, ...],
    keepdim: bool,
    acc: np.dtype,
    out: np.ndarray,
) -> np.ndarray:
    if out.dtype == acc:
        ufunc.reduce(src, axis=axes, dtype=acc, out=out, keepdims=keepdim)
        return out
    return _store(out, ufunc.reduce(src, axis=axes, dtype=acc, keepdims=keepdim))


# ---------------------------------------------------------------------------
# sum, prod, mean


@kernel("aten::sum.IntList_out")
def sum_out(self, dim, keepdim, dtype, out):
    axes, shape, _ = _plan(self.shape, _dims(dim), keepdim, True)
    out = fit(out, shape)
    out_dtype(out, _requested(dtype, "sum"), "sum")
    src, acc = _source(self, _promoted(self, dtype, "sum"))
    return _ufunc_reduce(np.add, src, axes, keepdim, acc, out)


@kernel("aten::prod.out")
def prod_out(self, dtype, out):
    axes, shape, _ = _plan(self.shape, None, False, True)
    out = fit(out, shape)
    out_dtype(out, _requested(dtype, "prod"), "prod")
    src, acc = _source(self, _promoted(self, dtype, "prod"))
    return _ufunc_reduce(np.multiply, src, axes, False, acc, out)


@kernel("aten::prod.int_out")
def prod_int_out(self, dim, keepdim, dtype, out):
    axes, shape, _ = _plan(self.shape, (dim,), keepdim, True)
    out = fit(out, shape)
    out_dtype(out, _requested(dtype, "prod"), "prod")
    src, acc = _source(self, _promoted(self, dtype, "prod"))
    return _ufunc_reduce(np.multiply, src, axes, keepdim, acc, out)


def _mean_dtype(self: np.ndarray, dtype: int | None) -> np.dtype:
    dt = _requested(dtype, "mean")
    if dt is None:
        if self.dtype.kind not in "fc":
            raise KernelError(
                "mean(): could not infer output dtype. Input dtype must be either a floating "
                f"point or complex dtype. Got: {self.dtype}"
            )
        return self.dtype
    if dt.kind not in "fc":
        raise KernelError(
            "mean(): could not infer output dtype. Optional dtype must be either a floating "
            f"point or complex dtype. Got: {dt}"
        )
    return dt


def _mean(self, dim, keepdim, dtype, out):
    dt = _mean_dtype(self, dtype)
    axes, shape, count = _plan(self.shape, _dims(dim), keepdim, True)
    out = fit(out, shape)
    out_dtype(out, None if dtype is None else dt, "mean")
    if count == 0:
        out.fill(np.nan)
        return out
    src, acc = _source(self, dt)
    if out.dtype == acc and src.dtype == acc and acc.kind == "f":
        # The official portable mean adds the reduced values one after the other in the
        # output dtype, then divides: so do we, bit for bit (numpy's reduce is pairwise).
        np.true_divide(sequential_sum(src, axes).reshape(out.shape), count, out=out)
        return out
    if out.dtype == acc:
        np.add.reduce(src, axis=axes, dtype=acc, out=out, keepdims=keepdim)
        np.true_divide(out, count, out=out)
        return out
    total = np.add.reduce(src, axis=axes, dtype=acc, keepdims=keepdim)
    return _store(out, np.true_divide(total, count))


@kernel("aten::mean.out")
def mean_out(self, dim, keepdim, dtype, out):
    return _mean(self, dim, keepdim, dtype, out)


@kernel("aten::mean.dtype_out")
def mean_dtype_out(self, dtype, out):
    return _mean(self, None, False, dtype, out)


# ---------------------------------------------------------------------------
# var, var_mean


def var_arguments(
    self: np.ndarray, dim: object, correction: object, keepdim: object
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(reduced axes, result shape, reduced count) of var/var_mean, or KernelError (the
    family's argument check, see kernels.reduce.checks)."""
    if self.dtype.kind not in "fc":
        raise KernelError(
            f"var: std and var only support floating point and complex dtypes, got {self.dtype}"
        )
    if correction is not None and not isinstance(correction, (int, float)):
        raise KernelError(f"var: correction must be a number or None, got {correction!r}")
    return _plan(self.shape, _dims(dim), keepdim, True)


def _var_parts(self, dim, correction, keepdim):
    axes, shape, count = var_arguments(self, dim, correction, keepdim)
    if self.ndim == 0:
        self, axes = self.reshape(1), (0,)
    correction = 1 if correction is None else correction
    acc = _F32 if self.dtype == _F16 else self.dtype
    divisor = max(count - correction, 0)
    with quiet_fp():
        mean = np.add.reduce(self, axis=axes, dtype=acc, keepdims=True)
        np.true_divide(mean, count, out=mean)
        dev = np.subtract(self, mean, dtype=acc)
        if dev.dtype.kind == "c":
            sq = np.square(dev.real)
            sq += np.square(dev.imag)
        else:
            sq = np.multiply(dev, dev, out=dev)
        var = np.add.reduce(sq, axis=axes, keepdims=True)
        np.true_divide(var, divisor, out=var)
    return shape, var.reshape(shape), mean.reshape(shape)


@kernel("aten::var.out")
def var_out(self, dim, unbiased, keepdim, out):
    shape, var, _ = _var_parts(self, dim, 1 if unbiased else 0, keepdim)
    return _store(fit(out, shape), var)


@kernel("aten::var.correction_out")
def var_correction_out(self, dim, correction, keepdim, out):
    shape, var, _ = _var_parts(self, dim, correction, keepdim)
    return _store(fit(out, shape), var)


@kernel("aten::var_mean.correction_out", n_outs=2)
def var_mean_correction_out(self, dim, correction, keepdim, out0, out1):
    shape, var, mean = _var_parts(self, dim, correction, keepdim)
    return _store(fit(out0, shape), var), _store(fit(out1, shape), mean)


# ---------------------------------------------------------------------------
# amax, amin, max, min, argmax, argmin


def _check_nonempty(self: np.ndarray, axes: tuple[int, ...], all_dims: bool, name: str) -> None:
    if self.size:
        return
    if all_dims:
        raise KernelError(
            f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument."
        )
    for a in axes:
        if self.shape[a] == 0:
            raise KernelError(f"{name}(): Expected reduction dim {a} to have non-zero size.")


def _extreme(ufunc, name, self, dim, keepdim, out):
    _check_numpy_dtype(self, name)
    dims = _dims(dim)
    axes, shape, _ = _plan(self.shape, dims, keepdim, True)
    _check_nonempty(self, axes, not dims, name)
    out = fit(out, shape)
    return _ufunc_reduce(ufunc, self, axes, keepdim, self.dtype, out)


@kernel("aten::amax.out")
def amax_out(self, dim, keepdim, out):
    return _extreme(np.maximum, "amax", self, dim, keepdim, out)


@kernel("aten::amin.out")
def amin_out(self, dim, keepdim, out):
    return _extreme(np.minimum, "amin", self, dim, keepdim, out)


@kernel("aten::max.unary_out")
def max_unary_out(self, out):
    return _extreme(np.maximum, "max", self, None, False, out)


@kernel("aten::min.unary_out")
def min_unary_out(self, out):
    return _extreme(np.minimum, "min", self, None, False, out)


def _arg_into(argfn, self, axis, keepdim, out):
    if out.dtype == _I64:
        argfn(self, axis=axis, out=out, keepdims=keepdim)
        return out
    return _store(out, argfn(self, axis=axis, keepdims=keepdim))


def _arg(argfn, name, self, dim, keepdim, out):
    _check_numpy_dtype(self, name)
    if self.dtype == _BOOL:
        raise KernelError(f"{name}(): does not support bool input")
    if dim is None:
        _check_nonempty(self, (), True, name)
        shape = (1,) * self.ndim if keepdim else ()
        out = fit(out, shape)
        if self.ndim == 0:
            out[...] = 0
            return out
        return _arg_into(argfn, self, None, keepdim, out)
    axes, shape, _ = _plan(self.shape, (dim,), keepdim, True)
    _check_nonempty(self, axes, False, name)
    out = fit(out, shape)
    if self.ndim == 0:
        out[...] = 0
        return out
    return _arg_into(argfn, self, axes[0], keepdim, out)


@kernel("aten::argmax.out")
def argmax_out(self, dim, keepdim, out):
    return _arg(np.argmax, "argmax", self, dim, keepdim, out)


@kernel("aten::argmin.out")
def argmin_out(self, dim, keepdim, out):
    return _arg(np.argmin, "argmin", self, dim, keepdim, out)


def _extreme_dim(ufunc, argfn, name, self, dim, keepdim, values, indices):
    _check_numpy_dtype(self, name)
    axes, shape, _ = _plan(self.shape, (dim,), keepdim, True)
    _check_nonempty(self, axes, False, name)
    values = fit(values, shape)
    indices = fit(indices, shape)
    if self.ndim == 0:
        values[...] = self
        indices[...] = 0
        return values, indices
    _ufunc_reduce(ufunc, self, axes, keepdim, self.dtype, values)
    _arg_into(argfn, self, axes[0], keepdim, indices)
    return values, indices


@kernel("aten::max.dim_max", n_outs=2)
def max_dim_max(self, dim, keepdim, max, max_values):
    return _extreme_dim(np.maximum, np.argmax, "max", self, dim, keepdim, max, max_values)


@kernel("aten::min.dim_min", n_outs=2)
def min_dim_min(self, dim, keepdim, min, min_indices):
    return _extreme_dim(np.minimum, np.argmin, "min", self, dim, keepdim, min, min_indices)


# ---------------------------------------------------------------------------
# any


def _any(self, dims, keepdim, empty_is_all, out):
    _check_numpy_dtype(self, "any")
    axes, shape, _ = _plan(self.shape, dims, keepdim, empty_is_all)
    out = fit(out, shape)
    if out.dtype == _BOOL:
        np.logical_or.reduce(self, axis=axes, out=out, keepdims=keepdim)
        return out
    return _store(out, np.logical_or.reduce(self, axis=axes, keepdims=keepdim))


@kernel("aten::any.all_out")
def any_all_out(self, out):
    return _any(self, None, False, True, out)


@kernel("aten::any.dims_out")
def any_dims_out(self, dim, keepdim, out):
    # Unlike sum, an empty dim list reduces nothing (torch.any(x, dim=()) is x != 0).
    return _any(self, _dims(dim), keepdim, False, out)


@kernel("aten::any.out")
def any_out(self, dim, keepdim, out):
    return _any(self, (dim,), keepdim, True, out)


# ---------------------------------------------------------------------------
# cumsum


@kernel("aten::cumsum.out")
def cumsum_out(self, dim, dtype, out):
    _check_numpy_dtype(self, "cumsum")
    axis = axis_of(dim, self.ndim, "cumsum")
    out = fit(out, self.shape)
    out_dtype(out, _requested(dtype, "cumsum"), "cumsum")
    src, acc = _source(self, _promoted(self, dtype, "cumsum"))
    if self.ndim == 0:
        np.copyto(out, src, casting="unsafe")
        return out
    if out.dtype == acc:
        np.cumsum(src, axis=axis, dtype=acc, out=out)
        return out
    return _store(out, np.cumsum(src, axis=axis, dtype=acc))


# ---------------------------------------------------------------------------
# topk


def topk_arguments(self: np.ndarray, k: object, dim: object) -> tuple[int, tuple[int, ...]]:
    """(axis, result shape) of topk, or KernelError (see kernels.reduce.checks)."""
    _check_numpy_dtype(self, "topk")
    if self.dtype == _BOOL:
        raise KernelError("topk does not support bool dtypes")
    axis = axis_of(dim, self.ndim, "topk")
    size = self.shape[axis] if self.ndim else 1
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= size:
        raise KernelError(
            f"topk: selected index k out of range: k={k!r} for dimension {dim} of size {size}"
        )
    if self.ndim == 0:
        return axis, ()
    return axis, self.shape[:axis] + (k,) + self.shape[axis + 1 :]


@kernel("aten::topk.values", n_outs=2)
def topk_values(self, k, dim, largest, sorted, values, indices):
    """Top ``k`` along ``dim``; NaN counts as larger than every number (torch).

    Values are always returned sorted (also valid for ``sorted=False``).
    Equal values come in ascending index order: torch's own order for ties
    is whatever its unstable partial sort leaves, so any order is valid.
    """
    axis, shape = topk_arguments(self, k, dim)
    size = self.shape[axis] if self.ndim else 1
    if self.ndim == 0:
        values = fit(values, ())
        indices = fit(indices, ())
        values[...] = self
        indices[...] = 0
        return values, indices
    values = fit(values, shape)
    indices = fit(indices, shape)
    if k == 0 or values.size == 0:
        return values, indices
    if largest:
        # Descending with ties in ascending index order: a stable ascending
        # sort of the reversed row, read backwards.
        order = np.argsort(np.flip(self, axis), axis=axis, kind="stable")
        order = np.flip(order, axis)
        order = order[(slice(None),) * axis + (slice(0, k),)]
        idx = np.subtract(size - 1, order, out=order)
    else:
        idx = np.argsort(self, axis=axis, kind="stable")
        idx = idx[(slice(None),) * axis + (slice(0, k),)]
    np.copyto(indices, idx, casting="unsafe")
    np.copyto(values, np.take_along_axis(self, idx, axis=axis), casting="unsafe")
    return values, indices


# ---------------------------------------------------------------------------
# cdist, pdist


def _pnorm(diff: np.ndarray, p: float, axis: int = -1) -> np.ndarray:
    """The p-norm of ``diff`` (already absolute values) along ``axis``; consumes ``diff``."""
    if p == 0:
        return np.add.reduce(diff != 0, axis=axis, dtype=diff.dtype)
    if p == 1:
        return np.add.reduce(diff, axis=axis)
    if p == 2:
        np.multiply(diff, diff, out=diff)
        return np.sqrt(np.add.reduce(diff, axis=axis))
    if math.isinf(p):
        if diff.shape[axis] == 0:
            return np.zeros(diff.shape[:axis] + diff.shape[axis:][1:], dtype=diff.dtype)
        return np.maximum.reduce(diff, axis=axis)
    np.power(diff, diff.dtype.type(p), out=diff)
    return np.power(np.add.reduce(diff, axis=axis), diff.dtype.type(1.0 / p))


def _check_distance_dtype(a: np.ndarray, name: str, what: str) -> None:
    if a.dtype.kind != "f" or a.dtype == _F16:
        raise KernelError(f"{name} only supports float32 and float64 inputs, {what} got: {a.dtype}")


@kernel("aten::_cdist_forward.out")
def cdist_forward_out(x1, x2, p, compute_mode, out):
    _check_distance_dtype(x1, "cdist", "X1")
    _check_distance_dtype(x2, "cdist", "X2")
    if x1.dtype != x2.dtype:
        raise KernelError(
            f"cdist: X1 and X2 must have the same dtype, got {x1.dtype} and {x2.dtype}"
        )
    if x1.ndim < 2 or x2.ndim < 2:
        raise KernelError(
            f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D, X2 got: {x2.ndim}D"
        )
    if x1.shape[-1] != x2.shape[-1]:
        raise KernelError(
            "cdist: X1 and X2 must have the same number of columns. "
            f"X1: {x1.shape[-1]} X2: {x2.shape[-1]}"
        )
    if p < 0:
        raise KernelError(f"cdist only supports non-negative p values, got {p}")
    if compute_mode not in (None, 0, 1, 2):
        raise KernelError(f"cdist: compute_mode must be None, 0, 1 or 2, got {compute_mode}")
    batch = broadcast_shape(x1.shape[:-2], x2.shape[:-2])
    r1, r2 = x1.shape[-2], x2.shape[-2]
    out = fit(out, batch + (r1, r2))
    if out.size == 0:
        return out
    use_mm = p == 2 and (compute_mode == 1 or (not compute_mode and (r1 > 25 or r2 > 25)))
    if use_mm:
        # torch's matrix-product form: |a|^2 + |b|^2 - 2 a.b, clamped before sqrt.
        sq1 = np.einsum("...i,...i->...", x1, x1)[..., :, None]
        sq2 = np.einsum("...i,...i->...", x2, x2)[..., None, :]
        d = np.matmul(x1, np.swapaxes(x2, -1, -2))
        d *= -2
        d += sq1
        d += sq2
        np.maximum(d, x1.dtype.type(1e-30), out=d)
        np.sqrt(d, out=d)
        np.copyto(out, d)
        return out
    diff = np.subtract(x1[..., :, None, :], x2[..., None, :, :])
    np.abs(diff, out=diff)
    np.copyto(out, _pnorm(diff, p))
    return out


@kernel("aten::_pdist_forward.out")
def pdist_forward_out(self, p, out):
    _check_distance_dtype(self, "pdist", "input")
    if self.ndim != 2:
        raise KernelError(f"pdist only supports 2D tensors, got: {self.ndim}D")
    if p < 0:
        raise KernelError(f"pdist only supports non-negative p values, got {p}")
    n = self.shape[0]
    out = fit(out, (n * (n - 1) // 2,))
    if out.size == 0:
        return out
    i, j = np.triu_indices(n, 1)
    diff = np.subtract(self[i], self[j])
    np.abs(diff, out=diff)
    np.copyto(out, _pnorm(diff, p))
    return out
