"""Reduction kernels against torch eager: sum, mean, prod, var, amax/amin,
max/min, argmax/argmin, any, cumsum, topk, cdist, pdist."""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyexecutorch.kernels import KernelError, get_kernel
from pyexecutorch.schema.scalar_type import scalar_type_of

SETTINGS = settings(max_examples=int(os.environ.get("PYET_EXAMPLES", 30)), deadline=None)

FLOATS = [np.float32, np.float64, np.float16]
INTS = [np.int32, np.int64, np.int8, np.uint8]
ALL = FLOATS + INTS + [np.bool_]


@contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def call(name, *args):
    return get_kernel(name).fn(*args)


def np_dtype(t: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=t).numpy().dtype


def code(dtype) -> int:
    return int(scalar_type_of(np.dtype(dtype)))


def out_for(expected: torch.Tensor) -> np.ndarray:
    """The planned output the compiler would give: the expected shape and dtype, garbage inside."""
    return np.full(expected.shape, 7, dtype=np_dtype(expected.dtype))


def check(got: np.ndarray, expected: torch.Tensor, exact: bool = False) -> None:
    exp = expected.numpy()
    assert got.shape == exp.shape, (got.shape, exp.shape)
    assert got.dtype == exp.dtype, (got.dtype, exp.dtype)
    if exact or exp.dtype.kind in "biu":
        np.testing.assert_array_equal(got, exp)
        return
    tol = 2e-3 if exp.dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got, exp, rtol=tol, atol=tol, equal_nan=True)


