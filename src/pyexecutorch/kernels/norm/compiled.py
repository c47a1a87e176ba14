"""Compiled (numba) forms of layer, group and inference batch norm.

numpy normalizes rows in eight to ten whole-array passes (sums by a matrix
product, subtract, square, sum, sqrt, divide, scale, shift), each a call of
0.3-1 us on the small rows of tiny models; here each row is one loop that
reads it three times. Layer norm sums each row in interleaved partial sums
(short blocks in the input's dtype, added in float64) and normalizes it as
``(x - mean) / std`` in the input's dtype as the numpy kernel does; group norm
accumulates its statistics in float64; and the weight and bias apply only when given (so -0.0 stays as numpy
gives it). Imported only by the compiled tier; ``norm.py`` stays the reference.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit, prange

from pyexecutorch.jit.arrays import FLOATS, contiguous, dense, planned
from pyexecutorch.jit.variants import choose, pick, serial_and_parallel
from pyexecutorch.kernels.norm.norm import bn_scale_shift
from pyexecutorch.kernels.reduce.compiled import MAX_ROW, row_sum
from pyexecutorch.kernels.registry import compiled_form, offer


def _row_squares(x, i, mu, zero):  # noqa: ANN001, ANN201
    """The sum of (x[i, j] - mu)^2 over row i, in partial sums as :func:`row_sum` adds."""
    k = x.shape[1]
    s0 = s1 = s2 = s3 = zero
    j = 0
    while j + 4 <= k:
        d0 = x[i, j] - mu
        d1 = x[i, j + 1] - mu
        d2 = x[i, j + 2] - mu
        d3 = x[i, j + 3] - mu
        s0 += d0 * d0
        s1 += d1 * d1
        s2 += d2 * d2
        s3 += d3 * d3
        j += 4
    while j < k:
        d0 = x[i, j] - mu
        s0 += d0 * d0
        j += 1
    return np.float64((s0 + s1) + (s2 + s3))


row_squares = njit(cache=True, error_model="numpy")(_row_squares)


def _layer_norm(x, w, b, out, mean, rstd, eps, has_w, has_b, zero):  # noqa: ANN001, ANN201
    """Rows of x (m, k) normalized into out; each row's mean and 1/std into mean, rstd.

    The mean and std are rounded to x's dtype (through the statistics outputs)
    before they are used, as numpy's passes in that dtype do, so the last pass
    is the reference's subtract, divide, scale and shift in x's dtype.
    """
    m, k = x.shape
    for r in prange(m):  # noqa: B020 - prange is range when serial
        mean[r] = row_sum(x, r, zero) / k
        mu = mean[r]
        rstd[r] = np.sqrt(row_squares(x, r, mu, zero) / k + eps)
        std = rstd[r]
        for j in range(k):
            y = (x[r, j] - mu) / std
            if has_w:
                y = y * w[j]
            if has_b:
                y = y + b[j]
            out[r, j] = y
        rstd[r] = 1 / std
    return out


def _group_norm(x, w, b, out, mean, rstd, eps, groups, has_w, has_b):  # noqa: ANN001, ANN201
    """x (n * groups, channels per group, pixels): each row normalized, then per-channel affine."""
    rows, cg, hw = x.shape
    k = cg * hw
    for r in prange(rows):  # noqa: B020
        s = 0.0
        for c in range(cg):
            for t in range(hw):
                s += x[r, c, t]
        mu = s / k
        q = 0.0
        for c in range(cg):
            for t in range(hw):
                d = x[r, c, t] - mu
                q += d * d
        std = np.sqrt(q / k + eps)
        first = (r % groups) * cg
        for c in range(cg):
            for t in range(hw):
                y = (x[r, c, t] - mu) / std
                if has_w:
                    y = y * w[first + c]
                if has_b:
                    y = y + b[first + c]
                out[r, c, t] = y
        mean[r] = mu
        rstd[r] = 1.0 / std
    return out


def _scale_shift(x, scale, shift, out):  # noqa: ANN001, ANN201
    """out = x * scale + shift per channel of x (n, c, pixels): two roundings, as numpy's."""
    n, c, hw = x.shape
    for row in prange(n * c):  # noqa: B020
        i = row // c
        ch = row - i * c
        sc = scale[ch]
        sh = shift[ch]
        for t in range(hw):
            out[i, ch, t] = x[i, ch, t] * sc + sh
    return out


