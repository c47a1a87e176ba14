"""The compiled forms of norms, reductions, pooling, gathers and small products.

Each form is checked against its numpy kernel and against torch eager on
generated shapes (NaN, infinity and -0.0 among the inputs where torch and
numpy agree on them), with an output aliasing its input where the kernel
allows it; cases the forms leave to numpy return None; and a program loaded
with the compiled tier runs them (they are what its generated code calls).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("numba", reason="the compiled forms need numba (the jit extra)")

from pyexecutorch.exir import to_edge  # noqa: E402
from pyexecutorch.kernels import get_kernel  # noqa: E402
from pyexecutorch.kernels.linalg import compiled as linalg_compiled  # noqa: E402
from pyexecutorch.kernels.registry import KernelError, fast_path_of, get_compiled_form  # noqa: E402
from pyexecutorch.runtime import (
    Runtime,  # noqa: E402
    tiers,  # noqa: E402
)

tiers.enabled(True)  # imports every family's compiled forms

F32, F64 = np.float32, np.float64
TOL = {F32: {"rtol": 1e-5, "atol": 1e-5}, F64: {"rtol": 1e-12, "atol": 1e-12}}


def _read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False  # as program constants reach kernels
    return a


def _t(a):  # noqa: ANN001, ANN202
    return torch.from_numpy(np.array(a)) if isinstance(a, np.ndarray) else a


def _run(name: str, args: tuple, outs: list[np.ndarray], alias: int | None = None):  # noqa: ANN202
    """(reference outputs, compiled outputs) of ``name``; ``alias``: out 0 is input ``alias``."""
    reference = get_kernel(name).fn(*args, *[o.copy() for o in outs])
    if alias is not None:
        args = list(args)
        args[alias] = args[alias].copy()
        outs = [args[alias], *outs[1:]]
    fast = get_compiled_form(name)(*args, *outs)
    assert fast is not None, f"{name}: the compiled form declined"
    got = fast(*args, *outs)
    if not isinstance(reference, tuple):
        reference, got = (reference,), (got,)
    return reference, got


def _check(name, args, outs, want, dtype, alias=None):  # noqa: ANN001, ANN202
    reference, got = _run(name, args, outs, alias)
    for r, g in zip(reference, got, strict=True):
        np.testing.assert_allclose(g, r, **TOL[dtype])
    np.testing.assert_allclose(got[0], want, **TOL[dtype])
    return got


def _x(shape, dtype, seed=0, special=True):  # noqa: ANN001, ANN202
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    if special:
        x.reshape(-1)[:1] = -0.0
    return x


# ---------------------------------------------------------------------------
# norms

LAYER_NORM = [((2, 5, 16), (16,), True), ((3, 33), (33,), False), ((4, 3, 5), (3, 5), True)]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape,ns,affine", LAYER_NORM)
def test_layer_norm(shape, ns, affine, dtype):
    x = _x(shape, dtype)
    w = _read_only(np.random.default_rng(1).uniform(0.5, 1.5, ns).astype(dtype)) if affine else None
    b = _read_only(np.random.default_rng(2).standard_normal(ns).astype(dtype)) if affine else None
    stat = shape[: len(shape) - len(ns)] + (1,) * len(ns)
    outs = [np.full(shape, np.nan, dtype), np.zeros(stat, dtype), np.zeros(stat, dtype)]
    want = F.layer_norm(_t(x), ns, _t(w), _t(b), 1e-5).numpy()
    args = (x, ns, w, b, 1e-5)
    _check("aten::native_layer_norm.out", args, outs, want, dtype)
    _check("aten::native_layer_norm.out", args, outs, want, dtype, alias=0)


def test_layer_norm_non_finite_rows_are_nan_as_in_torch():
    x = _x((3, 8), F32)
    x[1, 2], x[2, 0] = np.inf, np.nan
    outs = [np.zeros((3, 8), F32), np.zeros((3, 1), F32), np.zeros((3, 1), F32)]
    want = F.layer_norm(_t(x), (8,), eps=1e-5).numpy()
    got = _check("aten::native_layer_norm.out", (x, (8,), None, None, 1e-5), outs, want, F32)
    assert np.isnan(got[0][1:]).all() and np.isfinite(got[0][0]).all()


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape,groups", [((2, 8, 4, 4), 2), ((1, 6, 5), 3), ((3, 4, 2, 3), 4)])
def test_group_norm(shape, groups, dtype):
    n, c = shape[:2]
    hw = int(np.prod(shape[2:]))
    x = _x(shape, dtype)
    w = _read_only(np.random.default_rng(1).uniform(0.5, 1.5, c).astype(dtype))
    b = _read_only(np.random.default_rng(2).standard_normal(c).astype(dtype))
    outs = [np.zeros(shape, dtype), np.zeros((n, groups), dtype), np.zeros((n, groups), dtype)]
    want = F.group_norm(_t(x), groups, _t(w), _t(b), 1e-5).numpy()
    args = (x, w, b, n, c, hw, groups, 1e-5)
    _check("aten::native_group_norm.out", args, outs, want, dtype)
    _check("aten::native_group_norm.out", args, outs, want, dtype, alias=0)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape", [(2, 8, 4, 4), (3, 5), (1, 3, 7)])
def test_batch_norm_inference(shape, dtype):
    c = shape[1]
    rng = np.random.default_rng(3)
    w, b, mean = (_read_only(rng.standard_normal(c).astype(dtype)) for _ in range(3))
    var = _read_only(rng.uniform(0.5, 2.0, c).astype(dtype))
    x = _x(shape, dtype)
    x.reshape(-1)[1] = np.inf
    want = F.batch_norm(_t(x), _t(mean), _t(var), _t(w), _t(b), False, 0.1, 1e-5).numpy()
    outs = [np.zeros(shape, dtype), np.zeros(0, dtype), np.zeros(0, dtype)]
    args = (x, w, b, mean, var, 0.1, 1e-5)
    name = "aten::_native_batch_norm_legit_no_training.out"
    _check(name, args, outs, want, dtype)
    _check(name, args, outs, want, dtype, alias=0)


# ---------------------------------------------------------------------------
# softmax and reductions


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,dim", [((4, 16), -1), ((3, 5, 7), 1), ((2, 3), 0), ((70,), 0)])
def test_softmax(shape, dim, log, dtype):
    x = _x(shape, dtype) * 4
    x.reshape(-1)[-1] = -np.inf
    name = "aten::_log_softmax.out" if log else "aten::_softmax.out"
    want = (torch.log_softmax if log else torch.softmax)(_t(x), dim).numpy()
    _check(name, (x, dim, False), [np.zeros(shape, dtype)], want, dtype)
    _check(name, (x, dim, False), [np.zeros(shape, dtype)], want, dtype, alias=0)


def test_softmax_of_a_row_of_minus_infinity_is_nan_as_in_torch():
    x = np.array([[-np.inf] * 4, [0.0, 1.0, 2.0, np.inf], [1.0, np.nan, 0.0, 0.0]], F32)
    want = torch.softmax(_t(x), -1).numpy()
    got = _check("aten::_softmax.out", (x, -1, False), [np.zeros_like(x)], want, F32)
    assert np.isnan(got[0][0]).all() and np.isnan(got[0][2]).all()


@pytest.mark.parametrize("log", [False, True])
def test_softmax_row_maxima_are_the_running_maximums_bits(log):
    # rows of 19 (two passes of eight interleaved maxima and a tail): the statistic is the
    # first largest value or the first NaN, as one running maximum finds it, bit for bit
    # (the sign of a zero maximum included)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((7, 19)) * 3).astype(F32)
    x[0] = -5.0
    x[0, 3], x[0, 12] = -0.0, 0.0  # the largest: -0.0 first
    x[1] = -5.0
    x[1, 2], x[1, 17] = 0.0, -0.0  # the largest: 0.0 first
    x[2, 9] = np.nan  # in the eight-wide passes
    x[3, 18] = np.nan  # in the tail
    x[4, 0] = np.nan  # the first element
    x[5] = -np.inf
    x[6, 18] = 40.0  # the largest last
    from pyexecutorch.kernels.reduce import compiled as reduce_compiled  # noqa: PLC0415

    for i, row in enumerate(x):
        top = row[0]  # the running maximum the interleaved one stands for
        for v in row[1:]:
            if v > top or v != v:
                top = v
        got = reduce_compiled._row_top(x.reshape(7, 19, 1), i)
        assert F32(got).view(np.int32) == F32(top).view(np.int32), (i, got, top)
    name = "aten::_log_softmax.out" if log else "aten::_softmax.out"
    want = (torch.log_softmax if log else torch.softmax)(_t(x), -1).numpy()
    _check(name, (x, -1, False), [np.zeros_like(x)], want, F32)


REDUCTIONS = [((3, 7, 12), [1], False), ((2, 3, 8, 8), [-1, -2], True), ((4, 5), [0, 1], False)]
REDUCTIONS += [((5, 9), [1], True), ((3, 4, 6), [0], False), ((2, 3, 20), [2], False)]


def _reduced(shape, dims, keepdim):  # noqa: ANN001, ANN202
    axes = {d % len(shape) for d in dims}
    return tuple(1 if i in axes else s for i, s in enumerate(shape) if keepdim or i not in axes)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape,dims,keepdim", REDUCTIONS)
def test_mean_and_sum(shape, dims, keepdim, dtype):
    x = _x(shape, dtype)
    out = np.zeros(_reduced(shape, dims, keepdim), dtype)
    want = torch.mean(_t(x), dims, keepdim).numpy()
    _check("aten::mean.out", (x, dims, keepdim, None), [out], want, dtype)
    want = torch.sum(_t(x), dims, keepdim).numpy()
    _check("aten::sum.IntList_out", (x, dims, keepdim, None), [out], want, dtype)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape,dims", [((3, 7), [1]), ((2, 3, 4), [2]), ((4, 2, 3), [0])])
def test_sums_of_negative_zeros_are_positive_zero(shape, dims, dtype):
    # torch and numpy sum from +0.0: a mean or sum of -0.0 is 0.0
    x = np.full(shape, -0.0, dtype)
    out = np.full(_reduced(shape, dims, False), np.nan, dtype)
    for name, fn in (("aten::mean.out", torch.mean), ("aten::sum.IntList_out", torch.sum)):
        want = fn(_t(x), dims).numpy()
        reference, got = _run(name, (x, dims, False, None), [out])
        for g in (got[0], reference[0]):
            np.testing.assert_array_equal(g, want)
            assert not np.signbit(g).any() and not np.signbit(want).any()


@pytest.mark.parametrize("dtype", [F32, F64, np.int64, np.int32])
@pytest.mark.parametrize("shape,dims,keepdim", REDUCTIONS)
def test_amax(shape, dims, keepdim, dtype):
    x = (_x(shape, F64) * 50).astype(dtype)
    if x.dtype.kind == "f":
        x.reshape(-1)[3] = np.nan
        x.reshape(-1)[-1] = np.inf
    out = np.zeros(_reduced(shape, dims, keepdim), dtype)
    want = torch.amax(_t(x), dims, keepdim).numpy()
    reference, got = _run("aten::amax.out", (x, dims, keepdim), [out])
    np.testing.assert_array_equal(got[0], reference[0])
    np.testing.assert_array_equal(got[0], want)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize(
    "shape,dims,keepdim", [((3, 4, 5), (0, 2), False), ((2, 3, 4, 5), (1, 3), True)]
)
def test_mean_and_sum_over_two_runs_of_axes(shape, dims, keepdim, dtype):
    x = _x(shape, dtype)
    out = np.zeros(_reduced(shape, dims, keepdim), dtype)
    want = torch.mean(_t(x), dims, keepdim).numpy()
    _check("aten::mean.out", (x, dims, keepdim, None), [out], want, dtype)
    want = torch.sum(_t(x), dims, keepdim).numpy()
    _check("aten::sum.IntList_out", (x, dims, keepdim, None), [out], want, dtype)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_mean_of_every_element(dtype):
    x = _x((3, 4, 5), dtype)
    _check("aten::mean.dtype_out", (x, None), [np.zeros((), dtype)], torch.mean(_t(x)), dtype)


@pytest.mark.parametrize("dtype", [F32, F64, np.int64, np.int32])
@pytest.mark.parametrize("shape,dims,keepdim", REDUCTIONS)
def test_amin(shape, dims, keepdim, dtype):
    x = (_x(shape, F64) * 50).astype(dtype)
    if x.dtype.kind == "f":
        x.reshape(-1)[3] = np.nan
        x.reshape(-1)[-1] = -np.inf
    out = np.zeros(_reduced(shape, dims, keepdim), dtype)
    want = torch.amin(_t(x), dims, keepdim).numpy()
    reference, got = _run("aten::amin.out", (x, dims, keepdim), [out])
    np.testing.assert_array_equal(got[0], reference[0])
    np.testing.assert_array_equal(got[0], want)


@pytest.mark.filterwarnings("ignore:var... degrees of freedom")
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("correction", [1, 0, 1.0, 5])
def test_var(correction, dtype):
    x = _x((3, 4, 5), dtype) * 3 + 1
    x[0, 1, 2] = np.nan
    for dims, keepdim in (([1], True), ([2], False), ([1, 2], False)):
        out = np.zeros(_reduced(x.shape, dims, keepdim), dtype)
        args = (x, dims, correction, keepdim)
        with np.errstate(all="ignore"):  # a correction past the count divides by zero
            want = torch.var(_t(x), dims, correction=correction, keepdim=keepdim).numpy()
            reference, got = _run("aten::var.correction_out", args, [out])
        np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(reference[0]))
        np.testing.assert_allclose(got[0], reference[0], **TOL[dtype])
        np.testing.assert_allclose(got[0], want, **TOL[dtype])


@pytest.mark.parametrize("dtype", [F32, F64])
def test_prod(dtype):
    x = _x((3, 4, 5), dtype) + 0.5
    x[1, 2, 3] = np.inf
    for dim, keepdim in ((2, True), (0, False), (-2, False)):
        out = np.zeros(_reduced(x.shape, [dim], keepdim), dtype)
        want = torch.prod(_t(x), dim, keepdim).numpy()
        _check("aten::prod.int_out", (x, dim, keepdim, None), [out], want, dtype)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_and_min_dim_values_and_first_indices(name, dtype):
    x = np.round(_x((3, 6, 5), dtype) * 2) / 2  # ties
    x[0, 3, 1] = x[2, 0, 4] = x[2, 5, 4] = np.nan  # the first NaN wins
    x[1, :, 2] = -np.inf
    kernel = f"aten::{name}.dim_{name}"
    for dim, keepdim in ((1, False), (-1, True), (0, False)):
        shape = _reduced(x.shape, [dim], keepdim)
        outs = [np.zeros(shape, dtype), np.zeros(shape, np.int64)]
        reference, got = _run(kernel, (x, dim, keepdim), outs)
        values, indices = getattr(torch, name)(_t(x), dim, keepdim)
        for r, g, w in zip(reference, got, (values.numpy(), indices.numpy()), strict=True):
            np.testing.assert_array_equal(g, r)
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", [F32, F64, np.int64, np.int32])
def test_cumsum_adds_as_numpy_does(dtype):
    x = (_x((3, 5, 4), F64) * 50).astype(dtype)
    if x.dtype.kind == "f":
        x[0, 1, 2], x[1, 0, 3] = np.nan, np.inf
    else:
        x[2, :, 1] = np.iinfo(dtype).max  # int64 wraps; int32 sums in int64
    acc = dtype if x.dtype.kind == "f" else np.int64
    for dim in (1, -1, 0):
        out = np.zeros(x.shape, acc)
        reference, got = _run("aten::cumsum.out", (x, dim, None), [out])
        np.testing.assert_array_equal(got[0], reference[0])
        want = torch.cumsum(_t(x), dim).numpy()  # floats: torch sums in double
        if x.dtype.kind == "f":
            np.testing.assert_allclose(got[0], want, **TOL[dtype])
        else:
            np.testing.assert_array_equal(got[0], want)
        if acc == dtype:  # written over its own input
            reference, got = _run("aten::cumsum.out", (x, dim, None), [out], alias=0)
            np.testing.assert_array_equal(got[0], reference[0])


INDEXING = [
    ([np.array([2, 0, -1])], (4, 6, 5)),  # one tensor, on the first axis, negative wraps
    ([None, np.array([5, -6, 1, 1])], (4, 6, 5)),  # on a middle axis
    ([np.array([2, 0, 3]), None, np.array([4, -5, 0])], (4, 6, 5)),  # apart: its axis first
    ([None, np.array([1, 2]), np.array([0, 4])], (4, 6, 5)),  # adjacent: in place
]


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("dtype", [F32, np.int64])
@pytest.mark.parametrize("case", range(len(INDEXING)))
def test_index_by_one_or_two_index_tensors(case, dtype, index_dtype):
    given, shape = INDEXING[case]
    x = (_x(shape, F64) * 9).astype(dtype)
    indices = [None if ix is None else ix.astype(index_dtype) for ix in given]
    want = _t(x)[tuple(slice(None) if ix is None else _t(ix).long() for ix in indices)].numpy()
    reference, got = _run("aten::index.Tensor_out", (x, indices), [np.zeros(want.shape, dtype)])
    np.testing.assert_array_equal(got[0], reference[0])
    np.testing.assert_array_equal(got[0], want)


def test_index_and_gather_out_of_range_raise_the_reference_error():
    x = _x((4, 6, 5), F32)
    bad = [None, np.array([1, 6])]
    fast = get_compiled_form("aten::index.Tensor_out")(x, bad, np.zeros((4, 2, 5), F32))
    with pytest.raises(KernelError, match="out of bounds"):
        fast(x, bad, np.zeros((4, 2, 5), F32))
    index = np.zeros((4, 6, 2), np.int64)
    index[1, 2, 1] = 5
    fast = get_compiled_form("aten::gather.out")(x, 2, index, False, np.zeros(index.shape, F32))
    with pytest.raises(KernelError, match="gather"):
        fast(x, 2, index, False, np.zeros(index.shape, F32))


@pytest.mark.parametrize("dtype", [F32, F64, np.int32])
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_gather_along_an_axis(dim, dtype):
    x = (_x((4, 6, 5), F64) * 9).astype(dtype)
    shape = list(x.shape)
    shape[dim] = 3
    index = np.random.default_rng(3).integers(0, x.shape[dim], shape).astype(np.int64)
    want = torch.gather(_t(x), dim, _t(index)).numpy()
    reference, got = _run("aten::gather.out", (x, dim, index, False), [np.zeros(shape, dtype)])
    np.testing.assert_array_equal(got[0], reference[0])
    np.testing.assert_array_equal(got[0], want)


# ---------------------------------------------------------------------------
# pooling

ADAPTIVE = [
    ((1, 32, 8, 8), (1, 1)),
    ((2, 3, 8, 8), (2, 2)),
    ((2, 3, 7, 9), (3, 5)),
    ((3, 6, 6), (4, 4)),
]  # noqa: E501


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape,size", ADAPTIVE)
def test_adaptive_avg_pool(shape, size, dtype):
    x = _x(shape, dtype)
    x.reshape(-1)[5] = np.inf
    want = F.adaptive_avg_pool2d(_t(x), size).numpy()
    out = np.zeros(shape[:-2] + size, dtype)
    _check("aten::_adaptive_avg_pool2d.out", (x, list(size)), [out], want, dtype)


# (shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG_POOL = [
    ((2, 3, 8, 8), 3, 2, 1, False, True, None),
    ((2, 3, 8, 8), 3, 2, 1, False, False, None),
    ((1, 2, 7, 7), 2, 2, 0, True, True, None),
    ((1, 2, 9, 6), 3, 1, 1, False, True, 5),
    ((3, 5, 5), 2, 2, 1, True, False, None),
]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("case", AVG_POOL, ids=[str(c) for c in AVG_POOL])
def test_avg_pool(case, dtype):
    shape, k, s, p, ceil, include, override = case
    x = _x(shape, dtype)
    want = F.avg_pool2d(_t(x), k, s, p, ceil, include, override).numpy()
    args = (x, [k, k], [s, s], [p, p], ceil, include, override)
    _check("aten::avg_pool2d.out", args, [np.zeros(want.shape, dtype)], want, dtype)


# (shape, kernel, stride, padding, dilation, ceil_mode)
MAX_POOL = [
    ((2, 3, 8, 8), 2, 2, 0, 1, False),
    ((2, 3, 8, 8), 3, 1, 1, 1, False),
    ((1, 2, 9, 9), 3, 2, 1, 2, False),
    ((1, 2, 7, 7), 2, 2, 1, 1, True),
    ((3, 6, 5), 3, 2, 0, 1, True),
]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("case", MAX_POOL, ids=[str(c) for c in MAX_POOL])
def test_max_pool_values_and_indices(case, dtype):
    shape, k, s, p, d, ceil = case
    x = _x(shape, dtype)
    flat = x.reshape(-1)
    flat[7], flat[8], flat[20] = np.nan, np.nan, -np.inf  # a window's last NaN is its index
    flat[30:34] = 1.5  # ties: the first maximum's index
    want, want_idx = F.max_pool2d(_t(x), k, s, p, d, ceil, return_indices=True)
    args = (x, [k, k], [s, s], [p, p], [d, d], ceil)
    outs = [np.zeros(want.shape, dtype), np.zeros(want.shape, np.int64)]
    reference, got = _run("aten::max_pool2d_with_indices.out", args, outs)
    np.testing.assert_array_equal(got[0], reference[0])
    np.testing.assert_array_equal(got[1], reference[1])
    np.testing.assert_array_equal(got[0], want.numpy())
    np.testing.assert_array_equal(got[1], want_idx.numpy())


# ---------------------------------------------------------------------------
# gathers


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_embedding(dtype, index_dtype):
    weight = _read_only(_x((50, 12), dtype))
    idx = np.random.default_rng(4).integers(0, 50, (3, 7)).astype(index_dtype)
    idx[0, 0], idx[0, 1] = 0, 49
    want = F.embedding(_t(idx).long(), _t(weight)).numpy()
    args = (weight, idx, -1, False, False)
    reference, got = _run("aten::embedding.out", args, [np.zeros((3, 7, 12), dtype)])
    np.testing.assert_array_equal(got[0], reference[0])
    np.testing.assert_array_equal(got[0], want)


def test_embedding_out_of_range_raises_the_reference_error():
    weight = _read_only(_x((10, 4), F32))
    idx = np.array([1, 2, 3], np.int64)
    out = np.zeros((3, 4), F32)
    fast = get_compiled_form("aten::embedding.out")(weight, idx, -1, False, False, out)
    assert fast is not None
    for bad in (10, -1):
        idx[1] = bad
        with pytest.raises(KernelError, match=f"embedding: index {bad} is out of range"):
            fast(weight, idx, -1, False, False, out)


@pytest.mark.parametrize("dtype", [F32, np.int64])
@pytest.mark.parametrize(
    "shape,dim,index", [((4, 6, 5), 1, [2, 0, 5, 5]), ((4, 6), 0, [3]), ((2, 3, 4), -1, [3, 1])]
)  # noqa: E501
def test_index_select(shape, dim, index, dtype):
    x = (_x(shape, F64) * 10).astype(dtype)
    idx = np.array(index, np.int64)
    want = torch.index_select(_t(x), dim, _t(idx)).numpy()
    reference, got = _run("aten::index_select.out", (x, dim, idx), [np.zeros(want.shape, dtype)])
    np.testing.assert_array_equal(got[0], reference[0])
    np.testing.assert_array_equal(got[0], want)
    idx[0] = shape[dim]
    with pytest.raises(KernelError, match="index_select: index .* is out of bounds"):
        get_compiled_form("aten::index_select.out")(x, dim, idx, np.zeros(want.shape, dtype))(
            x, dim, idx, np.zeros(want.shape, dtype)
        )


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [F32, np.int64])
@pytest.mark.parametrize(
    "shape,axis,index,values_shape",
    [
        ((1, 6, 8), 1, [2], (1, 1, 8)),  # a KV cache update
        ((1, 6, 8), 1, [4], (8,)),  # values broadcast over leading 1s
        ((3, 5, 2), 1, [0, -1, 3, 0], (3, 4, 2)),  # negatives, a repeated row
        ((4, 3), 0, [1, 3], (2, 3)),
    ],
)
def test_index_put(shape, axis, index, values_shape, dtype, accumulate):
    a = (_x(shape, F64) * 10).astype(dtype)
    idx = np.array(index, np.int64)
    values = (_x(values_shape, F64, 7) * 10).astype(dtype)
    indices = [None] * axis + [idx]
    if accumulate or len(set(i % shape[axis] for i in index)) == len(index):
        want = torch.ops.aten.index_put(_t(a), [None] * axis + [_t(idx)], _t(values), accumulate)
        want = want.numpy()
    else:
        want = None  # which of two writes to one row lands is unspecified in torch
    aliased = a.copy()
    for src, out in ((a, np.zeros(shape, dtype)), (aliased, aliased)):  # out apart, out is a
        reference = get_kernel("aten::index_put.out").fn(
            src.copy(), indices, values, accumulate, np.zeros(shape, dtype)
        )
        fast = get_compiled_form("aten::index_put.out")(src, indices, values, accumulate, out)
        assert fast is not None
        got = fast(src, indices, values, accumulate, out)
        assert got is out
        np.testing.assert_array_equal(got, reference)
        if want is not None:
            np.testing.assert_array_equal(got, want)


def test_index_put_out_of_range_raises_the_reference_error():
    a, values, out = np.zeros((1, 6, 8), F32), np.ones((1, 1, 8), F32), np.zeros((1, 6, 8), F32)
    idx = np.array([2], np.int64)
    fast = get_compiled_form("aten::index_put.out")(a, [None, idx], values, False, out)
    for bad in (6, -7):
        idx[0] = bad
        with pytest.raises(KernelError, match="index_put"):
            fast(a, [None, idx], values, False, out)
        assert not out.any()  # nothing written


# ---------------------------------------------------------------------------
# small matrix products


@pytest.mark.filterwarnings("ignore:invalid value encountered in matmul")
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("n,k,p", [(4, 6, 5), (1, 16, 3), (7, 1, 9), (4, 8, 8)])
def test_mm_bmm_addmm(n, k, p, dtype):
    a, b = _x((n, k), dtype, 1), _x((k, p), dtype, 2)
    a[0, 0] = np.inf
    want = (_t(a) @ _t(b)).numpy()
    _check("aten::mm.out", (a, b), [np.zeros((n, p), dtype)], want, dtype)
    a3, b3 = _x((3, n, k), dtype, 3), _x((3, k, p), dtype, 4)
    want = torch.bmm(_t(a3), _t(b3)).numpy()
    _check("aten::bmm.out", (a3, b3), [np.zeros((3, n, p), dtype)], want, dtype)
    for bias_shape in ((p,), (n, p), (1, p)):
        bias = _read_only(_x(bias_shape, dtype, 5))
        want = torch.addmm(_t(bias), _t(a), _t(b)).numpy()
        _check("aten::addmm.out", (bias, a, b, 1, 1), [np.zeros((n, p), dtype)], want, dtype)


@pytest.mark.skipif(not linalg_compiled.HAS_BLAS, reason="numba's np.dot needs scipy")
@pytest.mark.skipif(not linalg_compiled.can_thread(), reason="numba runs one thread only")
@pytest.mark.parametrize("dtype", [F32, F64])
def test_a_one_row_product_splits_its_columns_over_the_threads_in_force(dtype):
    from pyexecutorch.runtime.threads import set_threads  # noqa: PLC0415

    k, p = 512, 1008  # a decoded token's product: past SPLIT_GEMV_MACS
    a, b = _x((1, k), dtype, 1), _x((k, p), dtype, 2)
    bias = _read_only(_x((p,), dtype, 3))
    out = np.zeros((1, p), dtype)
    fast = get_compiled_form("aten::addmm.out")(bias, a, b, 1, 1, out, whole=True)
    dispatcher, args = fast_path_of(fast).step
    # the blocks are the threads in force at each call, at most one per 16 columns
    assert dispatcher is linalg_compiled.blas_matmul_at_threads and args[-1] == p // 16
    try:
        for seed in (11, 12, 13):  # new values in the planned input at each call
            a[...] = _x((1, k), dtype, seed) / np.sqrt(k)  # (sums of order 1)
            want = torch.addmm(_t(bias), _t(a), _t(b)).numpy()
            got = {}
            for threads in (2, 1):  # set after the form was made, changed between calls
                set_threads(threads)
                fast(bias, a, b, 1, 1, out)
                np.testing.assert_allclose(out, want, **TOL[dtype])
                got[threads] = out.copy()
            # the split changes no bit: each column is the same gemv sum
            np.testing.assert_array_equal(got[1], got[2])
    finally:
        set_threads(1)
    # a product of several rows, or a small one, or one whose width OpenBLAS's gemv sums
    # otherwise than its slices (not a multiple of 16), stays one serial BLAS call
    # (one row: the form that compiles the gemv alone)
    assert linalg_compiled.blas_form(2, k, p) == (linalg_compiled.blas_matmul, 1)
    assert linalg_compiled.blas_form(1, 16, 16) == (linalg_compiled.blas_matmul_one_row, 1)
    assert linalg_compiled.blas_form(1, k, 1000) == (linalg_compiled.blas_matmul_one_row, 1)


@pytest.mark.skipif(not linalg_compiled.NUMPY_BLAS, reason="products stay on numpy's BLAS")
@pytest.mark.skipif(not linalg_compiled.can_thread(), reason="numba runs one thread only")
@pytest.mark.parametrize("batch", [6, 3])
def test_a_batched_product_shares_its_products_over_the_threads_in_force(batch):
    """Six heads' products (past SPLIT_PRODUCT together) are one serial BLAS call each, three
    a thread at two threads; three products split each over the threads instead (one each
    would leave a thread idle a third of the time). Either way every bit is the one-thread
    product's, call after call with new values in the planned inputs."""
    from pyexecutorch.runtime.threads import set_threads  # noqa: PLC0415

    n, k, p = 97, 64, 97  # (an attention's 197 tokens by 64, smaller)
    a, b = _x((batch, n, k), F32, 1), _x((batch, k, p), F32, 2)
    out = np.zeros((batch, n, p), F32)
    fast = get_compiled_form("aten::bmm.out")(a, b, out, whole=True)
    if batch * n * k * p < linalg_compiled.SPLIT_PRODUCT:
        n = p = 2 * n  # (the three-product case made large enough too)
        a, b = _x((batch, n, k), F32, 1), _x((batch, k, p), F32, 2)
        out = np.zeros((batch, n, p), F32)
        fast = get_compiled_form("aten::bmm.out")(a, b, out, whole=True)
    assert fast_path_of(fast).step[0] is linalg_compiled.blas_batches_at_threads
    try:
        for seed in (11, 12):
            a[...] = _x(a.shape, F32, seed)
            b[...] = _x(b.shape, F32, seed + 10)
            want = torch.bmm(_t(a), _t(b)).numpy()
            got = {}
            for threads in (2, 1):  # set after the form was made
                set_threads(threads)
                out[...] = np.nan
                fast(a, b, out)
                np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
                got[threads] = out.copy()
            np.testing.assert_array_equal(got[1], got[2])
    finally:
        set_threads(1)
    # one product, or a small batch, stays the serial form
    assert linalg_compiled.blas_form(n, k, p) == (linalg_compiled.blas_matmul, 1)
    assert linalg_compiled.blas_form(8, 8, 8, 6) == (linalg_compiled.blas_matmul, 1)


