"""convolution / convolution_backward kernels against torch eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import pyexecutorch.kernels.conv.conv as conv_mod
from pyexecutorch.kernels import KernelError

from ._nn_util import LAYOUTS, OUT_KINDS, SETTINGS, call, close, layout, planned, rand, readonly, t

CONV = "aten::convolution.out"
CONV_BW = "aten::convolution_backward.out"


@st.composite
def conv_cases(draw, transposed=None, max_nd=3):
    nd = draw(st.sampled_from([1, 2, 2, 2, 3][: 4 if max_nd < 3 else 5]))
    tr = draw(st.booleans()) if transposed is None else transposed
    groups = draw(st.integers(1, 3))
    cg = draw(st.integers(1, 3))
    ocg = draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    k = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    s = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    d = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    p = tuple(draw(st.integers(0, 2)) for _ in range(nd))
    max_in = 9 if nd < 3 else 5
    if tr:
        op = tuple(draw(st.integers(0, max(si, di) - 1)) for si, di in zip(s, d, strict=True))
        size = tuple(draw(st.integers(1, max_in - 3)) for _ in range(nd))
        # Output must be positive.
        ok = all(
            (i - 1) * si - 2 * pi + di * (ki - 1) + oi + 1 > 0
            for i, si, pi, di, ki, oi in zip(size, s, p, d, k, op, strict=True)
        )
        if not ok:
            p = (0,) * nd
    else:
        op = (0,) * nd
        size = tuple(
            draw(st.integers(max(1, di * (ki - 1) + 1 - 2 * pi), max_in))
            for ki, di, pi in zip(k, d, p, strict=True)
        )
    bias = draw(st.booleans())
    return dict(
        nd=nd,
        tr=tr,
        groups=groups,
        cg=cg,
        ocg=ocg,
        n=n,
        k=k,
        s=s,
        d=d,
        p=p,
        op=op,
        size=size,
        bias=bias,
    )


def _make(case, dtype, seed, const=True):
    rng = np.random.default_rng(seed)
    g = case["groups"]
    c = g * case["cg"]
    oc = g * case["ocg"]
    x = rand(rng, (case["n"], c, *case["size"]), dtype)
    if case["tr"]:
        w = rand(rng, (c, case["ocg"], *case["k"]), dtype)
    else:
        w = rand(rng, (oc, case["cg"], *case["k"]), dtype)
    b = rand(rng, (oc,), dtype) if case["bias"] else None
    if const:
        w = readonly(w)
        b = None if b is None else readonly(b)
    return x, w, b


def _torch_conv(case, x, w, b):
    args = (list(case["s"]), list(case["p"]), list(case["d"]), case["tr"], list(case["op"]))
    tx, tw, tb = t(x), t(w), t(b)
    if x.dtype == np.float16:
        r = torch.ops.aten.convolution(
            tx.float(), tw.float(), None if tb is None else tb.float(), *args, case["groups"]
        )
        return r.half()
    return torch.ops.aten.convolution(tx, tw, tb, *args, case["groups"])


def _ours(case, x, w, b, out):
    return call(
        CONV, x, w, b, case["s"], case["p"], case["d"], case["tr"], case["op"], case["groups"], out
    )


@SETTINGS
@given(
    conv_cases(),
    st.sampled_from(["float32", "float32", "float64", "float16"]),
    st.sampled_from(LAYOUTS),
    st.sampled_from(OUT_KINDS),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_convolution_matches_torch(case, dtype, lay, out_kind, const, seed):
    x, w, b = _make(case, dtype, seed, const)
    expected = _torch_conv(case, x, w, b)
    xl = layout(x, lay)
    for _ in range(2):  # second call reuses cached scratch and weights
        out = planned(expected.shape, dtype, out_kind)
        got = _ours(case, xl, w, b, out)
        close(got, expected)


@SETTINGS
@given(conv_cases(transposed=False, max_nd=2), st.integers(0, 2**32 - 1))
def test_convolution_row_blocks(case, seed):
    # Tiny column-buffer limit: the unfolding runs in row blocks that share a buffer.
    x, w, b = _make(case, "float32", seed)
    expected = _torch_conv(case, x, w, b)
    old = conv_mod._COL_LIMIT
    conv_mod._COL_LIMIT = 40
    try:
        for _ in range(2):
            close(_ours(case, x, w, b, planned(expected.shape, "float32", "exact")), expected)
    finally:
        conv_mod._COL_LIMIT = old


def test_convolution_channels_last_out():
    rng = np.random.default_rng(0)
    x = layout(rand(rng, (2, 8, 10, 10)), "permuted")
    for k, groups in ((3, 1), (1, 1), (3, 8), (1, 2)):
        w = readonly(rand(rng, (8, 8 // groups, k, k)))
        b = readonly(rand(rng, (8,)))
        expected = torch.ops.aten.convolution(
            t(x), t(w), t(b), [1, 1], [k // 2] * 2, [1, 1], False, [0, 0], groups
        )
        out = layout(np.zeros(expected.shape, np.float32), "permuted")
        got = call(CONV, x, w, b, (1, 1), (k // 2, k // 2), (1, 1), False, (0, 0), groups, out)
        close(got, expected)
        close(out, expected)


def test_convolution_single_entry_params_and_large_conv():
    rng = np.random.default_rng(1)
    x = rand(rng, (1, 32, 28, 28))
    w = readonly(rand(rng, (32, 32, 3, 3)))
    b = readonly(rand(rng, (32,)))
    expected = torch.ops.aten.convolution(
        t(x), t(w), t(b), [1, 1], [1, 1], [1, 1], False, [0, 0], 1
    )
    got = call(
        CONV,
        x,
        w,
        b,
        (1,),
        (1,),
        (1,),
        False,
        (0,),
        1,
        planned((1, 32, 28, 28), np.float32, "exact"),
    )
    close(got, expected, rtol=1e-4, atol=1e-4)


def test_convolution_weights_changing_between_calls():
    # Writable weights (not constants) must never be served from the cache.
    rng = np.random.default_rng(2)
    x = rand(rng, (1, 4, 6, 6))
    w = rand(rng, (16, 4, 3, 3))
    b = rand(rng, (16,))
    out = np.zeros((1, 16, 6, 6), np.float32)
    for _ in range(3):
        w[...] = rand(rng, w.shape)
        b[...] = rand(rng, b.shape)
        expected = torch.ops.aten.convolution(
            t(x), t(w), t(b), [1, 1], [1, 1], [1, 1], False, [0, 0], 1
        )
        close(call(CONV, x, w, b, (1, 1), (1, 1), (1, 1), False, (0, 0), 1, out), expected)


def test_convolution_empty_batch_and_zero_output():
    x = np.zeros((0, 3, 5, 5), np.float32)
    w = readonly(np.ones((4, 3, 3, 3), np.float32))
    got = call(
        CONV, x, w, None, (1, 1), (0, 0), (1, 1), False, (0, 0), 1, np.empty((0,), np.float32)
    )
    assert got.shape == (0, 4, 3, 3)


@pytest.mark.parametrize(
    "xs, ws, kwargs, match",
    [
        ((1, 4, 5, 5), (6, 3, 3, 3), {}, "expects 3 input channels"),
        ((1, 4, 5, 5), (6, 2, 3, 3), {"groups": 4}, "not divisible by groups 4"),
        ((1, 4, 5, 5), (6, 4, 3, 3), {"groups": 0}, "groups must be positive"),
        ((1, 4, 5), (6, 4, 3, 3), {}, "weight's rank 4"),
        ((1, 4, 2, 2), (6, 4, 3, 3), {}, "larger than the padded input"),
        ((1, 4, 5, 5), (6, 4, 3, 3), {"stride": (0, 1)}, "stride must be positive"),
        ((1, 4, 5, 5), (6, 4, 3, 3), {"padding": (1, 1, 1)}, "padding must have 1 or 2"),
        (
            (1, 4, 5, 5),
            (4, 6, 3, 3),
            {"transposed": True, "output_padding": (2, 2)},
            "output_padding",
        ),
        ((1, 5, 5, 5), (4, 6, 3, 3), {"transposed": True}, "expects 4 input channels"),
        ((1, 4, 5, 5, 5, 5), (6, 4, 3, 3, 3, 3), {}, "weight must be 3-D, 4-D or 5-D"),
    ],
)
def test_convolution_errors(xs, ws, kwargs, match):
    args = dict(
        stride=(1, 1),
        padding=(0, 0),
        dilation=(1, 1),
        transposed=False,
        output_padding=(0, 0),
        groups=1,
    )
    args.update(kwargs)
    x = np.zeros(xs, np.float32)
    w = np.zeros(ws, np.float32)
    with pytest.raises(KernelError, match=match):
        call(
            CONV,
            x,
            w,
            None,
            args["stride"],
            args["padding"],
            args["dilation"],
            args["transposed"],
            args["output_padding"],
            args["groups"],
            np.empty((0,), np.float32),
        )


def test_convolution_dtype_errors():
    x = np.zeros((1, 2, 4, 4), np.int64)
    with pytest.raises(KernelError, match="input must be float16, float32 or float64"):
        call(
            CONV,
            x,
            x[:, :, :3, :3],
            None,
            (1, 1),
            (0, 0),
            (1, 1),
            False,
            (0, 0),
            1,
            np.empty((0,), np.int64),
        )
    x = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(KernelError, match="weight dtype float64 must match"):
        call(
            CONV,
            x,
            np.zeros((1, 2, 3, 3)),
            None,
            (1, 1),
            (0, 0),
            (1, 1),
            False,
            (0, 0),
            1,
            np.empty((0,), np.float32),
        )
    with pytest.raises(KernelError, match=r"bias must have shape \(1,\)"):
        call(
            CONV,
            x,
            np.zeros((1, 2, 3, 3), np.float32),
            np.zeros(2, np.float32),
            (1, 1),
            (0, 0),
            (1, 1),
            False,
            (0, 0),
            1,
            np.empty((0,), np.float32),
        )


@SETTINGS
@given(
    conv_cases(max_nd=2),
    st.sampled_from(["float32", "float64"]),
    st.lists(st.booleans(), min_size=3, max_size=3),
    st.integers(0, 2**32 - 1),
)
def test_convolution_backward_matches_torch(case, dtype, mask, seed):
    x, w, b = _make(case, dtype, seed)
    fwd = _torch_conv(case, x, w, b)
    rng = np.random.default_rng(seed + 1)
    go = rand(rng, tuple(fwd.shape), dtype)
    bias_sizes = [w.shape[1] * case["groups"]] if case["tr"] else [w.shape[0]]
    expected = torch.ops.aten.convolution_backward(
        t(go),
        t(x),
        t(w),
        bias_sizes,
        list(case["s"]),
        list(case["p"]),
        list(case["d"]),
        case["tr"],
        list(case["op"]),
        case["groups"],
        mask,
    )
    outs = (
        planned(x.shape, dtype, "exact"),
        planned(w.shape, dtype, "unplanned"),
        planned((bias_sizes[0],), dtype, "exact"),
    )
    got = call(
        CONV_BW,
        go,
        x,
        w,
        tuple(bias_sizes),
        case["s"],
        case["p"],
        case["d"],
        case["tr"],
        case["op"],
        case["groups"],
        tuple(mask),
        *outs,
    )
    for m, g, e in zip(mask, got, expected, strict=True):
        if m:
            close(g, e, rtol=1e-4, atol=1e-4)


def test_convolution_backward_shape_error():
    x = np.zeros((1, 2, 5, 5), np.float32)
    w = np.zeros((3, 2, 3, 3), np.float32)
    with pytest.raises(KernelError, match="grad_output must have the convolution's output shape"):
        call(
            CONV_BW,
            np.zeros((1, 3, 4, 4), np.float32),
            x,
            w,
            (3,),
            (1, 1),
            (0, 0),
            (1, 1),
            False,
            (0, 0),
            1,
            (True, True, True),
            *(np.empty((0,), np.float32),) * 3,
        )
