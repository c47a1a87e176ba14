"""The reduction family's argument checks (see :mod:`pyexecutorch.kernels.checks`): the
reduced dims, keepdim and dtype, through the functions the numpy kernels call
(:func:`~pyexecutorch.kernels.reduce.reduce._plan` and the dtype rules), and so the
shape of each output."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyexecutorch.kernels.checks import argument_check, typed
from pyexecutorch.kernels.reduce.reduce import (
    _BOOL,
    _check_nonempty,
    _check_numpy_dtype,
    _dims,
    _mean_dtype,
    _plan,
    _requested,
    axis_of,
    topk_arguments,
    var_arguments,
)
from pyexecutorch.kernels.registry import KernelError

Shape = tuple[int, ...]


def _input(x: Any, name: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise KernelError(f"{name}: the input must be a tensor, got {type(x).__name__}")
    _check_numpy_dtype(x, name)
    return x


@argument_check("aten::sum.IntList_out")
def check_sum(x: Any, dim: Any, keepdim: Any, dtype: Any) -> tuple[Shape]:
    dt = _requested(dtype, "sum")
    return (typed(_plan(_input(x, "sum").shape, _dims(dim), keepdim, True)[1], dt),)


@argument_check("aten::mean.out")
def check_mean(x: Any, dim: Any, keepdim: Any, dtype: Any) -> tuple[Shape]:
    dt = _mean_dtype(_input(x, "mean"), dtype)
    return (typed(_plan(x.shape, _dims(dim), keepdim, True)[1], None if dtype is None else dt),)


@argument_check("aten::mean.dtype_out")
def check_mean_all(x: Any, dtype: Any) -> tuple[Shape]:
    return check_mean(x, None, False, dtype)


@argument_check("aten::any.out")
def check_any(x: Any, dim: Any, keepdim: Any) -> tuple[Shape]:
    return (_plan(_input(x, "any").shape, (dim,), keepdim, True)[1],)


@argument_check("aten::any.dims_out")
def check_any_dims(x: Any, dim: Any, keepdim: Any) -> tuple[Shape]:
    return (_plan(_input(x, "any").shape, _dims(dim), keepdim, False)[1],)


@argument_check("aten::any.all_out")
def check_any_all(x: Any) -> tuple[Shape]:
    return (_plan(_input(x, "any").shape, None, False, True)[1],)


def _one_dim(x: Any, dim: Any, keepdim: Any, name: str, optional: bool) -> Shape:
    """The result shape of a reduction over one dim (every one where ``dim`` is None)."""
    x = _input(x, name)
    if dim is None and optional:
        if not isinstance(keepdim, bool):
            raise KernelError(f"keepdim must be a bool, got {keepdim!r}")
        _check_nonempty(x, (), True, name)
        return (1,) * x.ndim if keepdim else ()
    axes, shape, _ = _plan(x.shape, (dim,), keepdim, True)
    _check_nonempty(x, axes, False, name)
    return shape


@argument_check("aten::argmax.out", "aten::argmin.out")
def check_arg_extreme(x: Any, dim: Any, keepdim: Any) -> tuple[Shape]:
    if isinstance(x, np.ndarray) and x.dtype == _BOOL:
        raise KernelError("argmax/argmin do not support bool input")
    return (_one_dim(x, dim, keepdim, "argmax", True),)


@argument_check("aten::max.dim_max", "aten::min.dim_min")
def check_extreme_dim(x: Any, dim: Any, keepdim: Any) -> tuple[Shape, Shape]:
    shape = _one_dim(x, dim, keepdim, "max", False)
    return shape, shape


@argument_check("aten::amax.out", "aten::amin.out")
def check_extreme(x: Any, dim: Any, keepdim: Any) -> tuple[Shape]:
    dims = _dims(dim)
    axes, shape, _ = _plan(_input(x, "amax").shape, dims, keepdim, True)
    _check_nonempty(x, axes, not dims, "amax")
    return (shape,)


@argument_check("aten::prod.int_out")
def check_prod_dim(x: Any, dim: Any, keepdim: Any, dtype: Any) -> tuple[Shape]:
    dt = _requested(dtype, "prod")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise KernelError(f"prod: dim must be an int, got {dim!r}")
    return (typed(_plan(_input(x, "prod").shape, (dim,), keepdim, True)[1], dt),)


@argument_check("aten::prod.out")
def check_prod(x: Any, dtype: Any) -> tuple[Shape]:
    dt = _requested(dtype, "prod")
    return (typed(_plan(_input(x, "prod").shape, None, False, True)[1], dt),)


@argument_check("aten::cumsum.out")
def check_cumsum(x: Any, dim: Any, dtype: Any) -> tuple[Shape]:
    axis_of(dim, _input(x, "cumsum").ndim, "cumsum")
    return (typed(x.shape, _requested(dtype, "cumsum")),)


@argument_check("aten::topk.values")
def check_topk(x: Any, k: Any, dim: Any, largest: Any, sorted: Any) -> tuple[Shape, Shape]:
    shape = topk_arguments(_input(x, "topk"), k, dim)[1]
    return shape, shape


@argument_check("aten::var.correction_out")
def check_var(x: Any, dim: Any, correction: Any, keepdim: Any) -> tuple[Shape]:
    return (var_arguments(_input(x, "var"), dim, correction, keepdim)[1],)


@argument_check("aten::var_mean.correction_out")
def check_var_mean(x: Any, dim: Any, correction: Any, keepdim: Any) -> tuple[Shape, Shape]:
    shape = var_arguments(_input(x, "var_mean"), dim, correction, keepdim)[1]
    return shape, shape