@pytest.mark.skipif(not linalg_compiled.can_thread(), reason="numba runs one thread only")
def test_softmax_and_layer_norm_of_a_transformer_split_their_rows_over_the_threads():
    """An attention's softmax (6 x 97 x 97 here) and a token matrix's layer norm (197 x 384) are below
    the sums' parallel size but cost several times a sum's work an element: their
    parallel variants run, with each row's bits at two threads what they are at one."""
    from pyexecutorch.jit.variants import choose  # noqa: PLC0415
    from pyexecutorch.kernels.norm import compiled as norm_compiled  # noqa: PLC0415
    from pyexecutorch.kernels.reduce import compiled as reduce_compiled  # noqa: PLC0415
    from pyexecutorch.runtime.threads import set_threads  # noqa: PLC0415

    x = _x((6, 97, 97), F32, 3) * 4
    soft_out = np.zeros_like(x)
    soft = get_compiled_form("aten::_softmax.out")(x, -1, False, soft_out)
    assert fast_path_of(soft).step[0] is reduce_compiled.SOFTMAX[1]
    assert choose(reduce_compiled.SOFTMAX, x.size) is reduce_compiled.SOFTMAX[0]  # (a sum's)
    tokens = _x((197, 384), F32, 4)
    w = _read_only(_x((384,), F32, 5))
    bias = _read_only(_x((384,), F32, 6))
    norm_outs = [np.zeros_like(tokens), np.zeros((197, 1), F32), np.zeros((197, 1), F32)]
    norm = get_compiled_form("aten::native_layer_norm.out")(
        tokens, (384,), w, bias, 1e-5, *norm_outs
    )
    assert fast_path_of(norm).step[0] is norm_compiled.LAYER_NORM[1]
    try:
        for seed in (21, 22):
            x[...] = _x(x.shape, F32, seed) * 4
            tokens[...] = _x(tokens.shape, F32, seed + 10)
            got = {}
            for threads in (2, 1):
                set_threads(threads)
                soft(x, -1, False, soft_out)
                norm(tokens, (384,), w, bias, 1e-5, *norm_outs)
                got[threads] = [soft_out.copy(), *(o.copy() for o in norm_outs)]
            np.testing.assert_allclose(got[1][0], torch.softmax(_t(x), -1).numpy(), **TOL[F32])
            want = F.layer_norm(_t(tokens), (384,), _t(w), _t(bias), 1e-5).numpy()
            np.testing.assert_allclose(got[1][1], want, **TOL[F32])
            for one, two in zip(got[1], got[2], strict=True):
                np.testing.assert_array_equal(one, two)
    finally:
        set_threads(1)


