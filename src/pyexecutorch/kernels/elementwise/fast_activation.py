"""Load-time fast paths for activations and clamps: erf, gelu, elu, leaky_relu,
hardtanh, clamp.

They compute what the general kernels compute with fewer numpy calls: scalar
operands bound once as 0-dim arrays (or full arrays for min/max, see
:func:`bound`), scratch and flat views made at load, and identities that save
passes where they are exact (``leaky_relu(x) = max(x * slope, x)`` for
``0 < slope < 1``). numpy's ``maximum``/``minimum`` return their second
operand when the two compare equal, so the tensor goes second: clamping -0.0 at
0 keeps -0.0, as torch does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyexecutorch.kernels.elementwise.activation import HALF_ERF, TANH_BETA, TANH_BETA_KAPPA
from pyexecutorch.kernels.elementwise.fast import (
    F64,
    FLOATS,
    NUMERIC,
    bound,
    broadcasts_to,
    const,
    fits,
    overlaps,
    same_dtype,
    same_memory,
    unary,
)
from pyexecutorch.kernels.elementwise.unary import ERF, SMALL
from pyexecutorch.kernels.registry import Const, Inline, specializer


def _scratch_if_shared(x: np.ndarray, out: np.ndarray) -> np.ndarray | None:
    """Scratch to build a result in before writing ``out`` when ``out`` shares
    ``x``'s memory (see ``overlaps``); ``None`` when ``out`` itself will do."""
    return np.empty_like(out) if overlaps(out, x) else None


# ---------------------------------------------------------------------------
# erf and gelu
# ---------------------------------------------------------------------------


def _erf_kernel(evaluate, x0: np.ndarray, out0: np.ndarray, after=None):  # noqa: ANN001, ANN202
    """A kernel ``(x, ..., out)`` running ``evaluate(flat x, flat out)`` then ``after(x, out)``.

    Flat views of the load-time arrays are taken once; any other array is
    flattened per call.
    """
    xf0, of0 = x0.reshape(-1), out0.reshape(-1)

    def run(x: np.ndarray, *rest: Any) -> np.ndarray:
        out = rest[-1]
        evaluate(xf0 if x is x0 else x.reshape(-1), of0 if out is out0 else out.reshape(-1))
        if after is not None:
            after(x, out)
        return out

    return run


def _evaluable(x: Any, out: Any) -> bool:
    # float32 at any size; float64 only where math.erf is used (larger float64
    # tensors keep the general kernel's float64 evaluation). The evaluation
    # reads x block by block before writing the block's output: out may be
    # x's memory, but no other overlap.
    return (
        unary(x, out)
        and out.flags.c_contiguous
        and (x.dtype != F64 or x.size <= SMALL)
        and (same_memory(x, out) or not overlaps(out, x))
    )


@specializer("aten::erf.out")
def _erf(x: Any, out: Any) -> Any:
    if not _evaluable(x, out):
        return None
    return _erf_kernel(ERF.evaluator(x.size), x, out)


@specializer("aten::gelu.out")
def _gelu(x: Any, approximate: Any, out: Any) -> Any:
    if approximate == "tanh" and unary(x, out):
        return _gelu_tanh(x, out)
    if approximate != "none" or not _evaluable(x, out):
        return None
    half = const(0.5, x.dtype)
    # x is read again after out is written: keep a copy when they share memory
    kept = np.empty_like(x) if overlaps(out, x) else None
    evaluate = HALF_ERF.evaluator(x.size)

    def finish(x: np.ndarray, out: np.ndarray) -> None:
        # out = 0.5 * erf(x / sqrt(2)) rounded as torch rounds its erf; then
        # x * (0.5 + out), the general kernel's gelu_from_half_erf
        np.add(out, half, out=out)
        np.multiply(out, x if kept is None else kept, out=out)

    if kept is None:
        return _erf_kernel(evaluate, x, out, finish)
    kept_flat = kept.reshape(-1)

    def keep_then_evaluate(xf: np.ndarray, of: np.ndarray) -> None:
        np.copyto(kept_flat, xf)
        evaluate(xf, of)

    return _erf_kernel(keep_then_evaluate, x, out, finish)


def _gelu_tanh(x: np.ndarray, out: np.ndarray):  # noqa: ANN202
    # the general kernel's formula: 0.5 * x * (1 + tanh(x * (beta + beta * kappa * x^2)))
    dt = x.dtype
    bk, b, one, half = (const(v, dt) for v in (TANH_BETA_KAPPA, TANH_BETA, 1.0, 0.5))
    multiply, add = np.multiply, np.add
    scratch = _scratch_if_shared(x, out)

    def gelu(x: np.ndarray, approximate: Any, out: np.ndarray) -> np.ndarray:
        t = out if scratch is None else scratch
        multiply(x, x, out=t)
        multiply(t, bk, out=t)
        add(t, b, out=t)
        multiply(t, x, out=t)
        np.tanh(t, out=t)
        add(t, one, out=t)
        multiply(t, x, out=t)
        return multiply(t, half, out=out)

    return gelu


# ---------------------------------------------------------------------------
# elu, leaky_relu
# ---------------------------------------------------------------------------


