"""Helpers shared by the shape/copy/creation/padding kernel tests."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import settings
from hypothesis import strategies as st

from pyexecutorch.kernels import get_kernel

SETTINGS = settings(max_examples=30, deadline=None)

DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_]
LAYOUTS = ["c", "strided", "f"]


def call(name, *args):
    kernel = get_kernel(name)
    assert kernel is not None, f"{name} is not registered"
    return kernel.fn(*args)


def np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


def data(rng: np.random.Generator, shape, dtype, *, nan: bool = False) -> np.ndarray:
    """Random contiguous data of ``dtype`` (floats with a NaN/inf sprinkled in if ``nan``)."""
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = max(info.min, -1000), min(info.max, 1000)
        return np.asarray(rng.integers(low, high, size=shape, endpoint=True), dtype=dtype)
    if dtype.kind == "c":
        return np.asarray(rng.standard_normal(shape) + 1j * rng.standard_normal(shape), dtype)
    a = np.asarray(rng.standard_normal(shape) * 10, dtype=dtype)
    if nan and a.size:
        flat = a.reshape(-1)
        flat[rng.integers(0, a.size)] = np.nan
        flat[rng.integers(0, a.size)] = -np.inf
    return a


def layout(a: np.ndarray, kind: str) -> np.ndarray:
    """``a`` presented as a C-contiguous, strided (every other element) or F-ordered array."""
    if a.ndim == 0:
        return a.copy()
    if kind == "c":
        return np.ascontiguousarray(a)
    if kind == "strided":
        buf = np.zeros(a.shape[:-1] + (a.shape[-1] * 2 + 1,), dtype=a.dtype)
        view = buf[..., 1::2]
        view[...] = a
        return view
    return np.asfortranarray(a)


def planned(shape, dtype, kind: str = "c") -> np.ndarray:
    """A planned output of ``shape``: garbage inside, laid out as ``kind`` (or unplanned)."""
    dtype = np.dtype(dtype)
    if kind == "unplanned":
        return np.empty((0,), dtype=dtype)
    filler = np.ones(shape, dtype=dtype) if dtype.kind != "b" else np.ones(shape, dtype=bool)
    filler *= 7 if dtype.kind != "b" else True
    return layout(filler, "strided" if kind == "strided" else kind)


OUT_KINDS = ["c", "f", "unplanned"]


@st.composite
def shapes(draw, min_dims=0, max_dims=4, min_side=0, max_side=4):
    return tuple(
        draw(st.lists(st.integers(min_side, max_side), min_size=min_dims, max_size=max_dims))
    )


def same(got: np.ndarray, expected: torch.Tensor) -> None:
    """Exact equality with torch's result, dtype and shape included (NaNs compare equal)."""
    exp = expected.detach().numpy()
    assert got.shape == exp.shape, (got.shape, exp.shape)
    assert got.dtype == exp.dtype, (got.dtype, exp.dtype)
    np.testing.assert_array_equal(got, exp)
