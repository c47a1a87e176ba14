"""Normalization, softmax and dropout kernels.

Each kernel runs a handful of whole-array ufunc passes in the computation
dtype (float32 for float16 inputs, as torch does), writing into the planned
output. Layer and group norm share one row normalizer, and softmax and
log-softmax one core, built once per shape (:func:`row_normalizer`,
:func:`softmax_core`); the load-time fast paths in
:mod:`pyexecutorch.kernels.norm.fast` bind the same cores, so both give the
same values. Short rows are summed by a small matrix product with a matrix of
ones, which leaves each row's sum in every column and lets every later pass
be a same-shape ufunc instead of a slow broadcast over many short rows.
Inference batch norm folds weight, bias and running statistics into one
per-channel scale and shift (cached for constant parameters) and costs two
passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from pyexecutorch.kernels.checks import number
from pyexecutorch.kernels.common import (
    fit,
    float_compute_dtype,
    normalize_dim,
    quiet_fp,
    view_as,
)
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.kernels.scratch import derived, scratch, scratch_object

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


def _check_param(op: str, name: str, a, shape: tuple[int, ...], dtype: np.dtype) -> None:
    if a is None:
        return
    if a.shape != shape and a.size != math.prod(shape):
        raise KernelError(f"{op}: {name} must have shape {shape}, got {a.shape}")
    if a.dtype.kind != "f":
        raise KernelError(f"{op}: {name} must be floating point, got {a.dtype}")


def _is_pow2(k: int) -> bool:
    return k > 0 and k & (k - 1) == 0


# Rows up to this long (and arrays up to this much work) are summed by one small
# matrix product with a (k, k) matrix of ones, which leaves each row's sum in
# every column of the row: the statistics come out full-shaped and every later
# pass is a same-shape ufunc, several times cheaper than a broadcast over many
# short rows. Longer rows use a matrix-vector product and per-row broadcasts.
_SQUARE_MAX_K = 64
_SQUARE_MAX_WORK = 1 << 15


def _square_sums(m: int, k: int) -> bool:
    return k <= _SQUARE_MAX_K and m * k * k <= _SQUARE_MAX_WORK


def _sum_matrix(k: int, cdt: np.dtype) -> tuple[np.ndarray, bool]:
    """``(k, k)`` summing matrix and whether the caller still divides by ``k``.

    For a power of two the matrix holds ``1/k``: scaling each term by a power
    of two is exact, so it yields the sum divided by ``k`` in one product.
    """
    if _is_pow2(k):
        return np.full((k, k), 1 / k, cdt), False
    return np.ones((k, k), cdt), True


RowNormalizer = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def row_normalizer(m: int, k: int, cdt: np.dtype, eps: float) -> RowNormalizer:
    """``norm(x2, t) -> (mean, std)`` for ``(m, k)`` rows (``m, k > 0``).

    ``norm`` writes ``(x2 - mean) / std`` row-wise into ``t`` (``x2`` and ``t``
    have dtype ``cdt`` and any strides; ``t`` may be ``x2`` itself, as every
    pass that writes it reads ``x2`` elementwise or before) and returns the row means and ``std = sqrt(var + eps)`` (biased
    variance, two-pass: the centred rows are squared) as ``(m, 1)`` views of
    its own buffers, valid until the next call. Layer and group norm share it,
    in their general kernels and their load-time fast paths, so both give the
    same values for the same shapes.
    """
    kk = np.array(k, cdt)
    e0 = np.array(eps, cdt)
    if _square_sums(m, k):
        ones, divide = _sum_matrix(k, cdt)
        mean = np.empty((m, k), cdt)
        sq = np.empty((m, k), cdt)
        std = np.empty((m, k), cdt)
        mean_col, std_col = mean[:, :1], std[:, :1]

        def norm(x2: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            np.dot(x2, ones, mean)
            if divide:
                np.divide(mean, kk, mean)
            np.subtract(x2, mean, t)
            np.multiply(t, t, sq)
            np.dot(sq, ones, std)
            if divide:
                np.divide(std, kk, std)
            np.add(std, e0, std)
            np.sqrt(std, std)
            np.divide(t, std, t)
            return mean_col, std_col

        return norm

    ones = np.ones(k, cdt)
    # A ufunc whose operands all have one element, or that broadcasts a (1, 1)
    # one, costs over twice a two-element one: a single row keeps its
    # statistics in two-element buffers (the second entry is a harmless dummy)
    # and broadcasts them as 0-dim views.
    n = max(m, 2)
    mean_v = np.ones(n, cdt)
    std_v = np.ones(n, cdt)
    mean_rows, std_rows = mean_v[:m], std_v[:m]
    mean_col, std_col = mean_rows.reshape(m, 1), std_rows.reshape(m, 1)
    mean_b, std_b = (
        (mean_v[:1].reshape(()), std_v[:1].reshape(())) if m == 1 else (mean_col, std_col)
    )

    def norm_long(x2: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        np.dot(x2, ones, mean_rows)  # BLAS row sums
        np.divide(mean_v, kk, mean_v)
        np.subtract(x2, mean_b, t)
        np.vecdot(t, t, std_rows)  # sum of squares without a squared temporary
        np.divide(std_v, kk, std_v)
        np.add(std_v, e0, std_v)
        np.sqrt(std_v, std_v)
        np.divide(t, std_b, t)
        return mean_col, std_col

    return norm_long


_LN_SIGNATURES: dict[tuple, tuple] = {}


def layer_norm_arguments(input, ns, weight, bias):
    """(rows, row length, statistics' shape, compute dtype) of a layer norm, or KernelError:
    the family's argument check (see kernels.norm.checks), made once per signature."""
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


def _cached_normalizer(m: int, k: int, cdt: np.dtype, eps: float) -> RowNormalizer:
    def make():
        square = _square_sums(m, k)
        nbytes = (3 * m * k + k * k) if square else (2 * m + k)
        return row_normalizer(m, k, cdt, eps), nbytes * cdt.itemsize

    return scratch_object(("row-normalizer", m, k, cdt.char, float(eps)), make)


def _store_stats(mean, std, mo, ro, shape, cdt) -> None:
    """Means and ``1 / std`` (torch's rstd) into the statistics outputs."""
    np.copyto(mo, mean.reshape(shape), casting="unsafe")
    rstd = scratch("norm-rstd", std.shape, cdt)
    np.divide(1, std, rstd)
    np.copyto(ro, rstd.reshape(shape), casting="unsafe")


def _empty_rows(mo, ro) -> None:
    """Statistics of zero-length rows, as torch gives them: mean 0, rstd NaN."""
    mo[...] = 0
    ro[...] = np.nan


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
        number(eps, "native_layer_norm", "eps")
        sig = layer_norm_arguments(input, ns, weight, bias)
        if len(_LN_SIGNATURES) >= 512:
            _LN_SIGNATURES.clear()
        _LN_SIGNATURES[key] = sig
    m, k, stat_shape, cdt = sig
    o = fit(out0, input.shape)
    mo = fit(out1, stat_shape)
    ro = fit(out2, stat_shape)
    if m == 0:
        return o, mo, ro
    if k == 0:
        _empty_rows(mo, ro)
        return o, mo, ro
    x2 = input.reshape(m, k).astype(cdt, copy=False)
    direct = o.dtype == cdt and o.flags.c_contiguous
    t = o.reshape(m, k) if direct else scratch("ln-out", (m, k), cdt)
    with quiet_fp():  # inf inputs give NaN rows, as in torch
        mean, std = _cached_normalizer(m, k, cdt, eps)(x2, t)
        if weight is not None:
            np.multiply(t, weight.reshape(k), t)
        if bias is not None:
            np.add(t, bias.reshape(k), t)
        _store_stats(mean, std, mo, ro, stat_shape, cdt)
    if not direct:
        np.copyto(o, t.reshape(o.shape), casting="unsafe")
    return o, mo, ro


@kernel("aten::native_group_norm.out", n_outs=3)
def native_group_norm(input, weight, bias, N, C, HxW, group, eps, out0, out1, out2):
    cdt = group_norm_arguments(input, weight, bias, N, C, HxW, group, eps)
    o = fit(out0, input.shape)
    mo = fit(out1, (N, group))
    ro = fit(out2, (N, group))
    if N == 0 or C == 0:
        return o, mo, ro
    return _group_norm_rows(input, weight, bias, N, C, HxW, group, eps, o, mo, ro, cdt)


def group_norm_arguments(input, weight, bias, N, C, HxW, group, eps) -> np.dtype:  # noqa: ANN001
    """The dtype native_group_norm computes in, or KernelError (the family's argument check,
    see kernels.norm.checks)."""
    op = "native_group_norm"
    cdt = float_compute_dtype(input, "input", op)
    for name, n in (("N", N), ("C", C), ("HxW", HxW), ("group", group)):
        if isinstance(n, bool) or not isinstance(n, int):
            raise KernelError(f"{op}: {name} must be an int, got {n!r}")
    number(eps, op, "eps")
    if input.ndim < 2 or input.shape[0] != N or input.shape[1] != C:
        raise KernelError(f"{op}: input of shape {input.shape} does not match N={N}, C={C}")
    if input.size != N * C * HxW:  # (N, C, HxW: ints, checked above)
        raise KernelError(
            f"{op}: input of shape {input.shape} has {input.size} elements, expected "
            f"N*C*HxW = {N * C * HxW}"
        )
    if group <= 0 or C % group:
        raise KernelError(f"{op}: channels {C} must be divisible by group {group} (> 0)")
    _check_param(op, "weight", weight, (C,), input.dtype)
    _check_param(op, "bias", bias, (C,), input.dtype)
    return cdt


def _group_norm_rows(input, weight, bias, N, C, HxW, group, eps, o, mo, ro, cdt):  # noqa: ANN001, ANN202
    """Group norm of the (N * group) rows of a non-empty input."""
    m, k = N * group, (C // group) * HxW
    if k == 0:
        _empty_rows(mo, ro)
        return o, mo, ro
    x2 = input.reshape(m, k).astype(cdt, copy=False)
    o2 = view_as(o, (m, k)) if o.dtype == cdt else None
    t = o2 if o2 is not None else scratch("gn-out", (m, k), cdt)
    with quiet_fp():
        mean, std = _cached_normalizer(m, k, cdt, eps)(x2, t)
        if weight is not None or bias is not None:
            t3 = t.reshape(N, C, HxW)
            if weight is not None:
                np.multiply(t3, weight.reshape(C, 1), out=t3, casting="unsafe")
            if bias is not None:
                np.add(t3, bias.reshape(C, 1), out=t3, casting="unsafe")
        _store_stats(mean, std, mo, ro, (N, group), cdt)
    if t is not o2:
        np.copyto(o, t.reshape(o.shape), casting="unsafe")
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


def bn_scale_shift(weight, bias, running_mean, running_var, eps: float, cdt: np.dtype, bshape):
    """Inference batch norm's per-channel ``(scale, shift)``, shaped ``bshape``:
    ``out = x * scale + shift``."""
    with quiet_fp():
        rv = running_var.astype(cdt)
        invstd = 1 / np.sqrt(rv + cdt.type(eps))
        scale, shift = _bn_affine(weight, bias, running_mean.astype(cdt), invstd, cdt)
    return scale.reshape(bshape), shift.reshape(bshape)


def _bn_inference(op, input, weight, bias, running_mean, running_var, eps, out, cdt):
    bshape = (input.shape[1],) + (1,) * (input.ndim - 2)
    scale, shift = derived(
        ("bn", float(eps), cdt.char, len(bshape)),
        (weight, bias, running_mean, running_var),
        lambda: bn_scale_shift(weight, bias, running_mean, running_var, eps, cdt, bshape),
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


def batch_norm_arguments(op, input, weight, bias, running_mean, running_var, eps):  # noqa: ANN001, ANN201
    """(compute dtype, channels) of an inference batch norm, whose running statistics are
    tensors, or KernelError (the family's argument check, see kernels.norm.checks)."""
    for name, a in (("running_mean", running_mean), ("running_var", running_var)):
        if not isinstance(a, np.ndarray):
            raise KernelError(f"{op}: {name} must be a tensor, got {type(a).__name__}")
    number(eps, op, "eps")
    return _bn_check(op, input, weight, bias, running_mean, running_var)


@kernel("aten::_native_batch_norm_legit_no_training.out", n_outs=3)
def native_batch_norm_legit_no_training(
    input, weight, bias, running_mean, running_var, momentum, eps, out0, out1, out2
):
    op = "_native_batch_norm_legit_no_training"
    number(eps, op, "eps")  # (per instruction: not part of the cached signature)
    key = (
        input.shape,
        input.dtype,
        *(None if a is None else (a.shape, a.dtype) for a in (weight, bias)),
        *(getattr(a, "shape", a) for a in (running_mean, running_var)),
        *(getattr(a, "dtype", a) for a in (running_mean, running_var)),
    )
    cdt = _BN_SIGNATURES.get(key)
    if cdt is None:
        cdt, _ = batch_norm_arguments(op, input, weight, bias, running_mean, running_var, eps)
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


def softmax_arguments(op: str, self, dim, half_to_float) -> tuple[np.dtype, int]:
    """(compute dtype, dim) of a softmax, or KernelError: the argument check (norm.checks)."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise KernelError(f"{op}: dim must be an int, got {dim!r}")
    if not isinstance(half_to_float, bool):
        raise KernelError(f"{op}: half_to_float must be a bool, got {half_to_float!r}")
    if half_to_float:
        if self.dtype != _F16:
            raise KernelError(f"{op}: half_to_float=True needs a float16 input, got {self.dtype}")
        cdt = _F32
    else:
        cdt = float_compute_dtype(self, "input", op)
    return cdt, normalize_dim(dim, self.ndim)


def _softmax_setup(op, self, dim, half_to_float, out):
    cdt, d = softmax_arguments(op, self, dim, half_to_float)
    o = fit(out, self.shape)
    return cdt, d, o


def softmax_layout(shape: tuple[int, ...], dim: int) -> tuple[int, int, int]:
    """``(a, k, b)``: the tensor as ``a`` blocks of ``k`` rows of ``b`` along ``dim``."""
    if not shape:
        return 1, 1, 1
    return math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1 :])


# With at most this many rows (or when the softmax dim is not the last), each
# row's maximum is subtracted before exp, as torch does. More rows of the last
# dim use one maximum for the whole tensor (numpy's per-row reductions cost
# tens of nanoseconds a row): exp cannot overflow, and a row whose sum comes
# out below _MIN_ROW_SUM (a row far below the maximum, NaN, infinities, a row
# of -inf) sends the whole tensor through the per-row path. Results agree with
# the per-row shift up to float rounding.
_ROWMAX_MAX_ROWS = 16
_MIN_ROW_SUM = 2.0**-32
# A global maximum this close to zero needs no shift at all.
_EXP_SAFE = 60.0

Softmax = Callable[[np.ndarray, np.ndarray], None]


def softmax_core(a: int, k: int, b: int, cdt: np.dtype, log: bool) -> Softmax:
    """``run(x, t)``: softmax (``log``: log-softmax) of ``x`` along its axis 1, into ``t``.

    ``x`` and ``t`` are ``(a * b, k)`` when ``b == 1`` (the softmax dim is the
    last), else ``(a, k, b)``; ``x`` has dtype ``cdt`` (any strides), ``t`` is
    a ``cdt`` array that does not overlap ``x``. ``a, k, b > 0``. The general
    kernels and the load-time fast paths share it, so both give the same values.
    """
    if b != 1:
        return _softmax_inner(a, k, b, cdt, log)
    m = a
    e = np.empty((m, k), cdt) if log else None
    if _square_sums(m, k):
        # each row's sum in every column of the row (see _square_sums)
        ones = np.ones((k, k), cdt)
        s = sums = np.empty((m, k), cdt)
        s_col = s[:, 0]
    else:
        ones = np.ones(k, cdt)
        s_col = sums = np.empty(m, cdt)
        s = s_col.reshape(m, 1)
    row_max = np.empty((m, 1), cdt)
    top = np.empty((), cdt)
    # one row: its maximum is the maximum of all, and broadcasting a 0-dim view
    # costs less than a (1, 1) array (see row_normalizer)
    one_row = m == 1
    if one_row and not _square_sums(m, k):
        s = s_col.reshape(())

    def by_row_max(x: np.ndarray, t: np.ndarray) -> None:
        if one_row:
            np.maximum.reduce(x, None, None, top)
            np.subtract(x, top, t)
        else:
            np.maximum.reduce(x, 1, None, row_max, True)
            np.subtract(x, row_max, t)
        if log:
            np.exp(t, e)
            np.dot(e, ones, sums)
            np.log(s, s)
            np.subtract(t, s, t)
        else:
            np.exp(t, t)
            np.dot(t, ones, sums)
            np.divide(t, s, t)

    if m <= _ROWMAX_MAX_ROWS:
        return by_row_max

    def by_top(x: np.ndarray, t: np.ndarray) -> None:
        np.maximum.reduce(x, None, None, top)
        base = x
        if not -_EXP_SAFE < float(top) < _EXP_SAFE:  # also NaN and infinities
            np.subtract(x, top, t)
            base = t
        ex = e if log else t
        np.exp(base, ex)
        np.dot(ex, ones, sums)
        if not np.minimum.reduce(s_col) >= _MIN_ROW_SUM:
            by_row_max(x, t)
            return
        if log:
            np.log(s, s)
            np.subtract(base, s, t)
        else:
            np.divide(t, s, t)

    return by_top


def _softmax_inner(a: int, k: int, b: int, cdt: np.dtype, log: bool) -> Softmax:
    """Softmax along a dim that is not the last: per-row maxima and sums with keepdims."""
    row_max = np.empty((a, 1, b), cdt)
    s = np.empty((a, 1, b), cdt)
    e = np.empty((a, k, b), cdt) if log else None

    def run(x: np.ndarray, t: np.ndarray) -> None:
        np.maximum.reduce(x, 1, None, row_max, True)
        np.subtract(x, row_max, t)
        ex = e if log else t
        np.exp(t, ex)
        np.add.reduce(ex, 1, None, s, True)
        if log:
            np.log(s, s)
            np.subtract(t, s, t)
        else:
            np.divide(t, s, t)

    return run


def _cached_softmax(layout: tuple[int, int, int], cdt: np.dtype, log: bool) -> Softmax:
    a, k, b = layout

    def make():
        return softmax_core(a, k, b, cdt, log), (4 if log else 3) * a * k * b * cdt.itemsize

    return scratch_object(("softmax-core", layout, cdt.char, log), make)


def _softmax_kernel(op: str, log: bool, self, dim, half_to_float, out):
    cdt, d, o = _softmax_setup(op, self, dim, half_to_float, out)
    if o.size == 0:
        return o
    layout = softmax_layout(self.shape, d)
    a, k, b = layout
    shape = (a, k) if b == 1 else layout
    x = self.reshape(shape).astype(cdt, copy=False)
    direct = o.dtype == cdt and o.flags.c_contiguous
    t = o.reshape(shape) if direct else scratch("softmax-out", shape, cdt)
    if np.may_share_memory(x, t):
        x = x.copy()
    with quiet_fp():  # rows of -inf give NaN, as in torch
        _cached_softmax(layout, cdt, log)(x, t)
    if not direct:
        np.copyto(o, t.reshape(o.shape), casting="unsafe")
    return o


@kernel("aten::_softmax.out")
def softmax(self, dim, half_to_float, out):
    return _softmax_kernel("_softmax", False, self, dim, half_to_float, out)


@kernel("aten::_log_softmax.out")
def log_softmax(self, dim, half_to_float, out):
    return _softmax_kernel("_log_softmax", True, self, dim, half_to_float, out)


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
