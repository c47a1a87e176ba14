"""The shape family's argument checks (see :mod:`pyexecutorch.kernels.checks`): the
splits' parts, cat's operands and the copies' dim orders, through the functions their numpy
kernels call."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyexecutorch.kernels.checks import argument_check
from pyexecutorch.kernels.registry import KernelError
from pyexecutorch.kernels.shape.copy import _check_dim_order
from pyexecutorch.kernels.shape.shape import (
    cat_parts,
    expand_shape,
    repeat_shape,
    split_parts,
    split_with_sizes_parts,
)


def _pieces(x: Any, axis: int, sizes: list[int]) -> tuple[list[tuple[int, ...]]]:
    return ([x.shape[:axis] + (n,) + x.shape[axis + 1 :] for n in sizes],)


def _tensor(x: Any, op: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise KernelError(f"{op}: the input must be a tensor, got {type(x).__name__}")
    return x


@argument_check("aten::split_copy.Tensor_out")
def check_split(x: Any, split_size: Any, dim: Any) -> tuple[list[tuple[int, ...]]]:
    return _pieces(x, *split_parts(_tensor(x, "split"), split_size, dim))


@argument_check("aten::split_with_sizes_copy.out")
def check_split_with_sizes(x: Any, sizes: Any, dim: Any) -> tuple[list[tuple[int, ...]]]:
    return _pieces(x, *split_with_sizes_parts(_tensor(x, "split_with_sizes"), sizes, dim))


@argument_check("aten::cat.out")
def check_cat(tensors: Any, dim: Any) -> tuple[tuple[int, ...]]:
    if not isinstance(tensors, list):
        raise KernelError(f"cat(): expected a list of tensors, got {type(tensors).__name__}")
    return (cat_parts(tensors, dim)[2],)


@argument_check("aten::_to_copy.out", "aten::clone.out")
def check_copy(x: Any, *options: Any) -> tuple[tuple[int, ...]]:
    return (_tensor(x, "copy").shape,)


@argument_check("dim_order_ops::_to_dim_order_copy.out", "dim_order_ops::_clone_dim_order.out")
def check_dim_order_copy(x: Any, non_blocking: Any, dim_order: Any) -> tuple[tuple[int, ...]]:
    x = _tensor(x, "_to_dim_order_copy")
    _check_dim_order(dim_order, x.ndim, "_to_dim_order_copy")
    return (x.shape,)


@argument_check("aten::expand_copy.out")
def check_expand(x: Any, size: Any, implicit: Any) -> tuple[tuple[int, ...]]:
    return (expand_shape(_tensor(x, "expand_copy"), size),)


@argument_check("aten::repeat.out")
def check_repeat(x: Any, repeats: Any) -> tuple[tuple[int, ...]]:
    return (repeat_shape(_tensor(x, "repeat"), repeats),)
