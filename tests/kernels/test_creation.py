"""Tensor-creation kernels against torch eager: empty, full, full_like, ones, zeros,
scalar_tensor, arange, rand, randn."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from pyexecutorch.kernels import KernelError, get_kernel
from pyexecutorch.kernels.shape.creation import manual_seed

from ._shape_testutil import DTYPES, OUT_KINDS, SETTINGS, call, planned, same, shapes

dtypes = st.sampled_from(DTYPES)
out_kinds = st.sampled_from(OUT_KINDS)
TORCH_OF = {np.dtype(d): torch.from_numpy(np.zeros(1, d)).dtype for d in DTYPES}

fill_values = st.one_of(
    st.booleans(),
    st.integers(-300, 300),
    st.floats(-1e3, 1e3, allow_nan=False),
    st.sampled_from([float("nan"), float("inf"), -0.0, 2**40, 0.5, -0.5, 65519, 65520.0, 1e39]),
)


def _torch_or_error(fn):
    try:
        return fn(), None
    except (RuntimeError, ValueError) as e:
        return None, e


@SETTINGS
@given(shapes(), dtypes, fill_values, out_kinds)
def test_full_family(shape, dtype, value, out_kind):
    tdt = TORCH_OF[np.dtype(dtype)]
    # torch skips its overflow check when filling a single element; ask it with two.
    _, error = _torch_or_error(lambda: torch.full((2,), value, dtype=tdt))
    expected = torch.full(shape, value, dtype=tdt) if error is None else None
    like = np.zeros(shape, dtype)
    cases = [
        ("aten::full.out", (shape, value)),
        ("aten::full_like.out", (like, value, None)),
    ]
    if not shape:
        cases.append(("aten::scalar_tensor.out", (value,)))
    for name, args in cases:
        out = planned(shape, dtype, out_kind)
        if error is not None:
            with pytest.raises(KernelError, match="without overflow"):
                call(name, *args, out)
        else:
            same(call(name, *args, out), expected)


@SETTINGS
@given(shapes(), dtypes, out_kinds)
def test_ones_zeros_empty(shape, dtype, out_kind):
    tdt = TORCH_OF[np.dtype(dtype)]
    same(
        call("aten::ones.out", shape, planned(shape, dtype, out_kind)), torch.ones(shape, dtype=tdt)
    )
    same(
        call("aten::zeros.out", shape, planned(shape, dtype, out_kind)),
        torch.zeros(shape, dtype=tdt),
    )
    got = call("aten::empty.out", shape, None, planned(shape, dtype, out_kind))
    assert got.shape == shape and got.dtype == dtype
    order = tuple(range(len(shape)))
    got = call("dim_order_ops::_empty_dim_order.out", shape, order, planned(shape, dtype))
    assert got.shape == shape and got.dtype == dtype


def test_creation_errors():
    out = np.empty(0, np.float32)
    with pytest.raises(KernelError, match="negative dimension -1"):
        call("aten::zeros.out", (2, -1), out)
    with pytest.raises(KernelError, match="not a permutation"):
        call("dim_order_ops::_empty_dim_order.out", (2, 3), (0, 0), out)
    with pytest.raises(KernelError, match="300 cannot be converted"):
        call("aten::full.out", (2,), 300, np.empty(2, np.uint8))
    with pytest.raises(KernelError, match="without overflow"):
        call("aten::full.out", (2,), 1e39, np.empty(2, np.float32))
    with pytest.raises(KernelError, match="without overflow"):
        call("aten::scalar_tensor.out", float("nan"), np.empty((), np.int32))


def _same_arange(got: np.ndarray, expected: torch.Tensor) -> None:
    """Equal, but floats within a couple of ulps of the largest value: torch's CPU arange
    evaluates start + i * step with FMA in SIMD chunks (a CPU-dependent last-bit difference);
    the kernel evaluates it as the official portable kernel does, in double, rounding once."""
    exp = expected.numpy()
    assert got.shape == exp.shape and got.dtype == exp.dtype, (got.shape, exp.shape)
    if got.dtype.kind == "f" and got.size:
        scale = float(np.abs(exp.astype(np.float64)).max())
        atol = 2 * float(np.finfo(got.dtype).eps) * scale
        np.testing.assert_allclose(got, exp, rtol=0, atol=atol)
    else:
        np.testing.assert_array_equal(got, exp)


numbers = st.one_of(
    st.integers(-20, 20), st.floats(-20, 20, allow_nan=False).map(lambda v: round(v, 3))
)
arange_dtypes = st.sampled_from([np.float32, np.float64, np.float16, np.int64, np.int32, np.int16])


@SETTINGS
@given(numbers, numbers, numbers, arange_dtypes)
def test_arange(start, end, step, dtype):
    tdt = TORCH_OF.get(np.dtype(dtype), torch.int16)
    expected, error = _torch_or_error(lambda: torch.arange(start, end, step, dtype=tdt))
    assume(expected is None or expected.numel() < 10_000)
    out = planned(expected.shape if expected is not None else (0,), dtype, "unplanned")
    if error is not None:
        with pytest.raises(KernelError):
            call("aten::arange.start_out", start, end, step, out)
        return
    _same_arange(call("aten::arange.start_out", start, end, step, out), expected)
    if isinstance(end, int) and end >= 0 or isinstance(end, float) and end > 0:
        expected = torch.arange(end, dtype=tdt)
        _same_arange(call("aten::arange.out", end, planned(expected.shape, dtype)), expected)


@pytest.mark.parametrize(
    "start,end,step,dtype",
    [
        (0, 1, 0.1, np.float32),
        (-1.0, 1.0, 0.3, np.float32),
        (0.0, 10.0, 0.7, np.float16),
        (1.5, 0.2, -0.1, np.float64),
        (0.5, 5.5, 1, np.int64),
        (0.5, 5.5, 1.5, np.int64),
        (0.5, 5.5, 1.5, np.int32),
        (10, -10, -3, np.int64),
        (0, 2**40, 2**38, np.int64),
        (0.0, 1.0, 1 / 3, np.float32),
    ],
)
def test_arange_float_steps(start, end, step, dtype):
    tdt = TORCH_OF[np.dtype(dtype)]
    expected = torch.arange(start, end, step, dtype=tdt)
    _same_arange(call("aten::arange.start_out", start, end, step, np.empty(0, dtype)), expected)


def test_arange_errors():
    out = np.empty(0, np.float32)
    with pytest.raises(KernelError, match="step must be nonzero"):
        call("aten::arange.start_out", 0, 5, 0, out)
    with pytest.raises(KernelError, match="inconsistent with step sign"):
        call("aten::arange.start_out", 0, 5, -1, out)
    with pytest.raises(KernelError, match="unsupported range"):
        call("aten::arange.start_out", 0, float("inf"), 1, out)
    with pytest.raises(KernelError, match="step must be nonzero"):
        call("aten::arange.start_out", 0, 5, 0.5, np.empty(0, np.int64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("kind", ["c", "f", "unplanned"])
def test_rand_randn(dtype, kind):
    shape = (40, 50)
    manual_seed(0)
    u = call("aten::rand.out", shape, planned(shape, dtype, kind))
    assert u.shape == shape and u.dtype == dtype
    assert u.min() >= 0 and u.max() < 1
    assert abs(float(u.astype(np.float64).mean()) - 0.5) < 0.05
    n = call("aten::randn.out", shape, planned(shape, dtype, kind))
    assert n.shape == shape and n.dtype == dtype
    assert abs(float(n.astype(np.float64).mean())) < 0.1
    assert abs(float(n.astype(np.float64).std()) - 1) < 0.1
    manual_seed(0)
    np.testing.assert_array_equal(call("aten::rand.out", shape, planned(shape, dtype, kind)), u)
    got = call("aten::rand.out", (), np.empty((), dtype))
    assert got.shape == ()
    with pytest.raises(KernelError, match="floating point"):
        call("aten::randn.out", (2,), np.empty(2, np.int64))


def test_full_speed():
    import timeit

    fn = get_kernel("aten::full.out").fn
    out = np.empty((4, 64), np.float32)
    per_call = min(timeit.repeat(lambda: fn((4, 64), 1.5, out), number=2000, repeat=3)) / 2000
    assert per_call < 10e-6, per_call
    assert math.isclose(float(out[0, 0]), 1.5)
