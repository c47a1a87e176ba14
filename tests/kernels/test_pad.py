"""Padding kernels against torch eager: constant_pad_nd, reflection_pad{1,2,3}d,
replication_pad{1,2,3}d, including negative (cropping) padding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pyexecutorch.kernels import KernelError

from ._shape_testutil import (
    DTYPES,
    LAYOUTS,
    OUT_KINDS,
    SETTINGS,
    call,
    data,
    layout,
    np_dtype,
    planned,
    same,
    shapes,
)

dtypes = st.sampled_from(DTYPES)
layouts = st.sampled_from(LAYOUTS)
out_kinds = st.sampled_from(OUT_KINDS)
seeds = st.integers(0, 2**32 - 1)


def _input(seed, shape, dtype, kind):
    a = data(np.random.default_rng(seed), shape, dtype, nan=True)
    return layout(a, kind), torch.from_numpy(a.copy())


def _run(name, expected, out_kind, *args):
    out = planned(expected.shape, np_dtype(expected.dtype), out_kind)
    same(call(name, *args, out), expected)


@SETTINGS
@given(shapes(max_dims=4), dtypes, layouts, out_kinds, seeds, st.data())
def test_constant_pad_nd(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    k = d.draw(st.integers(0, len(shape)))
    pad = []
    for i in range(k):
        n = shape[len(shape) - 1 - i]
        lo = d.draw(st.integers(-n, 3))
        hi = d.draw(st.integers(-(n + min(lo, 0)), 3))
        pad += [lo, hi]
    value = d.draw(st.sampled_from([0, 1, -1.5, True, 7]))
    if np.dtype(dtype) == np.uint8 and value == -1.5:
        value = 2
    if np.dtype(dtype).kind in "iub" and isinstance(value, float):
        value = 3
    expected = torch.constant_pad_nd(t, pad, value)
    _run("aten::constant_pad_nd.out", expected, out_kind, x, tuple(pad), value)


def test_constant_pad_errors():
    x = np.zeros((2, 3), np.float32)
    out = np.empty(0, np.float32)
    with pytest.raises(KernelError, match="must be even"):
        call("aten::constant_pad_nd.out", x, (1,), 0, out)
    with pytest.raises(KernelError, match="covers 3 dimensions"):
        call("aten::constant_pad_nd.out", x, (1, 1, 1, 1, 1, 1), 0, out)
    with pytest.raises(KernelError, match="negative output size"):
        call("aten::constant_pad_nd.out", x, (-2, -2), 0, out)
    with pytest.raises(KernelError, match="crops more than the input size 3"):
        call("aten::constant_pad_nd.out", x, (-4, 2), 0, out)
    with pytest.raises(KernelError, match="without overflow"):
        call("aten::constant_pad_nd.out", x.astype(np.uint8), (1, 1), 300, np.empty(0, np.uint8))


PADS = {
    ("reflect", 1): (torch.ops.aten.reflection_pad1d, "aten::reflection_pad1d.out"),
    ("reflect", 2): (torch.ops.aten.reflection_pad2d, "aten::reflection_pad2d.out"),
    ("reflect", 3): (torch.ops.aten.reflection_pad3d, "aten::reflection_pad3d.out"),
    ("replicate", 1): (torch.ops.aten.replication_pad1d, "aten::replication_pad1d.out"),
    ("replicate", 2): (torch.ops.aten.replication_pad2d, "aten::replication_pad2d.out"),
    ("replicate", 3): (torch.ops.aten.replication_pad3d, "aten::replication_pad3d.out"),
}
FLOATS = [np.float32, np.float64, np.float16]


@SETTINGS
@given(
    st.sampled_from(["reflect", "replicate"]),
    st.integers(1, 3),
    st.booleans(),
    st.sampled_from(FLOATS),
    layouts,
    out_kinds,
    seeds,
    st.booleans(),
    st.data(),
)
def test_reflection_replication_pad(mode, dims, batched, dtype, kind, out_kind, seed, negative, d):
    lead = (d.draw(st.integers(0, 2)),) if batched else ()
    spatial = tuple(d.draw(st.integers(1, 5)) for _ in range(dims))
    shape = lead + (d.draw(st.integers(1, 2)),) + spatial
    x, t = _input(seed, shape, dtype, kind)
    padding = []
    for i in range(dims):
        n = spatial[dims - 1 - i]
        top = n - 1 if mode == "reflect" else 4
        low = -(n - 1) if negative else 0
        lo = d.draw(st.integers(low, top))
        hi = d.draw(st.integers(max(low, 1 - n - lo), top))
        padding += [lo, hi]
    torch_fn, name = PADS[(mode, dims)]
    expected = torch_fn(t, padding)
    _run(name, expected, out_kind, x, tuple(padding))


def test_pad_integer_dtypes():
    x = np.arange(12, dtype=np.int64).reshape(1, 3, 4)
    t = torch.from_numpy(x.copy())
    for (_mode, dims), (torch_fn, name) in PADS.items():
        if dims != 1:
            continue
        expected = torch_fn(t, [2, 3])
        same(call(name, x, (2, 3), np.empty(expected.shape, np.int64)), expected)


def test_reflection_replication_errors():
    out = np.empty(0, np.float32)
    x = np.zeros((1, 2, 3), np.float32)
    with pytest.raises(KernelError, match="must be less than the input size 3"):
        call("aten::reflection_pad1d.out", x, (3, 0), out)
    with pytest.raises(KernelError, match="expected a 2D or 3D"):
        call("aten::reflection_pad1d.out", np.zeros(3, np.float32), (1, 1), out)
    with pytest.raises(KernelError, match="4 entries"):
        call("aten::replication_pad2d.out", np.zeros((1, 2, 3), np.float32), (1, 1), out)
    with pytest.raises(KernelError, match="non-zero sizes"):
        call("aten::replication_pad1d.out", np.zeros((1, 0, 3), np.float32), (1, 1), out)
    with pytest.raises(KernelError, match="too small"):
        call("aten::replication_pad1d.out", x, (-2, -1), out)


def test_pad_batch_zero():
    x = np.zeros((0, 2, 3), np.float32)
    t = torch.from_numpy(x.copy())
    expected = torch.ops.aten.reflection_pad1d(t, [1, 2])
    same(call("aten::reflection_pad1d.out", x, (1, 2), np.empty(0, np.float32)), expected)
