"""The normalization family's argument checks (see :mod:`pyexecutorch.kernels.checks`):
a layer norm's normalized shape, weight, bias and eps, through the function its numpy
kernel calls."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyexecutorch.kernels.checks import argument_check, number
from pyexecutorch.kernels.norm.norm import (
    batch_norm_arguments,
    group_norm_arguments,
    layer_norm_arguments,
    softmax_arguments,
)
from pyexecutorch.kernels.registry import KernelError

Shape = tuple[int, ...]


@argument_check("aten::native_layer_norm.out")
def check_layer_norm(
    x: Any, normalized_shape: Any, weight: Any, bias: Any, eps: Any
) -> tuple[Shape, Shape, Shape]:
    op = "native_layer_norm"
    for what, a in (("input", x), ("weight", weight), ("bias", bias)):
        if not (isinstance(a, np.ndarray) or (a is None and what != "input")):
            raise KernelError(f"{op}: {what} must be a tensor, got {type(a).__name__}")
    number(eps, op, "eps")
    _, _, stats, _ = layer_norm_arguments(x, tuple(normalized_shape), weight, bias)
    return x.shape, stats, stats


def _softmax_check(op: str) -> Any:
    def check(x: Any, dim: Any, half_to_float: Any) -> tuple[Shape]:
        if not isinstance(x, np.ndarray):
            raise KernelError(f"{op}: the input must be a tensor, got {type(x).__name__}")
        softmax_arguments(op, x, dim, half_to_float)
        return (x.shape,)

    return check


for _op in ("_softmax", "_log_softmax"):
    argument_check(f"aten::{_op}.out")(_softmax_check(_op))


@argument_check("aten::_native_batch_norm_legit_no_training.out")
def check_batch_norm(
    x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, momentum: Any, eps: Any
) -> tuple[Shape, Shape, Shape]:
    op = "_native_batch_norm_legit_no_training"
    for what, a in (("input", x), ("weight", weight), ("bias", bias)):
        if not (isinstance(a, np.ndarray) or (a is None and what != "input")):
            raise KernelError(f"{op}: {what} must be a tensor, got {type(a).__name__}")
    batch_norm_arguments(op, x, weight, bias, running_mean, running_var, eps)
    return x.shape, (0,), (0,)


@argument_check("aten::native_group_norm.out")
def check_group_norm(
    x: Any, weight: Any, bias: Any, n: Any, c: Any, hxw: Any, group: Any, eps: Any
) -> tuple[Shape, Shape, Shape]:
    op = "native_group_norm"
    for what, a in (("input", x), ("weight", weight), ("bias", bias)):
        if not (isinstance(a, np.ndarray) or (a is None and what != "input")):
            raise KernelError(f"{op}: {what} must be a tensor, got {type(a).__name__}")
    group_norm_arguments(x, weight, bias, n, c, hxw, group, eps)
    return x.shape, (n, group), (n, group)
