"""Indexing fast paths (fast_index.py) compute bit for bit what the general
kernels compute, agree with torch eager, raise the general kernels' errors for
out-of-range indices, and decline what they do not cover."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.kernels import KernelError, get_kernel
from pyexecutorch.kernels.registry import get_specializer

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

RNG = np.random.default_rng(2)
DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_]
INDEX = [np.int64, np.int32]


def data(shape, dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return RNG.random(shape) > 0.5
    if dt.kind in "iu":
        return RNG.integers(0 if dt.kind == "u" else -9, 10, shape).astype(dt)
    a = RNG.standard_normal(shape).astype(dt)
    if a.size >= 4:
        a.reshape(-1)[:4] = np.array([np.nan, -0.0, np.inf, -np.inf], dt)
    return a


def same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    assert got.tobytes() == want.tobytes(), (got, want)


def like_torch(got: np.ndarray, want: torch.Tensor) -> None:
    exp = want.numpy()
    assert got.shape == exp.shape and got.dtype == exp.dtype
    np.testing.assert_array_equal(got, exp)


def t(a):
    return torch.from_numpy(a.copy()) if isinstance(a, np.ndarray) else a


def fast_path(name: str, args: list):
    fast = get_specializer(name)(*args)
    assert fast is not None, f"{name} declined"
    return fast


def both(name: str, args: list, fast=None) -> np.ndarray:
    """Run a (given or new) fast path and the general kernel on copies; return fast's output."""
    fast = fast or fast_path(name, args)
    copies = [[a.copy() if isinstance(a, np.ndarray) else a for a in args] for _ in range(2)]
    get_kernel(name).fn(*copies[0])
    fast(*copies[1])
    fast(*copies[1])  # the same planned output again
    same(copies[1][-1], copies[0][-1])
    return copies[1][-1]


def raises_like_general(name: str, fast, args: list) -> None:
    with pytest.raises(KernelError) as general:
        get_kernel(name).fn(*args)
    with pytest.raises(KernelError) as fast_error:
        fast(*args)
    assert str(fast_error.value) == str(general.value)


def declines(name: str, args: list) -> None:
    assert get_specializer(name)(*args) is None


def out_like(shape, dtype) -> np.ndarray:
    return np.full(shape, 7, dtype=dtype)


# ---------------------------------------------------------------------------
# embedding, index_select


@pytest.mark.parametrize("ishape", [(3, 7), (5,), ()])
@pytest.mark.parametrize("idt", INDEX)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_embedding(ishape, idt, dtype):
    w = data((50, 12), dtype)
    ix = RNG.integers(0, 50, ishape).astype(idt)
    ix.reshape(-1)[:1] = 0  # the NaN row
    args = [w, ix, -1, False, False, out_like(ishape + (12,), dtype)]
    got = both("aten::embedding.out", args)
    like_torch(got, torch.nn.functional.embedding(t(ix).long(), t(w)))


@pytest.mark.parametrize("bad", [50, -1, 2**40, -(2**40)])
def test_embedding_out_of_range_raises_as_general(bad):
    w = data((50, 4), np.float32)
    ix = np.array([1, 2, 3], np.int64)
    fast = fast_path("aten::embedding.out", [w, ix, -1, False, False, out_like((3, 4), "f4")])
    ix[1] = bad
    raises_like_general(
        "aten::embedding.out", fast, [w, ix, -1, False, False, out_like((3, 4), "f4")]
    )


