"""Fast paths of elementwise math: equal to their general kernels and to torch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pyexecutorch.kernels import get_kernel
from pyexecutorch.kernels.elementwise.fast import _WHERE_BITS_MIN
from pyexecutorch.kernels.registry import get_specializer

from .test_fast_activation import run_both, same, values

SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, np.inf, -np.inf, np.nan, 1e-40, 3.0, 100.0])


def floats(shape, dtype=np.float32, positive: bool = False) -> np.ndarray:
    n = math.prod(shape)
    x = values(n, np.float64)
    x[: min(n, len(SPECIAL))] = SPECIAL[: min(n, len(SPECIAL))]
    x = np.random.default_rng(n).permutation(x)
    if positive:
        x = np.abs(x)
    return x.astype(dtype).reshape(shape)


def torch_of(x):
    return torch.from_numpy(x) if isinstance(x, np.ndarray) else x


UNARY = {
    "log": torch.log, "log1p": torch.log1p, "log2": torch.log2, "log10": torch.log10,
    "expm1": torch.expm1, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "asin": torch.asin, "acos": torch.acos, "atan": torch.atan, "sinh": torch.sinh,
    "cosh": torch.cosh, "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
    "abs": torch.abs, "ceil": torch.ceil, "floor": torch.floor, "trunc": torch.trunc,
    "round": torch.round, "reciprocal": torch.reciprocal, "rsqrt": torch.rsqrt,
}  # fmt: skip
# numpy's and torch's loops agree bit for bit on these
EXACT_UNARY = {"abs", "ceil", "floor", "trunc", "round", "reciprocal", "rsqrt"}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 8), (70, 70)])
def test_unary(op, dtype, shape):
    x = floats(shape, dtype)
    got, expected = run_both(f"aten::{op}.out", x, np.empty_like(x))
    same(got, expected)
    ref = UNARY[op](torch.from_numpy(x)).numpy()
    if op in EXACT_UNARY:
        same(got, ref)
    else:
        rtol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=1e-30, equal_nan=True)


def test_abs_of_integers_and_logical_not_and_float_tests():
    i = np.array([-128, -1, 0, 5, 127], np.int8)
    got, expected = run_both("aten::abs.out", i, np.empty_like(i))
    same(got, expected)
    same(got, torch.abs(torch.from_numpy(i)).numpy())
    x = floats((4, 5))
    b = np.empty(x.shape, bool)
    for op in ("logical_not", "isnan", "isinf"):
        got, expected = run_both(f"aten::{op}.out", x, b)
        same(got, expected)
        same(got, getattr(torch, op)(torch.from_numpy(x)).numpy())


EXPONENTS = [2, 3, 0.5, -0.5, -1, -2, 1, 0, 1.5, -1.5, 2.5, 4, 0.3, 2.0, 3.0, -1.0]


@pytest.mark.parametrize("exponent", EXPONENTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_tensor_scalar(exponent, dtype):
    x = floats((6, 9), dtype)
    got, expected = run_both("aten::pow.Tensor_Scalar_out", x, exponent, np.empty_like(x))
    same(got, expected)
    ref = torch.pow(torch.from_numpy(x), exponent).numpy()
    if exponent in (2, 3, -1, -2, 1, 0):
        same(got, ref)  # torch's plain-arithmetic exponents: bit for bit
        return
    special = ~np.isfinite(ref) | (ref == 0) | ~np.isfinite(x)
    same(got[special], ref[special])  # -0.0 and -inf included (pow would differ for the roots)
    if exponent in (0.5, -0.5):
        # numpy's square root is correctly rounded, torch's float32 one not always
        ok = ~special
        assert np.all(np.abs(got[ok] - ref[ok]) <= np.spacing(np.abs(ref[ok])))
    else:
        # numpy's and torch's pow, as the general kernel's test allows
        rtol = 1e-5 if dtype == np.float32 else 1e-13
        np.testing.assert_allclose(got[~special], ref[~special], rtol=rtol)


def test_pow_declines():
    spec = get_specializer("aten::pow.Tensor_Scalar_out")
    x = floats((3,))
    assert spec(x, math.inf, np.empty_like(x)) is None
    assert spec(x, True, np.empty_like(x)) is None
    i = np.arange(3)
    assert spec(i, 2, np.empty_like(i)) is None


@pytest.mark.parametrize(
    "cond_shape,a_shape,b_shape",
    [
        ((1, 1, 6), (), (1, 1, 6)),
        ((3, 8), (3, 8), (3, 8)),
        ((64, 64), (64, 1), ()),
        ((5, 300), (300,), (5, 300)),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.int8])
def test_where(cond_shape, a_shape, b_shape, dtype):
    rng = np.random.default_rng(1)
    cond = rng.random(cond_shape) > 0.4
    if dtype in (np.float32, np.float64):
        a, b = floats(a_shape, dtype), floats(b_shape, dtype)
    else:
        a = rng.integers(-100, 100, a_shape).astype(dtype)
        b = rng.integers(-100, 100, b_shape).astype(dtype)
    shape = np.broadcast_shapes(cond_shape, a_shape, b_shape)
    got, expected = run_both("aten::where.self_out", cond, a, b, np.empty(shape, dtype))
    same(got, expected)
    ref = torch.where(torch.from_numpy(cond), torch_of(np.asarray(a)), torch_of(np.asarray(b)))
    same(got, ref.numpy())


def test_where_by_bits_keeps_every_bit_pattern():
    n = 2 * _WHERE_BITS_MIN
    a = np.full(n, np.nan, np.float32)
    a.view(np.uint32)[::3] = 0x7FC00123  # a NaN payload
    b = np.full(n, -0.0, np.float32)
    cond = np.arange(n) % 2 == 0
    fast = get_specializer("aten::where.self_out")(cond, a, b, np.empty(n, np.float32))
    got = fast(cond, a, b, np.empty(n, np.float32))
    np.testing.assert_array_equal(got.view(np.uint32), np.where(cond, a, b).view(np.uint32))


def test_where_declines():
    spec = get_specializer("aten::where.self_out")
    c, a = np.array([True, False]), floats((2,))
    assert spec(c, a, a.astype(np.float64), np.empty(2)) is None  # mixed dtypes
    assert spec(c.astype(np.int8), a, a, np.empty(2, np.float32)) is None
    i8 = np.array([1, 2], np.int8)
    assert spec(c, i8, i8.copy(), i8) is None  # out is a, read after out is written
    assert spec(c, a, a, np.empty(3, np.float32)) is None


COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge"]


@pytest.mark.parametrize("op", COMPARISONS)
def test_comparisons(op):
    x, y = floats((4, 6)), floats((6,))
    y[1] = x[0, 1]
    out = np.empty((4, 6), bool)
    got, expected = run_both(f"aten::{op}.Tensor_out", x, y, out)
    same(got, expected)
    same(got, getattr(torch, op)(torch.from_numpy(x), torch.from_numpy(y)).numpy())
    for scalar in (0.5, 0, -np.inf, 3):
        got, expected = run_both(f"aten::{op}.Scalar_out", x, scalar, out)
        same(got, expected)
        same(got, getattr(torch, op)(torch.from_numpy(x), scalar).numpy())
    i, j = np.arange(6, dtype=np.int64), np.array([3], np.int64)
    got, expected = run_both(f"aten::{op}.Tensor_out", i, j, np.empty(6, bool))
    same(got, expected)
    same(got, getattr(torch, op)(torch.from_numpy(i), torch.from_numpy(j)).numpy())
    got, expected = run_both(f"aten::{op}.Scalar_out", i, 2, np.empty(6, bool))
    same(got, getattr(torch, op)(torch.from_numpy(i), 2).numpy())


def test_comparisons_decline():
    i = np.arange(6, dtype=np.int32)
    b = np.empty(6, bool)
    assert get_specializer("aten::lt.Scalar_out")(i, 2.5, b) is None  # compares in float
    assert get_specializer("aten::lt.Scalar_out")(i, 2**40, b) is None
    assert get_specializer("aten::lt.Tensor_out")(i, i.astype(np.int64), b) is None
    assert get_specializer("aten::lt.Tensor_out")(i, i, np.empty(6, np.int32)) is None


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_logical(op):
    x = floats((3, 4))
    y = np.array([True, False, True, False])
    got, expected = run_both(f"aten::{op}.out", x, y, np.empty((3, 4), bool))
    same(got, expected)
    same(got, getattr(torch, op)(torch.from_numpy(x), torch.from_numpy(y)).numpy())


@pytest.mark.parametrize("mode", [None, "floor", "trunc"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_div_mode(mode, dtype):
    a, b = floats((5, 7), dtype), floats((7,), dtype)
    b[2] = 0.0
    b[3] = -0.0
    got, expected = run_both("aten::div.out_mode", a, b, mode, np.empty((5, 7), dtype))
    same(got, expected)
    same(got, torch.div(torch.from_numpy(a), torch.from_numpy(b), rounding_mode=mode).numpy())
    for scalar in (3, -0.7, 0.0):
        got, expected = run_both("aten::div.Scalar_mode_out", a, scalar, mode, np.empty_like(a))
        same(got, expected)
        same(got, torch.div(torch.from_numpy(a), scalar, rounding_mode=mode).numpy())


def test_div_mode_declines_unsigned_integers_and_unknown_modes():
    u = np.arange(1, 4, dtype=np.uint8)
    assert get_specializer("aten::div.out_mode")(u, u, "floor", np.empty_like(u)) is None
    i = np.arange(1, 4)
    assert get_specializer("aten::div.out_mode")(i, i, "round", np.empty_like(i)) is None
    x = floats((3,))
    assert get_specializer("aten::div.out_mode")(x, x, "round", np.empty_like(x)) is None


def test_atan2():
    a, b = floats((4, 5)), floats((5,))
    got, expected = run_both("aten::atan2.out", a, b, np.empty((4, 5), np.float32))
    same(got, expected)
    np.testing.assert_allclose(
        got,
        torch.atan2(torch.from_numpy(a), torch.from_numpy(b)).numpy(),
        rtol=1e-6,
        equal_nan=True,
    )


IN_PLACE = [
    ("aten::pow.Tensor_Scalar_out", [3]),
    ("aten::pow.Tensor_Scalar_out", [-2]),
    ("aten::pow.Tensor_Scalar_out", [-0.5]),
    ("aten::pow.Tensor_Scalar_out", [1.5]),
    ("aten::rsqrt.out", []),
    ("aten::log.out", []),
    ("aten::div.Scalar_mode_out", [3.0, "trunc"]),
]


@pytest.mark.parametrize("name,rest", IN_PLACE, ids=[f"{n}-{r}" for n, r in IN_PLACE])
def test_fast_paths_whose_output_is_their_input(name, rest):
    x = floats((5, 6), positive=True)
    expected = get_kernel(name).fn(x.copy(), *rest, np.empty_like(x))
    a = x.copy()
    with np.errstate(all="ignore"):
        got = get_specializer(name)(a, *rest, a)(a, *rest, a)
    same(got, expected)


@pytest.mark.parametrize("n", [6, 3 * _WHERE_BITS_MIN])
@pytest.mark.parametrize("into", ["a", "b"])
def test_where_into_an_operand(n, into):
    rng = np.random.default_rng(2)
    cond = rng.random(n) > 0.5
    a, b = floats((n,)), floats((n,))
    expected = np.where(cond, a, b)
    out = a if into == "a" else b
    got = get_specializer("aten::where.self_out")(cond, a, b, out)(cond, a, b, out)
    same(got, expected)
