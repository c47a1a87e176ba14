"""The convolution family's argument checks (see :mod:`pyexecutorch.kernels.checks`):
geometry, groups, dtypes and bias, through the function the numpy kernel calls."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyexecutorch.kernels.checks import argument_check
from pyexecutorch.kernels.conv.conv import signature
from pyexecutorch.kernels.registry import KernelError


@argument_check("aten::convolution.out")
def check_convolution(
    x: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: Any,
    output_padding: Any,
    groups: Any,
) -> tuple[tuple[int, ...]]:
    for what, a in (("input", x), ("weight", weight), ("bias", bias)):
        if not (isinstance(a, np.ndarray) or (a is None and what == "bias")):
            raise KernelError(f"convolution: {what} must be a tensor, got {type(a).__name__}")
    if not isinstance(transposed, bool):
        raise KernelError(f"convolution: transposed must be a bool, got {transposed!r}")
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise KernelError(f"convolution: groups must be an int, got {groups!r}")
    sig = signature(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    return (sig[3],)
