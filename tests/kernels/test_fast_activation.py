"""Fast paths of activations and clamps: equal to their general kernels and to torch.

Also the accuracy of the float32 erf (shared by the general kernels and the fast
paths), checked on a dense grid of float32 values against float64 erf.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pyexecutorch.kernels import get_kernel
from pyexecutorch.kernels.elementwise.unary import ERF, SMALL
from pyexecutorch.kernels.registry import get_specializer

RNG = np.random.default_rng(0)
EDGES = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-42, -1e-42, 1e-30, -3.9, 3.9, -5.5, -5.6, 6.0, -7.0]
# sizes around the math.erf / vector threshold and the vector evaluation's blocks
SIZES = [1, 7, SMALL, SMALL + 1, 1000, 40000]


def values(n: int, dtype=np.float32, scale: float = 3.0) -> np.ndarray:
    x = RNG.standard_normal(n) * scale
    k = min(n, len(EDGES))
    x[RNG.permutation(n)[:k]] = EDGES[:k]
    return x.astype(dtype)


def shaped(n: int, dtype=np.float32, scale: float = 3.0) -> np.ndarray:
    x = values(n, dtype, scale)
    return x.reshape(-1, 8) if n % 8 == 0 else x


def run_both(name: str, *args):
    """(fast result, general result) for the instruction ``name(*args, out)``, outputs fresh."""
    out = args[-1]
    fast = get_specializer(name)(*args)
    assert fast is not None, f"{name} declined {args[1:-1]}"
    with np.errstate(all="ignore"):
        got = fast(*args[:-1], np.full_like(out, 7))
        expected = get_kernel(name).fn(*args[:-1], np.full_like(out, 7))
    assert got.dtype == expected.dtype and got.shape == expected.shape
    return got, expected


def same(got: np.ndarray, expected: np.ndarray) -> None:
    """Bit for bit, up to NaN payloads; signed zeros must match."""
    np.testing.assert_array_equal(got, expected)
    numbers = ~np.isnan(expected)
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(expected[numbers]))


def ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in units of float32's spacing at the exact (float64) value."""
    e = np.abs(exact)
    r = e.astype(np.float32)
    spacing = np.spacing(r).astype(np.float64)
    # just below a power of two the spacing is the smaller one
    below = (r.astype(np.float64) > e) & (np.frexp(r)[0] == 0.5) & (r > 2.0**-126)
    spacing = np.where(below, spacing / 2, spacing)
    return np.abs(got.astype(np.float64) - exact) / spacing


# ---------------------------------------------------------------------------
# erf accuracy
# ---------------------------------------------------------------------------


def _float32_grid() -> np.ndarray:
    """Non-negative float32 values: every 61st of all up to 6, and every one in four windows."""
    top = int(np.float32(6.0).view(np.int32))
    strided = np.arange(0, top, 61, dtype=np.int32)
    windows = [
        np.arange(int(np.float32(a).view(np.int32)), int(np.float32(b).view(np.int32)))
        for a, b in [(0.46, 0.48), (1.77, 1.78), (3.9, 4.01), (0.0, 1e-44)]
    ]
    return np.concatenate([strided, *windows]).astype(np.int32).view(np.float32)


def test_float32_erf_is_within_0_6_ulp_on_a_dense_grid():
    # An exhaustive run over every float32 in [0, 4.5] (1.08e9 values) measured
    # at most 0.541 ulp; torch's own float32 erf errs by up to ~0.77 ulp.
    x = _float32_grid()
    exact = torch.erf(torch.from_numpy(x).double()).numpy()
    got = np.empty_like(x)
    ERF.evaluator(x.size)(x, got)
    err = ulps(got, exact)
    assert err.max() <= 0.6, (err.max(), x[np.argmax(err)])
    torch_err = ulps(torch.erf(torch.from_numpy(x)).numpy(), exact).max()
    assert err.max() <= torch_err
    # odd: the negative half is the exact mirror
    neg = np.empty_like(x)
    ERF.evaluator(x.size)(-x, neg)
    same(neg, -got)


def test_float32_erf_tails_and_specials():
    x = np.array(
        [3.93, 4.0, 4.5, 6.0, 1e10, 3e38, np.inf, np.nan, 0.0, -0.0, -np.inf] * 10, np.float32
    )
    got = np.empty_like(x)
    ERF.evaluator(x.size)(x, got)
    same(got[:11], np.array([1, 1, 1, 1, 1, 1, 1, np.nan, 0.0, -0.0, -1], np.float32))
    # erf(x) for tiny x is 2x/sqrt(pi), correctly rounded, denormals included
    tiny = np.geomspace(1e-45, 1e-20, 200).astype(np.float32)
    got = np.empty_like(tiny)
    ERF.evaluator(tiny.size)(tiny, got)
    exact = tiny.astype(np.float64) * (2 / math.sqrt(math.pi))
    assert np.all(np.abs(got - exact) <= np.spacing(got).astype(np.float64) * 0.5001)


