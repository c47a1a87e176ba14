"""Normalization, softmax and dropout kernels.

Each kernel runs a handful of whole-array ufunc passes in the computation
dtype (float32 for float16 inputs, as torch does), writing into the planned
output: layer/group norm subtract the mean in place in the output and get
the variance as a row-wise dot product (no squared temporary); inference
batch norm folds weight, bias and running statistics into one per-channel
scale and shift (cached for constant parameters) and costs two passes.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from pyexecutorch.kernels.common import fit, normalize_dim, quiet_fp
from pyexecutorch.kernels.conv import derived, float_compute_dtype, scratch, view_as
from pyexecutorch.kernels.registry import KernelError, kernel

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


def _check_param(op: str, name: str, a, shape: tuple[int, ...], dtype: np.dtype) -> None:
    if a is None:
        return
    if a.shape != shape and a.size != math.prod(shape):
        raise KernelError(f"{op}: {name} must have shape {shape}, got {a.shape}")
    if a.dtype.kind != "f":
        raise KernelError(f"{op}: {name} must be floating point, got {a.dtype}")


def _stat_buffer(out: np.ndarray, shape: tuple[int, ...], cdt: np.dtype):
    """``(buffer, direct)``: ``out`` viewed as ``shape`` when it can take the
    statistics directly, else a new array to copy from."""
    if out.dtype == cdt and out.flags.c_contiguous:
        return out.reshape(shape), True
    return np.empty(shape, cdt), False


def _normalize_rows(x2, t, mean, rstd, eps: float, cdt: np.dtype) -> None:
    """Rows of ``x2 (M, K)`` minus their mean, times rstd, into ``t``.

    ``mean`` is ``(M, 1)``, ``rstd`` is ``(M,)``; the variance is the biased
    one, as a row-wise dot product of the centred rows (no squared temporary).
    """
    k = x2.shape[1]
    if k == 0:  # torch: mean 0, rstd NaN
        mean[...] = 0
        rstd[...] = np.nan
        return
    if x2.dtype == cdt and x2.flags.c_contiguous and mean.flags.c_contiguous:
        np.matmul(x2, _ones(k, cdt.char), out=mean.reshape(-1))  # BLAS row sums
    else:
        np.add.reduce(x2, axis=1, keepdims=True, dtype=cdt, out=mean)
    np.divide(mean, k, out=mean)
    with quiet_fp():  # inf inputs give NaN rows, as in torch
        np.subtract(x2, mean, out=t)
        np.vecdot(t, t, out=rstd)
        np.divide(rstd, k, out=rstd)
        np.add(rstd, eps, out=rstd)
        np.sqrt(rstd, out=rstd)
        np.divide(1, rstd, out=rstd)
        np.multiply(t, rstd.reshape(-1, 1), out=t)


_LN_SIGNATURES: dict[tuple, tuple] = {}


def _ln_signature(input, ns, weight, bias):
    op = "native_layer_norm"
    cdt = float_compute_dtype(input, "input", op)
    nd = len(ns)
    if nd == 0 or input.ndim < nd or tuple(input.shape[input.ndim - nd :]) != ns:
        raise KernelError(
            f"{op}: normalized_shape {list(ns)} must match the trailing dims of input "
            f"of shape {input.shape}"
        )
    _check_param(op, "weight", weight, ns, input.dtype)
    _check_param(op, "bias", bias, ns, input.dtype)
    lead = input.shape[: input.ndim - nd]
    return math.prod(lead), math.prod(ns), lead + (1,) * nd, cdt


@kernel("aten::native_layer_norm.out", n_outs=3)
def native_layer_norm(input, normalized_shape, weight, bias, eps, out0, out1, out2):
    ns = tuple(normalized_shape)
    key = (
        input.shape,
        input.dtype,
        ns,
        None if weight is None else (weight.shape, weight.dtype),
        None if bias is None else (bias.shape, bias.dtype),
    )
    sig = _LN_SIGNATURES.get(key)
    if sig is None:
        sig = _ln_signature(input, ns, weight, bias)
        if len(_LN_SIGNATURES) >= 512:
            _LN_SIGNATURES.clear()
        _LN_SIGNATURES[key] = sig
    m, k, stat_shape, cdt = sig
    o = fit(out0, input.shape)
    mo = fit(out1, stat_shape)
    ro = fit(out2, stat_shape)
    if m == 0:
        return o, mo, ro
    x2 = input.reshape(m, k)
    direct = o.dtype == cdt and o.flags.c_contiguous
    t = o.reshape(m, k) if direct else scratch("ln-out", (m, k), cdt)
    mean, mean_direct = _stat_buffer(mo, (m, 1), cdt)
    rstd, rstd_direct = _stat_buffer(ro, (m,), cdt)
    _normalize_rows(x2, t, mean, rstd, eps, cdt)
    if weight is not None:
        np.multiply(t, weight.reshape(k), out=t)
    if bias is not None:
        np.add(t, bias.reshape(k), out=t)
    if not direct:
        np.copyto(o, t.reshape(o.shape), casting="unsafe")
    if not mean_direct:
        np.copyto(mo, mean.reshape(stat_shape), casting="unsafe")
    if not rstd_direct:
        np.copyto(ro, rstd.reshape(stat_shape), casting="unsafe")
    return o, mo, ro


@kernel("aten::native_group_norm.out", n_outs=3)
def native_group_norm(input, weight, bias, N, C, HxW, group, eps, out0, out1, out2):
    op = "native_group_norm"
    cdt = float_compute_dtype(input, "input", op)
    if input.ndim < 2 or input.shape[0] != N or input.shape[1] != C:
        raise KernelError(f"{op}: input of shape {input.shape} does not match N={N}, C={C}")
    if input.size != N * C * HxW:
        raise KernelError(
            f"{op}: input of shape {input.shape} has {input.size} elements, expected "
            f"N*C*HxW = {N * C * HxW}"
        )
    if group <= 0 or C % group:
        raise KernelError(f"{op}: channels {C} must be divisible by group {group} (> 0)")
    _check_param(op, "weight", weight, (C,), input.dtype)
    _check_param(op, "bias", bias, (C,), input.dtype)
    o = fit(out0, input.shape)
    mo = fit(out1, (N, group))
    ro = fit(out2, (N, group))
    if N == 0 or C == 0:
        return o, mo, ro
    m, k = N * group, (C // group) * HxW
    x2 = input.reshape(m, k)
    o2 = view_as(o, (m, k)) if o.dtype == cdt else None
    t = o2 if o2 is not None else scratch("gn-out", (m, k), cdt)
    mean = np.empty((m, 1), cdt)
    rstd = np.empty(m, cdt)
    _normalize_rows(x2, t, mean, rstd, eps, cdt)
    if weight is not None or bias is not None:
        t3 = t.reshape(N, C, HxW)
        if weight is not None:
            np.multiply(t3, weight.reshape(C, 1), out=t3, casting="unsafe")
        if bias is not None:
            np.add(t3, bias.reshape(C, 1), out=t3, casting="unsafe")
    if t is not o2:
        np.copyto(o, t.reshape(o.shape), casting="unsafe")
    np.copyto(mo, mean.reshape(N, group), casting="unsafe")
    np.copyto(ro, rstd.reshape(N, group), casting="unsafe")
    return o, mo, ro


def _bn_check(op, input, weight, bias, running_mean, running_var):
    cdt = float_compute_dtype(input, "input", op)
    if input.ndim < 2:
        raise KernelError(f"{op}: input must have at least 2 dims (N, C, ...), got {input.shape}")
    c = input.shape[1]
    for name, a in (
        ("weight", weight),
        ("bias", bias),
        ("running_mean", running_mean),
        ("running_var", running_var),
    ):
        if a is not None and (a.ndim != 1 or a.shape[0] != c):
            raise KernelError(f"{op}: {name} must have shape ({c},), got {a.shape}")
        if a is not None and a.dtype.kind != "f":
            raise KernelError(f"{op}: {name} must be floating point, got {a.dtype}")
    return cdt, c


def _bn_affine(weight, bias, mean, invstd, cdt):
    """Per-channel ``(scale, shift)`` with ``out = x * scale + shift``."""
    scale = invstd if weight is None else invstd * weight.astype(cdt, copy=False)
    shift = -mean * scale
    if bias is not None:
        shift += bias
    return scale.astype(cdt, copy=False), shift.astype(cdt, copy=False)


def _bn_apply(x, scale, shift, o, cdt):
    bshape = (x.shape[1],) + (1,) * (x.ndim - 2)
    t = o if o.dtype == cdt else scratch("bn-out", o.shape, cdt)
    np.multiply(x, scale.reshape(bshape), out=t, casting="unsafe")
    np.add(t, shift.reshape(bshape), out=t)
    if t is not o:
        np.copyto(o, t, casting="unsafe")


_BN_SIGNATURES: dict[tuple, np.dtype] = {}


def _bn_inference(op, input, weight, bias, running_mean, running_var, eps, out, cdt):
    bshape = (input.shape[1],) + (1,) * (input.ndim - 2)

    def make():
        with quiet_fp():
            rv = running_var.astype(cdt)
            invstd = 1 / np.sqrt(rv + cdt.type(eps))
            scale, shift = _bn_affine(weight, bias, running_mean.astype(cdt), invstd, cdt)
        return scale.reshape(bshape), shift.reshape(bshape)

    scale, shift = derived(
        ("bn", float(eps), cdt.char, len(bshape)), (weight, bias, running_mean, running_var), make
    )
    o = fit(out, input.shape)
    if o.size:
        t = o if o.dtype == cdt else scratch("bn-out", o.shape, cdt)
        np.multiply(input, scale, out=t)
        np.add(t, shift, out=t)
        if t is not o:
            np.copyto(o, t, casting="unsafe")
    return o


def _bn_training(op, input, weight, bias, running_mean, running_var, momentum, eps, outs, cdt):
    out, save_mean, save_invstd = outs
    c = input.shape[1]
    o = fit(out, input.shape)
    sm = fit(save_mean, (c,))
    si = fit(save_invstd, (c,))
    axes = (0, *range(2, input.ndim))
    n = input.size // c if c else 0
    x = input.astype(cdt, copy=False)
    with quiet_fp():
        mean = np.mean(x, axis=axes, dtype=cdt) if n else np.full(c, np.nan, cdt)
        bshape = (c,) + (1,) * (input.ndim - 2)
        xc = x - mean.reshape(bshape)
        var = np.mean(np.square(xc), axis=axes, dtype=cdt) if n else np.full(c, np.nan, cdt)
        invstd = 1 / np.sqrt(var + cdt.type(eps))
        scale, shift = _bn_affine(weight, bias, mean, invstd, cdt)
    if o.size:
        _bn_apply(x, scale, shift, o, cdt)
    if running_mean is not None:
        running_mean[...] = (1 - momentum) * running_mean + momentum * mean
    if running_var is not None:
        with quiet_fp():
            unbiased = var * n / (n - 1) if n != 1 else var / 0
        running_var[...] = (1 - momentum) * running_var + momentum * unbiased
    np.copyto(sm, mean, casting="unsafe")
    np.copyto(si, invstd, casting="unsafe")
    return o, sm, si


@kernel("aten::_native_batch_norm_legit_no_training.out", n_outs=3)
def native_batch_norm_legit_no_training(
    input, weight, bias, running_mean, running_var, momentum, eps, out0, out1, out2
):
    op = "_native_batch_norm_legit_no_training"
    key = (
        input.shape,
        input.dtype,
        *(None if a is None else (a.shape, a.dtype) for a in (weight, bias)),
        running_mean.shape,
        running_mean.dtype,
        running_var.shape,
        running_var.dtype,
    )
    cdt = _BN_SIGNATURES.get(key)
    if cdt is None:
        cdt, _ = _bn_check(op, input, weight, bias, running_mean, running_var)
        if len(_BN_SIGNATURES) >= 512:
            _BN_SIGNATURES.clear()
        _BN_SIGNATURES[key] = cdt
    o = _bn_inference(op, input, weight, bias, running_mean, running_var, eps, out0, cdt)
    return o, fit(out1, (0,)), fit(out2, (0,))


@kernel("aten::_native_batch_norm_legit.out", n_outs=3)
def native_batch_norm_legit(
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
    save_invstd,
):
    op = "_native_batch_norm_legit"
    cdt, _ = _bn_check(op, input, weight, bias, running_mean, running_var)
    if training:
        return _bn_training(
            op,
            input,
            weight,
            bias,
            running_mean,
            running_var,
            momentum,
            eps,
            (out, save_mean, save_invstd),
            cdt,
        )
    o = _bn_inference(op, input, weight, bias, running_mean, running_var, eps, out, cdt)
    return o, fit(save_mean, (0,)), fit(save_invstd, (0,))


@kernel("aten::_native_batch_norm_legit.no_stats_out", n_outs=3)
def native_batch_norm_legit_no_stats(
    input, weight, bias, training, momentum, eps, out, save_mean, save_invstd
):
    op = "_native_batch_norm_legit.no_stats"
    cdt, _ = _bn_check(op, input, weight, bias, None, None)
    if not training:
        raise KernelError(f"{op}: evaluation mode (training=False) needs running statistics")
    return _bn_training(
        op, input, weight, bias, None, None, momentum, eps, (out, save_mean, save_invstd), cdt
    )


# ---------------------------------------------------------------------------
# Softmax.


def _softmax_setup(op, self, dim, half_to_float, out):
    if half_to_float:
        if self.dtype != _F16:
            raise KernelError(f"{op}: half_to_float=True needs a float16 input, got {self.dtype}")
        cdt = _F32
    else:
        cdt = float_compute_dtype(self, "input", op)
    d = normalize_dim(dim, self.ndim)
    o = fit(out, self.shape)
    return cdt, d, o


# Inputs whose values all lie within this distance of zero (or of each
# other) need no per-row maximum: exp cannot overflow, and no row's sum can
# underflow, so one scalar shift (or none) replaces the row-wise maximum,
# which numpy computes slowly for short rows. The result is the same softmax
# up to float rounding.
_EXP_SAFE = 60.0


def _shift(x: np.ndarray, d: int):
    """What to subtract before exp: ``None``, a scalar, or the row maxima."""
    hi = float(np.maximum.reduce(x, axis=None))
    lo = float(np.minimum.reduce(x, axis=None))
    if hi - lo < _EXP_SAFE:  # False for NaN and infinities
        return None if -_EXP_SAFE < lo and hi < _EXP_SAFE else hi
    return np.maximum.reduce(x, axis=d, keepdims=True)


@lru_cache(maxsize=64)
def _ones(k: int, char: str) -> np.ndarray:
    a = np.ones(k, char)
    a.flags.writeable = False
    return a


def _row_sums(e: np.ndarray, d: int) -> np.ndarray:
    """Sums of ``e`` along ``d`` (kept as a size-1 dim); a BLAS mat-vec for the last dim."""
    if d == e.ndim - 1 and e.flags.c_contiguous and e.dtype.kind == "f":
        k = e.shape[-1]
        s = np.matmul(e.reshape(-1, k), _ones(k, e.dtype.char))
        return s.reshape(e.shape[:-1] + (1,))
    return np.add.reduce(e, axis=d, keepdims=True)


@kernel("aten::_softmax.out")
def softmax(self, dim, half_to_float, out):
    cdt, d, o = _softmax_setup("_softmax", self, dim, half_to_float, out)
    if o.size == 0:
        return o
    x = self if self.ndim else self.reshape(1)
    t = o if o.dtype == cdt and o.flags.c_contiguous else scratch("softmax", o.shape, cdt)
    t1 = t if self.ndim else t.reshape(1)
    m = _shift(x, d)
    with quiet_fp():  # rows of -inf give NaN, as in torch
        if m is None:
            np.exp(x, out=t1, dtype=cdt)
        else:
            np.subtract(x, m, out=t1, dtype=cdt)
            np.exp(t1, out=t1)
        np.divide(t1, _row_sums(t1, d), out=t1)
    if t is not o:
        np.copyto(o, t, casting="unsafe")
    return o


@kernel("aten::_log_softmax.out")
def log_softmax(self, dim, half_to_float, out):
    cdt, d, o = _softmax_setup("_log_softmax", self, dim, half_to_float, out)
    if o.size == 0:
        return o
    x = self if self.ndim else self.reshape(1)
    t = o if o.dtype == cdt and o.flags.c_contiguous else scratch("logsoftmax", o.shape, cdt)
    t1 = t if self.ndim else t.reshape(1)
    e = scratch("logsoftmax-exp", t1.shape, cdt)
    m = _shift(x, d)
    with quiet_fp():
        if m is None:
            np.copyto(t1, x, casting="unsafe")
        else:
            np.subtract(x, m, out=t1, dtype=cdt)
        np.exp(t1, out=e)
        s = _row_sums(e, d)
        np.log(s, out=s)
        np.subtract(t1, s, out=t1)
    if t is not o:
        np.copyto(o, t, casting="unsafe")
    return o


# ---------------------------------------------------------------------------
# Dropout.

_RNG = np.random.default_rng()


@kernel("aten::native_dropout.out", n_outs=2)
def native_dropout(input, p, train, out0, out1):
    op = "native_dropout"
    if not 0 <= p <= 1:
        raise KernelError(f"{op}: dropout probability must be between 0 and 1, got {p}")
    o = fit(out0, input.shape)
    mask = fit(out1, input.shape)
    if train is not None and not train:
        np.copyto(o, input, casting="unsafe")
        mask[...] = True
        return o, mask
    if input.dtype.kind not in "fc":
        raise KernelError(f"{op}: training dropout needs a floating input, got {input.dtype}")
    keep = 1.0 - p
    m = _RNG.random(input.shape) < keep
    np.copyto(mask, m, casting="unsafe")
    scale = 0.0 if keep == 0 else 1.0 / keep
    np.multiply(input, m, out=o, casting="unsafe")
    np.multiply(o, scale, out=o, casting="unsafe")
    return o, mask
