"""Reduction fast paths (fast_reduce.py) compute bit for bit what the general
kernels compute, agree with torch eager, and decline what they do not cover."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.kernels import get_kernel
from pyexecutorch.kernels.registry import get_specializer
from pyexecutorch.schema.scalar_type import scalar_type_of

# The runtime silences numpy's float warnings; these tests call the kernels directly.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

RNG = np.random.default_rng(1)
FLOATS = [np.float32, np.float64, np.float16]
INTS = [np.int32, np.int64, np.uint8, np.int8]


def code(dtype) -> int:
    return int(scalar_type_of(np.dtype(dtype)))


def data(shape, dtype, special: bool = True) -> np.ndarray:
    """Values of ``dtype`` with, for floats, NaN, infinities and signed zeros mixed in."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return RNG.random(shape) > 0.5
    if dt.kind in "iu":
        lo = 0 if dt.kind == "u" else -4
        return RNG.integers(lo, 5, shape).astype(dt)
    a = (RNG.standard_normal(shape) * 2).astype(dt)
    if special and a.size >= 6:
        flat = a.reshape(-1)
        picks = RNG.choice(a.size, 5, replace=False)
        flat[picks] = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], dtype=dt)
    return a


def same(got: np.ndarray, want: np.ndarray) -> None:
    """Same shape, dtype and bytes (signed zeros and NaN included)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    assert got.tobytes() == want.tobytes(), (got, want)


def near_torch(got: np.ndarray, want: torch.Tensor) -> None:
    exp = want.numpy()
    assert got.shape == exp.shape and got.dtype == exp.dtype, (got.shape, exp.shape)
    if exp.dtype.kind in "biu":
        np.testing.assert_array_equal(got, exp)
    else:
        tol = 2e-3 if exp.dtype == np.float16 else 2e-6
        np.testing.assert_allclose(got, exp, rtol=tol, atol=tol, equal_nan=True)


def both(name: str, args: list, unused: frozenset[int] | None = None) -> tuple:
    """Run the fast path and the general kernel on copies; return the fast outputs."""
    kernel = get_kernel(name)
    kw = {} if unused is None else {"unused_outputs": unused}
    fast = get_specializer(name)(*args, **kw)
    assert fast is not None, f"{name} declined {[getattr(a, 'shape', a) for a in args]}"
    n = kernel.n_outs
    copies = [[a.copy() if isinstance(a, np.ndarray) else a for a in args] for _ in range(2)]
    kernel.fn(*copies[0])
    # The runtime passes the same planned outputs on each call: run twice.
    fast(*copies[1])
    fast(*copies[1])
    outs = []
    for i, (g, f) in enumerate(zip(copies[0][-n:], copies[1][-n:], strict=True)):
        if unused is None or i not in unused:
            same(f, g)
        outs.append(f)
    return tuple(outs)


def declines(name: str, args: list) -> None:
    assert get_specializer(name)(*args) is None


def t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a.copy())


def out_like(shape, dtype) -> np.ndarray:
    return np.full(shape, 7, dtype=dtype)  # garbage inside, as planned memory


SHAPES_DIMS = [
    ((3, 4, 5), (1,)),
    ((3, 4, 5), (0, 2)),
    ((3, 4, 5), (-1,)),
    ((3, 4, 5), None),
    ((3, 4, 5), ()),
    ((6,), (0,)),
    ((2, 1, 7), (1, 2)),
    ((0, 3), (0,)),
    ((), None),
    ((), (0,)),
]


# ---------------------------------------------------------------------------
# sum, prod


@pytest.mark.parametrize("shape,dims", SHAPES_DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_])
def test_sum(shape, dims, keepdim, dtype):
    a = np.asarray(data(shape, dtype))
    want = torch.sum(t(a), dim=list(dims) if dims else list(range(a.ndim)), keepdim=keepdim)
    out = out_like(want.shape, want.numpy().dtype)
    (got,) = both("aten::sum.IntList_out", [a, dims, keepdim, None, out])
    near_torch(got, want)


@pytest.mark.parametrize("src,dt", [(np.int32, np.int64), (np.float32, np.float64)])
def test_sum_with_dtype(src, dt):
    a = data((4, 6), src)
    want = torch.sum(t(a), dim=[1], dtype=torch.from_numpy(np.zeros(0, dt)).dtype)
    (got,) = both("aten::sum.IntList_out", [a, (1,), False, code(dt), out_like((4,), dt)])
    near_torch(got, want)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64])
def test_prod(dim, keepdim, dtype):
    a = data((3, 4, 5), dtype)
    want = torch.prod(t(a), dim=dim, keepdim=keepdim)
    out = out_like(want.shape, want.numpy().dtype)
    (got,) = both("aten::prod.int_out", [a, dim, keepdim, None, out])
    near_torch(got, want)


@pytest.mark.parametrize("shape", [(3, 4), (5,), (2, 1, 3), (0, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.bool_])
def test_prod_all(shape, dtype):
    a = data(shape, dtype)
    want = torch.prod(t(a))
    (got,) = both("aten::prod.out", [a, None, out_like((), want.numpy().dtype)])
    near_torch(got, want)


@pytest.mark.parametrize("shape", [(3, 4), (5,), (2, 1, 3), ()])
@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.float16, np.int64, np.uint8, np.bool_]
)
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_all(shape, dtype, op):
    a = np.asarray(data(shape, dtype))
    want = getattr(torch, op)(t(a))
    (got,) = both(f"aten::{op}.unary_out", [a, out_like((), a.dtype)])
    near_torch(got, want)


def test_max_all_declines_empty():
    declines("aten::max.unary_out", [np.zeros((0, 2), np.float32), out_like((), np.float32)])
    declines("aten::min.unary_out", [np.zeros((2,), np.float32), out_like((), np.float64)])


def test_sum_prod_decline():
    a = data((3, 4), np.float32)
    # wrong output shape or dtype, bad dim, complex, float16 into another dtype
    declines("aten::sum.IntList_out", [a, (1,), False, None, out_like((3, 1), np.float32)])
    declines("aten::sum.IntList_out", [a, (1,), False, None, out_like((3,), np.float64)])
    declines("aten::sum.IntList_out", [a, (5,), False, None, out_like((3,), np.float32)])
    declines("aten::sum.IntList_out", [a, (1, 1), False, None, out_like((3,), np.float32)])
    c = a.astype(np.complex64)
    declines("aten::sum.IntList_out", [c, (1,), False, None, out_like((3,), np.complex64)])
    h = a.astype(np.float16)
    f32 = code(np.float32)
    declines("aten::sum.IntList_out", [h, (1,), False, f32, out_like((3,), np.float32)])
    declines("aten::prod.int_out", [a, None, False, None, out_like((), np.float32)])


# ---------------------------------------------------------------------------
# amax, amin


@pytest.mark.parametrize("shape,dims", [sd for sd in SHAPES_DIMS if 0 not in sd[0]])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_])
@pytest.mark.parametrize("op", ["amax", "amin"])
def test_amax_amin(shape, dims, keepdim, dtype, op):
    a = np.asarray(data(shape, dtype))
    want = getattr(torch, op)(t(a), dim=list(dims) if dims else [], keepdim=keepdim)
    out = out_like(want.shape, a.dtype)
    (got,) = both(f"aten::{op}.out", [a, dims, keepdim, out])
    near_torch(got, want)


def test_amax_declines_empty_and_complex():
    declines("aten::amax.out", [np.zeros((0, 3), np.float32), (0,), False, out_like((3,), "f4")])
    declines("aten::amax.out", [np.zeros((2, 0), np.float32), (0,), False, out_like((0,), "f4")])
    c = np.ones((2, 3), np.complex64)
    declines("aten::amin.out", [c, (0,), False, out_like((3,), np.complex64)])
    declines("aten::amin.out", [np.ones((2, 3), "f4"), (0,), False, out_like((3,), "f8")])


# ---------------------------------------------------------------------------
# max.dim, min.dim


@pytest.mark.parametrize("shape,dim", [((3, 4, 5), 1), ((3, 4, 5), -1), ((7,), 0), ((2, 6), 0)])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64])
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_dim(shape, dim, keepdim, dtype, op):
    a = data(shape, dtype)
    want_v, want_i = getattr(torch, op)(t(a), dim=dim, keepdim=keepdim)
    outs = [out_like(want_v.shape, a.dtype), out_like(want_v.shape, np.int64)]
    name = f"aten::{op}.dim_{op}"
    got_v, got_i = both(name, [a, dim, keepdim, *outs])
    near_torch(got_v, want_v)
    # Indices agree wherever the extreme is unique; NaN picks the first NaN in both.
    ties = (np.expand_dims(got_v, dim) if not keepdim else got_v) == a
    unique = ties.sum(axis=dim, keepdims=keepdim) <= 1
    np.testing.assert_array_equal(got_i[unique], want_i.numpy()[unique])
    # Only the values are read: the indices may stay unwritten.
    values_only, _ = both(name, [a, dim, keepdim, *outs], unused=frozenset({1}))
    same(values_only, got_v)


def test_max_dim_declines():
    a = data((3, 4), np.float32)
    o = [out_like((3,), np.float32), out_like((3,), np.int64)]
    declines("aten::max.dim_max", [np.float32(1.0) * np.ones(()), 0, False, *o])
    declines("aten::max.dim_max", [np.zeros((3, 0), np.float32), 1, False, *o])
    declines("aten::max.dim_max", [a, 1, False, o[0], out_like((3,), np.int32)])
    declines("aten::min.dim_min", [a, 0, False, *o])  # wrong output shape


# ---------------------------------------------------------------------------
# argmax, argmin


@pytest.mark.parametrize("shape", [(4, 7), (3, 4, 5), (6,)])
@pytest.mark.parametrize("dim", [None, 0, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.uint8])
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argmax_argmin(shape, dim, keepdim, dtype, op):
    a = data(shape, dtype)
    if dtype in INTS:  # distinct integers: torch's tie order is not part of the contract
        a = RNG.permutation(a.size).reshape(shape).astype(dtype)
    want = getattr(torch, op)(t(a), dim=dim, keepdim=keepdim)
    (got,) = both(f"aten::{op}.out", [a, dim, keepdim, out_like(want.shape, np.int64)])
    if np.dtype(dtype).kind == "f":
        # with NaN/inf/signed zeros: the selected values agree
        picked = np.take_along_axis(
            a.reshape(-1) if dim is None else a,
            got.reshape(-1) if dim is None else (got if keepdim else np.expand_dims(got, dim)),
            axis=0 if dim is None else dim,
        )
        wanted = np.take_along_axis(
            a.reshape(-1) if dim is None else a,
            want.numpy().reshape(-1)
            if dim is None
            else (want.numpy() if keepdim else np.expand_dims(want.numpy(), dim)),
            axis=0 if dim is None else dim,
        )
        np.testing.assert_array_equal(picked, wanted)
    else:
        near_torch(got, want)


def test_argmax_first_nan_and_first_tie():
    a = np.array([[1.0, 3.0, 3.0, np.nan, np.nan], [2.0, 2.0, -1.0, 0.0, 2.0]], np.float32)
    (got,) = both("aten::argmax.out", [a, 1, False, out_like((2,), np.int64)])
    assert got.tolist() == torch.argmax(t(a), 1).tolist() == [3, 0]
    (got,) = both("aten::argmin.out", [a, 1, False, out_like((2,), np.int64)])
    assert got.tolist() == torch.argmin(t(a), 1).tolist() == [3, 2]


def test_argmax_declines():
    a = data((3, 4), np.float32)
    declines("aten::argmax.out", [a > 0, 1, False, out_like((3,), np.int64)])
    declines("aten::argmax.out", [np.ones((), np.float32), None, False, out_like((), np.int64)])
    declines("aten::argmax.out", [np.ones((0, 2), "f4"), None, False, out_like((), np.int64)])
    declines("aten::argmin.out", [a, 1, False, out_like((3,), np.int32)])
    declines("aten::argmin.out", [a, None, True, out_like((), np.int64)])


# ---------------------------------------------------------------------------
# any


@pytest.mark.parametrize("dtype", [np.bool_, np.float32, np.int64, np.int8])
def test_any(dtype):
    a = data((3, 4, 5), dtype)
    if a.dtype != np.bool_:
        a[RNG.random(a.shape) < 0.8] = 0
    (got,) = both("aten::any.all_out", [a, out_like((), np.bool_)])
    near_torch(got, torch.any(t(a)))
    for dims, keepdim in [((1,), False), ((0, 2), True), ((), False), (None, False)]:
        want = torch.any(t(a), dim=dims, keepdim=keepdim) if dims is not None else torch.any(t(a))
        if dims is None and keepdim:
            continue
        out = out_like(want.shape, np.bool_)
        (got,) = both("aten::any.dims_out", [a, dims, keepdim, out])
        near_torch(got, want)
    for dim, keepdim in [(0, False), (-1, True)]:
        want = torch.any(t(a), dim=dim, keepdim=keepdim)
        (got,) = both("aten::any.out", [a, dim, keepdim, out_like(want.shape, np.bool_)])
        near_torch(got, want)


def test_any_declines():
    a = data((3, 4), np.float32)
    # torch.any of a uint8 tensor is uint8: the general kernel's business
    declines("aten::any.out", [a.astype(np.uint8), 0, False, out_like((4,), np.uint8)])
    declines("aten::any.dims_out", [a, (0,), False, out_like((3,), np.bool_)])


# ---------------------------------------------------------------------------
# cumsum


@pytest.mark.parametrize("shape,dim", [((3, 6), 1), ((3, 6), 0), ((2, 3, 4), -1), ((7,), 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
def test_cumsum(shape, dim, dtype):
    a = data(shape, dtype)
    want = torch.cumsum(t(a), dim)
    (got,) = both("aten::cumsum.out", [a, dim, None, out_like(want.shape, want.numpy().dtype)])
    near_torch(got, want)


def test_cumsum_with_dtype_and_declines():
    a = data((3, 5), np.int32)
    want = torch.cumsum(t(a), 1, dtype=torch.float64)
    (got,) = both("aten::cumsum.out", [a, 1, code(np.float64), out_like((3, 5), np.float64)])
    near_torch(got, want)
    declines("aten::cumsum.out", [a.astype(np.float16), 1, None, out_like((3, 5), np.float16)])
    declines("aten::cumsum.out", [np.ones((), "f4"), 0, None, out_like((), np.float32)])
    declines("aten::cumsum.out", [a, 1, None, out_like((3, 5), np.int32)])  # int32 -> int64
    declines("aten::cumsum.out", [a, 2, None, out_like((3, 5), np.int64)])


# ---------------------------------------------------------------------------
# topk


@pytest.mark.parametrize("shape,dim", [((4, 7), -1), ((4, 7), 0), ((2, 5, 3), 1), ((9,), 0)])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.uint8])
def test_topk_distinct_matches_torch(shape, dim, largest, dtype):
    size = shape[dim]
    a = RNG.permutation(int(np.prod(shape))).reshape(shape).astype(np.float64)
    if np.dtype(dtype).kind == "f":
        a = a - 10.5
        a.reshape(-1)[0] = np.nan  # NaN is the largest value, in torch and here
    a = a.astype(dtype)
    for k in sorted({1, 2, size}):
        want_v, want_i = torch.topk(t(a), k, dim, largest=largest)
        outs = [out_like(want_v.shape, a.dtype), out_like(want_v.shape, np.int64)]
        got_v, got_i = both("aten::topk.values", [a, k, dim, largest, True, *outs])
        near_torch(got_v, want_v)
        near_torch(got_i, want_i)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_topk_ties_keep_general_order(largest, dtype):
    # Ties (several NaN, signed zeros) come in ascending index order, as the general kernel says.
    a = np.array([[1, 3, 3, 2, 3, 1], [0, 0, 5, 5, 0, 5]], dtype=dtype)
    if dtype == np.float32:
        a[0, 0] = np.nan
        a[0, 5] = np.nan
        a[1, 0] = -0.0
        a[1, 4] = -0.0
    for k in (1, 3, 6):
        outs = [out_like((2, k), a.dtype), out_like((2, k), np.int64)]
        got_v, got_i = both("aten::topk.values", [a, k, 1, largest, True, *outs])
        want_v, _ = torch.topk(t(a), k, 1, largest=largest)
        same(got_v, np.take_along_axis(a, got_i, axis=1))
        np.testing.assert_array_equal(got_v, want_v.numpy())
    got_v, got_i = both(
        "aten::topk.values",
        [a, 3, 1, True, True, out_like((2, 3), a.dtype), out_like((2, 3), np.int64)],
    )
    if dtype == np.float32:
        assert got_i.tolist() == [[0, 5, 1], [2, 3, 5]]


def test_topk_declines():
    a = data((3, 4), np.float32)
    o = [out_like((3, 2), np.float32), out_like((3, 2), np.int64)]
    declines("aten::topk.values", [a, 0, 1, True, True, *o])
    declines("aten::topk.values", [a, 5, 1, True, True, *o])
    declines("aten::topk.values", [a > 0, 2, 1, True, True, o[0].astype(bool), o[1]])
    declines("aten::topk.values", [np.ones((), "f4"), 1, 0, True, True, *o])
    declines("aten::topk.values", [a, 2, 1, True, True, o[0], o[1].astype(np.int32)])
    declines("aten::topk.values", [a, 2, 0, True, True, *o])  # wrong output shape
