"""Load-time fast paths of normalization, softmax, mean, var and batch norm.

Each fast path must give exactly what its general kernel gives (they share the
normalizer and softmax cores, or make the same numpy calls) and match torch
eager; and it must decline what it does not cover.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pyexecutorch.kernels import get_kernel
from pyexecutorch.kernels.registry import get_specializer

from ._nn_util import SETTINGS

# NaN and inf inputs warn in numpy outside the runtime (which silences them), and
# torch warns about a variance with no degrees of freedom left.
pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:var.*degrees of freedom:UserWarning"),
]

RNG = np.random.default_rng(0)
F16, F32, F64 = np.float16, np.float32, np.float64
TORCH_TOL = {
    np.dtype(F16): dict(rtol=2e-3, atol=2e-3),
    np.dtype(F32): dict(rtol=1e-5, atol=1e-5),
    np.dtype(F64): dict(rtol=1e-10, atol=1e-12),
}


def rand(shape, dtype=F32, scale=1.0, offset=0.0):
    return (RNG.standard_normal(shape) * scale + offset).astype(dtype)


def const(a):
    """A read-only copy, as program constants reach kernels."""
    if a is None:
        return None
    b = np.array(a, copy=True)
    b.flags.writeable = False
    return b


def fresh(outs):
    return [np.full_like(o, 77) for o in outs]


def as_tuple(r):
    return tuple(r) if isinstance(r, (tuple, list)) else (r,)


def fast_vs_general(name, inputs, outs, *, unused=None):
    """Run the fast path (declining is a failure) and the general kernel; return both results.

    The fast path is built with the load-time outputs, then run twice: with those
    arrays and with fresh ones (a run may hand it other arrays of the same shape).
    """
    special = get_specializer(name)
    kwargs = {} if unused is None else {"unused_outputs": frozenset(unused)}
    fast = special(*inputs, *outs, **kwargs)
    assert fast is not None, f"{name}: the fast path declined a case it should take"
    general = as_tuple(get_kernel(name).fn(*inputs, *fresh(outs)))
    got = as_tuple(fast(*inputs, *outs))
    for g, o in zip(got, outs, strict=True):
        assert g is o, "the fast path must return the arrays it was given"
    again = as_tuple(fast(*inputs, *fresh(outs)))
    keep = [i for i in range(len(general)) if unused is None or i not in unused]
    for i in keep:
        np.testing.assert_array_equal(got[i], general[i])
        np.testing.assert_array_equal(again[i], general[i])
    return [got[i] for i in keep], [general[i] for i in keep]


def close_to_torch(got, expected):
    e = expected.detach().numpy().astype(got.dtype)
    np.testing.assert_allclose(got, e, **TORCH_TOL[got.dtype], equal_nan=True)


def tt(a):
    """torch tensor (float16 widened to float32, as torch's CPU norms compute)."""
    if a is None:
        return None
    r = torch.from_numpy(np.array(a))
    return r.float() if r.dtype == torch.float16 else r


# ---------------------------------------------------------------------------
# layer norm

LN_CASES = [
    ((2, 5, 16), (16,), F32),  # the norms model: short rows, one matrix product each
    ((2, 16, 32), (32,), F32),  # gpt blocks
    ((1, 64, 256), (256,), F32),  # gpt6: long rows, matrix-vector sums
    ((33, 24), (24,), F32),  # a row length that is not a power of two
    ((5, 100), (100,), F32),
    ((3, 7), (7,), F64),
    ((4, 6, 3), (6, 3), F16),  # two normalized dims, float16 through float32
    ((1, 8), (8,), F32),
    ((1, 1, 256), (256,), F32),  # one long row: KV-cache decoding
]


def _ln_outs(shape, ns, dtype):
    stat = shape[: len(shape) - len(ns)] + (1,) * len(ns)
    return [np.zeros(shape, dtype), np.zeros(stat, dtype), np.zeros(stat, dtype)]


@pytest.mark.parametrize("shape,ns,dtype", LN_CASES)
@pytest.mark.parametrize("affine", ["both", "weight", "none", "writable"])
@pytest.mark.parametrize("unused", [None, {1, 2}])
def test_layer_norm(shape, ns, dtype, affine, unused):
    x = rand(shape, dtype, scale=3, offset=2)
    w = rand(ns, dtype, 0.5, 1.0)
    b = rand(ns, dtype) if affine in ("both", "writable") else None
    if affine == "none":
        w = None
    if affine != "writable":
        w, b = const(w), const(b)
    inputs = [x, ns, w, b, 1e-5]
    got, _ = fast_vs_general(
        "aten::native_layer_norm.out", inputs, _ln_outs(shape, ns, dtype), unused=unused
    )
    expected = torch.ops.aten.native_layer_norm(tt(x), list(ns), tt(w), tt(b), 1e-5)
    for g, e in zip(got, expected if unused is None else expected[:1], strict=True):
        close_to_torch(g, e)


def test_layer_norm_edge_rows():
    """NaN and inf rows give NaN rows, constant rows give the bias, other rows are untouched."""
    for shape in [(6, 16), (6, 200)]:  # both row-sum strategies
        x = rand(shape)
        x[0, 3] = np.nan
        x[1, 5] = np.inf
        x[2, :] = 4.0
        x[3, :] = -0.0
        x[4] *= 1e-20
        x[5] += 1000
        w, b = const(rand(shape[1:])), const(rand(shape[1:]))
        got, _ = fast_vs_general(
            "aten::native_layer_norm.out",
            [x, shape[1:], w, b, 1e-5],
            _ln_outs(shape, shape[1:], F32),
        )
        expected = torch.ops.aten.native_layer_norm(tt(x), [shape[1]], tt(w), tt(b), 1e-5)
        assert np.isnan(got[0][:2]).all()
        # torch's running (Welford) mean of a row holding inf is NaN; ours is the sum / k (inf)
        assert got[1][1, 0] == np.inf
        for g, e in zip(got, expected, strict=True):
            close_to_torch(g[[0, 2, 3, 4]], e[[0, 2, 3, 4]])
        # Values near 1000 keep float32's absolute precision there (ulp 6e-5) in
        # the mean, in torch as here: compare both with a float64 reference.
        x64 = x[5].astype(F64)
        ref = (x64 - x64.mean()) / np.sqrt(x64.var() + 1e-5) * w + b
        e5 = expected[0][5].numpy()
        bound = 2 * np.abs(e5 - ref).max() + 1e-4
        assert np.abs(got[0][5] - ref).max() <= bound


def test_layer_norm_reads_a_different_input_array():
    """At run time the input may be another array (the caller's), not contiguous."""
    x = rand((4, 12, 16))
    planned = np.ascontiguousarray(x[:, ::2])
    outs = _ln_outs(planned.shape, (16,), F32)
    w = const(rand(16))
    fast = get_specializer("aten::native_layer_norm.out")(planned, (16,), w, None, 1e-5, *outs)
    got = fast(x[:, ::2], (16,), w, None, 1e-5, *outs)
    expected = get_kernel("aten::native_layer_norm.out").fn(
        planned, (16,), w, None, 1e-5, *fresh(outs)
    )
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)