LAYER_NORM = serial_and_parallel(_layer_norm, "layer_norm")
GROUP_NORM = serial_and_parallel(_group_norm, "group_norm")
SCALE_SHIFT = serial_and_parallel(_scale_shift, "scale_shift")


def _array(a: Any, dtype: np.dtype, shape: tuple[int, ...] | None = None) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == dtype and (shape is None or a.shape == shape)


def _param(p: Any, dtype: np.dtype, size: int) -> bool:
    return p is None or (_array(p, dtype) and p.size == size)


def _stats_out(a: Any, used: bool, dtype: np.dtype, shape: tuple[int, ...], m: int):  # noqa: ANN202
    """The flat view a statistics output is written through, or scratch when nothing reads it."""
    if not used:
        return np.empty(m, dtype), False
    if not planned(a, dtype, shape):
        return None, True
    return a.reshape(m), True


# An element of a layer norm (three passes: two sums, then a division, scale and shift)
# costs what about four of a sum do: its threads start from a quarter of the sums' size
# (a ViT-S token matrix, 197 x 384, took 67 us on one thread, below the sums' threshold).
LAYER_NORM_COST = 4


@compiled_form("aten::native_layer_norm.out")
def _layer_norm_form(
    input: Any,
    normalized_shape: Any,
    weight: Any,
    bias: Any,
    eps: Any,
    out0: Any,
    out1: Any,
    out2: Any,
    *,
    unused_outputs: frozenset[int] = frozenset(),
) -> Any:
    """Layer norm of float32/float64 rows, or None."""
    if not dense(input) or input.dtype not in FLOATS:
        return None
    dt = input.dtype
    ns = tuple(normalized_shape)
    nd = len(ns)
    if nd == 0 or input.ndim < nd or input.shape[input.ndim - nd :] != ns:
        return None
    k = math.prod(ns)
    m = input.size // k if k else 0
    if m == 0 or k == 0 or k > MAX_ROW or not isinstance(eps, float):
        return None
    if not (_param(weight, dt, k) and _param(bias, dt, k) and planned(out0, dt, input.shape)):
        return None
    stat_shape = input.shape[: input.ndim - nd] + (1,) * nd
    mean0, use_mean = _stats_out(out1, 1 not in unused_outputs, dt, stat_shape, m)
    rstd0, use_rstd = _stats_out(out2, 2 not in unused_outputs, dt, stat_shape, m)
    if mean0 is None or rstd0 is None:
        return None
    x_load, x_rows = input, input.reshape(m, k)
    o_load, o_rows = out0, out0.reshape(m, k)
    w_load, b_load = weight, bias
    dummy = np.zeros(1, dt)
    w_rows = dummy if weight is None else contiguous(weight, (k,))
    b_rows = dummy if bias is None else contiguous(bias, (k,))
    has_w, has_b = weight is not None, bias is not None
    zero = dt.type(-0.0)
    load = (x_rows, w_rows, b_rows, o_rows, mean0, rstd0, eps, has_w, has_b, zero)
    work = m * k * LAYER_NORM_COST
    kern = pick(LAYER_NORM, work, load)

    def layer_norm(input, normalized_shape, weight, bias, eps, out0, out1, out2):  # noqa: ANN001, ANN202
        kern(
            x_rows if input is x_load else contiguous(input, (m, k)),
            w_rows if weight is w_load else contiguous(weight, (k,)),
            b_rows if bias is b_load else contiguous(bias, (k,)),
            o_rows if out0 is o_load else out0.reshape(m, k),
            out1.reshape(m) if use_mean else mean0,
            out2.reshape(m) if use_rstd else rstd0,
            eps,
            has_w,
            has_b,
            zero,
        )
        return out0, out1, out2

    # the step: the call on the planned arrays
    return offer(layer_norm, step=(choose(LAYER_NORM, work), load), fills_outputs=True)