def test_embedding_declines():
    w = data((5, 4), np.float32)
    declines(
        "aten::embedding.out",
        [w, np.zeros((0,), np.int64), -1, False, False, out_like((0, 4), "f4")],
    )
    declines(
        "aten::embedding.out",
        [w, np.zeros((2,), np.int16), -1, False, False, out_like((2, 4), "f4")],
    )
    declines(
        "aten::embedding.out",
        [w, np.zeros((2,), np.int64), -1, False, False, out_like((2, 4), "f8")],
    )
    declines(
        "aten::embedding.out",
        [w[0], np.zeros((2,), np.int64), -1, False, False, out_like((2,), "f4")],
    )


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("idt", INDEX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_index_select(dim, idt, dtype):
    a = data((4, 6, 5), dtype)
    ix = np.array([2, 0, 3, 3], idt)
    want = torch.index_select(t(a), dim, t(ix))
    got = both("aten::index_select.out", [a, dim, ix, out_like(want.shape, a.dtype)])
    like_torch(got, want)


@pytest.mark.parametrize("bad", [6, -1, 12, -13])
def test_index_select_out_of_range(bad):
    a = data((4, 6), np.float32)
    ix = np.array([1, 2], np.int64)
    fast = fast_path("aten::index_select.out", [a, 1, ix, out_like((4, 2), "f4")])
    raises_like_general(
        "aten::index_select.out", fast, [a, 1, np.array([1, bad]), out_like((4, 2), "f4")]
    )


def test_index_select_declines():
    a = data((4, 6), np.float32)
    declines("aten::index_select.out", [a, 1, np.array(1), out_like((4, 1), "f4")])
    declines("aten::index_select.out", [a, 1, np.zeros((0,), np.int64), out_like((4, 0), "f4")])
    declines("aten::index_select.out", [a, 2, np.array([1]), out_like((4, 1), "f4")])
    declines("aten::index_select.out", [a, 1, np.array([1]), out_like((4, 2), "f4")])


# ---------------------------------------------------------------------------
# index.Tensor


INDEX_CASES = [
    lambda i: [i],
    lambda i: [None, i],
    lambda i: [None, None, i[:2] % 5],
    lambda i: [i, None, i],
    lambda i: [i.reshape(2, 2), i[:2]],
    lambda i: [None, i.reshape(2, 2), i[:1] % 5],
]


@pytest.mark.parametrize("case", range(len(INDEX_CASES)))
@pytest.mark.parametrize("idt", INDEX)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_index_tensor(case, idt, dtype):
    a = data((4, 6, 5), dtype)
    ix = np.array([2, 0, -1, 3], idt)  # negative indices count from the end, as in torch
    indices = INDEX_CASES[case](ix)
    want = torch.ops.aten.index.Tensor(t(a), [t(i) if i is not None else None for i in indices])
    got = both("aten::index.Tensor_out", [a, indices, out_like(want.shape, a.dtype)])
    like_torch(got, want)


@pytest.mark.parametrize("case", [0, 3])
def test_index_tensor_out_of_range(case):
    a = data((4, 6, 5), np.float32)
    ix = np.array([0, 1, 2, 3])
    indices = INDEX_CASES[case](ix)
    shape = a[tuple(slice(None) if i is None else i for i in indices)].shape
    fast = fast_path("aten::index.Tensor_out", [a, indices, out_like(shape, "f4")])
    for bad in (4, -5):
        ix[2] = bad
        raises_like_general(
            "aten::index.Tensor_out", fast, [a, INDEX_CASES[case](ix), out_like(shape, "f4")]
        )


def test_index_tensor_declines():
    a = data((4, 6), np.float32)
    mask = np.ones(4, bool)
    declines("aten::index.Tensor_out", [a, [mask], out_like((4, 6), "f4")])
    declines("aten::index.Tensor_out", [a, [None], out_like((4, 6), "f4")])
    declines("aten::index.Tensor_out", [a, [np.array([0]), None, None], out_like((1, 6), "f4")])
    declines("aten::index.Tensor_out", [a, [np.array([0])], out_like((1, 6), "f8")])
    declines("aten::index.Tensor_out", [a, [np.array([0, 1])], out_like((1, 6), "f4")])
    declines("aten::index.Tensor_out", [a, [np.zeros(0, np.int64)], out_like((0, 6), "f4")])


# ---------------------------------------------------------------------------
# index_put


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize(
    "make",
    [
        lambda: ([None, np.array([2])], (1, 1, 8)),  # the kv-cache update
        lambda: ([None, np.array([1, 4, 1], np.int32)], (1, 3, 8)),  # duplicates
        lambda: ([np.array([0]), np.array([-1, 3])], (2, 8)),
        lambda: ([None, np.array([5]), np.array([7])], (1,)),
        lambda: ([None, np.array([0, 2])], (8,)),  # values broadcast
        lambda: ([np.array([0])], (1, 6, 8)),
        lambda: ([None, None, np.array([[1, -2], [3, 0]])], (1, 6, 2, 2)),
        lambda: ([None, np.array([[1], [-1]], np.int32)], (1, 2, 1, 8)),
        lambda: ([None, np.array([1, 4, 2])], (3, 8)),  # fewer leading dims, same size
        lambda: ([None, np.array(3)], (1, 8)),
    ],
)
def test_index_put(accumulate, dtype, make):
    a = data((1, 6, 8), dtype)
    indices, vshape = make()
    values = data(vshape, dtype)
    want = torch.ops.aten.index_put(
        t(a), [t(i) if i is not None else None for i in indices], t(values), accumulate
    )
    got = both("aten::index_put.out", [a, indices, values, accumulate, out_like(a.shape, a.dtype)])
    if accumulate or not any(i is not None and np.unique(i).size < i.size for i in indices):
        like_torch(got, want)  # duplicates without accumulate: torch leaves the order open
    # in place
    inplace = fast_path("aten::index_put_", [a, indices, values, accumulate])
    mine, general = a.copy(), a.copy()
    inplace(mine, indices, values, accumulate)
    get_kernel("aten::index_put_").fn(general, indices, values, accumulate)
    same(mine, general)


def test_index_put_aliased_out_and_errors():
    a = data((1, 6, 8), np.float32)
    pos = np.array([2])
    v = data((1, 1, 8), np.float32)
    fast = fast_path("aten::index_put.out", [a, [None, pos], v, False, a])
    expect = a.copy()
    expect[:, 2] = v
    fast(a, [None, pos], v, False, a)
    same(a, expect)
    out = out_like(a.shape, a.dtype)
    raises_like_general("aten::index_put.out", fast, [a, [None, np.array([6])], v, False, out])
    inplace = fast_path("aten::index_put_", [a, [None, pos], v, False])
    raises_like_general("aten::index_put_", inplace, [a, [None, np.array([-7])], v, False])


def test_index_put_declines():
    a = data((1, 6, 8), np.float32)
    v = data((1, 1, 8), np.float32)
    out = out_like(a.shape, "f4")
    declines("aten::index_put.out", [a, [None, np.array([2])], v.astype("f8"), False, out])
    declines("aten::index_put.out", [a, [None, np.ones(6, bool)], v, False, out])
    declines(
        "aten::index_put.out", [a, [None, np.array([2, 3, 4])], data((1, 2, 8), "f4"), False, out]
    )
    declines("aten::index_put.out", [a, [None, np.zeros(0, np.int64)], v, False, out])
    declines("aten::index_put.out", [a, [None, np.array([2])], v, 1, out])
    declines("aten::index_put.out", [a, [None, np.array([2])], v, False, out.astype("f8")])


# ---------------------------------------------------------------------------
# gather, scatter, scatter_add


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("idt", INDEX)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
@pytest.mark.parametrize("ishape", [(4, 6, 2), (2, 3, 5), (4, 6, 5), (1, 1, 1)])
def test_gather(dim, idt, dtype, ishape):
    a = data((4, 6, 5), dtype)
    size = a.shape[dim]
    ishape = tuple(
        min(n, s) if d != dim % 3 else n
        for d, (n, s) in enumerate(zip(ishape, a.shape, strict=True))
    )
    ix = RNG.integers(0, size, ishape).astype(idt)
    want = torch.gather(t(a), dim, t(ix).long())
    got = both("aten::gather.out", [a, dim, ix, False, out_like(ishape, a.dtype)])
    like_torch(got, want)


@pytest.mark.parametrize("bad", [5, -1, 10, -11, 2**40])
def test_gather_out_of_range(bad):
    a = data((4, 6, 5), np.float32)
    ix = RNG.integers(0, 5, (4, 6, 2))
    fast = fast_path("aten::gather.out", [a, 2, ix, False, out_like(ix.shape, "f4")])
    ix[1, 2, 1] = bad
    raises_like_general("aten::gather.out", fast, [a, 2, ix, False, out_like(ix.shape, "f4")])


def test_gather_declines():
    a = data((4, 6), np.float32)
    declines("aten::gather.out", [a, 1, np.zeros((4,), np.int64), False, out_like((4,), "f4")])
    declines("aten::gather.out", [a, 1, np.zeros((5, 1), np.int64), False, out_like((5, 1), "f4")])
    declines("aten::gather.out", [a, 1, np.zeros((4, 0), np.int64), False, out_like((4, 0), "f4")])
    declines("aten::gather.out", [a, 1, np.zeros((4, 2), np.int64), False, out_like((4, 2), "f8")])
    declines("aten::gather.out", [a, 1, np.zeros((4, 2), np.int16), False, out_like((4, 2), "f4")])


def _distinct_index(shape, size, dim):
    """An index whose entries along ``dim`` are distinct: scatter then has one writer per slot."""
    ix = np.argsort(RNG.random(shape[:dim] + (size,) + shape[dim + 1 :]), axis=dim)
    return ix[(slice(None),) * dim + (slice(0, shape[dim]),)]


@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("op", ["src", "value", "add"])
def test_scatter(dim, dtype, op):
    a = data((4, 6, 5), dtype)
    ishape = (3, 4, 2)
    ishape = ishape[:dim] + (min(ishape[dim], a.shape[dim]),) + ishape[dim + 1 :]
    ix = _distinct_index(ishape, a.shape[dim], dim)
    src = data((4, 6, 5), dtype)
    out = out_like(a.shape, a.dtype)
    if op == "src":
        name, args = "aten::scatter.src_out", [a, dim, ix, src, out]
        want = torch.scatter(t(a), dim, t(ix), t(src))
    elif op == "value":
        name, args = "aten::scatter.value_out", [a, dim, ix, -2.5, out]
        want = torch.scatter(t(a), dim, t(ix), -2.5)
    else:
        ix = RNG.integers(0, a.shape[dim], ishape)  # duplicates add up
        name, args = "aten::scatter_add.out", [a, dim, ix, src, out]
        want = torch.scatter_add(t(a), dim, t(ix), t(src))
    got = both(name, args)
    if op == "add" and np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, equal_nan=True)
    else:
        like_torch(got, want)


