"""The compiled tier's forms of the non-convolution CNN operators.

Values-only max pooling (what a program that never reads the indices runs), the
pooling forms' whole-method steps, cat and split as flat row copies: each
against its numpy kernel and torch eager, with NaN, infinities, -0.0, ceil-mode and padded windows, and an input that
is not the planned array. A small pooling network compiles into one whole method
and computes what the numpy tier and eager compute.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("numba", reason="the compiled forms need numba (the jit extra)")


from pyexecutorch.exir import to_edge  # noqa: E402
from pyexecutorch.kernels import get_kernel  # noqa: E402
from pyexecutorch.kernels.registry import fast_path_of, get_compiled_form  # noqa: E402
from pyexecutorch.runtime import (
    Runtime,  # noqa: E402
    tiers,  # noqa: E402
)

tiers.enabled(True)  # imports every family's compiled forms

F32, F64 = np.float32, np.float64
MAX_POOL = "aten::max_pool2d_with_indices.out"


def _x(shape, dtype, seed=0):  # noqa: ANN001, ANN202
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    flat[3], flat[11], flat[12] = np.nan, np.inf, -np.inf
    flat[20:24] = -0.0  # ties of signed zeros: the first one wins, as in torch
    flat[24:26] = 0.0
    flat[40:44] = 1.25  # ties
    return x


# (shape, kernel, stride, padding, dilation, ceil_mode): squeezenet's ceil-mode 3x3/2,
# shufflenet's padded 3x3/2, dilation, 1-wide kernels, 3-D input
VALUES_ONLY = [
    ((1, 4, 31, 31), 3, 2, 0, 1, True),
    ((2, 3, 15, 15), 3, 2, 0, 1, True),
    ((1, 3, 16, 16), 3, 2, 1, 1, False),
    ((1, 2, 9, 9), 3, 2, 1, 2, True),
    ((1, 2, 7, 6), (1, 3), (1, 2), 0, 1, False),
    ((3, 6, 5), 2, 2, 1, 1, True),
    ((1, 3, 13, 12), 5, 2, 2, 1, True),  # 5 taps a pass: folds alternate two buffers
    ((2, 2, 12, 13), (4, 6), (3, 1), (2, 1), (1, 2), False),
    ((1, 5, 8, 9), (7, 1), 1, (3, 0), 1, False),
]


def _pair(v):  # noqa: ANN001, ANN202
    return list(v) if isinstance(v, tuple) else [v, v]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("case", VALUES_ONLY, ids=[str(c) for c in VALUES_ONLY])
def test_max_pool_values_only(case, dtype):
    shape, k, s, p, d, ceil = case
    x = _x(shape, dtype)
    want = F.max_pool2d(torch.from_numpy(x.copy()), k, s, p, d, ceil).numpy()
    args = (x, _pair(k), _pair(s), _pair(p), _pair(d), ceil)
    out, idx = np.zeros(want.shape, dtype), np.full(want.shape, -7, np.int64)
    reference = get_kernel(MAX_POOL).fn(*args, out.copy(), idx.copy())[0]
    fast = get_compiled_form(MAX_POOL)(*args, out, idx, unused_outputs=frozenset({1}))
    assert fast is not None and fast_path_of(fast).fills_outputs
    got, got_idx = fast(*args, out, idx)
    assert got is out and got_idx is idx
    np.testing.assert_array_equal(got, reference)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert (idx == -7).all()  # nobody reads the indices: they are not computed
    # An input that is not the planned array (another call's tensor, non-contiguous)
    other = np.asfortranarray(_x(shape, dtype, seed=1))
    fast(other, *args[1:], out, idx)
    want = F.max_pool2d(torch.from_numpy(np.ascontiguousarray(other)), k, s, p, d, ceil)
    np.testing.assert_array_equal(out, want.numpy())


@pytest.mark.parametrize("case", VALUES_ONLY, ids=[str(c) for c in VALUES_ONLY])
def test_max_pool_values_step_in_blocks(case):
    """The values-only step, its planes in one block or several (as the parallel
    variant splits them), signed zeros, NaN and -inf as torch."""
    shape, k, s, p, d, ceil = case
    x = _x(shape, F64)
    want = F.max_pool2d(torch.from_numpy(x.copy()), k, s, p, d, ceil).numpy()
    out, idx = np.zeros(want.shape, F64), np.zeros(want.shape, np.int64)
    args = (x, _pair(k), _pair(s), _pair(p), _pair(d), ceil)
    fast = get_compiled_form(MAX_POOL)(*args, out, idx, unused_outputs=frozenset({1}))
    function, load = fast_path_of(fast).step[:2]
    planes = load[0].shape[0]
    for block in sorted({planes, 2, 1}):
        out[...] = 0
        function(*load[:6], block, *load[7:])
        np.testing.assert_array_equal(out, want, err_msg=f"block {block}")
        np.testing.assert_array_equal(np.signbit(out), np.signbit(want))


@pytest.mark.parametrize("k, s", [(2, 2), (3, 1)])
def test_max_pool_values_ties_across_rows_go_row_major(k, s):
    # Each window holds -0.0 in an earlier row and 0.0 below-left of it: torch returns
    # the first in row-major order (-0.0), a column-first fold would return 0.0.
    x = np.tile(np.array([[-1.0, -0.0], [0.0, -1.0]], F32), (1, 2, 3, 3))
    want = F.max_pool2d(torch.from_numpy(x.copy()), k, s).numpy()
    out, idx = np.zeros(want.shape, F32), np.zeros(want.shape, np.int64)
    args = (x, [k, k], [s, s], [0, 0], [1, 1], False)
    fast = get_compiled_form(MAX_POOL)(*args, out, idx, unused_outputs=frozenset({1}))
    (got,) = _step_result(fast, [out])
    assert np.signbit(want).any()
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_max_pool_values_parallel_variant():
    from pyexecutorch.kernels.pool.compiled import MAX_POOL_VALUES  # noqa: PLC0415

    x = _x((2, 5, 17, 16), F32)
    want = F.max_pool2d(torch.from_numpy(x.copy()), 3, 2, 1, 1, True).numpy()
    out, idx = np.zeros(want.shape, F32), np.zeros(want.shape, np.int64)
    args = (x, [3, 3], [2, 2], [1, 1], [1, 1], True)
    fast = get_compiled_form(MAX_POOL)(*args, out, idx, unused_outputs=frozenset({1}))
    load = fast_path_of(fast).step[1]
    MAX_POOL_VALUES[1](*load[:6], 3, *load[7:])
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(want))


def _step_result(fast, outs):  # noqa: ANN001, ANN202
    """Run a form's whole-method step (its compiled call on the planned arrays)."""
    function, args = fast_path_of(fast).step[:2]
    for o in outs:
        o[...] = 0
    function(*args)
    return [o.copy() for o in outs]