def test_layer_norm_declines():
    special = get_specializer("aten::native_layer_norm.out")
    x = rand((3, 8))
    outs = _ln_outs((3, 8), (8,), F32)
    assert special(x.astype(np.int32), (8,), None, None, 1e-5, *outs) is None
    assert special(x, (4,), None, None, 1e-5, *outs) is None  # not the trailing dims
    assert special(x, (8,), rand(8, F64), None, 1e-5, *outs) is None  # mixed dtypes
    assert special(x, (8,), None, None, 1e-5, np.zeros((3, 8), F64), *outs[1:]) is None
    assert special(x[:, :0], (0,), None, None, 1e-5, *_ln_outs((3, 0), (0,), F32)) is None
    # a statistics output that something reads must have the planned shape
    assert special(x, (8,), None, None, 1e-5, outs[0], np.zeros(3, F32), outs[2]) is None
    assert (
        special(
            x,
            (8,),
            None,
            None,
            1e-5,
            outs[0],
            np.zeros(3, F32),
            outs[2],
            unused_outputs=frozenset({1}),
        )
        is not None
    )


# ---------------------------------------------------------------------------
# group norm

GN_CASES = [
    ((2, 8, 4, 4), 2, F32),  # the norms model
    ((1, 6, 5), 3, F32),
    ((3, 4), 2, F32),  # no spatial dims
    ((2, 32, 8, 8), 4, F32),  # long rows
    ((2, 6, 3, 3), 3, F64),
    ((2, 4, 3), 2, F16),
]