@pytest.mark.skipif(not linalg_compiled.HAS_BLAS, reason="numba's np.dot needs scipy")
@pytest.mark.parametrize("dtype", [F32, F64])
def test_the_one_row_product_is_the_general_forms_bit_for_bit(dtype):
    # a CNN's classifier (one row, a width no split takes): the form blas_form picks
    # makes the general form's gemv calls, over batches, with and without the bias
    k, p = 96, 1000
    assert linalg_compiled.blas_form(1, k, p)[0] is linalg_compiled.blas_matmul_one_row
    b = _x((2, k, p), dtype, 2)
    bias = _x((1, p), dtype, 3)
    for seed, has_bias in ((11, True), (12, False), (13, True)):  # new inputs each call
        a = _x((2, 1, k), dtype, seed)
        got = linalg_compiled.blas_matmul_one_row(a, b, bias, np.zeros((2, 1, p), dtype), has_bias)
        want = linalg_compiled.blas_matmul(a, b, bias, np.zeros((2, 1, p), dtype), has_bias, 1)
        np.testing.assert_array_equal(got, want)
        reference = _t(a) @ _t(b) + (_t(bias) if has_bias else 0)
        np.testing.assert_allclose(got, reference.numpy(), **TOL[dtype])


@pytest.mark.skipif(not linalg_compiled.HAS_BLAS, reason="numba's np.dot needs scipy")
@pytest.mark.parametrize("dtype", [F32, F64])
def test_products_past_the_loop_are_one_blas_call(dtype):
    n, k, p = 17, 48, 40  # past WHOLE_MAX_MACS: BLAS steps in whole methods, else numpy
    a, b = _x((n, k), dtype, 1), _x((k, p), dtype, 2)
    a[0, 0] = np.nan
    form = get_compiled_form
    whole = {"whole": True}
    assert form("aten::mm.out")(a, b, np.zeros((n, p), dtype)) is None  # numpy's np.dot
    for bias_shape in ((p,), (1, p), (n, p), (n, 1)):
        bias = _read_only(_x(bias_shape, dtype, 5))
        out = np.zeros((n, p), dtype)
        assert form("aten::addmm.out")(bias, a, b, 1, 1, out) is None
        fast = form("aten::addmm.out")(bias, a, b, 1, 1, out, **whole)
        assert fast_path_of(fast).step[0] is linalg_compiled.blas_matmul
        fast(bias, a, b, 1, 1, out)
        want = torch.addmm(_t(bias), _t(a), _t(b)).numpy()
        np.testing.assert_allclose(
            out, get_kernel("aten::addmm.out").fn(bias, a, b, 1, 1, out.copy()), **TOL[dtype]
        )
        np.testing.assert_allclose(out, want, **TOL[dtype])
    big = _x((64, 256), dtype, 11), _x((256, 768), dtype, 12)
    large = form("aten::mm.out")(*big, np.zeros((64, 768), dtype), **whole)
    if linalg_compiled.NUMPY_BLAS:  # numpy's own BLAS serves compiled code at any size
        assert fast_path_of(large).step[0] is linalg_compiled.blas_matmul
    else:  # scipy's is slower than numpy's: large products stay on numpy's
        assert large is None
    out = np.zeros((n, p), dtype)
    fast = form("aten::mm.out")(a, b, out, **whole)
    assert fast_path_of(fast).step[0] is linalg_compiled.blas_matmul
    fast(a, b, out)
    np.testing.assert_allclose(out, (_t(a) @ _t(b)).numpy(), **TOL[dtype])
    a3, b3 = _x((3, n, k), dtype, 3), _x((3, k, p), dtype, 4)
    out3 = np.zeros((3, n, p), dtype)
    fast = form("aten::bmm.out")(a3, b3, out3, **whole)
    assert fast_path_of(fast).step[0] is linalg_compiled.blas_matmul
    fast(a3, b3, out3)
    np.testing.assert_allclose(out3, torch.bmm(_t(a3), _t(b3)).numpy(), **TOL[dtype])
    # another array than the planned one is multiplied too (made contiguous first)
    other = _x((n, k), dtype, 6)
    fast = form("aten::mm.out")(a, b, out, **whole)
    fast(np.asfortranarray(other), b, out)
    np.testing.assert_allclose(out, (_t(other) @ _t(b)).numpy(), **TOL[dtype])
    # BLAS writes into out: an out over an operand is left to numpy
    square = _x((k, k), dtype, 7)
    assert form("aten::mm.out")(square, square, square, **whole) is None