def test_scatter_duplicates_and_errors():
    a = data((3, 4), np.float32)
    ix = np.array([[1, 1, 0], [3, 3, 3]])
    src = data((3, 4), np.float32)
    both("aten::scatter.src_out", [a, 1, ix, src, out_like(a.shape, "f4")])
    fast = fast_path("aten::scatter_add.out", [a, 1, ix, src, out_like(a.shape, "f4")])
    both("aten::scatter_add.out", [a, 1, ix, src, out_like(a.shape, "f4")], fast)
    bad = ix.copy()
    bad[1, 1] = 4
    raises_like_general("aten::scatter_add.out", fast, [a, 1, bad, src, out_like(a.shape, "f4")])
    # writing into the input itself
    fast = fast_path("aten::scatter.value_out", [a, 1, ix, 9.0, a])
    b = a.copy()
    fast(a, 1, ix, 9.0, a)
    get_kernel("aten::scatter.value_out").fn(b, 1, ix, 9.0, b)
    same(a, b)


def test_scatter_declines():
    a = data((3, 4), np.float32)
    ix = np.zeros((2, 2), np.int64)
    out = out_like(a.shape, "f4")
    declines("aten::scatter.src_out", [a, 1, ix, data((3, 4), "f8"), out])
    declines("aten::scatter.src_out", [a, 1, ix, data((1, 4), "f4"), out])
    declines("aten::scatter.value_out", [a, 1, ix, np.ones(()), out])
    declines("aten::scatter.value_out", [a, 1, ix, 1.0, out.astype("f8")])
    declines("aten::scatter.value_out", [a, 1, ix, 1.0, np.zeros((4, 3), "f4").T])
    declines("aten::scatter_add.out", [a, 1, np.zeros((2,), np.int64), a, out])


