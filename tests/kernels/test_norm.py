"""Normalization, softmax and dropout kernels against torch eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from pyexecutorch.kernels import KernelError

from ._nn_util import LAYOUTS, OUT_KINDS, SETTINGS, call, close, layout, planned, rand, readonly, t

seeds = st.integers(0, 2**32 - 1)
FLOATS = st.sampled_from(["float32", "float32", "float64", "float16"])
shapes = st.lists(st.integers(0, 6), min_size=1, max_size=4).map(tuple)


def _f(a):
    """torch tensor of ``a`` in float32 when half (torch computes half norms in float)."""
    r = t(a)
    return None if r is None else (r.float() if r.dtype == torch.float16 else r)


@SETTINGS
@given(
    shapes,
    st.integers(1, 3),
    st.booleans(),
    st.booleans(),
    FLOATS,
    st.sampled_from(LAYOUTS),
    st.sampled_from(OUT_KINDS),
    seeds,
)
def test_native_layer_norm(shape, nnorm, has_w, has_b, dtype, lay, out_kind, seed):
    nnorm = min(nnorm, len(shape))
    ns = shape[len(shape) - nnorm :]
    rng = np.random.default_rng(seed)
    x = rand(rng, shape, dtype, scale=3) + np.asarray(2, dtype)
    w = readonly(rand(rng, ns, dtype)) if has_w else None
    b = readonly(rand(rng, ns, dtype)) if has_b else None
    ev, em, er = torch.ops.aten.native_layer_norm(_f(x), list(ns), _f(w), _f(b), 1e-5)
    stat = tuple(ev.shape[: len(shape) - nnorm]) + (1,) * nnorm
    outs = [
        planned(shape, dtype, out_kind),
        planned(stat, dtype, out_kind),
        planned(stat, dtype, out_kind),
    ]
    got = call("aten::native_layer_norm.out", layout(x, lay), ns, w, b, 1e-5, *outs)
    exp = [e.to(t(x).dtype) for e in (ev, em, er)]
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else {}
    for g, e in zip(got, exp, strict=True):
        close(g, e, **tol)


@SETTINGS
@given(
    st.integers(0, 3),
    st.integers(1, 3),
    st.integers(1, 3),
    st.lists(st.integers(1, 5), max_size=2),
    st.booleans(),
    FLOATS,
    st.sampled_from(LAYOUTS),
    seeds,
)
def test_native_group_norm(n, groups, cpg, spatial, affine, dtype, lay, seed):
    c = groups * cpg
    shape = (n, c, *spatial)
    hxw = int(np.prod(spatial)) if spatial else 1
    rng = np.random.default_rng(seed)
    x = rand(rng, shape, dtype, scale=2)
    w = rand(rng, (c,), dtype) if affine else None
    b = rand(rng, (c,), dtype) if affine else None
    ev, em, er = torch.ops.aten.native_group_norm(_f(x), _f(w), _f(b), n, c, hxw, groups, 1e-5)
    outs = [
        planned(shape, dtype, "exact"),
        planned((n, groups), dtype, "exact"),
        planned((n, groups), dtype, "unplanned"),
    ]
    got = call("aten::native_group_norm.out", layout(x, lay), w, b, n, c, hxw, groups, 1e-5, *outs)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else {}
    for g, e in zip(got, (ev, em, er), strict=True):
        close(g, e.to(t(x).dtype), **tol)


@SETTINGS
@given(
    st.integers(1, 3),
    st.integers(1, 4),
    st.lists(st.integers(1, 5), max_size=2),
    st.booleans(),
    FLOATS,
    st.sampled_from(LAYOUTS),
    st.sampled_from(OUT_KINDS),
    st.booleans(),
    seeds,
)
def test_batch_norm_no_training(n, c, spatial, affine, dtype, lay, out_kind, const, seed):
    shape = (n, c, *spatial)
    rng = np.random.default_rng(seed)
    x = rand(rng, shape, dtype)
    w = rand(rng, (c,), dtype) if affine else None
    b = rand(rng, (c,), dtype) if affine else None
    rm = rand(rng, (c,), dtype)
    rv = np.abs(rand(rng, (c,), dtype)) + np.asarray(0.5, dtype)
    if const:
        w, b, rm, rv = (None if a is None else readonly(a) for a in (w, b, rm, rv))
    ev = torch.ops.aten._native_batch_norm_legit_no_training(
        _f(x), _f(w), _f(b), _f(rm), _f(rv), 0.1, 1e-5
    )[0].to(t(x).dtype)
    for name, extra in (
        ("aten::_native_batch_norm_legit_no_training.out", (rm, rv, 0.1, 1e-5)),
        ("aten::_native_batch_norm_legit.out", (rm, rv, False, 0.1, 1e-5)),
    ):
        for _ in range(2):
            got = call(
                name,
                layout(x, lay),
                w,
                b,
                *extra,
                planned(shape, dtype, out_kind),
                np.empty((0,), dtype),
                np.empty((0,), dtype),
            )
            close(got[0], ev, **(dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else {}))
            assert got[1].shape == (0,) and got[2].shape == (0,)


@SETTINGS
@given(
    st.integers(1, 3),
    st.integers(1, 4),
    st.lists(st.integers(1, 5), max_size=2),
    st.booleans(),
    st.sampled_from(["float32", "float64"]),
    st.booleans(),
    seeds,
)
def test_batch_norm_training(n, c, spatial, affine, dtype, with_stats, seed):
    # One value per channel: x - mean is 0 up to rounding, which 1/sqrt(eps) amplifies.
    assume(n * int(np.prod(spatial)) > 1)
    shape = (n, c, *spatial)
    rng = np.random.default_rng(seed)
    x = rand(rng, shape, dtype)
    w = rand(rng, (c,), dtype) if affine else None
    b = rand(rng, (c,), dtype) if affine else None
    rm = rand(rng, (c,), dtype)
    rv = np.abs(rand(rng, (c,), dtype)) + 0.5
    outs = (
        planned(shape, dtype, "exact"),
        planned((c,), dtype, "exact"),
        planned((c,), dtype, "unplanned"),
    )
    if with_stats:
        trm, trv = t(rm), t(rv)
        expected = torch.ops.aten._native_batch_norm_legit(
            t(x), t(w), t(b), trm, trv, True, 0.1, 1e-5
        )
        got = call("aten::_native_batch_norm_legit.out", x, w, b, rm, rv, True, 0.1, 1e-5, *outs)
        close(rm, trm, rtol=1e-4, atol=1e-5)
        close(rv, trv, rtol=1e-4, atol=1e-5)
    else:
        expected = torch.ops.aten._native_batch_norm_legit(t(x), t(w), t(b), True, 0.1, 1e-5)
        got = call("aten::_native_batch_norm_legit.no_stats_out", x, w, b, True, 0.1, 1e-5, *outs)
    for g, e in zip(got, expected, strict=True):
        close(g, e, rtol=1e-4, atol=1e-5)


@SETTINGS
@given(
    st.lists(st.integers(0, 5), max_size=4).map(tuple),
    st.integers(-4, 3),
    FLOATS,
    st.sampled_from(["plain", "large", "offset", "inf", "nan"]),
    st.sampled_from(LAYOUTS),
    st.sampled_from(OUT_KINDS),
    seeds,
)
def test_softmax_and_log_softmax(shape, dim, dtype, special, lay, out_kind, seed):
    ndim = max(len(shape), 1)
    dim = dim % ndim
    rng = np.random.default_rng(seed)
    x = rand(rng, shape, dtype, scale=3)
    if x.size and special == "large":
        x = (x * 1000).astype(dtype) if dtype != "float16" else (x * 10).astype(dtype)
    elif x.size and special == "offset":  # narrow range far from zero: one scalar shift
        x = (x + 100).astype(dtype)
    elif x.size and special == "inf":
        x.reshape(-1)[rng.integers(0, x.size, max(1, x.size // 3))] = -np.inf
    elif x.size and special == "nan":
        x.reshape(-1)[rng.integers(0, x.size)] = np.nan
    for name, fn in (
        ("aten::_softmax.out", torch.ops.aten._softmax),
        ("aten::_log_softmax.out", torch.ops.aten._log_softmax),
    ):
        expected = fn(_f(x), dim, False).to(t(x).dtype)
        got = call(
            name, layout(x, lay) if x.ndim else x, dim, False, planned(shape, dtype, out_kind)
        )
        close(got, expected)


def test_softmax_half_to_float():
    x = rand(np.random.default_rng(0), (3, 5), np.float16)
    for name, fn in (
        ("aten::_softmax.out", torch.softmax),
        ("aten::_log_softmax.out", torch.log_softmax),
    ):
        got = call(name, x, 1, True, np.empty((3, 5), np.float32))
        close(got, fn(t(x).float(), 1), rtol=1e-5, atol=1e-6)
        with pytest.raises(KernelError, match="half_to_float=True needs a float16 input"):
            call(name, x.astype(np.float32), 1, True, np.empty((3, 5), np.float32))


def test_softmax_rows_sum_to_one_and_errors():
    x = rand(np.random.default_rng(1), (64, 300)) * 50
    got = call("aten::_softmax.out", x, -1, False, np.empty_like(x))
    np.testing.assert_allclose(got.sum(-1), 1, rtol=1e-5)
    with pytest.raises(KernelError, match="out of range"):
        call("aten::_softmax.out", x, 2, False, np.empty_like(x))
    with pytest.raises(KernelError, match="input must be float16, float32 or float64"):
        call("aten::_softmax.out", x.astype(np.int64), 0, False, np.empty_like(x))


@pytest.mark.parametrize("train", [False, None, True])
@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_native_dropout(train, p):
    x = rand(np.random.default_rng(0), (50, 40))
    o, m = call("aten::native_dropout.out", x, p, train, np.empty_like(x), np.empty(x.shape, bool))
    assert m.dtype == np.bool_
    if train is False:
        close(o, x)
        assert m.all()
        return
    keep = 1 - p
    if p == 1.0:
        assert not m.any() and not o.any()
        return
    np.testing.assert_allclose(o, np.where(m, x / keep, 0), rtol=1e-6)
    assert abs(m.mean() - keep) < 0.05


def test_norm_errors():
    x = np.zeros((2, 3, 4), np.float32)
    e = np.empty((0,), np.float32)
    with pytest.raises(KernelError, match="normalized_shape"):
        call("aten::native_layer_norm.out", x, (3,), None, None, 1e-5, e, e, e)
    with pytest.raises(KernelError, match=r"weight must have shape \(4,\)"):
        call("aten::native_layer_norm.out", x, (4,), np.ones(5, np.float32), None, 1e-5, e, e, e)
    with pytest.raises(KernelError, match="divisible by group 2"):
        call("aten::native_group_norm.out", x, None, None, 2, 3, 4, 2, 1e-5, e, e, e)
    with pytest.raises(KernelError, match="expected N\\*C\\*HxW"):
        call("aten::native_group_norm.out", x, None, None, 2, 3, 5, 3, 1e-5, e, e, e)
    with pytest.raises(KernelError, match=r"running_mean must have shape \(3,\)"):
        call(
            "aten::_native_batch_norm_legit_no_training.out",
            x,
            None,
            None,
            np.zeros(4, np.float32),
            np.ones(3, np.float32),
            0.1,
            1e-5,
            e,
            e,
            e,
        )
    with pytest.raises(KernelError, match="needs running statistics"):
        call(
            "aten::_native_batch_norm_legit.no_stats_out", x, None, None, False, 0.1, 1e-5, e, e, e
        )
    with pytest.raises(KernelError, match="between 0 and 1"):
        call("aten::native_dropout.out", x, 1.5, True, e, np.empty((0,), bool))