@specializer("aten::elu.out")
def _elu(x: Any, alpha: Any, scale: Any, input_scale: Any, out: Any) -> Any:
    if not unary(x, out) or not all(
        fits(v, x.dtype) and np.isfinite(v) for v in (alpha, scale, input_scale)
    ):
        return None
    dt = x.dtype
    zero = const(0, dt)
    neg_coef = const(float(alpha) * float(scale), dt)
    if scale == 1 and input_scale == 1 and 0 < float(neg_coef) <= 1:
        # x > 0 ? x : alpha * expm1(x) is max(alpha * expm1(min(0, x)), x): for
        # x <= 0, alpha * expm1(x) >= x when alpha <= 1; for x > 0 the first is 0
        t = _scratch_if_shared(x, out)
        scaled = neg_coef != 1

        def elu(x: np.ndarray, alpha: Any, scale: Any, input_scale: Any, out: np.ndarray):  # noqa: ANN202
            s = out if t is None else t
            np.minimum(zero, x, out=s)
            np.expm1(s, out=s)
            if scaled:
                np.multiply(s, neg_coef, out=s)
            return np.maximum(s, x, out=out)

        return elu
    # the general kernel's sum of the two parts, at most one of them nonzero
    neg = np.empty(x.shape, dt)
    in_coef = const(input_scale, dt)
    pos_coef = const(scale, dt)

    def elu_general(x: np.ndarray, alpha: Any, scale: Any, input_scale: Any, out: np.ndarray):  # noqa: ANN202
        np.minimum(zero, x, out=neg)
        if input_scale != 1:
            np.multiply(neg, in_coef, out=neg)
        np.expm1(neg, out=neg)
        np.multiply(neg, neg_coef, out=neg)
        np.maximum(zero, x, out=out)
        if scale != 1:
            np.multiply(out, pos_coef, out=out)
        return np.add(out, neg, out=out)

    return elu_general


@specializer("aten::leaky_relu.out")
def _leaky_relu(x: Any, negative_slope: Any, out: Any) -> Any:
    if not unary(x, out) or not fits(negative_slope, x.dtype):
        return None
    slope = const(negative_slope, x.dtype)
    if slope == 1:
        return Inline(np.copyto, (-1, 0))
    if not 0 < float(slope) < np.inf:
        return None  # with a zero slope inf * 0 = NaN would win the max: the general kernel's case
    # x > 0 ? x : x * slope is max(x * slope, x) for slope < 1, min for slope > 1
    pick = np.maximum if slope < 1 else np.minimum
    t = _scratch_if_shared(x, out)

    def leaky_relu(x: np.ndarray, negative_slope: Any, out: np.ndarray) -> np.ndarray:
        s = out if t is None else t
        np.multiply(x, slope, out=s)
        return pick(s, x, out=out)

    return leaky_relu


# ---------------------------------------------------------------------------
# hardtanh, clamp
# ---------------------------------------------------------------------------

# np.clip is one pass instead of two but costs ~3 us more per call.
_CLIP_MIN = 2048


def _clamp_scalars(x: np.ndarray, lo: Any, hi: Any) -> Any:
    """A kernel ``(x, lo, hi, out)`` for min(max(x, lo), hi) with Python-number
    bounds (either may be None), or None."""
    dt = x.dtype
    for v in (lo, hi):
        if v is not None and (not fits(v, dt) or v != v):
            return None  # NaN bounds and overflowing ones: the general kernel's cases
    if lo is None and hi is None:
        return None
    if lo is not None and hi is not None and x.size >= _CLIP_MIN:
        # np.clip keeps x on ties (-0.0) and propagates NaN, like torch
        return Inline(
            np.clip, (0, Const(const(lo, dt)), Const(const(hi, dt)), -1), keyword_out=True
        )
    lo_b = None if lo is None else bound(lo, x)
    hi_b = None if hi is None else bound(hi, x)
    if hi_b is None:
        return Inline(np.maximum, (Const(lo_b), 0, -1), keyword_out=True)
    if lo_b is None:
        return Inline(np.minimum, (Const(hi_b), 0, -1), keyword_out=True)

    def clamp(x: np.ndarray, lo: Any, hi: Any, out: np.ndarray) -> np.ndarray:
        np.maximum(lo_b, x, out=out)
        return np.minimum(hi_b, out, out=out)

    return clamp


@specializer("aten::hardtanh.out")
def _hardtanh(x: Any, lo: Any, hi: Any, out: Any) -> Any:
    if not unary(x, out) or not (isinstance(lo, (int, float)) and isinstance(hi, (int, float))):
        return None
    return _clamp_scalars(x, lo, hi)


@specializer("aten::clamp.out")
def _clamp(x: Any, lo: Any, hi: Any, out: Any) -> Any:
    if not unary(x, out, NUMERIC):
        return None
    if x.dtype not in FLOATS and any(v is not None and type(v) is not int for v in (lo, hi)):
        return None  # an integer tensor with a float bound computes in float: general kernel
    return _clamp_scalars(x, lo, hi)


@specializer("aten::clamp.Tensor_out")
def _clamp_tensor(x: Any, lo: Any, hi: Any, out: Any) -> Any:
    bounds = [b for b in (lo, hi) if b is not None]
    if not bounds or not same_dtype(NUMERIC, x, out, *bounds):
        return None
    if not broadcasts_to(out, x, *bounds):
        return None
    if lo is not None and hi is not None and overlaps(out, hi):
        return None  # hi is read after out is first written
    if hi is None:
        return Inline(np.maximum, (1, 0, -1), keyword_out=True)
    if lo is None:
        return Inline(np.minimum, (2, 0, -1), keyword_out=True)

    def clamp(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, out: np.ndarray) -> np.ndarray:
        np.maximum(lo, x, out=out)
        return np.minimum(hi, out, out=out)

    return clamp