def test_small_tensors_use_math_erf():
    x = values(SMALL)
    got = np.empty_like(x)
    ERF.evaluator(SMALL)(x, got)
    same(got, np.array([math.erf(v) for v in x.astype(np.float64)], np.float32))


# ---------------------------------------------------------------------------
# erf and gelu fast paths
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
def test_erf_fast_path(n):
    x = shaped(n)
    got, expected = run_both("aten::erf.out", x, np.empty_like(x))
    same(got, expected)
    # torch's float32 erf and ours are both within an ulp of erf: at most one apart
    ref = torch.erf(torch.from_numpy(x)).numpy()
    finite = np.isfinite(ref)
    assert np.all(np.abs(got[finite] - ref[finite]) <= np.spacing(np.abs(ref[finite])))
    same(got[~finite], ref[~finite])


def test_erf_float64_fast_path_only_for_small_tensors():
    x = values(SMALL, np.float64)
    got, expected = run_both("aten::erf.out", x, np.empty_like(x))
    same(got, expected)
    np.testing.assert_allclose(got, torch.erf(torch.from_numpy(x)).numpy(), rtol=1e-15)
    big = values(SMALL + 1, np.float64)
    assert get_specializer("aten::erf.out")(big, np.empty_like(big)) is None


def _gelu_tolerance(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    # torch's float32 gelu has its own erf, less accurate than torch.erf: on a
    # grid over [-8, 8] it errs by up to 4.5 ulp where x > 0 and by up to
    # 3.1e-7 * |x| where x < 0 (1 + erf cancels); ours by 1.5 ulp and 3e-8 * |x|
    return 6 * np.spacing(np.abs(ref)) + np.abs(x) * 2.0**-21


@pytest.mark.parametrize("n", SIZES)
def test_gelu_fast_path(n):
    x = shaped(n)
    got, expected = run_both("aten::gelu.out", x, "none", np.empty_like(x))
    same(got, expected)
    ref = F.gelu(torch.from_numpy(x)).numpy()
    finite = np.isfinite(x)
    assert np.all(np.abs(got[finite] - ref[finite]) <= _gelu_tolerance(x, ref)[finite])
    # NaN and -inf give NaN; inf gives inf, the limit (torch's float32 kernel gives NaN)
    same(got[~finite], np.where(x[~finite] == np.inf, np.inf, np.nan).astype(np.float32))


def test_gelu_matches_float64_within_float32_rounding():
    x = np.concatenate([np.linspace(-8, 8, 40001), [-0.0, 0.0]]).astype(np.float32)
    got, _ = run_both("aten::gelu.out", x, "none", np.empty_like(x))
    exact = F.gelu(torch.from_numpy(x).double()).numpy()
    # 0.5 * erf is rounded to float32 before 0.5 is added (as torch rounds erf
    # before adding 1): an absolute error of up to one step 2**-25 of that
    # rounding in the factor of x where it is small, plus two roundings
    tol = 1.5 * np.spacing(np.abs(got)).astype(np.float64) + np.abs(x) * 2.0**-25
    assert np.all(np.abs(got - exact) <= tol)
    # far left the factor is exactly 0, as in torch: -0.0
    assert np.all((got[x < -5.6] == 0) & np.signbit(got[x < -5.6]))
    same(got[-2:], np.array([-0.0, 0.0], np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [5, 64, 3000])
def test_gelu_tanh_fast_path(dtype, n):
    x = shaped(n, dtype)
    got, expected = run_both("aten::gelu.out", x, "tanh", np.empty_like(x))
    same(got, expected)
    ref = F.gelu(torch.from_numpy(x), approximate="tanh").numpy()
    # 1 + tanh cancels for x < 0: an ulp of tanh near -1 is 2**-24 (float32) of the factor of x
    finite = np.isfinite(x)
    eps = np.finfo(dtype).eps
    tol = 8 * eps * np.abs(ref) + np.abs(x) * eps
    assert np.all(np.abs(got[finite] - ref[finite]) <= tol[finite])
    same(got[~finite], expected[~finite])


def test_gelu_small_float64():
    x = values(SMALL, np.float64)
    got, expected = run_both("aten::gelu.out", x, "none", np.empty_like(x))
    same(got, expected)
    np.testing.assert_allclose(got, F.gelu(torch.from_numpy(x)).numpy(), rtol=1e-15, atol=1e-300)


# ---------------------------------------------------------------------------
# elu, leaky_relu
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "alpha,scale,input_scale",
    [(1.0, 1, 1), (0.5, 1, 1), (1.6732632423543772, 1.0507009873554805, 1), (1.0, 2.0, 3.0)],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [6, 24, 3000])
def test_elu_fast_path(alpha, scale, input_scale, dtype, n):
    x = shaped(n, dtype)
    got, expected = run_both("aten::elu.out", x, alpha, scale, input_scale, np.empty_like(x))
    same(got, expected)
    ref = torch.ops.aten.elu(torch.from_numpy(x), alpha, scale, input_scale).numpy()
    tol = 2e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol, equal_nan=True)
    # -0.0 stays -0.0, as in torch
    np.testing.assert_array_equal(np.signbit(got[ref == 0]), np.signbit(ref[ref == 0]))


