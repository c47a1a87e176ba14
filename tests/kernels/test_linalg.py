"""mm / bmm / addmm / linear kernels against torch eager."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pyexecutorch.kernels import KernelError

from ._nn_util import LAYOUTS, OUT_KINDS, SETTINGS, call, close, layout, planned, rand, readonly, t

DTYPES = ["float32", "float32", "float64", "float16", "int64", "int32", "complex64"]
dims = st.integers(0, 6)
seeds = st.integers(0, 2**32 - 1)


def _torch(fn, *arrays):
    """torch's result; float16 computed in float32 and rounded (torch's CPU half gemm)."""
    if any(a is not None and a.dtype == np.float16 for a in arrays):
        ts = [None if a is None else t(a).float() for a in arrays]
        return fn(*ts).half()
    return fn(*[t(a) for a in arrays])


def _tol(dtype, k):
    if np.dtype(dtype) in (np.float32, np.complex64):
        return dict(rtol=1e-4, atol=1e-5 * max(1, k))
    return {}


@SETTINGS
@given(
    dims,
    dims,
    dims,
    st.sampled_from(DTYPES),
    st.sampled_from(LAYOUTS),
    st.sampled_from(OUT_KINDS),
    seeds,
)
def test_mm(n, k, m, dtype, lay, out_kind, seed):
    rng = np.random.default_rng(seed)
    a = layout(rand(rng, (n, k), dtype), lay)
    b = rand(rng, (k, m), dtype)
    expected = _torch(torch.mm, a, b)
    got = call("aten::mm.out", a, b, planned((n, m), dtype, out_kind))
    close(got, expected, **_tol(dtype, k))


@SETTINGS
@given(
    st.integers(0, 3),
    dims,
    dims,
    dims,
    st.sampled_from(DTYPES),
    st.sampled_from(LAYOUTS),
    st.sampled_from(OUT_KINDS),
    seeds,
)
def test_bmm(bs, n, k, m, dtype, lay, out_kind, seed):
    rng = np.random.default_rng(seed)
    a = rand(rng, (bs, n, k), dtype)
    b = layout(rand(rng, (bs, k, m), dtype), lay)
    expected = _torch(torch.bmm, a, b)
    got = call("aten::bmm.out", a, b, planned((bs, n, m), dtype, out_kind))
    close(got, expected, **_tol(dtype, k))


@SETTINGS
@given(
    dims,
    dims,
    dims,
    st.sampled_from(DTYPES),
    st.sampled_from(["full", "row", "col", "scalar"]),
    st.sampled_from([(1, 1), (0.5, 2.0), (0, 1), (1, 0), (2, -1)]),
    seeds,
)
def test_addmm(n, k, m, dtype, self_shape, coeffs, seed):
    rng = np.random.default_rng(seed)
    shape = {"full": (n, m), "row": (m,), "col": (n, 1), "scalar": ()}[self_shape]
    s = rand(rng, shape, dtype)
    a = rand(rng, (n, k), dtype)
    b = rand(rng, (k, m), dtype)
    beta, alpha = coeffs
    if np.dtype(dtype).kind in "iu":
        beta, alpha = int(beta), int(alpha)
    expected = _torch(lambda s_, a_, b_: torch.addmm(s_, a_, b_, beta=beta, alpha=alpha), s, a, b)
    got = call("aten::addmm.out", s, a, b, beta, alpha, planned((n, m), dtype, "exact"))
    close(got, expected, **_tol(dtype, k))


def test_addmm_zero_coefficients_ignore_nan_and_inf():
    s = np.full((2, 2), np.nan, np.float32)
    a = np.full((2, 3), np.inf, np.float32)
    b = np.zeros((3, 2), np.float32)
    got = call(
        "aten::addmm.out",
        s,
        np.ones((2, 3), np.float32),
        np.ones((3, 2), np.float32),
        0,
        1,
        planned((2, 2), np.float32, "exact"),
    )
    close(got, np.full((2, 2), 3, np.float32))
    got = call(
        "aten::addmm.out",
        np.ones((2, 2), np.float32),
        a,
        b,
        1,
        0,
        planned((2, 2), np.float32, "exact"),
    )
    close(got, torch.addmm(t(np.ones((2, 2), np.float32)), t(a), t(b), alpha=0))


@SETTINGS
@given(
    st.lists(st.integers(0, 4), min_size=0, max_size=3),
    st.integers(1, 40),
    st.integers(1, 40),
    st.booleans(),
    st.sampled_from(["float32", "float64", "float16"]),
    st.sampled_from(LAYOUTS),
    st.sampled_from(OUT_KINDS),
    st.booleans(),
    seeds,
)
def test_linear(lead, n_in, n_out, has_bias, dtype, lay, out_kind, const, seed):
    rng = np.random.default_rng(seed)
    x = layout(rand(rng, (*lead, n_in), dtype), lay) if lead else rand(rng, (n_in,), dtype)
    w = rand(rng, (n_out, n_in), dtype)
    b = rand(rng, (n_out,), dtype) if has_bias else None
    if const:
        w, b = readonly(w), (None if b is None else readonly(b))
    expected = _torch(torch.nn.functional.linear, x, w, b)
    for _ in range(2):
        got = call("aten::linear.out", x, w, b, planned(tuple(expected.shape), dtype, out_kind))
        close(got, expected, **_tol(dtype, n_in))


def test_linear_does_not_copy_weight():
    # The transposed weight view goes to BLAS as a transpose flag: the call
    # allocates far less than one copy of the weight (numpy reports its data
    # allocations to tracemalloc).
    rng = np.random.default_rng(0)
    x = rand(rng, (4, 512))
    w = readonly(rand(rng, (1024, 512)))
    b = readonly(rand(rng, (1024,)))
    out = np.empty((4, 1024), np.float32)
    call("aten::linear.out", x, w, b, out)
    tracemalloc.start()
    try:
        call("aten::linear.out", x, w, b, out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < w.nbytes // 8, peak
    close(out, torch.nn.functional.linear(t(x), t(w), t(b)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "name, args, match",
    [
        ("aten::mm.out", ((2, 3), (4, 5)), "cannot be multiplied"),
        ("aten::mm.out", ((2, 3, 1), (3, 5)), "must be 2-D"),
        ("aten::bmm.out", ((2, 2, 3), (3, 3, 5)), "cannot be multiplied"),
        ("aten::bmm.out", ((2, 3), (3, 5)), "must be 3-D"),
    ],
)
def test_shape_errors(name, args, match):
    a, b = (np.zeros(s, np.float32) for s in args)
    with pytest.raises(KernelError, match=match):
        call(name, a, b, np.empty((0,), np.float32))


def test_other_errors():
    f = np.zeros((2, 2), np.float32)
    with pytest.raises(KernelError, match="same dtype"):
        call("aten::mm.out", f, f.astype(np.float64), np.empty((0,), np.float32))
    with pytest.raises(KernelError, match="dtype bool is not supported"):
        call("aten::mm.out", f.astype(bool), f.astype(bool), np.empty((0,), bool))
    with pytest.raises(KernelError, match="does not broadcast"):
        call("aten::addmm.out", np.zeros(3, np.float32), f, f, 1, 1, np.empty((0,), np.float32))
    with pytest.raises(KernelError, match="in_features 3"):
        call("aten::linear.out", f, np.zeros((4, 3), np.float32), None, np.empty((0,), np.float32))
    with pytest.raises(KernelError, match=r"bias must have shape \(4,\)"):
        call(
            "aten::linear.out",
            np.zeros((2, 3), np.float32),
            np.zeros((4, 3), np.float32),
            np.zeros(5, np.float32),
            np.empty((0,), np.float32),
        )


# ---------------------------------------------------------------------------
# FFT (signal kernels)


NORM_NAMES = {0: "backward", 1: "ortho", 2: "forward"}  # torch's forward norm codes
INVERSE_NAMES = {0: "forward", 1: "ortho", 2: "backward"}  # ... applied to an inverse


@SETTINGS
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple),
    st.data(),
    st.sampled_from([0, 1, 2]),
    st.booleans(),
    st.sampled_from(["float32", "float64"]),
    st.sampled_from(LAYOUTS),
    seeds,
)
def test_fft_r2c_and_c2r(shape, data, norm, onesided, dtype, lay, seed):
    ndim = len(shape)
    dims = data.draw(
        st.lists(
            st.integers(-ndim, ndim - 1), min_size=1, max_size=ndim, unique_by=lambda d: d % ndim
        )
    )
    rng = np.random.default_rng(seed)
    x = rand(rng, shape, dtype)
    # (torch's public functions as the reference: the raw aten ops misbehave on 1-D inputs)
    nn = NORM_NAMES[norm]
    if onesided:
        expected = torch.fft.rfftn(t(x), dim=dims, norm=nn)
    else:
        expected = torch.fft.fftn(t(x), dim=dims, norm=nn)
    cdt = np.complex64 if dtype == "float32" else np.complex128
    got = call(
        "aten::_fft_r2c.out",
        layout(x, lay),
        tuple(dims),
        norm,
        onesided,
        planned(tuple(expected.shape), cdt, "exact"),
    )
    close(
        got,
        expected,
        rtol=1e-4 if dtype == "float32" else None,
        atol=1e-4 if dtype == "float32" else None,
    )

    last = dims[-1] % ndim
    last_size = data.draw(st.integers(1, 8))
    spec = rand(rng, shape[:last] + (last_size // 2 + 1,) + shape[last + 1 :], cdt)
    sizes = [last_size if d % ndim == last else shape[d % ndim] for d in dims]
    expected = torch.fft.irfftn(t(spec), s=sizes, dim=dims, norm=INVERSE_NAMES[norm])
    got = call(
        "aten::_fft_c2r.out",
        spec,
        tuple(dims),
        norm,
        last_size,
        planned(tuple(expected.shape), dtype, "exact"),
    )
    close(
        got,
        expected,
        rtol=1e-4 if dtype == "float32" else None,
        atol=1e-4 if dtype == "float32" else None,
    )


def test_fft_errors():
    x = np.zeros((4, 4), np.float32)
    e = np.empty((0,), np.complex64)
    with pytest.raises(KernelError, match="input must be float32 or float64"):
        call("aten::_fft_r2c.out", x.astype(np.int64), (0,), 0, True, e)
    with pytest.raises(KernelError, match="repeated dimensions"):
        call("aten::_fft_r2c.out", x, (0, -2), 0, True, e)
    with pytest.raises(KernelError, match="normalization must be 0, 1 or 2"):
        call("aten::_fft_r2c.out", x, (0,), 3, True, e)
    with pytest.raises(KernelError, match="input must be complex64 or complex128"):
        call("aten::_fft_c2r.out", x, (0,), 0, 4, np.empty((0,), np.float32))
    with pytest.raises(KernelError, match="out of range"):
        call("aten::_fft_c2r.out", x.astype(np.complex64), (2,), 0, 4, np.empty((0,), np.float32))