def test_a_small_product_reads_a_strided_row_view_in_place():
    rows = _x((2, 5, 16), F32, 8)
    a = rows[:, -1]  # (2, 16), rows 80 floats apart: a select the runtime made a view
    b, bias = _x((16, 4), F32, 9), _read_only(_x((4,), F32, 10))
    want = torch.addmm(_t(bias), _t(np.ascontiguousarray(a)), _t(b)).numpy()
    out = np.zeros((2, 4), F32)
    fast = get_compiled_form("aten::addmm.out")(bias, a, b, 1, 1, out)
    assert fast_path_of(fast).step[1][0].base is not None and np.shares_memory(
        fast_path_of(fast).step[1][0], rows
    )
    fast(bias, a, b, 1, 1, out)
    np.testing.assert_allclose(out, want, **TOL[F32])
    rows[:, -1] += 1.0  # the bound view reads the new values
    fast(bias, a, b, 1, 1, out)
    want = torch.addmm(_t(bias), _t(np.ascontiguousarray(a)), _t(b)).numpy()
    np.testing.assert_allclose(out, want, **TOL[F32])


# ---------------------------------------------------------------------------
# the vectorizable exp, erf and tanh of float32 loops (jit/math_functions.py)


def _special_inputs() -> np.ndarray:
    edges = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1e-4, -1e-4, 88.72, 88.73]
    edges += [-87.3, -103.9, -104.0, -150.0, 4.0, -4.0, 3.9, 20.0, -20.0, 1e30, -1e30]
    edges += [0.625, -0.625, 0.6249, 9.1, -9.2, 2.0**-12, -(2.0**-13)]  # tanh_f32's seams
    grid = np.linspace(-110.0, 95.0, 20001)
    rng = np.random.default_rng(7).standard_normal(20000) * 3
    return np.concatenate([edges, grid, rng]).astype(F32)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float32 steps, for finite values of one sign (0 where both are equal)."""
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    g = got.view(np.int32).astype(np.int64)
    w = want.view(np.int32).astype(np.int64)
    return np.where(same, 0, np.abs(g - w))


def test_compiled_exp_erf_tanh_round_as_the_float64_functions():
    from numba import njit  # noqa: PLC0415

    from pyexecutorch.jit.math_functions import (  # noqa: PLC0415
        erf_f64,
        exp_f32,
        exp_f64,
        tanh_f32,
        tanh_f64,
    )
    from pyexecutorch.kernels.elementwise.unary import ERF  # noqa: PLC0415

    @njit
    def apply(x, out):  # noqa: ANN001, ANN202 - a float32 loop as the fused ones are
        for i in range(x.size):
            out[0, i] = exp_f32(x[i])
            out[1, i] = F32(erf_f64(x[i]))
            out[2, i] = F32(tanh_f64(x[i]))
            out[3, i] = F32(exp_f64(x[i]))
            out[4, i] = tanh_f32(x[i])

    x = _special_inputs()
    got = np.empty((5, x.size), F32)
    apply(x, got)
    x64 = torch.from_numpy(x.astype(F64))
    with np.errstate(over="ignore"):
        exact = [torch.exp(x64), torch.erf(x64), torch.tanh(x64), torch.exp(x64), torch.tanh(x64)]
        exact = [e.numpy().astype(F32) for e in exact]  # correctly rounded or nearly
    names = ("exp", "erf", "tanh", "exp_f64", "tanh_f32")
    for name, g, want in zip(names, got, exact, strict=True):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(x), err_msg=name)
        assert _ulps(g, want).max() <= 1, name
        assert (np.signbit(g) == np.signbit(want))[~np.isnan(x)].all(), name
    for e in (got[0], got[3]):
        assert e[x == np.inf][0] == np.inf and e[x == F32(88.73)][0] == np.inf
        assert e[x == F32(-104.0)][0] == 0.0 and e[x == -np.inf][0] == 0.0
    # float32 exp's subnormal results round once (2**-149 is the smallest)
    tiny = np.array([-87.5, -95.0, -103.0, -103.9], F32)
    got_tiny = np.empty((5, tiny.size), F32)
    apply(tiny, got_tiny)
    want_tiny = torch.exp(torch.from_numpy(tiny.astype(F64))).numpy().astype(F32)
    assert (_ulps(got_tiny[0], want_tiny) <= 1).all() and (got_tiny[0] > 0).all()
    # erf is the numpy kernel's own float32 erf
    reference = np.empty_like(x)
    ERF(x, reference)
    np.testing.assert_allclose(got[1], reference, rtol=2e-7, atol=0)


# ---------------------------------------------------------------------------
# float16 in compiled loops


def test_half_bits_and_rounding_match_numpy_casts():
    from numba import njit

    from pyexecutorch.jit.half import HALF_TO_FLOAT, half_bits, round_half

    @njit
    def encode(x, bits, rounded):  # noqa: ANN001, ANN202
        for i in range(x.size):
            bits[i] = half_bits(x[i])
            rounded[i] = round_half(x[i])

    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    halves = every.view(np.float16).astype(F32)
    assert np.array_equal(HALF_TO_FLOAT.view(np.uint32), halves.view(np.uint32))
    # every half; the midpoints between neighbours (ties go to even) and a float32 step
    # either side; random float32 bit patterns; the overflow edge
    with np.errstate(all="ignore"):  # the infinities' and NaNs' neighbours
        mids = ((halves[:-1].astype(F64) + halves[1:]) / 2).astype(F32)
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            halves,
            mids,
            np.nextafter(mids, F32(np.inf)),
            np.nextafter(mids, F32(-np.inf)),
            rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(F32),
            np.array([65504, 65519.996, 65520, -65520, 2.9802322e-08, -2.9802326e-08], F32),
        ]
    )
    bits, rounded = np.empty(x.size, np.uint16), np.empty(x.size, F32)
    encode(x, bits, rounded)
    with np.errstate(all="ignore"):
        want = x.astype(np.float16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(bits[~nan], want[~nan].view(np.uint16))
    np.testing.assert_array_equal(
        rounded[~nan].view(np.uint32), want[~nan].astype(F32).view(np.uint32)
    )
    assert np.isnan(bits[nan].view(np.float16)).all() and np.isnan(rounded[nan]).all()
    np.testing.assert_array_equal(np.signbit(bits[nan].view(np.float16)), np.signbit(x[nan]))


@pytest.mark.parametrize("n,k,p", [(4, 16, 32), (3, 5, 1), (1, 32, 8)])
def test_float16_addmm_sums_in_float32_and_rounds_once(n, k, p):
    a = _x((n, k), np.float16, 1)
    a.reshape(-1)[1:3] = [np.inf, 6e-8]
    b = _read_only(_x((k, p), np.float16, 2) * np.float16(0.25))
    for bias_shape in ((p,), (n, p)):
        bias = _read_only(_x(bias_shape, np.float16, 5))
        out = np.zeros((n, p), np.float16)
        reference = get_kernel("aten::addmm.out").fn(bias, a, b, 1, 1, out.copy())
        fast = get_compiled_form("aten::addmm.out")(bias, a, b, 1, 1, out)
        assert fast is not None and fast_path_of(fast).step is not None
        got = fast(bias, a, b, 1, 1, out)
        assert got is out
        np.testing.assert_array_equal(np.isnan(got), np.isnan(reference))
        np.testing.assert_allclose(got, reference, rtol=1e-3, atol=1e-3)
        want = torch.addmm(_t(bias).float(), _t(a).float(), _t(b).float()).half().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
        # another input than the planned one: the reference kernel, same result
        other = np.ascontiguousarray(a[::-1])
        np.testing.assert_array_equal(
            fast(bias, other, b, 1, 1, out.copy()),
            get_kernel("aten::addmm.out").fn(bias, other, b, 1, 1, out.copy()),
        )
    # weights that can change are left to numpy
    assert get_compiled_form("aten::addmm.out")(bias, a, b.copy(), 1, 1, out) is None


# ---------------------------------------------------------------------------
# what the forms leave to numpy


def test_unusual_cases_are_left_to_numpy():
    form = get_compiled_form
    h = np.zeros((2, 8), np.float16)
    assert form("aten::_softmax.out")(h, -1, False, np.zeros_like(h)) is None  # float16
    # three runs of axes
    y = np.zeros((2, 3, 4, 5, 6), F32)
    assert form("aten::mean.out")(y, [0, 2, 4], False, None, np.zeros(15, F32)) is None
    # (integer sums have a form: tests/kernels/test_int_bool_compiled.py)
    big = np.zeros((16, 16), F32)
    assert form("aten::mm.out")(big, big, np.zeros((16, 16), F32)) is None  # BLAS's size
    bias = np.zeros(4, F32)  # writeable: an input, not a constant
    small = np.zeros((4, 4), F32)
    assert form("aten::addmm.out")(bias, small, small, 1, 1, np.zeros((4, 4), F32)) is None
    assert form("aten::addmm.out")(_read_only(bias), small, small, 2, 1, small.copy()) is None
    running = np.ones(3, F32)  # batch norm statistics that can change
    bn = (np.zeros((1, 3, 2), F32), None, None, running, running, 0.1, 1e-5)
    outs = (np.zeros((1, 3, 2), F32), np.zeros(0, F32), np.zeros(0, F32))
    assert form("aten::_native_batch_norm_legit_no_training.out")(*bn, *outs) is None


# ---------------------------------------------------------------------------
# selected at load


class _Everything(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(20, 16)
        self.ln = torch.nn.LayerNorm(16)
        self.gn = torch.nn.GroupNorm(2, 4)
        self.fc = torch.nn.Linear(16, 6)

    def forward(self, idx, img):  # noqa: ANN001, ANN201
        e = self.ln(self.emb(idx))  # [2, 5, 16]
        att = torch.softmax(torch.bmm(e, e.transpose(1, 2)), -1)
        y = self.fc(att.bmm(e).mean(1))
        g = self.gn(img)
        pooled = F.max_pool2d(g, 2) + F.avg_pool2d(g, 2)
        return y, pooled, F.adaptive_avg_pool2d(g, 1), torch.amax(e, -1)


def _bound_functions(method) -> set[str]:  # noqa: ANN001
    """The source files (family/compiled.py) of the functions a method's generated code calls."""
    files = set()
    for chain in method._loaded.chains:
        for value in chain.run.__globals__.values():
            code = getattr(value, "__code__", None)
            if code is not None and code.co_filename.endswith("compiled.py"):
                files.add("/".join(Path(code.co_filename).parts[-2:]))
    return files


def test_a_program_on_the_compiled_tier_calls_the_compiled_forms():
    torch.manual_seed(0)
    module = _Everything().eval()
    inputs = (torch.randint(0, 20, (2, 5)), torch.randn(1, 4, 6, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge = to_edge(torch.export.export(module, inputs))
        pte = edge.to_executorch().buffer
    want = module(*inputs)
    for jit in (True, False):
        program = Runtime.get().load_program(pte, jit=jit)
        method = program.load_method("forward")
        got = method.execute([t.numpy() for t in inputs])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w.detach().numpy(), rtol=1e-5, atol=1e-5)
        files = _bound_functions(method)
        families = {"norm/compiled.py", "reduce/compiled.py", "pool/compiled.py"}
        families |= {"index/compiled.py", "linalg/compiled.py"}
        if jit:
            assert families <= files, f"not called: {families - files}"
        else:
            assert not files & families