def _gn_args(shape, groups, dtype, affine):
    n, c = shape[:2]
    hxw = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    x = rand(shape, dtype, scale=2, offset=1)
    w = const(rand((c,), dtype, 0.5, 1.0)) if affine else None
    b = const(rand((c,), dtype)) if affine else None
    outs = [np.zeros(shape, dtype), np.zeros((n, groups), dtype), np.zeros((n, groups), dtype)]
    return [x, w, b, n, c, hxw, groups, 1e-5], outs


@pytest.mark.parametrize("shape,groups,dtype", GN_CASES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("unused", [None, {1, 2}])
def test_group_norm(shape, groups, dtype, affine, unused):
    inputs, outs = _gn_args(shape, groups, dtype, affine)
    if dtype == F32 and affine:
        inputs[0].reshape(-1)[3] = np.nan  # one group of one sample goes NaN, as in torch
    got, _ = fast_vs_general("aten::native_group_norm.out", inputs, outs, unused=unused)
    x, w, b, n, c, hxw, g, eps = inputs
    expected = torch.ops.aten.native_group_norm(tt(x), tt(w), tt(b), n, c, hxw, g, eps)
    for gv, e in zip(got, expected if unused is None else expected[:1], strict=True):
        close_to_torch(gv, e)


def test_group_norm_declines():
    special = get_specializer("aten::native_group_norm.out")
    inputs, outs = _gn_args((2, 6, 3), 3, F32, True)
    assert special(*inputs[:6], 4, 1e-5, *outs) is None  # 6 channels in 4 groups
    assert special(*inputs[:3], 2, 5, *inputs[5:], *outs) is None  # N, C do not match
    bad = [inputs[0].astype(np.int64), *inputs[1:]]
    assert special(*bad, *outs) is None


# ---------------------------------------------------------------------------
# softmax and log-softmax

SOFTMAX = ["aten::_softmax.out", "aten::_log_softmax.out"]


def _causal(shape):
    x = rand(shape, scale=2)
    t = shape[-1]
    x[..., np.triu_indices(t, 1)[0], np.triu_indices(t, 1)[1]] = -np.inf
    return x


def _kv_row():
    x = rand((1, 1, 6))
    x[..., 3:] = -np.inf
    return x


SOFTMAX_INPUTS = {
    "small": lambda: (rand((3, 8), scale=3), -1),
    "dim1": lambda: (rand((3, 8), scale=3), 1),
    "kv-masked": lambda: (_kv_row(), -1),
    "causal": lambda: (_causal((2, 4, 16, 16)), -1),  # many rows: one shift for all
    "causal-long": lambda: (_causal((1, 4, 64, 64)), 3),
    "long-rows": lambda: (rand((20, 300), scale=5), -1),
    "one-long-row": lambda: (rand((1, 300), scale=5), -1),
    "large": lambda: (rand((40, 10), scale=1000), -1),  # rows far apart: per-row shift
    "offset": lambda: (rand((40, 10), offset=100), -1),
    "negative": lambda: (rand((40, 10), offset=-200), -1),
    "one-row-far-below": lambda: (np.concatenate([rand((30, 10)), rand((1, 10), offset=-40)]), -1),
    "not-last": lambda: (rand((3, 5, 4), scale=3), 1),
    "first": lambda: (rand((6, 3)), 0),
    "scalar": lambda: (np.array(1.5, F32), 0),
    "double": lambda: (rand((20, 7), F64, scale=3), -1),
    "half": lambda: (rand((20, 7), F16, scale=3), -1),
}


def _special_rows(x):
    """NaN, +inf and all -inf rows: NaN rows in torch, other rows unaffected."""
    x = x.copy()
    x[0, 1] = np.nan
    x[1, 2] = np.inf
    x[2, :] = -np.inf
    x[3, :] = np.inf
    return x


@pytest.mark.parametrize("name", SOFTMAX)
@pytest.mark.parametrize("case", sorted(SOFTMAX_INPUTS))
def test_softmax(name, case):
    x, dim = SOFTMAX_INPUTS[case]()
    got, _ = fast_vs_general(name, [x, dim, False], [np.zeros(x.shape, x.dtype)])
    op = torch.ops.aten._softmax if "log" not in name else torch.ops.aten._log_softmax
    close_to_torch(got[0], op(tt(x), dim, False))


@pytest.mark.parametrize("name", SOFTMAX)
@pytest.mark.parametrize("rows", [5, 40])  # per-row shift and one shift for all
def test_softmax_special_rows(name, rows):
    x = _special_rows(rand((rows, 9), scale=3))
    got, _ = fast_vs_general(name, [x, -1, False], [np.zeros(x.shape, F32)])
    op = torch.ops.aten._softmax if "log" not in name else torch.ops.aten._log_softmax
    assert np.isnan(got[0][:4]).all() and not np.isnan(got[0][4:]).any()
    close_to_torch(got[0], op(tt(x), -1, False))


@pytest.mark.parametrize("name", SOFTMAX)
def test_softmax_half_to_float(name):
    x = rand((30, 5), F16, scale=3)
    got, _ = fast_vs_general(name, [x, 1, True], [np.zeros(x.shape, F32)])
    op = torch.ops.aten._softmax if "log" not in name else torch.ops.aten._log_softmax
    # torch's CPU kernel refuses half_to_float; it means a float32 softmax of the input
    close_to_torch(got[0], op(tt(x), 1, False))


@pytest.mark.parametrize("name", SOFTMAX)
def test_softmax_declines(name):
    special = get_specializer(name)
    x = rand((3, 4))
    out = np.zeros((3, 4), F32)
    assert special(x, 1, True, out) is None  # half_to_float needs float16
    assert special(x, 2, False, out) is None  # dim out of range
    assert special(x.astype(np.int32), 1, False, out) is None
    assert special(x, 1, False, np.zeros((3, 4), F64)) is None
    assert special(x[:0], 1, False, out[:0]) is None
    assert special(x, 1, False, x) is None  # in place


# ---------------------------------------------------------------------------
# mean and var (kernels in reduce.py)


def _reduced(shape, dims, keepdim):
    axes = range(len(shape)) if not dims else [d % len(shape) for d in dims]
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


MEAN_CASES = [
    ((3, 4, 5), (0, 2), False),  # reductions model
    ((3, 7, 12), (1,), False),  # embedding model
    ((1, 32, 8, 8), (2, 3), True),  # global average pooling
    ((3, 4, 5), (-1,), True),
    ((6,), None, False),
    ((2, 3), (), False),  # an empty list reduces everything
]


@pytest.mark.parametrize("shape,dims,keepdim", MEAN_CASES)
@pytest.mark.parametrize("dtype", [F32, F64])
def test_mean(shape, dims, keepdim, dtype):
    x = rand(shape, dtype, scale=3, offset=1)
    x.reshape(-1)[1] = np.nan
    out = np.zeros(_reduced(shape, dims, keepdim), dtype)
    got, _ = fast_vs_general("aten::mean.out", [x, dims, keepdim, None], [out])
    close_to_torch(got[0], torch.mean(tt(x), dim=dims, keepdim=keepdim))
    out = np.zeros((), dtype)
    got, _ = fast_vs_general("aten::mean.dtype_out", [x, None], [out])
    close_to_torch(got[0], torch.mean(tt(x)))


def test_mean_declines():
    special = get_specializer("aten::mean.out")
    x = rand((3, 4))
    assert special(x, (1,), False, 6, np.zeros(3, F32)) is None  # an explicit dtype
    assert special(x.astype(F16), (1,), False, None, np.zeros(3, F16)) is None
    assert special(x, (1,), False, None, np.zeros(4, F32)) is None  # wrong output shape
    assert special(x, (1, 1), False, None, np.zeros(3, F32)) is None  # a dim named twice
    assert special(x[:, :0], (1,), False, None, np.zeros(3, F32)) is None  # empty: NaN
    assert get_specializer("aten::mean.dtype_out")(x, 7, np.zeros((), F64)) is None


VAR_CASES = [
    ((3, 4, 5), (1,), 1, True),  # reductions model
    ((3, 4, 5), (2,), 0, False),
    ((3, 4, 5), (-1,), 1.0, False),  # torch.std's decomposition
    ((4, 6), None, 2, False),
    ((4, 6), (0, 1), 0.5, True),
    ((1, 5), (0,), 1, False),  # a count of one: division by zero, NaN as in torch
]


@pytest.mark.parametrize("shape,dims,correction,keepdim", VAR_CASES)
@pytest.mark.parametrize("dtype", [F32, F64])
def test_var(shape, dims, correction, keepdim, dtype):
    x = rand(shape, dtype, scale=2, offset=3)
    if x.size > 8:
        x.reshape(-1)[7] = np.inf
        x.reshape(-1)[2] = np.nan
    out = np.zeros(_reduced(shape, dims, keepdim), dtype)
    got, _ = fast_vs_general("aten::var.correction_out", [x, dims, correction, keepdim], [out])
    close_to_torch(got[0], torch.var(tt(x), dim=dims, correction=correction, keepdim=keepdim))
    outs = [np.zeros_like(out), np.zeros_like(out)]
    got, _ = fast_vs_general("aten::var_mean.correction_out", [x, dims, correction, keepdim], outs)
    ev, em = torch.var_mean(tt(x), dim=dims, correction=correction, keepdim=keepdim)
    close_to_torch(got[0], ev)
    # torch's var_mean gives a NaN mean where inf meets its running (Welford)
    # update; ours is the sum / count, as torch.mean gives it
    close_to_torch(got[1], torch.mean(tt(x), dim=dims, keepdim=keepdim))
    if correction in (0, 1):
        unbiased = correction == 1
        got, _ = fast_vs_general("aten::var.out", [x, dims, unbiased, keepdim], [out])
        close_to_torch(got[0], torch.var(tt(x), dim=dims, unbiased=unbiased, keepdim=keepdim))


def test_var_declines():
    special = get_specializer("aten::var.correction_out")
    x = rand((3, 4))
    assert special(x.astype(F16), (1,), 1, False, np.zeros(3, F16)) is None
    assert special(x, (1,), True, False, np.zeros(3, F32)) is None  # a bool correction
    assert special(np.array(2.0, F32), None, 1, False, np.zeros((), F32)) is None  # 0-dim
    assert special(x, (1,), 1, False, np.zeros(3, F64)) is None
    assert get_specializer("aten::var.out")(x, (1,), 1, False, np.zeros(3, F32)) is None


# ---------------------------------------------------------------------------
# inference batch norm


def _bn_params(c, dtype, affine):
    w = const(rand(c, dtype, 0.5, 1.0)) if affine else None
    b = const(rand(c, dtype)) if affine else None
    mean = const(rand(c, dtype))
    var = const(np.abs(rand(c, dtype)) + 0.5)
    return w, b, mean, var


@pytest.mark.parametrize("shape", [(2, 3, 4, 4), (5, 3), (1, 8, 20, 20), (2, 4, 6)])
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm(shape, dtype, affine):
    x = rand(shape, dtype, scale=2)
    x.reshape(-1)[0] = np.nan
    w, b, mean, var = _bn_params(shape[1], dtype, affine)
    outs = [np.zeros(shape, dtype), np.zeros(0, dtype), np.zeros(0, dtype)]
    expected = torch.ops.aten._native_batch_norm_legit_no_training(
        tt(x), tt(w), tt(b), tt(mean), tt(var), 0.1, 1e-5
    )[0]
    got, _ = fast_vs_general(
        "aten::_native_batch_norm_legit_no_training.out", [x, w, b, mean, var, 0.1, 1e-5], outs
    )
    close_to_torch(got[0], expected)
    assert got[1].shape == got[2].shape == (0,)
    got, _ = fast_vs_general(
        "aten::_native_batch_norm_legit.out", [x, w, b, mean, var, False, 0.1, 1e-5], outs
    )
    close_to_torch(got[0], expected)


def test_batch_norm_with_other_parameters_at_run_time():
    """Parameters other than the load-time constants are folded per call."""
    x = rand((2, 3, 4))
    params = _bn_params(3, F32, True)
    outs = [np.zeros(x.shape, F32), np.zeros(0, F32), np.zeros(0, F32)]
    name = "aten::_native_batch_norm_legit_no_training.out"
    fast = get_specializer(name)(x, *params, 0.1, 1e-5, *outs)
    other = _bn_params(3, F32, True)
    got = fast(x, *other, 0.1, 1e-5, *outs)
    expected = get_kernel(name).fn(x, *other, 0.1, 1e-5, *fresh(outs))
    np.testing.assert_array_equal(got[0], expected[0])


def test_batch_norm_declines():
    x = rand((2, 3, 4))
    w, b, mean, var = _bn_params(3, F32, True)
    outs = [np.zeros(x.shape, F32), np.zeros(0, F32), np.zeros(0, F32)]
    special = get_specializer("aten::_native_batch_norm_legit_no_training.out")
    assert special(x, w, b, mean, var.copy(), 0.1, 1e-5, *outs) is None  # a buffer that can change
    assert special(x.astype(F16), w, b, mean, var, 0.1, 1e-5, *outs) is None
    assert special(x, w, b, mean, var, 0.1, 1e-5, outs[0], np.zeros(3, F32), outs[2]) is None
    legit = get_specializer("aten::_native_batch_norm_legit.out")
    assert legit(x, w, b, mean, var, True, 0.1, 1e-5, *outs) is None  # training


# ---------------------------------------------------------------------------
# random shapes across the strategy boundaries (short/long rows, few/many rows)


@SETTINGS
@given(
    st.integers(1, 80),
    st.integers(1, 90),
    st.sampled_from([F32, F32, F64, F16]),
    st.sampled_from(["plain", "masked", "wide"]),
    st.integers(0, 2**32 - 1),
)
def test_random_shapes(m, k, dtype, kind, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * (30 if kind == "wide" else 2)).astype(dtype)
    if kind == "masked":
        x[rng.random((m, k)) < 0.3] = -np.inf
    for name, op in (
        ("aten::_softmax.out", torch.ops.aten._softmax),
        ("aten::_log_softmax.out", torch.ops.aten._log_softmax),
    ):
        got, _ = fast_vs_general(name, [x, -1, False], [np.zeros((m, k), dtype)])
        close_to_torch(got[0], op(tt(x), -1, False))
    if kind == "masked":
        return
    w, b = const(rng.standard_normal(k).astype(dtype)), const(rng.standard_normal(k).astype(dtype))
    got, _ = fast_vs_general(
        "aten::native_layer_norm.out", [x, (k,), w, b, 1e-5], _ln_outs((m, k), (k,), dtype)
    )
    expected = torch.ops.aten.native_layer_norm(tt(x), [k], tt(w), tt(b), 1e-5)
    for g, e in zip(got, expected, strict=True):
        close_to_torch(g, e)