@pytest.mark.parametrize("values_only", [True, False])
def test_max_pool_step_computes_the_kernel(values_only):
    x = _x((2, 3, 11, 11), F32)
    args = (x, [3, 3], [2, 2], [1, 1], [1, 1], True)
    want, want_idx = F.max_pool2d(torch.from_numpy(x.copy()), 3, 2, 1, 1, True, True)
    out, idx = np.zeros(want.shape, F32), np.zeros(want.shape, np.int64)
    unused = frozenset({1}) if values_only else frozenset()
    fast = get_compiled_form(MAX_POOL)(*args, out, idx, unused_outputs=unused)
    got, got_idx = _step_result(fast, [out, idx])
    np.testing.assert_array_equal(got, want.numpy())
    if not values_only:
        np.testing.assert_array_equal(got_idx, want_idx.numpy())


# (shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG_STEPS = [
    ((1, 4, 31, 31), 3, 2, 0, True, True, None),
    ((2, 3, 9, 8), 3, 1, 1, False, False, None),
    ((1, 2, 7, 7), (2, 3), (2, 1), (1, 1), True, True, None),
    ((3, 6, 5), 2, 2, 1, True, False, 3),
]


@pytest.mark.parametrize("case", AVG_STEPS, ids=[str(c) for c in AVG_STEPS])
def test_avg_pool_step_in_blocks(case):
    """The average pooling step, its planes in one block or several (as the parallel
    variant splits them): equal to torch, a window of -0.0 averaging to 0.0."""
    shape, k, s, p, ceil, include, override = case
    x = _x(shape, F64)
    x[..., :3, :4] = -0.0  # the first windows hold only -0.0
    want = F.avg_pool2d(torch.from_numpy(x.copy()), k, s, p, ceil, include, override).numpy()
    out = np.zeros(want.shape, F64)
    args = (x, _pair(k), _pair(s), _pair(p), ceil, include, override)
    fast = get_compiled_form("aten::avg_pool2d.out")(*args, out)
    function, load = fast_path_of(fast).step[:2]
    planes = load[0].shape[0]
    for block in sorted({planes, 2, 1}):
        out[...] = 7
        function(*load[:6], block, *load[7:])
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12, err_msg=f"block {block}")
        zero = want == 0
        np.testing.assert_array_equal(np.signbit(out[zero]), np.signbit(want[zero]))


