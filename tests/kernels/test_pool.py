"""Pooling kernels against torch eager: max pool (+ indices, backward), avg pool, adaptive avg."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from pyexecutorch.kernels import KernelError

from ._nn_util import LAYOUTS, OUT_KINDS, SETTINGS, call, close, layout, planned, rand, t

seeds = st.integers(0, 2**32 - 1)


@st.composite
def pool_cases(draw, dilation=True):
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    s = draw(st.sampled_from([(), None])) if draw(st.booleans()) else None
    if s is None:
        s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilation else (1, 1)
    if dilation:
        p = tuple(
            draw(st.integers(0, ((ki - 1) * di + 1) // 2)) for ki, di in zip(k, d, strict=True)
        )
    else:
        p = tuple(draw(st.integers(0, ki // 2)) for ki in k)
    ceil = draw(st.booleans())
    batch = draw(st.sampled_from([(), (1,), (2,)]))
    c = draw(st.integers(1, 3))
    eff = [(ki - 1) * di + 1 for ki, di in zip(k, d, strict=True)]
    hw = tuple(draw(st.integers(max(1, e - 2 * pi), 10)) for e, pi in zip(eff, p, strict=True))
    return dict(k=k, s=s, p=p, d=d, ceil=ceil, shape=(*batch, c, *hw))


def _data(rng, shape, dtype, special):
    x = rand(rng, shape, dtype)
    if np.dtype(dtype).kind == "f":
        if special == "ties":
            x = np.round(x).astype(dtype)
        elif special == "nan":
            x.reshape(-1)[rng.integers(0, x.size, max(1, x.size // 5))] = np.nan
        elif special == "inf":
            x.reshape(-1)[rng.integers(0, x.size, max(1, x.size // 3))] = -np.inf
    elif special == "ties":
        x = (x // 8).astype(dtype)
    return x


@SETTINGS
@given(
    pool_cases(),
    st.sampled_from(["float32", "float64", "float16", "int64", "int32", "uint8"]),
    st.sampled_from(["plain", "ties", "nan", "inf"]),
    st.sampled_from(LAYOUTS),
    st.sampled_from(OUT_KINDS),
    seeds,
)
def test_max_pool2d_with_indices(case, dtype, special, lay, out_kind, seed):
    rng = np.random.default_rng(seed)
    x = _data(rng, case["shape"], dtype, special)
    try:
        ev, ei = torch.ops.aten.max_pool2d_with_indices(
            t(x), list(case["k"]), list(case["s"]), list(case["p"]), list(case["d"]), case["ceil"]
        )
    except RuntimeError:
        assume(False)
    xl = layout(x, lay)
    got_v, got_i = call(
        "aten::max_pool2d_with_indices.out",
        xl,
        case["k"],
        case["s"],
        case["p"],
        case["d"],
        case["ceil"],
        planned(ev.shape, dtype, out_kind),
        planned(ei.shape, np.int64, out_kind),
    )
    close(got_v, ev, rtol=0, atol=0)
    np.testing.assert_array_equal(got_i, ei.numpy())

    # Backward scatters the gradient to the chosen indices.
    # (A window entirely in the padding gets an index outside the image; torch's
    # backward would write out of bounds there, ours refuses.)
    hw = x.shape[-1] * x.shape[-2]
    if np.dtype(dtype).kind == "f" and dtype != "float16" and int(ei.max()) < hw:
        go = rand(rng, tuple(ev.shape), dtype)
        expected = torch.ops.aten.max_pool2d_with_indices_backward(
            t(go),
            t(x),
            list(case["k"]),
            list(case["s"]),
            list(case["p"]),
            list(case["d"]),
            case["ceil"],
            ei,
        )
        got = call(
            "aten::max_pool2d_with_indices_backward.grad_input",
            go,
            xl,
            case["k"],
            case["s"],
            case["p"],
            case["d"],
            case["ceil"],
            ei.numpy(),
            planned(x.shape, dtype, out_kind),
        )
        close(got, expected, rtol=1e-5, atol=1e-6)


@SETTINGS
@given(
    pool_cases(dilation=False),
    st.sampled_from(["float32", "float64", "float16", "int64"]),
    st.booleans(),
    st.sampled_from([None, None, 1, 3, -2]),
    st.sampled_from(LAYOUTS),
    st.sampled_from(OUT_KINDS),
    seeds,
)
def test_avg_pool2d(case, dtype, count_include_pad, divisor, lay, out_kind, seed):
    rng = np.random.default_rng(seed)
    x = rand(rng, case["shape"], dtype, scale=3)
    try:
        expected = torch.ops.aten.avg_pool2d(
            t(x),
            list(case["k"]),
            list(case["s"]),
            list(case["p"]),
            case["ceil"],
            count_include_pad,
            divisor,
        )
    except RuntimeError:
        assume(False)
    got = call(
        "aten::avg_pool2d.out",
        layout(x, lay),
        case["k"],
        case["s"],
        case["p"],
        case["ceil"],
        count_include_pad,
        divisor,
        planned(expected.shape, dtype, out_kind),
    )
    close(got, expected)


@SETTINGS
@given(
    st.sampled_from([(), (2,)]),
    st.integers(1, 3),
    st.integers(1, 12),
    st.integers(1, 12),
    st.integers(1, 7),
    st.integers(1, 7),
    st.sampled_from(["float32", "float64", "float16"]),
    st.sampled_from(LAYOUTS),
    st.sampled_from(OUT_KINDS),
    seeds,
)
def test_adaptive_avg_pool2d(batch, c, h, w, oh, ow, dtype, lay, out_kind, seed):
    rng = np.random.default_rng(seed)
    x = rand(rng, (*batch, c, h, w), dtype)
    expected = torch.ops.aten._adaptive_avg_pool2d(t(x), [oh, ow])
    got = call(
        "aten::_adaptive_avg_pool2d.out",
        layout(x, lay),
        (oh, ow),
        planned(expected.shape, dtype, out_kind),
    )
    close(
        got,
        expected,
        rtol=1e-4 if dtype != "float16" else None,
        atol=1e-5 if dtype != "float16" else None,
    )


@pytest.mark.parametrize("oh, ow", [(1, 1), (7, 7), (3, 5), (14, 14)])
def test_adaptive_avg_pool2d_fast_paths(oh, ow):
    rng = np.random.default_rng(0)
    x = rand(rng, (2, 16, 14, 14))
    expected = torch.ops.aten._adaptive_avg_pool2d(t(x), [oh, ow])
    close(
        call("aten::_adaptive_avg_pool2d.out", x, (oh, ow), np.empty(expected.shape, np.float32)),
        expected,
    )


def test_pool_errors():
    x = np.zeros((1, 2, 5, 5), np.float32)
    e = np.empty((0,), np.float32)
    ei = np.empty((0,), np.int64)
    mp = "aten::max_pool2d_with_indices.out"
    with pytest.raises(KernelError, match="padding .* at most half"):
        call(mp, x, (2, 2), (), (2, 2), (1, 1), False, e, ei)
    with pytest.raises(KernelError, match="must be 3-D"):
        call(mp, x[0, 0], (2, 2), (), (0, 0), (1, 1), False, e, ei)
    with pytest.raises(KernelError, match="kernel_size must be positive"):
        call(mp, x, (0, 2), (), (0, 0), (1, 1), False, e, ei)
    with pytest.raises(KernelError, match="kernel_size must have 1 or 2 entries"):
        call(mp, x, (2, 2, 2), (), (0, 0), (1, 1), False, e, ei)
    with pytest.raises(KernelError, match="output size"):
        call(mp, x, (6, 6), (), (0, 0), (1, 1), False, e, ei)
    with pytest.raises(KernelError, match="dtype bool is not supported"):
        call(mp, x.astype(bool), (2, 2), (), (0, 0), (1, 1), False, e, ei)
    with pytest.raises(KernelError, match="non-empty channel and spatial"):
        call(mp, np.zeros((1, 2, 0, 5), np.float32), (1, 1), (), (0, 0), (1, 1), False, e, ei)
    ap = "aten::avg_pool2d.out"
    with pytest.raises(KernelError, match="divisor_override must be non-zero"):
        call(ap, x, (2, 2), (), (0, 0), False, True, 0, e)
    with pytest.raises(KernelError, match="dtype int32 is not supported"):
        call(ap, x.astype(np.int32), (2, 2), (), (0, 0), False, True, None, e)
    with pytest.raises(KernelError, match="at most half"):
        call(ap, x, (2, 2), (), (2, 0), False, True, None, e)
    with pytest.raises(KernelError, match="need floating point"):
        call("aten::_adaptive_avg_pool2d.out", x.astype(np.int64), (2, 2), e)
    with pytest.raises(KernelError, match="indices must lie in"):
        call(
            "aten::max_pool2d_with_indices_backward.grad_input",
            np.ones((1, 2, 2, 2), np.float32),
            x,
            (2, 2),
            (2, 2),
            (0, 0),
            (1, 1),
            False,
            np.full((1, 2, 2, 2), 99),
            e,
        )


def test_max_pool_indices_nan_and_all_minus_inf():
    x = np.array(
        [[[[-np.inf, -np.inf, 1.0], [np.nan, 2.0, np.nan], [0.0, 0.0, -np.inf]]]], np.float32
    )
    for p in (0, 1):
        ev, ei = torch.ops.aten.max_pool2d_with_indices(t(x), [3, 3], [1, 1], [p, p])
        gv, gi = call(
            "aten::max_pool2d_with_indices.out",
            x,
            (3, 3),
            (1, 1),
            (p, p),
            (1, 1),
            False,
            np.empty(ev.shape, np.float32),
            np.empty(ei.shape, np.int64),
        )
        close(gv, ev)
        np.testing.assert_array_equal(gi, ei.numpy())


@pytest.mark.parametrize("stride", [1, 2])  # overlapping windows, and one window a block
def test_max_pool_keeps_the_first_of_equal_signed_zeros(stride):
    # torch returns the first maximum in row-major order: -0.0 before 0.0 stays -0.0
    x = np.array([[[[-1.0, -0.0, 0.0, -0.0], [-2.0, 0.0, -0.0, 0.0]]]], np.float32)
    ev, ei = torch.ops.aten.max_pool2d_with_indices(t(x), [2, 2], [stride, stride])
    gv, gi = call(
        "aten::max_pool2d_with_indices.out",
        x,
        (2, 2),
        (stride, stride),
        (0, 0),
        (1, 1),
        False,
        np.empty(ev.shape, np.float32),
        np.empty(ei.shape, np.int64),
    )
    np.testing.assert_array_equal(gv, ev.numpy())
    np.testing.assert_array_equal(np.signbit(gv), np.signbit(ev.numpy()))
    np.testing.assert_array_equal(gi, ei.numpy())


@SETTINGS
@given(
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 9),
    st.integers(1, 9),
    st.sampled_from(["float32", "float64", "int64", "uint8"]),
    st.sampled_from(["plain", "ties", "nan"]),
    st.sampled_from(LAYOUTS),
    seeds,
)
def test_max_pool2d_non_overlapping_windows(kh, kw, h, w, dtype, special, lay, seed):
    # stride == kernel, no padding: the window-reshape fast path (with crop).
    assume(kh <= h and kw <= w)
    rng = np.random.default_rng(seed)
    x = _data(rng, (2, 3, h, w), dtype, special)
    ev, ei = torch.ops.aten.max_pool2d_with_indices(t(x), [kh, kw], [kh, kw])
    for _ in range(2):
        gv, gi = call(
            "aten::max_pool2d_with_indices.out",
            layout(x, lay),
            (kh, kw),
            (kh, kw),
            (0, 0),
            (1, 1),
            False,
            np.empty(ev.shape, dtype),
            np.empty(ei.shape, np.int64),
        )
        close(gv, ev, rtol=0, atol=0)
        np.testing.assert_array_equal(gi, ei.numpy())