@pytest.mark.parametrize("slope", [0.01, 0.2, 1.0, 1.5, 1e-30])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_leaky_relu_fast_path(slope, dtype):
    x = shaped(640, dtype)
    got, expected = run_both("aten::leaky_relu.out", x, slope, np.empty_like(x))
    same(got, expected)
    same(got, F.leaky_relu(torch.from_numpy(x), slope).numpy())


def test_leaky_relu_declines_zero_and_negative_slopes():
    x = values(8)
    for slope in (0.0, -0.3, math.nan, True):
        assert get_specializer("aten::leaky_relu.out")(x, slope, np.empty_like(x)) is None


# ---------------------------------------------------------------------------
# hardtanh, clamp
# ---------------------------------------------------------------------------

CLAMPS = [(-1.0, 1.0), (0, 6), (0.0, None), (None, 0.0), (None, 6), (2.0, -2.0), (-0.0, 0.0)]


@pytest.mark.parametrize("lo,hi", CLAMPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [24, 4096])  # the larger is np.clip's and full-array bounds' size
def test_clamp_fast_path(lo, hi, dtype, n):
    x = shaped(n, dtype)
    got, expected = run_both("aten::clamp.out", x, lo, hi, np.empty_like(x))
    same(got, expected)
    same(got, torch.clamp(torch.from_numpy(x), lo, hi).numpy())  # ties keep -0.0, as torch
    if lo is not None and hi is not None and lo <= hi:
        got, expected = run_both("aten::hardtanh.out", x, lo, hi, np.empty_like(x))
        same(got, expected)
        same(got, F.hardtanh(torch.from_numpy(x), lo, hi).numpy())


def test_clamp_of_integers():
    x = RNG.integers(-100, 100, (5, 7)).astype(np.int32)
    got, expected = run_both("aten::clamp.out", x, -5, 50, np.empty_like(x))
    same(got, expected)
    same(got, torch.clamp(torch.from_numpy(x), -5, 50).numpy())


def test_clamp_declines():
    spec = get_specializer("aten::clamp.out")
    x, i = values(8), np.arange(8, dtype=np.int64)
    assert spec(x, math.nan, 1.0, np.empty_like(x)) is None  # NaN bound
    assert spec(x, 1e39, None, np.empty_like(x)) is None  # overflows float32
    assert spec(x, None, None, np.empty_like(x)) is None
    assert spec(i, 0.5, None, np.empty_like(i)) is None  # computes in float
    assert spec(x, True, None, np.empty_like(x)) is None
    h = values(8, np.float16)
    assert spec(h, 0.0, 1.0, np.empty_like(h)) is None


@pytest.mark.parametrize(
    "shape_lo,shape_hi", [((3, 4), (3, 4)), ((4,), None), (None, (1, 4)), ((), ())]
)
def test_clamp_tensor_fast_path(shape_lo, shape_hi):
    x = values(12).reshape(3, 4)
    lo = None if shape_lo is None else np.full(shape_lo, -0.5, np.float32)
    hi = None if shape_hi is None else np.full(shape_hi, 0.0, np.float32)
    if lo is not None and lo.ndim:
        lo.reshape(-1)[0] = np.nan
    got, expected = run_both("aten::clamp.Tensor_out", x, lo, hi, np.empty_like(x))
    same(got, expected)
    t = lambda a: None if a is None else torch.from_numpy(a)  # noqa: E731
    same(got, torch.clamp(t(x), t(lo), t(hi)).numpy())


# ---------------------------------------------------------------------------
# what the fast paths leave to the general kernels
# ---------------------------------------------------------------------------


