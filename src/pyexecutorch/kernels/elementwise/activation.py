"""Activation kernels: relu, leaky_relu, elu, gelu, glu.

(``sigmoid`` and ``hardtanh`` live with the unary and clamp kernels.)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from pyexecutorch.kernels.checks import number
from pyexecutorch.kernels.common import fit, normalize_dim
from pyexecutorch.kernels.elementwise.unary import (
    BOOL,
    F64,
    FLOATS,
    SMALL,
    ScaledErf,
    blocked,
    check_out,
    compute_in_loop_dtype,
    erf_f64,
    loop_dtype,
    quiet,
    sigmoid_into,
)
from pyexecutorch.kernels.registry import KernelError, kernel


def _floating(
    compute: Callable[[np.ndarray, np.ndarray], object], x: np.ndarray, o: np.ndarray, name: str
) -> None:
    """o = f(x) for an op torch defines on floating tensors only (float16 runs in float32)."""
    if x.ndim == 0:  # ufuncs return scalars for 0-dim arrays: work on 1-element views
        x, o = x.reshape(1), o.reshape(1)
    dt = x.dtype
    if dt is o.dtype and dt in FLOATS:
        compute(x, o)
        return
    if dt.kind != "f":
        raise KernelError(f"{name} needs a floating-point tensor, got {dt}")
    check_out(dt, o)
    compute_in_loop_dtype(compute, x, o, dt)


@kernel("aten::relu.out")
def relu(x, out):
    o = out if out.shape == x.shape else fit(out, x.shape)
    dt = x.dtype
    if dt is o.dtype and dt in FLOATS:
        np.maximum(0, x, out=o)  # NaN propagates and -0.0 stays (x wins ties), as in torch
        return o
    return _relu_general(x, o)


@quiet
def _relu_general(x, o):
    if x.dtype == BOOL:
        raise KernelError("relu is not supported for bool tensors")
    check_out(x.dtype, o)
    # -0.0 stays, as in torch: numpy's float16 maximum keeps the first operand on a tie,
    # its float32 and float64 ones the second
    if x.dtype == np.float16:
        np.maximum(x, 0, out=o, casting="unsafe")
    else:
        np.maximum(0, x, out=o, casting="unsafe")
    return o


@kernel("aten::leaky_relu.out")
@quiet
def leaky_relu(x, negative_slope, out):
    o = out if out.shape == x.shape else fit(out, x.shape)
    slope = float(number(negative_slope, "leaky_relu", "negative_slope"))

    def compute(v, dst):
        # x > 0 ? x : x * slope, each element read before it is written (the
        # output may be the input's memory)
        positive = v > 0
        np.multiply(v, slope, out=dst, where=~positive)
        np.copyto(dst, v, where=positive)

    _floating(compute, x, o, "leaky_relu")
    return o


@kernel("aten::elu.out")
@quiet
def elu(x, alpha, scale, input_scale, out):
    o = out if out.shape == x.shape else fit(out, x.shape)
    # (the checks the compiled tier makes at load: see kernels.elementwise.checks)
    pos_coef = float(number(scale, "elu", "scale"))
    neg_coef = float(number(alpha, "elu", "alpha")) * pos_coef
    in_coef = float(number(input_scale, "elu", "input_scale"))

    def compute(v, dst):
        # x > 0 ? x * scale : expm1(x * input_scale) * alpha * scale, as the
        # sum of two parts of which at most one is nonzero (numpy's min and max
        # return their second operand on ties: -0.0 stays -0.0, as in torch)
        neg = np.minimum(0, v)
        if in_coef != 1.0:
            neg *= in_coef
        np.expm1(neg, out=neg)
        neg *= neg_coef
        np.maximum(0, v, out=dst)
        if pos_coef != 1.0:
            dst *= pos_coef
        dst += neg

    _floating(compute, x, o, "elu")
    return o


_SQRT1_2 = math.sqrt(0.5)
TANH_BETA = math.sqrt(2.0 / math.pi)
TANH_BETA_KAPPA = TANH_BETA * 0.044715


def _gelu_erf_block(x, dst):
    # x is a float64 block: 0.5 * x * (1 + erf(x / sqrt(2)))
    e = x * _SQRT1_2
    erf_f64(e, e)
    e += 1.0
    e *= x
    e *= 0.5
    dst[...] = e


# 0.5 * erf(x / sqrt(2)), rounded once to the output's dtype
HALF_ERF = ScaledErf(_SQRT1_2, 0.5)


def gelu_from_half_erf(x: np.ndarray, h: np.ndarray) -> None:
    """h = gelu(x) given h = 0.5 * erf(x / sqrt(2)) rounded to h's dtype.

    As in torch's float32 kernel, 1 + erf is formed after rounding erf, so the
    tails where float32 erf rounds to -1 (x below about -5.54) give exactly -0.0.
    """
    h += 0.5
    h *= x


def _gelu_none(v, dst):
    if v.dtype == F64 and v.size > SMALL:
        blocked(_gelu_erf_block, v, dst)
        return
    if dst is v or np.may_share_memory(v, dst):
        v = v.copy()
    HALF_ERF(v, dst)
    gelu_from_half_erf(v, dst)


def _gelu_tanh(v, dst):
    # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), with the inner
    # polynomial as x * (beta + beta * kappa * x^2): one pass fewer
    t = dst if not np.may_share_memory(v, dst) else np.empty_like(dst)
    np.multiply(v, v, out=t)
    t *= TANH_BETA_KAPPA
    t += TANH_BETA
    t *= v
    np.tanh(t, out=t)
    t += 1.0
    t *= v
    t *= 0.5
    if t is not dst:
        dst[...] = t


@kernel("aten::gelu.out")
@quiet
def gelu(x, approximate, out):
    o = out if out.shape == x.shape else fit(out, x.shape)
    if approximate == "none":
        _floating(_gelu_none, x, o, "gelu")
    elif approximate == "tanh":
        _floating(_gelu_tanh, x, o, "gelu")
    else:
        raise KernelError(f"gelu's approximate must be 'none' or 'tanh', got {approximate!r}")
    return o


@kernel("aten::glu.out")
@quiet
def glu(x, dim, out):
    if x.ndim == 0:
        raise KernelError("glu needs a tensor with at least one dimension")
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d]
    if n % 2:
        raise KernelError(f"glu halves dimension {d}, which must have even size, got {n}")
    h = n // 2
    shape = x.shape[:d] + (h,) + x.shape[d + 1 :]
    o = out if out.shape == shape else fit(out, shape)
    if x.dtype.kind != "f":
        raise KernelError(f"glu needs a floating-point tensor, got {x.dtype}")
    check_out(x.dtype, o)
    lt = loop_dtype(x.dtype)
    v = x if x.dtype == lt else x.astype(lt)
    if np.may_share_memory(v, o):
        v = v.copy()  # the output may reuse the input's memory: keep the first half
    lead = (slice(None),) * d
    dst = o if o.dtype == lt else np.empty(shape, dtype=lt)
    # first half * sigmoid(second half)
    sigmoid_into(v[lead + (slice(h, n),)], dst)
    dst *= v[lead + (slice(0, h),)]
    if dst is not o:
        np.copyto(o, dst, casting="unsafe")
    return o
