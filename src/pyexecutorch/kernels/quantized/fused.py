"""The official quantized library's fused operators: ``add``, ``mixed_mm``, ``mixed_linear``.

``add`` is dequantize -> float add -> quantize in float32, as the official
kernel computes it; ``mixed_mm`` and ``mixed_linear`` multiply float inputs by
int8 weights scaled per row (``mixed_linear``: per group of columns).
"""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.common import fit, quiet_fp
from pyexecutorch.kernels.quantized.affine import (
    QUANT_BOUNDS,
    dequantize_into,
    quantize_into,
    reciprocal32,
    scalar_dtype,
)
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.schema.scalar_type import F32

_I8 = np.dtype(np.int8)


@kernel("quantized_decomposed::add.out")
def quantized_add(
    a, a_scale, a_zero_point, a_quant_min, a_quant_max,
    b, b_scale, b_zero_point, b_quant_min, b_quant_max,
    out_scale, out_zero_point, out_quant_min, out_quant_max, out,
):  # fmt: skip
    op = "quantized_decomposed::add"
    if a.shape != b.shape or a.dtype != b.dtype or a.dtype != out.dtype:
        raise KernelError(
            f"{op}: a, b and out need one shape and dtype, got {a.dtype}{a.shape}, "
            f"{b.dtype}{b.shape}, {out.dtype}"
        )
    if a.dtype not in QUANT_BOUNDS:
        raise KernelError(f"{op}: inputs must be integer tensors, got {a.dtype}")
    for lo, hi, name in (
        (a_quant_min, a_quant_max, "a"),
        (b_quant_min, b_quant_max, "b"),
        (out_quant_min, out_quant_max, "out"),
    ):
        if not 0 <= lo <= hi <= 255:
            raise KernelError(
                f"{op}: {name} needs 0 <= quant_min <= quant_max <= 255, got {lo}, {hi}"
            )
    o = fit(out, a.shape)
    da = dequantize_into(a, int(a_zero_point), np.float32(a_scale), F32, np.empty(a.shape, F32))
    db = dequantize_into(b, int(b_zero_point), np.float32(b_scale), F32, np.empty(b.shape, F32))
    da += db
    return quantize_into(
        da, reciprocal32(out_scale), int(out_zero_point), out_quant_min, out_quant_max, o
    )


def _check_mixed(op, x, weight, scales, zero_points):
    if x.ndim != 2 or weight.ndim != 2:
        raise KernelError(f"{op}: input and weight must be 2-D, got {x.shape} and {weight.shape}")
    if weight.dtype != _I8:
        raise KernelError(f"{op}: weight must be int8, got {weight.dtype}")
    if x.dtype.kind != "f" or scales.dtype != x.dtype:
        raise KernelError(
            f"{op}: input and weight_scales need one float dtype, got {x.dtype}, {scales.dtype}"
        )
    if zero_points is not None:
        raise KernelError(f"{op}: weight_zero_points are not supported")


@kernel("quantized_decomposed::mixed_mm.out")
def mixed_mm(input, weight, weight_scales, weight_zero_points, out):
    # input (m, n) @ (weight (n, p) scaled per row of weight)
    op = "mixed_mm"
    _check_mixed(op, input, weight, weight_scales, weight_zero_points)
    if input.shape[1] != weight.shape[0] or weight_scales.size != weight.shape[0]:
        raise KernelError(
            f"{op}: shapes {input.shape} @ {weight.shape} with {weight_scales.size} scales do not match"
        )
    o = fit(out, (input.shape[0], weight.shape[1]))
    w = weight.astype(F32) * weight_scales.reshape(-1, 1).astype(F32)
    with quiet_fp():
        np.copyto(o, input.astype(F32) @ w, casting="unsafe")
    return o


@kernel("quantized_decomposed::mixed_linear.out")
def mixed_linear(input, weight, weight_scales, weight_zero_points, dtype, out):
    # input (m, n) @ weight (p, n).T, weight scaled per row or per group of columns
    op = "mixed_linear"
    _check_mixed(op, input, weight, weight_scales, weight_zero_points)
    if dtype is not None and scalar_dtype(op, "dtype", dtype) != out.dtype:
        raise KernelError(f"{op}: out has dtype {out.dtype} but dtype says otherwise")
    m, n = input.shape
    p = weight.shape[0]
    if weight.shape[1] != n or weight_scales.ndim not in (1, 2) or weight_scales.shape[0] != p:
        raise KernelError(
            f"{op}: input {input.shape}, weight {weight.shape} and scales {weight_scales.shape} do not match"
        )
    groups = weight_scales.shape[1] if weight_scales.ndim == 2 else 1
    g = -(-n // groups)
    col_scale = np.repeat(weight_scales.reshape(p, groups).astype(F32), g, axis=1)[:, :n]
    o = fit(out, (m, p))
    with quiet_fp():
        np.copyto(o, input.astype(F32) @ (weight.astype(F32) * col_scale).T, casting="unsafe")
    return o
