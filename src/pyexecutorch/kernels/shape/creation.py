"""Tensor-creation kernels: empty, full, ones, zeros, arange, rand, randn.

The output dtype is the planned output's. Scalar fill values are converted as
torch's fill does (:func:`pyexecutorch.kernels.shape.shape.cast_scalar`), and arange
computes its length and values by torch's rules.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from pyexecutorch.kernels.bounds import bounded_fit, check_output_size
from pyexecutorch.kernels.common import fit
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.kernels.shape.shape import assign, cast_scalar, check_sizes

_RNG = np.random.default_rng()


def manual_seed(seed: int) -> None:
    """Reseed the generator behind ``rand``/``randn`` (for reproducible runs)."""
    global _RNG
    _RNG = np.random.default_rng(seed)


@kernel("aten::empty.out")
def empty(size, memory_format, out):
    return bounded_fit(out, check_sizes(size), "empty")


@kernel("dim_order_ops::_empty_dim_order.out")
def empty_dim_order(size, dim_order, out):
    size = check_sizes(size)
    if dim_order is not None and sorted(dim_order) != list(range(len(size))):
        raise KernelError(
            f"_empty_dim_order: dim_order {list(dim_order)} is not a permutation of the "
            f"{len(size)} dimensions"
        )
    return bounded_fit(out, size, "_empty_dim_order")


@kernel("aten::full.out")
def full(size, fill_value, out):
    out = bounded_fit(out, check_sizes(size), "full")
    out[...] = cast_scalar(fill_value, out.dtype, "fill_value")
    return out


@kernel("aten::full_like.out")
def full_like(self, fill_value, memory_format, out):
    out = fit(out, self.shape)
    out[...] = cast_scalar(fill_value, out.dtype, "fill_value")
    return out


@kernel("aten::ones.out")
def ones(size, out):
    out = bounded_fit(out, check_sizes(size), "ones")
    out[...] = 1
    return out


@kernel("aten::zeros.out")
def zeros(size, out):
    out = bounded_fit(out, check_sizes(size), "zeros")
    out[...] = 0
    return out


@kernel("aten::scalar_tensor.out")
def scalar_tensor(s, out):
    out = fit(out, ())
    out[...] = cast_scalar(s, out.dtype, "s")
    return out


# (start, end, step, dtype) -> the values; arange arguments are usually
# constants of the program, so a call is one copy.
_ARANGES: dict[tuple, np.ndarray] = {}


def _arange(start, end, step, out):
    key = (start, end, step, out.dtype)
    values = _ARANGES.get(key)
    if values is None:
        # The length first: a hostile end must fail before the range is built.
        n, wide = _arange_plan(start, end, step, out.dtype)
        check_output_size(out, (n,), "arange")
        values = wide()
        if len(_ARANGES) > 256:
            _ARANGES.clear()
        if values.size <= 1 << 16:
            values.flags.writeable = False
            _ARANGES[key] = values
    out = fit(out, values.shape)
    out[...] = values
    return out


def _arange_plan(start, end, step, dtype: np.dtype) -> tuple[int, Callable[[], np.ndarray]]:
    """torch's arange: its length rule, and a function building the values start + i * step
    (rounded once) in ``dtype``; nothing is allocated until that function is called."""
    if dtype.kind not in "iuf":
        raise KernelError(f"arange: unsupported output dtype {dtype}")
    fs, fe, fp = float(start), float(end), float(step)
    if fp == 0:
        raise KernelError("arange: step must be nonzero")
    if not (math.isfinite(fs) and math.isfinite(fe)):
        raise KernelError(f"arange: unsupported range {fs} -> {fe}")
    if not ((fp > 0 and fe >= fs) or (fp < 0 and fe <= fs)):
        raise KernelError(
            f"arange: upper bound ({end}) and lower bound ({start}) inconsistent with step "
            f"sign ({step})"
        )
    if dtype.kind in "iu":
        # Integer outputs compute in int64 from the truncated scalars.
        s, e, p = (
            int(v) if isinstance(v, bool | int) else math.trunc(v) for v in (start, end, step)
        )
        if dtype == np.int64:
            # torch sizes int64 ranges from the truncated scalars (other integer
            # types use the double formula below and may repeat a value).
            if p == 0:
                raise KernelError("arange: step must be nonzero")
            sgn = (p > 0) - (p < 0)
            num = e - s + p - sgn
            n = abs(num) // abs(p) * (1 if (num >= 0) == (p > 0) else -1)
        else:
            n = math.ceil((fe - fs) / fp)
        n = max(n, 0)
        first, stride, wide_dtype = s, p, np.int64
    else:
        n = max(math.ceil((fe - fs) / fp), 0)
        first, stride, wide_dtype = fs, fp, np.float64

    def build() -> np.ndarray:
        wide = np.arange(n, dtype=wide_dtype)
        wide *= stride
        wide += first
        values = np.empty(wide.shape, dtype)
        assign(values, wide)
        return values

    return n, build


@kernel("aten::arange.out")
def arange(end, out):
    return _arange(0, end, 1, out)


@kernel("aten::arange.start_out")
def arange_start(start, end, step, out):
    return _arange(start, end, step, out)


def _float_out(out: np.ndarray, op: str) -> None:
    if out.dtype.kind != "f":
        raise KernelError(f"{op}: output dtype must be floating point, got {out.dtype}")


@kernel("aten::rand.out")
def rand(size, out):
    """Uniform samples in [0, 1) from numpy's default generator."""
    out = bounded_fit(out, check_sizes(size), "rand")
    _float_out(out, "rand")
    if out.dtype == np.float16:
        # 11 random bits, exactly representable: never rounds up to 1.0.
        bits = _RNG.integers(0, 1 << 11, size=out.shape, dtype=np.int16)
        np.multiply(bits, np.float16(1.0 / (1 << 11)), out=out, casting="unsafe")
    elif out.flags.c_contiguous:
        _RNG.random(out=out, dtype=out.dtype)
    else:
        assign(out, _RNG.random(out.shape, dtype=out.dtype))
    return out


@kernel("aten::randn.out")
def randn(size, out):
    """Standard normal samples from numpy's default generator."""
    out = bounded_fit(out, check_sizes(size), "randn")
    _float_out(out, "randn")
    if out.dtype != np.float16 and out.flags.c_contiguous:
        _RNG.standard_normal(out=out, dtype=out.dtype)
    else:
        dtype = np.float32 if out.dtype == np.float16 else out.dtype
        assign(out, _RNG.standard_normal(out.shape, dtype=dtype))
    return out
