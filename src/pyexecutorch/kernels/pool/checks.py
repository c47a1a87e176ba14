"""The pooling family's argument checks (see :mod:`pyexecutorch.kernels.checks`): window,
stride, padding and dilation, through the functions the numpy kernels call."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyexecutorch.kernels.checks import argument_check
from pyexecutorch.kernels.common import float_compute_dtype
from pyexecutorch.kernels.pool.pad import constant_pad_shape
from pyexecutorch.kernels.pool.pool import _maxpool_signature, _pool_geometry, adaptive_arguments
from pyexecutorch.kernels.pool.upsample import _resolve_size
from pyexecutorch.kernels.registry import KernelError

Shape = tuple[int, ...]


def _input(x: Any, op: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise KernelError(f"{op}: the input must be a tensor, got {type(x).__name__}")
    return x


@argument_check("aten::max_pool2d_with_indices.out")
def check_max_pool2d(
    x: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: Any
) -> tuple[Shape, Shape]:
    x = _input(x, "max_pool2d_with_indices")
    shape = _maxpool_signature(x, kernel_size, stride, padding, dilation, ceil_mode)[5]
    return shape, shape


@argument_check("aten::avg_pool2d.out")
def check_avg_pool2d(
    x: Any,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    divisor_override: Any,
) -> tuple[Shape]:
    op = "avg_pool2d"
    x = _input(x, op)
    if x.dtype.kind != "f" and x.dtype != np.int64:
        raise KernelError(f"{op}: dtype {x.dtype} is not supported (need float or int64)")
    if divisor_override is not None and divisor_override == 0:
        raise KernelError(f"{op}: divisor_override must be non-zero")
    ohw = _pool_geometry(op, x, kernel_size, stride, padding, 1, ceil_mode, False)[4]
    return (x.shape[:-2] + ohw,)


@argument_check("aten::_adaptive_avg_pool2d.out")
def check_adaptive_avg_pool2d(x: Any, output_size: Any) -> tuple[Shape]:
    return (adaptive_arguments(_input(x, "_adaptive_avg_pool2d"), output_size),)


@argument_check("aten::constant_pad_nd.out")
def check_constant_pad(x: Any, pad: Any, value: Any) -> tuple[Shape]:
    return (constant_pad_shape(_input(x, "constant_pad_nd"), pad, value),)


@argument_check("aten::upsample_nearest2d.vec_out")
def check_upsample_nearest(x: Any, output_size: Any, scale_factors: Any) -> tuple[Shape]:
    op = "upsample_nearest2d"
    (oh, ow), _ = _resolve_size(op, _input(x, op), output_size, scale_factors)
    return (x.shape[:2] + (oh, ow),)


@argument_check("aten::upsample_bilinear2d.vec_out")
def check_upsample_bilinear(
    x: Any, output_size: Any, align_corners: Any, scale_factors: Any
) -> tuple[Shape]:
    op = "upsample_bilinear2d"
    float_compute_dtype(_input(x, op), "input", op)
    (oh, ow), _ = _resolve_size(op, x, output_size, scale_factors)
    return (x.shape[:2] + (oh, ow),)
