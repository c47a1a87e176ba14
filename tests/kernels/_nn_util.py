"""Helpers for the matrix / convolution / pooling / normalization kernel tests."""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from hypothesis import HealthCheck, settings

from pyexecutorch.kernels import get_kernel

# NN_EXAMPLES=500 for a longer soak.
SETTINGS = settings(
    max_examples=int(os.environ.get("NN_EXAMPLES", "30")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

OUT_KINDS = ("exact", "unplanned", "upper")
LAYOUTS = ("contiguous", "permuted", "sliced")

TOL = {
    np.dtype(np.float16): dict(rtol=2e-3, atol=2e-3),
    np.dtype(np.float32): dict(rtol=1e-4, atol=1e-5),
    np.dtype(np.float64): dict(rtol=1e-10, atol=1e-12),
    np.dtype(np.complex64): dict(rtol=1e-4, atol=1e-5),
    np.dtype(np.complex128): dict(rtol=1e-10, atol=1e-12),
}


def call(name: str, *args):
    k = get_kernel(name)
    assert k is not None, f"no kernel registered for {name}"
    return k.fn(*args)


def rand(rng: np.random.Generator, shape, dtype=np.float32, scale=1.0) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return (rng.standard_normal(shape) * scale).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -20), min(info.max, 20)
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)


def readonly(a: np.ndarray) -> np.ndarray:
    """A read-only copy, as constants reach kernels."""
    b = np.array(a, copy=True)
    b.flags.writeable = False
    return b


def layout(a: np.ndarray, kind: str) -> np.ndarray:
    """The same values as ``a`` with another memory layout."""
    if kind == "contiguous" or a.ndim == 0:
        return a.copy()
    if kind == "permuted":
        # Channels-last style: physical order moves dim 1 last.
        order = (0, *range(2, a.ndim), 1) if a.ndim >= 3 else tuple(reversed(range(a.ndim)))
        phys = np.ascontiguousarray(a.transpose(order))
        return phys.transpose(np.argsort(order))
    # Every other element of a buffer twice as wide in the last dim.
    big = np.zeros(a.shape[:-1] + (2 * a.shape[-1] + 1,), a.dtype)
    v = big[..., 1::2]
    v[...] = a
    return v


def planned(shape, dtype, kind: str) -> np.ndarray:
    """An out array as memory planning would hand it over."""
    shape = tuple(shape)
    if kind == "exact":
        return np.full(shape, 77, dtype) if np.dtype(dtype).kind != "b" else np.ones(shape, dtype)
    if kind == "unplanned":
        return np.empty((0,), dtype)
    # Upper bound of a dynamic shape: more storage than needed.
    return np.empty((math.prod(shape) + 5,), dtype)


def t(a) -> torch.Tensor | None:
    if a is None:
        return None
    return torch.from_numpy(np.array(a, copy=True))


def close(actual: np.ndarray, expected, rtol=None, atol=None, dtype=None):
    """Compare with torch's result: shape, dtype, values (NaN equal)."""
    if isinstance(expected, torch.Tensor):
        expected = expected.detach().numpy()
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == (dtype or expected.dtype), (actual.dtype, expected.dtype)
    tol = TOL.get(actual.dtype, dict(rtol=0, atol=0))
    np.testing.assert_allclose(
        actual.astype(np.float64) if actual.dtype == np.float16 else actual,
        expected.astype(np.float64) if expected.dtype == np.float16 else expected,
        rtol=tol["rtol"] if rtol is None else rtol,
        atol=tol["atol"] if atol is None else atol,
        equal_nan=True,
    )