# ---------------------------------------------------------------------------
# masked_fill


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.float16, np.int64, np.uint8, np.bool_]
)
@pytest.mark.parametrize("mshape", [(3, 6), (1, 6), (3, 1), ()])
@pytest.mark.parametrize("value", [-1.5, float("-inf"), float("nan"), 3, True])
def test_masked_fill(dtype, mshape, value):
    a = data((3, 6), dtype)
    if np.dtype(dtype).kind in "biu" and isinstance(value, float):
        return  # torch refuses or the general kernel's checks apply: see declines
    mask = np.asarray(RNG.random(mshape) > 0.5)
    want = torch.masked_fill(t(a), t(mask), value)
    got = both("aten::masked_fill.Scalar_out", [a, mask, value, out_like((3, 6), a.dtype)])
    like_torch(got, want)


def test_masked_fill_broadcasts_input():
    a = data((1, 6), np.float32)
    mask = RNG.random((3, 6)) > 0.5
    got = both("aten::masked_fill.Scalar_out", [a, mask, 0.25, out_like((3, 6), "f4")])
    like_torch(got, torch.masked_fill(t(a), t(mask), 0.25))


def test_masked_fill_declines():
    a = data((3, 6), np.float32)
    mask = np.ones((3, 6), bool)
    out = out_like((3, 6), "f4")
    declines("aten::masked_fill.Scalar_out", [a, mask.astype(np.uint8), 1.0, out])
    declines("aten::masked_fill.Scalar_out", [a, mask, 1.0, out.astype("f8")])
    declines("aten::masked_fill.Scalar_out", [a, mask, 1e300, out])  # overflows float32
    declines(
        "aten::masked_fill.Scalar_out", [a.astype(np.int64), mask, float("nan"), out.astype("i8")]
    )
    declines("aten::masked_fill.Scalar_out", [a, mask[:, :1], 1.0, out_like((3, 1), "f4")])