def test_activation_fast_paths_decline_what_they_do_not_cover():
    x = values(8)
    h = values(8, np.float16)
    big64 = values(100, np.float64)
    assert get_specializer("aten::erf.out")(h, np.empty_like(h)) is None
    assert get_specializer("aten::erf.out")(big64, np.empty_like(big64)) is None
    assert get_specializer("aten::erf.out")(x[1:], x[:-1]) is None  # partly overlapping
    assert get_specializer("aten::erf.out")(x, np.empty(8, np.float64)) is None
    assert get_specializer("aten::gelu.out")(x, "fast", np.empty_like(x)) is None
    assert get_specializer("aten::gelu.out")(big64, "none", np.empty_like(big64)) is None
    assert get_specializer("aten::gelu.out")(x, "none", np.empty((4, 2), np.float32)) is None
    assert get_specializer("aten::elu.out")(x, math.inf, 1, 1, np.empty_like(x)) is None
    assert get_specializer("aten::hardtanh.out")(x, None, 1.0, np.empty_like(x)) is None
    i = np.arange(8)
    assert get_specializer("aten::hardtanh.out")(i, -1, 1, np.empty_like(i)) is None


# Memory planning lets an output reuse the memory of an input that dies at the
# instruction: each fast path must then compute what it computes apart.
IN_PLACE = [
    ("aten::erf.out", []),
    ("aten::gelu.out", ["none"]),
    ("aten::gelu.out", ["tanh"]),
    ("aten::elu.out", [1.0, 1, 1]),
    ("aten::elu.out", [0.5, 1, 1]),
    ("aten::elu.out", [1.6732632423543772, 1.0507009873554805, 1]),
    ("aten::leaky_relu.out", [0.1]),
    ("aten::leaky_relu.out", [2.0]),
    ("aten::hardtanh.out", [-1.0, 1.0]),
    ("aten::clamp.out", [0, 6]),
    ("aten::clamp.out", [None, 6]),
]


@pytest.mark.parametrize("name,mid", IN_PLACE, ids=[f"{n}-{m}" for n, m in IN_PLACE])
@pytest.mark.parametrize("n", [24, 40000])
def test_fast_paths_whose_output_is_their_input(name, mid, n):
    x = shaped(n)
    expected = get_kernel(name).fn(x.copy(), *mid, np.empty_like(x))
    a = x.copy()
    fast = get_specializer(name)(a, *mid, a)
    assert fast is not None
    with np.errstate(all="ignore"):
        got = fast(a, *mid, a)
    assert got is a
    same(got, expected)


def test_clamp_tensor_with_output_in_the_bounds_memory():
    x, lo, hi = values(12), np.full(12, -0.5, np.float32), np.full(12, 0.5, np.float32)
    spec = get_specializer("aten::clamp.Tensor_out")
    assert spec(x, lo, hi, hi) is None  # hi is read after the first write
    expected = get_kernel("aten::clamp.Tensor_out").fn(x, lo, hi, np.empty_like(x))
    got = spec(x, lo, hi, lo)(x, lo, hi, lo)
    same(got, expected)
    same(get_kernel("aten::clamp.Tensor_out").fn(x, lo.copy(), hi, hi), expected)


def test_general_kernels_whose_output_is_their_input():
    # the general kernels too: memory planning hands them aliased outputs
    x = values(24).reshape(4, 6)
    cases = [
        ("aten::leaky_relu.out", [0.0]),
        ("aten::leaky_relu.out", [0.1]),
        ("aten::elu.out", [1.0, 1.0, 1.0]),
        ("aten::gelu.out", ["none"]),
        ("aten::gelu.out", ["tanh"]),
        ("aten::sign.out", []),
        ("aten::pow.Tensor_Scalar_out", [3]),
    ]
    for name, mid in cases:
        kernel = get_kernel(name).fn
        expected = kernel(x.copy(), *mid, np.empty_like(x))
        a = x.copy()
        with np.errstate(all="ignore"):
            same(kernel(a, *mid, a), expected)
    glu = get_kernel("aten::glu.out").fn
    expected = glu(x, 1, np.empty((4, 3), np.float32))
    a = x.copy()
    same(glu(a, 1, a[:, :3]), expected)  # the output is the first half's memory
    mask = np.zeros(24, bool)
    mask[::3] = True
    buf = np.zeros(24 * 4, np.uint8)
    m, o = buf[:24].view(bool), buf.view(np.float32)
    m[:] = mask
    x = np.arange(24, dtype=np.float32)
    got = get_kernel("aten::masked_fill.Scalar_out").fn(x, m, 9.0, o)  # out holds the mask
    same(got, np.where(mask, np.float32(9), x))