def test_avg_pool_parallel_variant():
    from pyexecutorch.kernels.pool.compiled import AVG_POOL  # noqa: PLC0415

    x = _x((2, 5, 17, 16), F32)
    x[np.isnan(x) | np.isinf(x)] = 0.5
    want = F.avg_pool2d(torch.from_numpy(x.copy()), 3, 2, 1, True, False).numpy()
    out = np.zeros(want.shape, F32)
    args = (x, [3, 3], [2, 2], [1, 1], True, False, None)
    load = fast_path_of(get_compiled_form("aten::avg_pool2d.out")(*args, out)).step[1]
    AVG_POOL[1](*load[:6], 3, *load[7:])
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_avg_and_adaptive_pool_steps_compute_the_kernels():
    x = _x((1, 4, 9, 9), F32)
    x[np.isnan(x) | np.isinf(x)] = 0.5  # (averages of infinities are NaN both ways)
    cases = [
        ("aten::avg_pool2d.out", (x, [3, 3], [2, 2], [1, 1], True, False, None)),
        ("aten::_adaptive_avg_pool2d.out", (x, [1, 1])),
        ("aten::_adaptive_avg_pool2d.out", (x, [4, 3])),
    ]
    for name, args in cases:
        shape = (1, 4, 5, 5) if name == "aten::avg_pool2d.out" else (1, 4, *args[1])
        out = np.zeros(shape, F32)
        reference = get_kernel(name).fn(*args, out.copy())
        fast = get_compiled_form(name)(*args, out)
        assert fast is not None and fast_path_of(fast).fills_outputs, name
        (got,) = _step_result(fast, [out])
        np.testing.assert_allclose(got, reference, rtol=1e-6, atol=1e-6, err_msg=name)


# ---------------------------------------------------------------------------
# cat and split

# (piece shapes, dim): channels of a batch of one (one run per piece), a batch of two
# (two runs), the last axis, the first axis, 3 and 4 pieces
CATS = [
    ([(1, 3, 4, 4), (1, 5, 4, 4)], 1),
    ([(2, 3, 4, 4), (2, 2, 4, 4)], 1),
    ([(2, 3, 2), (2, 3, 5), (2, 3, 1)], -1),
    ([(1, 6), (3, 6), (2, 6), (1, 6)], 0),
]


@pytest.mark.parametrize("dtype", [F32, np.int64, np.bool_])
@pytest.mark.parametrize("case", CATS, ids=[str(c) for c in CATS])
def test_cat_and_split(case, dtype):
    shapes, dim = case
    rng = np.random.default_rng(0)
    parts = [(rng.standard_normal(s) * 4).astype(dtype) for s in shapes]
    if dtype == F32:
        parts[0].reshape(-1)[:3] = [np.nan, -0.0, np.inf]
    want = torch.cat([torch.from_numpy(p) for p in parts], dim).numpy()
    out = np.zeros(want.shape, dtype)
    cat = get_compiled_form("aten::cat.out")(parts, dim, out)
    assert cat is not None and fast_path_of(cat).fills_outputs
    assert cat(parts, dim, out) is out
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(out, get_kernel("aten::cat.out").fn(parts, dim, out.copy()))
    (stepped,) = _step_result(cat, [out])
    np.testing.assert_array_equal(stepped, want)
    others = [p.copy() for p in parts]  # not the planned arrays: the numpy path
    np.testing.assert_array_equal(cat(others, dim, np.zeros_like(out)), want)

    sizes = [s[dim] for s in shapes]
    outs = [np.zeros(s, dtype) for s in shapes]
    split = get_compiled_form("aten::split_with_sizes_copy.out")(want, sizes, dim, outs)
    assert split is not None and fast_path_of(split).fills_outputs
    got = split(want, sizes, dim, outs)
    for g, o, p in zip(got, outs, parts, strict=True):
        assert g is o
        np.testing.assert_array_equal(g, p)
    for g, p in zip(_step_result(split, outs), parts, strict=True):
        np.testing.assert_array_equal(g, p)