@compiled_form("aten::native_group_norm.out")
def _group_norm_form(
    input: Any,
    weight: Any,
    bias: Any,
    N: Any,  # noqa: N803 - the operator's argument names
    C: Any,  # noqa: N803
    HxW: Any,  # noqa: N803
    group: Any,
    eps: Any,
    out0: Any,
    out1: Any,
    out2: Any,
    *,
    unused_outputs: frozenset[int] = frozenset(),
) -> Any:
    """Group norm of float32/float64 (N, C, ...) tensors, or None."""
    if not dense(input) or input.dtype not in FLOATS or input.ndim < 2:
        return None
    dt = input.dtype
    if not all(isinstance(v, int) for v in (N, C, HxW, group)) or not isinstance(eps, float):
        return None
    if input.shape[:2] != (N, C) or input.size != N * C * HxW or N * C * HxW == 0:
        return None
    if group <= 0 or C % group:
        return None
    if not (_param(weight, dt, C) and _param(bias, dt, C) and planned(out0, dt, input.shape)):
        return None
    rows, cg = N * group, C // group
    mean0, use_mean = _stats_out(out1, 1 not in unused_outputs, dt, (N, group), rows)
    rstd0, use_rstd = _stats_out(out2, 2 not in unused_outputs, dt, (N, group), rows)
    if mean0 is None or rstd0 is None:
        return None
    shape = (rows, cg, HxW)
    x_load, x_rows = input, input.reshape(shape)
    o_load, o_rows = out0, out0.reshape(shape)
    w_load, b_load = weight, bias
    dummy = np.zeros(1, dt)
    w_flat = dummy if weight is None else contiguous(weight, (C,))
    b_flat = dummy if bias is None else contiguous(bias, (C,))
    has_w, has_b = weight is not None, bias is not None
    load = (x_rows, w_flat, b_flat, o_rows, mean0, rstd0, eps, group, has_w, has_b)
    kern = pick(GROUP_NORM, input.size, load)

    def group_norm(input, weight, bias, N, C, HxW, group, eps, out0, out1, out2):  # noqa: ANN001, ANN202, N803
        kern(
            x_rows if input is x_load else contiguous(input, shape),
            w_flat if weight is w_load else contiguous(weight, (C,)),
            b_flat if bias is b_load else contiguous(bias, (C,)),
            o_rows if out0 is o_load else out0.reshape(shape),
            out1.reshape(rows) if use_mean else mean0,
            out2.reshape(rows) if use_rstd else rstd0,
            eps,
            group,
            has_w,
            has_b,
        )
        return out0, out1, out2

    # the step: the call on the planned arrays
    return offer(group_norm, step=(choose(GROUP_NORM, input.size), load), fills_outputs=True)


@compiled_form("aten::_native_batch_norm_legit_no_training.out")
def _batch_norm_form(
    input: Any,
    weight: Any,
    bias: Any,
    running_mean: Any,
    running_var: Any,
    momentum: Any,
    eps: Any,
    out0: Any,
    out1: Any,
    out2: Any,
) -> Any:
    """Inference batch norm with constant parameters: one scale-and-shift loop, or None."""
    if not dense(input) or input.dtype not in FLOATS or input.ndim < 2:
        return None
    dt, c = input.dtype, input.shape[1]
    if not isinstance(eps, float) or not planned(out0, dt, input.shape) or input.size == 0:
        return None
    params = (weight, bias, running_mean, running_var)
    for i, p in enumerate(params):
        if p is None and i < 2:
            continue
        if not isinstance(p, np.ndarray) or p.dtype.kind != "f" or p.shape != (c,):
            return None
        if p.flags.writeable:
            return None  # parameters that can change: folded per call by the numpy path
    if not all(isinstance(o, np.ndarray) and o.shape == (0,) for o in (out1, out2)):
        return None
    scale, shift = bn_scale_shift(weight, bias, running_mean, running_var, eps, dt, (c,))
    shape = (input.shape[0], c, input.size // (input.shape[0] * c))
    x_load, x_rows = input, input.reshape(shape)
    o_load, o_rows = out0, out0.reshape(shape)
    kern = pick(SCALE_SHIFT, input.size, (x_rows, scale, shift, o_rows))

    def batch_norm(input, weight, bias, running_mean, running_var, momentum, eps, out0, out1, out2):  # noqa: ANN001, ANN202
        kern(
            x_rows if input is x_load else contiguous(input, shape),
            scale,
            shift,
            o_rows if out0 is o_load else out0.reshape(shape),
        )
        return out0, out1, out2

    step = (choose(SCALE_SHIFT, input.size), (x_rows, scale, shift, o_rows))  # (planned arrays)
    return offer(batch_norm, step=step, fills_outputs=True)
