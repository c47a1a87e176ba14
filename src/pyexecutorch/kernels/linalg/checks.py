"""The matrix-product family's argument checks (see :mod:`pyexecutorch.kernels.checks`):
ranks, inner sizes, the added term's broadcast, dtypes and scalars, through the functions
the numpy kernels call."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyexecutorch.kernels.checks import argument_check, scalar
from pyexecutorch.kernels.linalg.linalg import _compute_dtype, addmm_shape, bmm_shape, mm_shape
from pyexecutorch.kernels.registry import KernelError

Shape = tuple[int, ...]


def _tensors(op: str, *arrays: Any) -> None:
    for a in arrays:
        if not isinstance(a, np.ndarray):
            raise KernelError(f"{op}: operands must be tensors, got {type(a).__name__}")


@argument_check("aten::mm.out")
def check_mm(x: Any, mat2: Any) -> tuple[Shape]:
    _tensors("mm", x, mat2)
    shape = mm_shape(x, mat2)  # (in the kernel's order)
    _compute_dtype("mm", x, mat2)
    return (shape,)


@argument_check("aten::bmm.out")
def check_bmm(x: Any, mat2: Any) -> tuple[Shape]:
    _tensors("bmm", x, mat2)
    shape = bmm_shape(x, mat2)
    _compute_dtype("bmm", x, mat2)
    return (shape,)


@argument_check("aten::addmm.out")
def check_addmm(x: Any, mat1: Any, mat2: Any, beta: Any, alpha: Any) -> tuple[Shape]:
    _tensors("addmm", x, mat1, mat2)
    shape = addmm_shape(x, mat1, mat2)  # (in the kernel's order)
    _compute_dtype("addmm", x, mat1, mat2)
    scalar(beta, "addmm", "beta")
    scalar(alpha, "addmm", "alpha")
    return (shape,)
