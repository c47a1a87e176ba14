"""The indexing family's argument checks (see :mod:`pyexecutorch.kernels.checks`): dims,
index dtypes and shapes, through the functions the numpy kernels call. An index's values
may change from call to call: the kernels and compiled forms check those as they run."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyexecutorch.kernels.checks import argument_check
from pyexecutorch.kernels.index.index import (
    _index_tuple,
    embedding_arguments,
    index_put_arguments,
    index_result_shape,
    index_select_arguments,
    scatter_shapes,
)
from pyexecutorch.kernels.registry import KernelError

Shape = tuple[int, ...]


def _input(x: Any, op: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise KernelError(f"{op}: the input must be a tensor, got {type(x).__name__}")
    return x


@argument_check("aten::embedding.out")
def check_embedding(
    weight: Any, indices: Any, padding_idx: Any, scale_grad: Any, sparse: Any
) -> tuple[Shape]:
    return (embedding_arguments(weight, indices),)


@argument_check("aten::index_select.out")
def check_index_select(x: Any, dim: Any, index: Any) -> tuple[Shape]:
    axis = index_select_arguments(_input(x, "index_select"), dim, index)
    if x.ndim == 0:
        return ((),)
    return (x.shape[:axis] + index.reshape(-1).shape + x.shape[axis + 1 :],)


@argument_check("aten::gather.out")
def check_gather(x: Any, dim: Any, index: Any, sparse_grad: Any) -> tuple[Shape]:
    scatter_shapes(x, dim, index, None, "gather")
    return (index.shape,)


@argument_check("aten::index.Tensor_out")
def check_index(x: Any, indices: Any) -> tuple[Shape | None]:
    return (index_result_shape(x, _index_tuple(_input(x, "index"), indices, "index")),)


@argument_check("aten::index_put.out")
def check_index_put(x: Any, indices: Any, values: Any, accumulate: Any) -> tuple[Shape]:
    index_put_arguments(_input(x, "index_put"), indices, values, accumulate, "index_put")
    return (x.shape,)