def test_cat_and_split_leave_other_cases_to_numpy():
    form = get_compiled_form("aten::cat.out")
    five = [np.zeros((1, 2), F32)] * 5
    assert form(five, 1, np.zeros((1, 10), F32)) is None  # more pieces than the loops take
    out = np.zeros((1, 4), F32)
    assert form([out[:, :2], out[:, 2:]], 1, out) is None  # reads its own output
    strided = np.zeros((2, 4), F32)[:, ::2]
    assert form([strided, strided], 1, np.zeros((2, 4), F32)) is None


# ---------------------------------------------------------------------------
# a whole method of pooling, cat, split and activations


class _Pools(torch.nn.Module):
    def forward(self, x):  # noqa: ANN001, ANN201
        y = F.max_pool2d(torch.sigmoid(x) * x, 3, 2, ceil_mode=True)
        z = F.avg_pool2d(F.gelu(y), 2, 1, 1)
        a, b = torch.cat([z, torch.relu(z)], 1).split([2, 4], 1)
        return F.adaptive_avg_pool2d(a, 1), F.max_pool2d(b, 2, 2, 1)


def test_a_pooling_network_compiles_whole_and_matches_eager():
    module = _Pools().eval()
    example = (torch.randn(1, 3, 17, 17),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pte = to_edge(torch.export.export(module, example)).to_executorch().buffer
    whole = Runtime.get().load_program(pte, jit=True).load_method("forward")
    numpy_tier = Runtime.get().load_program(pte, jit=False).load_method("forward")
    assert whole.plan.whole_source is not None, whole.plan.sources[0]
    for seed in (1, 2):  # a method bound to stale arrays would repeat the first answer
        x = torch.randn(1, 3, 17, 17, generator=torch.Generator().manual_seed(seed))
        x[0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), -0.0])
        want = module(x)
        got = whole.execute([x.numpy()])
        ref = numpy_tier.execute([x.numpy()])
        for g, r, w in zip(got, ref, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=4e-6, atol=1e-6)
            np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-5, atol=1e-6)


class _SqueezeExcitePool(torch.nn.Module):
    """An MBConv block's squeeze-excite: a SiLU map both kept (for the gate's product)
    and averaged (for the 1x1 convolution computing the gate)."""

    def __init__(self) -> None:
        super().__init__()
        self.expand = torch.nn.Conv2d(6, 6, 1)
        self.squeeze = torch.nn.Conv2d(6, 6, 1)

    def forward(self, x):  # noqa: ANN001, ANN201
        y = F.silu(self.expand(x))
        return y * torch.sigmoid(self.squeeze(y.mean((2, 3), keepdim=True)))


def test_a_mean_of_a_stored_silu_reads_it_back_and_matches_eager():
    module = _SqueezeExcitePool().eval()
    torch.manual_seed(0)
    x = torch.randn(1, 6, 9, 7, generator=torch.Generator().manual_seed(3))
    x[0, 1, 2, 3], x[0, 2, 0, 0], x[0, 3, 1, 1] = float("nan"), float("inf"), -float("inf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pte = to_edge(torch.export.export(module, (x,))).to_executorch().buffer
    fused = Runtime.get().load_program(pte, jit=True).load_method("forward")
    numpy_tier = Runtime.get().load_program(pte, jit=False).load_method("forward")
    plan = fused.plan
    runs = [plan.operators(run) for run in plan.fused_runs]
    # The SiLU is stored for the gate's product anyway: one flat loop computes it once and
    # the mean reads it back (rows of a few pixels do not vectorize in a fused reduction).
    assert ["aten::sigmoid.out", "aten::mul.out"] in runs, runs
    assert not any("aten::mean.out" in run and "aten::sigmoid.out" in run[:2] for run in runs)
    got = fused.execute([x.numpy()])
    ref = numpy_tier.execute([x.numpy()])
    for g, r, w in zip(got, ref, [module(x).detach()], strict=True):
        np.testing.assert_array_equal(np.isnan(np.asarray(g)), np.isnan(w.numpy()))
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=4e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-5, atol=1e-6)
