"""Numpy views of program tensors: planned memory, constants, dim orders."""

from __future__ import annotations

import math

import numpy as np

from pyexecutorch.schema.program import Tensor


def strides_for(
    sizes: tuple[int, ...], dim_order: tuple[int, ...], itemsize: int
) -> tuple[int, ...]:
    """Byte strides of a dense tensor whose dimensions lie in memory in ``dim_order``."""
    strides = [0] * len(sizes)
    step = itemsize
    for d in reversed(dim_order):
        strides[d] = step
        step *= max(sizes[d], 1)
    return tuple(strides)


def is_contiguous_order(dim_order: tuple[int, ...]) -> bool:
    return all(d == i for i, d in enumerate(dim_order))


def view_of(
    buffer: np.ndarray | memoryview,
    offset: int,
    sizes: tuple[int, ...],
    dim_order: tuple[int, ...],
    dtype: np.dtype,
) -> np.ndarray:
    """A logical-shape view of ``buffer`` at ``offset`` laid out in ``dim_order``."""
    if is_contiguous_order(dim_order):
        return np.ndarray(sizes, dtype=dtype, buffer=buffer, offset=offset)
    return np.ndarray(
        sizes,
        dtype=dtype,
        buffer=buffer,
        offset=offset,
        strides=strides_for(sizes, dim_order, dtype.itemsize),
    )


def tensor_nbytes(tensor: Tensor, itemsize: int) -> int:
    return math.prod(tensor.sizes) * itemsize


def dim_order_of(tensor: Tensor) -> tuple[int, ...]:
    """The tensor's dim order; an empty one means contiguous."""
    if tensor.dim_order:
        return tuple(tensor.dim_order)
    return tuple(range(len(tensor.sizes)))