@st.composite
def arrays(draw, dtypes=ALL, min_ndim=0, max_ndim=4, min_side=0, max_side=4, nan=True, lo=-5, hi=6):
    """A numpy array of a drawn shape and dtype, sometimes a non-contiguous view."""
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    ndim = draw(st.integers(min_ndim, max_ndim))
    shape = tuple(draw(st.lists(st.integers(min_side, max_side), min_size=ndim, max_size=ndim)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    layout = draw(st.sampled_from(["c", "strided", "transposed"])) if ndim else "c"
    base_shape = list(shape)
    if layout == "strided":
        base_shape[-1] *= 2
    elif layout == "transposed":
        base_shape = base_shape[::-1]
    if dtype.kind == "f":
        a = rng.standard_normal(base_shape).astype(dtype)
        if nan and a.size and draw(st.booleans()):
            a.reshape(-1)[rng.integers(0, a.size, size=max(1, a.size // 5))] = np.nan
    elif dtype.kind == "b":
        a = rng.integers(0, 2, size=base_shape).astype(dtype)
    else:
        low = max(lo, np.iinfo(dtype).min)
        a = rng.integers(low, hi, size=base_shape).astype(dtype)
    if layout == "strided":
        a = a[..., ::2]
    elif layout == "transposed":
        a = a.transpose()
    assert a.shape == shape
    return a


@st.composite
def dim_lists(draw, ndim, allow_none=True):
    """None, () or a list of distinct dims, some negative."""
    choice = draw(st.sampled_from(["none", "empty", "list"] if allow_none else ["list"]))
    if choice == "none":
        return None
    if choice == "empty":
        return ()
    n = max(ndim, 1)
    dims = draw(st.lists(st.integers(0, n - 1), unique=True, min_size=1, max_size=n))
    if ndim == 0:
        dims = dims[:1]
    return tuple(d - n if draw(st.booleans()) else d for d in dims)


def nonempty_reduction(a: np.ndarray, dims) -> bool:
    if a.size:
        return True
    if not dims:
        return False
    return all(a.shape[d] != 0 for d in dims)


# ---------------------------------------------------------------------------
# sum, mean, prod


@SETTINGS
@given(st.data())
def test_sum(data):
    a = data.draw(arrays())
    dims = data.draw(dim_lists(a.ndim))
    keepdim = data.draw(st.booleans())
    dtype = data.draw(
        st.sampled_from([None, np.float32, np.float64, np.int64, np.int32, np.float16])
    )
    if dtype is not None and np.dtype(dtype).kind == "i":
        a = np.asarray(np.nan_to_num(a))  # NaN -> int is undefined in both
    expected = torch.sum(
        torch.from_numpy(a.copy()),
        dim=list(dims) if dims is not None else None,
        keepdim=keepdim,
        dtype=None if dtype is None else torch.from_numpy(np.zeros(0, dtype)).dtype,
    )
    got = call(
        "aten::sum.IntList_out",
        a,
        dims,
        keepdim,
        None if dtype is None else code(dtype),
        out_for(expected),
    )
    check(got, expected)


@SETTINGS
@given(st.data())
def test_mean(data):
    a = data.draw(arrays(dtypes=FLOATS))
    dims = data.draw(dim_lists(a.ndim))
    keepdim = data.draw(st.booleans())
    dtype = data.draw(st.sampled_from([None, np.float32, np.float64]))
    tdtype = None if dtype is None else torch.from_numpy(np.zeros(0, dtype)).dtype
    t = torch.from_numpy(a.copy())
    expected = torch.mean(
        t, dim=list(dims) if dims is not None else None, keepdim=keepdim, dtype=tdtype
    )
    c = None if dtype is None else code(dtype)
    check(call("aten::mean.out", a, dims, keepdim, c, out_for(expected)), expected)
    expected = torch.mean(t, dtype=tdtype)
    check(call("aten::mean.dtype_out", a, c, out_for(expected)), expected)


def test_mean_of_integers_with_float_dtype():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    expected = torch.mean(torch.from_numpy(a), dim=[1], dtype=torch.float32)
    check(call("aten::mean.out", a, (1,), False, code(np.float32), out_for(expected)), expected)


@SETTINGS
@given(st.data())
def test_prod(data):
    a = data.draw(arrays(max_ndim=3, lo=-3, hi=4))
    dtype = data.draw(st.sampled_from([None, np.float64, np.int64]))
    if dtype is not None and np.dtype(dtype).kind == "i":
        a = np.asarray(np.nan_to_num(a))  # NaN -> int is undefined in both
    tdtype = None if dtype is None else torch.from_numpy(np.zeros(0, dtype)).dtype
    c = None if dtype is None else code(dtype)
    t = torch.from_numpy(a.copy())
    expected = torch.prod(t, dtype=tdtype)
    check(call("aten::prod.out", a, c, out_for(expected)), expected)
    dim = data.draw(st.integers(-max(a.ndim, 1), max(a.ndim, 1) - 1))
    keepdim = data.draw(st.booleans())
    expected = torch.prod(t, dim, keepdim=keepdim, dtype=tdtype)
    check(call("aten::prod.int_out", a, dim, keepdim, c, out_for(expected)), expected)


def test_integer_sum_and_prod_wrap_like_torch():
    a = np.array([2**62, 2**62, 2**62], dtype=np.int64)
    for name, fn in [("aten::prod.out", torch.prod), ("aten::sum.IntList_out", torch.sum)]:
        expected = fn(torch.from_numpy(a))
        args = (a, None) if name == "aten::prod.out" else (a, None, False, None)
        check(call(name, *args, out_for(expected)), expected)
    small = np.array([100, 100, 100], dtype=np.int8)
    expected = torch.sum(torch.from_numpy(small), dtype=torch.int8)
    check(
        call("aten::sum.IntList_out", small, None, False, code(np.int8), out_for(expected)),
        expected,
    )


def test_sum_float_to_int_dtype_truncates_first():
    a = np.array([1.5, 2.7, -0.9], dtype=np.float32)
    expected = torch.sum(torch.from_numpy(a), dtype=torch.int32)
    check(
        call("aten::sum.IntList_out", a, None, False, code(np.int32), out_for(expected)), expected
    )


# ---------------------------------------------------------------------------
# var, var_mean


@SETTINGS
@given(st.data())
def test_var(data):
    a = data.draw(arrays(dtypes=[np.float32, np.float64, np.float16], nan=False))
    dims = data.draw(dim_lists(a.ndim))
    keepdim = data.draw(st.booleans())
    t = torch.from_numpy(a.copy())
    tdims = list(dims) if dims is not None else None
    unbiased = data.draw(st.booleans())
    with _quiet():
        expected = torch.var(t, dim=tdims, unbiased=unbiased, keepdim=keepdim)
    check(call("aten::var.out", a, dims, unbiased, keepdim, out_for(expected)), expected)
    correction = data.draw(st.sampled_from([None, 0, 1, 2, 0.5]))
    with _quiet():
        expected = torch.var(t, dim=tdims, correction=correction, keepdim=keepdim)
        ev, em = torch.var_mean(t, dim=tdims, correction=correction, keepdim=keepdim)
    check(
        call("aten::var.correction_out", a, dims, correction, keepdim, out_for(expected)),
        expected,
    )
    gv, gm = call(
        "aten::var_mean.correction_out", a, dims, correction, keepdim, out_for(ev), out_for(em)
    )
    check(gv, ev)
    check(gm, em)


def test_var_degenerate_counts():
    one = np.array([3.0], dtype=np.float32)
    two = np.array([1.0, 2.0], dtype=np.float32)
    empty = np.zeros((0,), dtype=np.float32)
    for a, corr in [(one, 1), (two, 3), (empty, 1), (two, 1.5)]:
        with _quiet():
            expected = torch.var(torch.from_numpy(a), correction=corr)
        check(call("aten::var.correction_out", a, None, corr, False, out_for(expected)), expected)


def test_var_rejects_integers():
    with pytest.raises(KernelError, match="floating point"):
        call("aten::var.out", np.arange(3), None, True, False, np.zeros((), np.int64))


# ---------------------------------------------------------------------------
# amax, amin, max, min, argmax, argmin


@SETTINGS
@given(st.data())
def test_amax_amin(data):
    a = data.draw(arrays())
    dims = data.draw(dim_lists(a.ndim))
    keepdim = data.draw(st.booleans())
    t = torch.from_numpy(a.copy())
    for name, fn in [("aten::amax.out", torch.amax), ("aten::amin.out", torch.amin)]:
        if not nonempty_reduction(a, dims):
            with pytest.raises(KernelError, match="Expected reduction dim"):
                call(name, a, dims or (), keepdim, np.zeros(0, a.dtype))
            continue
        expected = fn(t, dim=list(dims or ()), keepdim=keepdim)
        check(call(name, a, dims or (), keepdim, out_for(expected)), expected, exact=True)


@SETTINGS
@given(st.data())
def test_max_min_dim_and_unary(data):
    a = data.draw(arrays(lo=-2, hi=3))
    dim = data.draw(st.integers(-max(a.ndim, 1), max(a.ndim, 1) - 1))
    keepdim = data.draw(st.booleans())
    t = torch.from_numpy(a.copy())
    for name, unary, fn in [
        ("aten::max.dim_max", "aten::max.unary_out", torch.max),
        ("aten::min.dim_min", "aten::min.unary_out", torch.min),
    ]:
        if a.size == 0:
            with pytest.raises(KernelError, match="Expected reduction dim"):
                call(unary, a, np.zeros((), a.dtype))
        else:
            expected = fn(t)
            check(call(unary, a, out_for(expected)), expected, exact=True)
        if a.ndim and a.shape[dim] == 0:
            with pytest.raises(KernelError, match=f"reduction dim {dim % a.ndim} to have non-zero"):
                call(name, a, dim, keepdim, np.zeros(0, a.dtype), np.zeros(0, np.int64))
            continue
        ev, ei = fn(t, dim, keepdim=keepdim)
        gv, gi = call(name, a, dim, keepdim, out_for(ev), out_for(ei))
        check(gv, ev, exact=True)
        check(gi, ei, exact=True)


@SETTINGS
@given(st.data())
def test_argmax_argmin(data):
    a = data.draw(arrays(dtypes=FLOATS + INTS, lo=-2, hi=3))
    dim = data.draw(st.one_of(st.none(), st.integers(-max(a.ndim, 1), max(a.ndim, 1) - 1)))
    keepdim = data.draw(st.booleans())
    t = torch.from_numpy(a.copy())
    for name, fn in [("aten::argmax.out", torch.argmax), ("aten::argmin.out", torch.argmin)]:
        empty = a.size == 0 if dim is None else a.ndim > 0 and a.shape[dim] == 0
        if empty:
            with pytest.raises(KernelError, match="Expected reduction dim"):
                call(name, a, dim, keepdim, np.zeros(0, np.int64))
            continue
        expected = fn(t, dim=dim, keepdim=keepdim)
        check(call(name, a, dim, keepdim, out_for(expected)), expected)


def test_nan_is_the_extreme_of_everything():
    a = np.array([[1.0, np.nan, 5.0, np.nan], [2.0, 0.0, -1.0, 3.0]], dtype=np.float32)
    t = torch.from_numpy(a)
    for name, fn in [("aten::argmax.out", torch.argmax), ("aten::argmin.out", torch.argmin)]:
        expected = fn(t, dim=1)
        check(call(name, a, 1, False, out_for(expected)), expected)
    ev, ei = torch.min(t, 1)
    gv, gi = call("aten::min.dim_min", a, 1, False, out_for(ev), out_for(ei))
    check(gv, ev)
    check(gi, ei)
    expected = torch.amin(t, dim=[0])
    check(call("aten::amin.out", a, (0,), False, out_for(expected)), expected)


def test_argmax_rejects_bool():
    with pytest.raises(KernelError, match="bool"):
        call("aten::argmax.out", np.array([True, False]), None, False, np.zeros((), np.int64))


# ---------------------------------------------------------------------------
# any


@SETTINGS
@given(st.data())
def test_any(data):
    a = data.draw(arrays(lo=0, hi=2))
    t = torch.from_numpy(a.copy())
    expected = torch.any(t)
    check(call("aten::any.all_out", a, out_for(expected)), expected)
    dims = data.draw(dim_lists(a.ndim))
    keepdim = data.draw(st.booleans())
    expected = torch.ops.aten.any.dims(t, list(dims) if dims is not None else None, keepdim)
    check(call("aten::any.dims_out", a, dims, keepdim, out_for(expected)), expected)
    dim = data.draw(st.integers(-max(a.ndim, 1), max(a.ndim, 1) - 1))
    expected = torch.any(t, dim, keepdim=keepdim)
    check(call("aten::any.out", a, dim, keepdim, out_for(expected)), expected)


def test_any_counts_nan_as_true():
    a = np.array([0.0, np.nan], dtype=np.float32)
    expected = torch.any(torch.from_numpy(a))
    check(call("aten::any.all_out", a, out_for(expected)), expected)


# ---------------------------------------------------------------------------
# cumsum


@SETTINGS
@given(st.data())
def test_cumsum(data):
    a = data.draw(arrays())
    dim = data.draw(st.integers(-max(a.ndim, 1), max(a.ndim, 1) - 1))
    dtype = data.draw(st.sampled_from([None, np.float64, np.int64, np.int32]))
    if dtype is not None and np.dtype(dtype).kind == "i":
        a = np.asarray(np.nan_to_num(a))  # NaN -> int is undefined in both
    tdtype = None if dtype is None else torch.from_numpy(np.zeros(0, dtype)).dtype
    expected = torch.cumsum(torch.from_numpy(a.copy()), dim, dtype=tdtype)
    c = None if dtype is None else code(dtype)
    check(call("aten::cumsum.out", a, dim, c, out_for(expected)), expected)


# ---------------------------------------------------------------------------
# topk


@SETTINGS
@given(st.data())
def test_topk(data):
    a = data.draw(arrays(dtypes=FLOATS + INTS, lo=-3, hi=4))
    dim = data.draw(st.integers(-max(a.ndim, 1), max(a.ndim, 1) - 1))
    size = a.shape[dim] if a.ndim else 1
    k = data.draw(st.integers(0, size))
    largest = data.draw(st.booleans())
    t = torch.from_numpy(a.copy())
    ev, ei = torch.topk(t, k, dim, largest=largest, sorted=True)
    gv, gi = call("aten::topk.values", a, k, dim, largest, True, out_for(ev), out_for(ei))
    check(gv, ev, exact=True)
    assert gi.shape == ei.shape and gi.dtype == np.int64
    if a.ndim:
        # Ties may come in any order; the indices must pick the values, once each.
        picked = np.take_along_axis(a, gi, axis=dim)
        np.testing.assert_array_equal(picked, gv)
        srt = np.sort(gi, axis=dim)
        assert (np.diff(srt, axis=dim) > 0).all()


def test_topk_distinct_values_match_indices_exactly():
    rng = np.random.default_rng(0)
    a = rng.permutation(200).astype(np.float32).reshape(10, 20)
    a[3, 4] = np.nan
    t = torch.from_numpy(a)
    for largest in (True, False):
        for k in (1, 3, 20):
            ev, ei = torch.topk(t, k, 1, largest=largest)
            gv, gi = call("aten::topk.values", a, k, 1, largest, True, out_for(ev), out_for(ei))
            check(gv, ev, exact=True)
            check(gi, ei, exact=True)


def test_topk_ties_come_in_index_order():
    a = np.array([1, 3, 3, 2, 3], dtype=np.int64)
    gv, gi = call(
        "aten::topk.values", a, 3, 0, True, True, np.zeros(3, a.dtype), np.zeros(3, np.int64)
    )
    assert gv.tolist() == [3, 3, 3] and gi.tolist() == [1, 2, 4]
    gv, gi = call(
        "aten::topk.values", a, 2, 0, False, True, np.zeros(2, a.dtype), np.zeros(2, np.int64)
    )
    assert gv.tolist() == [1, 2] and gi.tolist() == [0, 3]


def test_topk_errors():
    a = np.zeros((2, 3), np.float32)
    with pytest.raises(KernelError, match="k out of range"):
        call("aten::topk.values", a, 4, 1, True, True, np.zeros(0, a.dtype), np.zeros(0, np.int64))
    with pytest.raises(KernelError, match="bool"):
        call("aten::topk.values", a > 0, 1, 1, True, True, np.zeros(0, bool), np.zeros(0, np.int64))


# ---------------------------------------------------------------------------
# cdist, pdist


@SETTINGS
@given(st.data())
def test_cdist(data):
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    batch1 = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    batch2 = batch1[len(batch1) - data.draw(st.integers(0, len(batch1))) :]
    if batch2 and data.draw(st.booleans()):
        batch2 = (1,) + batch2[1:]
    m = data.draw(st.integers(0, 5))
    r1 = data.draw(st.sampled_from([1, 3, 30]))
    r2 = data.draw(st.sampled_from([2, 4, 27]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x1 = rng.standard_normal(batch1 + (r1, m)).astype(dtype)
    x2 = rng.standard_normal(batch2 + (r2, m)).astype(dtype)
    if data.draw(st.booleans()) and m:
        x2[..., 0, :] = x1[..., 0, :][(0,) * (x1.ndim - 2)] if x1.ndim > 2 else x1[0]
    p = data.draw(st.sampled_from([0.0, 1.0, 2.0, 3.0, 0.5, float("inf")]))
    mode = data.draw(st.sampled_from([None, 0, 1, 2]))
    expected = torch.ops.aten._cdist_forward(torch.from_numpy(x1), torch.from_numpy(x2), p, mode)
    got = call("aten::_cdist_forward.out", x1, x2, p, mode, out_for(expected))
    exp = expected.numpy()
    assert got.shape == exp.shape and got.dtype == exp.dtype
    tol = 1e-4 if dtype == np.float32 else 1e-10
    # p=2 may use the matrix-product form (as torch does), whose cancellation near
    # equal points leaves an absolute error of about sqrt(eps * |x|^2).
    atol = (3e-3 if dtype == np.float32 else 1e-7) if p == 2.0 else tol
    np.testing.assert_allclose(got, exp, rtol=tol, atol=atol)


@SETTINGS
@given(st.data())
def test_pdist(data):
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    n = data.draw(st.integers(0, 6))
    m = data.draw(st.integers(0, 4))
    p = data.draw(st.sampled_from([0.0, 1.0, 2.0, 3.0, 0.5, float("inf")]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((n, m)).astype(dtype)
    expected = torch.ops.aten._pdist_forward(torch.from_numpy(x), p)
    got = call("aten::_pdist_forward.out", x, p, out_for(expected))
    exp = expected.numpy()
    assert got.shape == exp.shape and got.dtype == exp.dtype
    np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)


def test_distance_errors():
    x = np.zeros((2, 3), np.float32)
    out = np.zeros((2, 2), np.float32)
    with pytest.raises(KernelError, match="non-negative p"):
        call("aten::_cdist_forward.out", x, x, -1.0, None, out)
    with pytest.raises(KernelError, match="same number of columns"):
        call("aten::_cdist_forward.out", x, np.zeros((2, 4), np.float32), 2.0, None, out)
    with pytest.raises(KernelError, match="float32 and float64"):
        call("aten::_cdist_forward.out", x.astype(np.int32), x.astype(np.int32), 2.0, None, out)
    with pytest.raises(KernelError, match="2D"):
        call("aten::_pdist_forward.out", np.zeros(3, np.float32), 2.0, np.zeros(0, np.float32))


# ---------------------------------------------------------------------------
# errors and outputs


def test_dim_errors():
    a = np.zeros((2, 3), np.float32)
    out = np.zeros((), np.float32)
    with pytest.raises(KernelError, match="appears multiple times"):
        call("aten::sum.IntList_out", a, (0, -2), False, None, out)
    with pytest.raises(KernelError, match="out of range"):
        call("aten::sum.IntList_out", a, (2,), False, None, out)
    with pytest.raises(KernelError, match="Input dtype must be either a floating"):
        call("aten::mean.out", np.arange(3), None, False, None, out)
    with pytest.raises(KernelError, match="Optional dtype must be either a floating"):
        call("aten::mean.out", a, None, False, code(np.int64), out)
    with pytest.raises(KernelError, match="amax\\(\\): Expected reduction dim 0 to have non-zero"):
        call("aten::amax.out", np.zeros((0, 3), np.float32), (0,), False, np.zeros(3, np.float32))
    with pytest.raises(KernelError, match="does not fit"):
        call("aten::sum.IntList_out", a, (0,), False, None, np.zeros(2, np.float32))


def test_zero_dim_reductions():
    a = np.array(2.5, dtype=np.float32)
    t = torch.from_numpy(a)
    for dims in [(0,), (-1,), None]:
        for keepdim in (False, True):
            expected = torch.sum(t, dim=list(dims) if dims else None, keepdim=keepdim)
            check(
                call("aten::sum.IntList_out", a, dims, keepdim, None, out_for(expected)), expected
            )
    ev, ei = torch.max(t, 0)
    gv, gi = call("aten::max.dim_max", a, 0, False, out_for(ev), out_for(ei))
    check(gv, ev)
    check(gi, ei)
    with pytest.raises(KernelError, match="appears multiple times"):
        call("aten::sum.IntList_out", a, (0, -1), False, None, np.zeros((), np.float32))


def test_unplanned_output_is_allocated():
    a = np.ones((3, 4), np.float32)
    got = call("aten::sum.IntList_out", a, (1,), False, None, np.zeros(0, np.float32))
    np.testing.assert_array_equal(got, np.full(3, 4.0, np.float32))
