"""Load-time fast paths for normalization, softmax, mean and variance.

Each specializer checks once, at load, that an instruction's tensors have the
dtypes and shapes it covers, then binds the computation of its general kernel
(the same row normalizer and softmax cores of :mod:`pyexecutorch.kernels.norm.norm`,
the same reductions as :mod:`pyexecutorch.kernels.reduce.reduce`) to buffers, views
and constants made at load: no signature lookups, output fitting or
temporaries per call. Where it pays, constant weights are tiled to the full
row shape, because a same-shape ufunc costs a fraction of one that broadcasts
a short vector over many rows; multiplying by a tiled copy gives the same
values as broadcasting. Outputs nothing reads (the mean and rstd of an
inference layer norm) are not computed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pyexecutorch.kernels.norm.norm import (
    bn_scale_shift,
    row_normalizer,
    softmax_core,
    softmax_layout,
)
from pyexecutorch.kernels.reduce.reduce import _dims, _plan, sequential_sum
from pyexecutorch.kernels.registry import KernelError, specializer
from pyexecutorch.schema.scalar_type import F16, F32, F64

_COMPUTE = {F16: F32, F32: F32, F64: F64}

# Constant weights of at most this many elements per tiled copy are tiled.
_TILE_MAX = 1 << 16


def _array(a: Any, dtype: np.dtype, shape: tuple[int, ...] | None = None) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == dtype and (shape is None or a.shape == shape)


def _planned(out: Any, dtype: np.dtype, shape: tuple[int, ...]) -> bool:
    """Whether ``out`` is a planned output this fast path can write in place."""
    return _array(out, dtype, shape) and out.flags.c_contiguous


def _tiled(param: np.ndarray | None, shape: tuple[int, ...], cdt: np.dtype) -> np.ndarray | None:
    """A contiguous copy of a constant ``param`` broadcast to ``shape``, or ``None``.

    Only read-only parameters (program constants, which never change) qualify,
    and only when the copy is small and replaces a broadcast over several rows.
    """
    if param is None or param.flags.writeable:
        return None
    size = math.prod(shape)
    if size > _TILE_MAX or size == param.size:
        return None
    return np.ascontiguousarray(np.broadcast_to(param.astype(cdt), shape))


def _stats_into(mo: np.ndarray | None, ro: np.ndarray | None, m: int, cdt: np.dtype):  # noqa: ANN202
    """A function writing the means and ``1 / std`` (torch's rstd) into the used statistics
    outputs, or ``None`` when nothing reads either."""
    if mo is None and ro is None:
        return None
    one = np.array(1, cdt)
    mview = None if mo is None else mo.reshape(m, 1)
    rview = None if ro is None else ro.reshape(m, 1)

    def store(mean: np.ndarray, std: np.ndarray, out1: np.ndarray, out2: np.ndarray) -> None:
        if mo is not None:
            np.copyto(mview if out1 is mo else out1.reshape(m, 1), mean, casting="unsafe")
        if ro is not None:
            np.divide(one, std, rview if out2 is ro else out2.reshape(m, 1))

    return store


# ---------------------------------------------------------------------------
# Layer norm


@specializer("aten::native_layer_norm.out")
def _layer_norm(
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
    if not isinstance(input, np.ndarray) or input.dtype not in _COMPUTE:
        return None
    dt = input.dtype
    cdt = _COMPUTE[dt]
    ns = tuple(normalized_shape)
    nd = len(ns)
    if nd == 0 or input.ndim < nd or input.shape[input.ndim - nd :] != ns:
        return None
    k = math.prod(ns)
    m = input.size // k if k else 0
    if m == 0 or k == 0 or not isinstance(eps, float):
        return None
    for p in (weight, bias):
        if p is not None and not (_array(p, dt) and p.size == k):
            return None
    stat_shape = input.shape[: input.ndim - nd] + (1,) * nd
    if not _planned(out0, dt, input.shape):
        return None
    mo = out1 if 1 not in unused_outputs else None
    ro = out2 if 2 not in unused_outputs else None
    if any(a is not None and not _planned(a, dt, stat_shape) for a in (mo, ro)):
        return None

    norm = row_normalizer(m, k, cdt, eps)
    stats = _stats_into(mo, ro, m, cdt)
    w0, b0 = weight, bias
    w_rows = None if weight is None else weight.reshape(k)
    b_rows = None if bias is None else bias.reshape(k)
    # what multiplies and adds for the load-time weight and bias (tiled when constant)
    w_use = _tiled(w_rows, (m, k), cdt)
    w_use = w_rows if w_use is None else w_use
    b_use = _tiled(b_rows, (m, k), cdt)
    b_use = b_rows if b_use is None else b_use
    half = dt != cdt
    x_load = input
    x_view = input.reshape(m, k)
    o_load = out0
    o_view = out0.reshape(m, k)
    # float16 runs in float32 scratch, rounded once at the end, as torch does
    xc = np.empty((m, k), cdt) if half else None
    tc = np.empty((m, k), cdt) if half else None

    def layer_norm(input, normalized_shape, weight, bias, eps, out0, out1, out2):  # noqa: ANN001, ANN202
        x2 = x_view if input is x_load else input.reshape(m, k)
        o2 = o_view if out0 is o_load else out0.reshape(m, k)
        if half:
            np.copyto(xc, x2)
            x2, t = xc, tc
        else:
            t = o2
        mean, std = norm(x2, t)
        if weight is not None:
            np.multiply(t, w_use if weight is w0 else weight.reshape(k), t)
        if bias is not None:
            np.add(t, b_use if bias is b0 else bias.reshape(k), t)
        if half:
            np.copyto(o2, t, casting="unsafe")
        if stats is not None:
            stats(mean, std, out1, out2)
        return out0, out1, out2

    return layer_norm


# ---------------------------------------------------------------------------
# Group norm


@specializer("aten::native_group_norm.out")
def _group_norm(
    input: Any,
    weight: Any,
    bias: Any,
    N: Any,  # noqa: N803 - the schema's names
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
    if not isinstance(input, np.ndarray) or input.dtype not in _COMPUTE:
        return None
    dt = input.dtype
    cdt = _COMPUTE[dt]
    if not all(isinstance(v, int) for v in (N, C, HxW, group)) or not isinstance(eps, float):
        return None
    if input.ndim < 2 or input.shape[:2] != (N, C) or input.size != N * C * HxW:
        return None
    if group <= 0 or C % group or N * C * HxW == 0:
        return None
    for p in (weight, bias):
        if p is not None and not _array(p, dt, (C,)):
            return None
    if not _planned(out0, dt, input.shape):
        return None
    mo = out1 if 1 not in unused_outputs else None
    ro = out2 if 2 not in unused_outputs else None
    if any(a is not None and not _planned(a, dt, (N, group)) for a in (mo, ro)):
        return None

    m, k = N * group, (C // group) * HxW
    norm = row_normalizer(m, k, cdt, eps)
    stats = _stats_into(mo, ro, m, cdt)
    w0, b0 = weight, bias
    full = (N, C, HxW)
    w_use = None if weight is None else _tiled(weight.reshape(C, 1), full, cdt)
    w_use = weight.reshape(C, 1) if w_use is None and weight is not None else w_use
    b_use = None if bias is None else _tiled(bias.reshape(C, 1), full, cdt)
    b_use = bias.reshape(C, 1) if b_use is None and bias is not None else b_use
    half = dt != cdt
    x_load, x_view = input, input.reshape(m, k)
    o_load, o_view = out0, out0.reshape(m, k)
    xc = np.empty((m, k), cdt) if half else None
    tc = np.empty((m, k), cdt) if half else None
    # the normalized rows as (N, C, HxW), for the per-channel affine
    t3_load = (tc if half else o_view).reshape(full)

    def group_norm(input, weight, bias, N, C, HxW, group, eps, out0, out1, out2):  # noqa: ANN001, ANN202, N803
        x2 = x_view if input is x_load else input.reshape(m, k)
        o2 = o_view if out0 is o_load else out0.reshape(m, k)
        if half:
            np.copyto(xc, x2)
            x2, t = xc, tc
        else:
            t = o2
        mean, std = norm(x2, t)
        if weight is not None or bias is not None:
            t3 = t3_load if t is tc or t is o_view else t.reshape(full)
            if weight is not None:
                np.multiply(t3, w_use if weight is w0 else weight.reshape(C, 1), t3)
            if bias is not None:
                np.add(t3, b_use if bias is b0 else bias.reshape(C, 1), t3)
        if half:
            np.copyto(o2, t, casting="unsafe")
        if stats is not None:
            stats(mean, std, out1, out2)
        return out0, out1, out2

    return group_norm


# ---------------------------------------------------------------------------
# Softmax and log-softmax


def _softmax(log: bool):  # noqa: ANN202
    def specialize(x: Any, dim: Any, half_to_float: Any, out: Any) -> Any:
        if not isinstance(x, np.ndarray) or x.dtype not in _COMPUTE or x.size == 0:
            return None
        if half_to_float is True:
            if x.dtype != F16:
                return None
            cdt = F32
        elif half_to_float is False:
            cdt = _COMPUTE[x.dtype]
        else:
            return None
        if not isinstance(dim, int) or not -max(x.ndim, 1) <= dim < max(x.ndim, 1):
            return None
        out_dt = cdt if half_to_float else x.dtype
        if not _planned(out, out_dt, x.shape) or np.may_share_memory(x, out):
            return None
        layout = softmax_layout(x.shape, dim % max(x.ndim, 1))
        a, k, b = layout
        shape = (a, k) if b == 1 else layout
        core = softmax_core(a, k, b, cdt, log)
        x_load, x_view = x, x.reshape(shape)
        o_load, o_view = out, out.reshape(shape)
        # float16 computes in float32 scratch, rounded once (as torch does)
        xc = np.empty(shape, cdt) if x.dtype != cdt else None
        tc = np.empty(shape, cdt) if out_dt != cdt else None

        def run(x, dim, half_to_float, out):  # noqa: ANN001, ANN202
            xv = x_view if x is x_load else x.reshape(shape)
            ov = o_view if out is o_load else out.reshape(shape)
            if xc is not None:
                np.copyto(xc, xv)
                xv = xc
            if tc is None:
                core(xv, ov)
            else:
                core(xv, tc)
                np.copyto(ov, tc, casting="unsafe")
            return out

        return run

    return specialize


specializer("aten::_softmax.out")(_softmax(False))
specializer("aten::_log_softmax.out")(_softmax(True))


# ---------------------------------------------------------------------------
# mean and var (general kernels in reduce.py): the same reductions with the
# axes, counts and buffers fixed at load.


def _reduction_plan(a: Any, dim: Any, keepdim: Any, out: Any) -> tuple[tuple[int, ...], int] | None:
    """``(axes, count)`` for a float32/float64 reduction into ``out``, or ``None``."""
    if not isinstance(a, np.ndarray) or a.dtype not in (F32, F64) or a.ndim == 0:
        return None
    if not isinstance(keepdim, bool) or not isinstance(out, np.ndarray):
        return None
    if not _planned(out, a.dtype, out.shape):
        return None
    try:
        axes, shape, count = _plan(a.shape, _dims(dim), keepdim, True)
    except KernelError:
        return None  # the general kernel raises the error
    if shape != out.shape or count == 0:
        return None
    return axes, count


def _mean_plan(a: Any, dim: Any, keepdim: Any, out: Any) -> tuple[tuple[int, ...], Any] | None:
    """``(axes, count)`` as a 0-dim array of the input's dtype, or ``None``."""
    plan = _reduction_plan(a, dim, keepdim, out)
    return None if plan is None else (plan[0], np.array(plan[1], a.dtype))


@specializer("aten::mean.out")
def _mean(a: Any, dim: Any, keepdim: Any, dtype: Any, out: Any) -> Any:
    plan = _mean_plan(a, dim, keepdim, out) if dtype is None else None
    if plan is None:
        return None
    axes, n = plan

    def mean(a, dim, keepdim, dtype, out):  # noqa: ANN001, ANN202
        # a running sum, as the reference (and the official kernel) adds
        np.true_divide(sequential_sum(a, axes).reshape(out.shape), n, out)
        return out

    return mean


@specializer("aten::mean.dtype_out")
def _mean_all(a: Any, dtype: Any, out: Any) -> Any:
    plan = _mean_plan(a, None, False, out) if dtype is None else None
    if plan is None:
        return None
    axes, n = plan

    def mean(a, dtype, out):  # noqa: ANN001, ANN202
        np.true_divide(sequential_sum(a, axes).reshape(out.shape), n, out)
        return out

    return mean


def _variance(a: np.ndarray, dim: Any, correction: Any, keepdim: bool, outs: list[np.ndarray]):  # noqa: ANN202
    """``run(a, var_out, mean_out)`` as reduce._var_parts computes var (and the mean)."""
    plan = _reduction_plan(a, dim, keepdim, outs[0])
    if plan is None or any(not _planned(o, a.dtype, outs[0].shape) for o in outs[1:]):
        return None
    if correction is None:
        correction = 1
    if isinstance(correction, bool) or not isinstance(correction, (int, float)):
        return None
    axes, count = plan
    keep = tuple(1 if i in axes else s for i, s in enumerate(a.shape))
    n = np.array(count, a.dtype)
    divisor = np.array(max(count - correction, 0), a.dtype)
    mean = np.empty(keep, a.dtype)
    dev = np.empty(a.shape, a.dtype)
    add = np.add.reduce

    var_load, var_view = outs[0], outs[0].reshape(keep)

    def run(a: np.ndarray, var_out: np.ndarray, mean_out: np.ndarray | None) -> None:
        add(a, axes, None, mean, True)
        np.true_divide(mean, n, mean)
        np.subtract(a, mean, dev)
        np.multiply(dev, dev, dev)
        v = var_view if var_out is var_load else var_out.reshape(keep)
        add(dev, axes, None, v, True)
        np.true_divide(v, divisor, v)
        if mean_out is not None:
            np.copyto(mean_out.reshape(keep), mean)

    return run


@specializer("aten::var.correction_out")
def _var_correction(a: Any, dim: Any, correction: Any, keepdim: Any, out: Any) -> Any:
    run = _variance(a, dim, correction, keepdim, [out])
    if run is None:
        return None

    def var(a, dim, correction, keepdim, out):  # noqa: ANN001, ANN202
        run(a, out, None)
        return out

    return var


@specializer("aten::var.out")
def _var(a: Any, dim: Any, unbiased: Any, keepdim: Any, out: Any) -> Any:
    if not isinstance(unbiased, bool):
        return None
    run = _variance(a, dim, 1 if unbiased else 0, keepdim, [out])
    if run is None:
        return None

    def var(a, dim, unbiased, keepdim, out):  # noqa: ANN001, ANN202
        run(a, out, None)
        return out

    return var


@specializer("aten::var_mean.correction_out")
def _var_mean(a: Any, dim: Any, correction: Any, keepdim: Any, out0: Any, out1: Any) -> Any:
    run = _variance(a, dim, correction, keepdim, [out0, out1])
    if run is None:
        return None

    def var_mean(a, dim, correction, keepdim, out0, out1):  # noqa: ANN001, ANN202
        run(a, out0, out1)
        return out0, out1

    return var_mean


# ---------------------------------------------------------------------------
# Inference batch norm: x * scale + shift with the per-channel scale and shift
# of constant parameters computed once, at load.

# Channel rows shorter than this broadcast slowly enough to tile scale and shift.
_BN_TILE_ROW = 64


def _batch_norm(
    input: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, eps: Any, out: Any
) -> Any:
    """``run(input, weight, bias, running_mean, running_var, out)``, or ``None``."""
    if not isinstance(input, np.ndarray) or input.dtype not in (F32, F64) or input.ndim < 2:
        return None
    if not isinstance(eps, float) or not _planned(out, input.dtype, input.shape):
        return None
    c = input.shape[1]
    params = (weight, bias, running_mean, running_var)
    for i, p in enumerate(params):
        if p is None and i < 2:
            continue
        if not isinstance(p, np.ndarray) or p.dtype.kind != "f" or p.shape != (c,):
            return None
        if p.flags.writeable:  # parameters that can change: the general kernel
            return None
    cdt = input.dtype
    bshape = (c,) + (1,) * (input.ndim - 2)
    scale, shift = bn_scale_shift(weight, bias, running_mean, running_var, eps, cdt, bshape)
    if input.size <= _TILE_MAX and math.prod(input.shape[2:]) < _BN_TILE_ROW:
        scale = np.ascontiguousarray(np.broadcast_to(scale, input.shape))
        shift = np.ascontiguousarray(np.broadcast_to(shift, input.shape))
    w0, b0, m0, v0 = params

    def run(input, weight, bias, running_mean, running_var, out):  # noqa: ANN001, ANN202
        if weight is w0 and bias is b0 and running_mean is m0 and running_var is v0:
            sc, sh = scale, shift
        else:
            sc, sh = bn_scale_shift(weight, bias, running_mean, running_var, eps, cdt, bshape)
        np.multiply(input, sc, out)
        np.add(out, sh, out)

    return run


def _empty_stats(*outs: Any) -> bool:
    return all(isinstance(o, np.ndarray) and o.shape == (0,) for o in outs)


@specializer("aten::_native_batch_norm_legit_no_training.out")
def _bn_no_training(
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
    run = _batch_norm(input, weight, bias, running_mean, running_var, eps, out0)
    if run is None or not _empty_stats(out1, out2):
        return None

    def batch_norm(input, weight, bias, running_mean, running_var, momentum, eps, out0, out1, out2):  # noqa: ANN001, ANN202
        run(input, weight, bias, running_mean, running_var, out0)
        return out0, out1, out2

    return batch_norm


@specializer("aten::_native_batch_norm_legit.out")
def _bn_legit(
    input: Any,
    weight: Any,
    bias: Any,
    running_mean: Any,
    running_var: Any,
    training: Any,
    momentum: Any,
    eps: Any,
    out: Any,
    save_mean: Any,
    save_invstd: Any,
) -> Any:
    if training is not False:
        return None
    run = _batch_norm(input, weight, bias, running_mean, running_var, eps, out)
    if run is None or not _empty_stats(save_mean, save_invstd):
        return None

    def batch_norm(  # noqa: ANN202
        input,
        weight,
        bias,
        running_mean,
        running_var,
        training,
        momentum,
        eps,
        out,
        save_mean,
        save_invstd,  # noqa: ANN001
    ):
        run(input, weight, bias, running_mean, running_var, out)
        return out, save_mean, save_invstd

    return batch_norm
