"""Reductions fused with their elementwise chains (the compiled tier) compute what the numpy
kernels and torch compute, and the fusion happens: softmax after scale and mask, log-softmax
over an inner dimension, RMSNorm as exported, layer norm with an activation after it, and sums
and means of elementwise expressions, kept and dropped dimensions, float32 and float64.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.runtime._tiers import both_tiers

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

F = torch.nn.functional


def _run(module: torch.nn.Module, inputs: tuple):  # noqa: ANN202
    """(the compiled method, its outputs, the numpy tier's, eager's)."""
    compiled, want, got, eager = both_tiers(module, inputs)
    return compiled, got, want, eager


def _ops(method, run: list[int]) -> list[str]:  # noqa: ANN001
    return method.plan.operators(run)


def _check(module: torch.nn.Module, inputs: tuple, fused_ops: list[list[str]]) -> None:
    method, got, want, eager = _run(module, inputs)
    runs = [_ops(method, run) for run in method.plan.fused_runs]
    for ops in fused_ops:
        assert ops in runs, runs
    tol = 2e-6 if got[0].dtype == np.float32 else 1e-12
    for g, w, e in zip(got, want, eager, strict=True):
        assert g.dtype == w.dtype == e.dtype
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_allclose(g, w, rtol=tol * 4, atol=tol)
        np.testing.assert_allclose(g, e, rtol=tol * 4, atol=tol)


class Attention(torch.nn.Module):
    def forward(self, q, k, mask):
        scores = (q @ k.transpose(-1, -2)) * 0.125 + mask
        return torch.softmax(scores, dim=-1)


class InnerLogSoftmax(torch.nn.Module):
    def forward(self, x, y):
        return torch.log_softmax(x - y, dim=1)


class RMSNorm(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(n) + 0.5)

    def forward(self, x):
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return x * rms * self.weight


class LayerNormGelu(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(n)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x, r):
        h = x + r
        return F.gelu(self.norm(h)), h


class Sums(torch.nn.Module):
    def forward(self, x, y):
        a = (x * y).sum(dim=(0, 2))
        b = (x - y).abs().mean(dim=1, keepdim=True) * x
        return a, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softmax_with_scale_and_mask(dtype):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 5, 8, generator=g, dtype=dtype)
    k = torch.randn(2, 3, 6, 8, generator=g, dtype=dtype)
    mask = torch.zeros(5, 6, dtype=dtype)
    mask[:, 4:] = -torch.inf  # masked columns: exactly zero after the softmax
    _check(Attention(), (q, k, mask), [["aten::mul.out", "aten::add.out", "aten::_softmax.out"]])


def test_log_softmax_over_an_inner_dimension():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(3, 7, 4, generator=g), torch.randn(7, 1, generator=g)
    _check(InnerLogSoftmax(), (x, y), [["aten::sub.out", "aten::_log_softmax.out"]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rms_norm_as_exported_is_one_loop(dtype):
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(2), dtype=dtype)
    ops = [
        "aten::pow.Tensor_Scalar_out",
        "aten::mean.out",
        "aten::add.out",
        "aten::rsqrt.out",
        "aten::mul.out",
        "aten::mul.out",
    ]
    _check(RMSNorm(16).to(dtype), (x,), [ops])


def test_layer_norm_with_residual_and_gelu():
    g = torch.Generator().manual_seed(3)
    x, r = torch.randn(2, 6, 24, generator=g), torch.randn(24, generator=g)
    ops = ["aten::add.out", "aten::native_layer_norm.out", "aten::gelu.out"]
    _check(LayerNormGelu(24), (x, r), [ops])


def test_sum_and_mean_of_expressions_keep_and_drop_dimensions():
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(3, 4, 5, generator=g), torch.randn(4, 5, generator=g)
    _check(
        Sums(),
        (x, y),
        [
            ["aten::mul.out", "aten::sum.IntList_out"],
            ["aten::sub.out", "aten::abs.out", "aten::mean.out", "aten::mul.out"],
        ],
    )


def test_nan_and_infinity_propagate_as_in_the_numpy_kernels():
    x = torch.randn(2, 3, 5, 6, generator=torch.Generator().manual_seed(5))
    k = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(6))
    x[0, 0, 0, 0] = torch.nan
    x[1, 2, 3, 1] = torch.inf
    mask = torch.zeros(5, 6)
    mask[4, :] = -torch.inf  # a row all masked: NaN, as in torch
    method, got, want, eager = _run(Attention(), (x, k, mask))
    assert method.plan.fused_runs
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(eager[0]))
    ok = ~np.isnan(want[0])
    np.testing.assert_allclose(got[0][ok], want[0][ok], rtol=1e-5, atol=2e-6)


class ResidualNorm(torch.nn.Module):
    """The layer norm's output may be planned on the matmul's bytes, read in the same loop."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x, r):
        return torch.relu(self.norm(self.lin(x) + r)) * 2.0


def test_output_on_an_input_s_bytes():
    g = torch.Generator().manual_seed(7)
    x, r = torch.randn(4, 16, generator=g), torch.randn(4, 16, generator=g)
    method, got, want, eager = _run(ResidualNorm(), (x, r))
    (run,) = [
        run for run in method.plan.fused_runs if "aten::native_layer_norm.out" in _ops(method, run)
    ]
    reads, writes = set(), set()
    for pc in run:
        loaded = method._loaded  # (the planned memory the loop reads and writes)
        a = loaded.plan.chains[0].instructions[pc].instr_args
        args, outs = loaded.facts.kernel_layout(loaded.kernels[a.op_index], a)
        reads.update(j for j in args[: len(args) - len(outs)] if j in loaded.capacity)
        writes.update(outs)
    reads -= writes
    addresses = {method._loaded.capacity[j].ctypes.data for j in reads}
    # the planner put a result of the loop on the bytes of an input the loop reads
    assert any(method._loaded.capacity[j].ctypes.data in addresses for j in writes)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(got[0], eager[0], rtol=1e-5, atol=2e-6)


class MaskedRows(torch.nn.Module):
    """What scaled_dot_product_attention exports: rows all masked come out as zeros."""

    def forward(self, scores):
        s = torch.softmax(scores, dim=-1)
        dead = torch.logical_not(torch.logical_not(scores == -torch.inf).any(-1, keepdim=True))
        # the sum keeps the scores alive: else the planner may shift the result onto them
        return torch.where(dead, torch.full_like(s, 0.0), s), scores.sum(0)


def test_softmax_and_the_masked_row_test_are_one_loop():
    scores = torch.randn(2, 3, 4, 6, generator=torch.Generator().manual_seed(8))
    scores[0, 1, 2, :] = -torch.inf  # a dead row: 0, where the softmax alone gives NaN
    scores[1, 0, 3, 2:] = -torch.inf
    ops = [
        "aten::_softmax.out",
        "aten::eq.Scalar_out",
        "aten::logical_not.out",
        "aten::any.out",
        "aten::logical_not.out",
        "aten::full_like.out",
        "aten::where.self_out",
    ]
    _check(MaskedRows(), (scores,), [ops])


class HalfReductions(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(n)

    def forward(self, x, y):
        h = self.norm(torch.relu(x + y))
        return torch.softmax(x, dim=-1), h, torch.log_softmax(x * 0.5, dim=1)


def test_float16_reductions_compute_in_float32_and_round_their_outputs():
    g = torch.Generator().manual_seed(21)
    x = (torch.randn(3, 5, 16, generator=g) * 4).half()
    y = torch.randn(3, 5, 16, generator=g).half()
    x[0, 0, 3] = float("nan")
    x[1, 2] = -float("inf")  # a row of -inf: NaN, as in torch
    module = HalfReductions(16).half()
    method, got, want, eager = _run(module, (x, y))
    runs = [_ops(method, run) for run in method.plan.fused_runs]
    assert ["aten::add.out", "aten::relu.out", "aten::native_layer_norm.out"] in runs, runs
    # x * 0.5 reads softmax's input: it joins that group, and log-softmax is left alone,
    # which in float16 still fuses (no compiled kernel takes float16)
    assert ["aten::_softmax.out", "aten::mul.out"] in runs, runs
    assert ["aten::_log_softmax.out"] in runs, runs
    for g_, w, e in zip(got, want, eager, strict=True):
        assert g_.dtype == w.dtype == e.dtype == np.float16
        np.testing.assert_array_equal(np.isnan(g_), np.isnan(w))
        np.testing.assert_array_equal(np.isnan(g_), np.isnan(e))
        # float32 sums in another order, one rounding to half: an ulp at most
        np.testing.assert_allclose(g_, w, rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(g_, e, rtol=2e-3, atol=2e-3)


class RowSums(torch.nn.Module):
    def forward(self, x, y):
        return (x * y).sum(-1), (x - y).abs().mean(-1, keepdim=True) * x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 7, 17, 1003])
def test_sums_in_lanes_on_odd_and_long_rows(dtype, n):
    g = torch.Generator().manual_seed(30 + n)
    x, y = torch.randn(3, 2, n, generator=g, dtype=dtype), torch.randn(n, generator=g, dtype=dtype)
    x[0, 1, n // 2] = torch.nan
    x[1, 0, 0] = torch.inf
    x[2, 1, -1] = -0.0
    fused = [
        ["aten::mul.out", "aten::sum.IntList_out"],
        ["aten::sub.out", "aten::abs.out", "aten::mean.out", "aten::mul.out"],
    ]
    _check(RowSums(), (x, y), fused if n > 1 else [])  # rows of one: the export drops sums


def test_sums_in_lanes_are_as_accurate_as_a_float64_sum():
    # a long row of products of mixed magnitudes: the loop's eight float64 partial sums,
    # rounded once, against the exact float64 sum of the same float32 products
    g = torch.Generator().manual_seed(40)
    x = torch.randn(2, 4099, generator=g) * torch.logspace(-3, 3, 4099)
    y = torch.randn(4099, generator=g)
    method, got, want, eager = _run(RowSums(), (x, y))
    assert ["aten::mul.out", "aten::sum.IntList_out"] in [
        _ops(method, run) for run in method.plan.fused_runs
    ]
    products = (x.numpy() * y.numpy()).astype(np.float64)  # the float32 products, exactly
    exact = products.sum(-1).astype(np.float32)
    scale = np.abs(products).sum(-1)
    assert (np.abs(got[0].astype(np.float64) - exact) <= 1e-7 * scale + 1e-30).all()
    # no worse than the numpy kernel's pairwise float32 sum, give or take one rounding
    assert (np.abs(got[0] - exact) <= np.abs(want[0] - exact) + np.abs(np.spacing(exact))).all()


class SqueezeExcite(torch.nn.Module):
    """EfficientNet's block tail: SiLU, its mean per channel, a sigmoid gate broadcast back."""

    def forward(self, x):
        s = F.silu(x)
        gate = torch.sigmoid(s.mean((2, 3), keepdim=True) * 2.0)
        return s * gate


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("hw", [(2, 2), (7, 9), (16, 16)])
def test_squeeze_excite_runs_a_flat_silu_then_the_mean_kernel(dtype, hw):
    x = torch.randn(1, 12, *hw, generator=torch.Generator().manual_seed(50), dtype=dtype) * 4
    x[0, 0, 0, 0] = torch.nan
    x[0, 1, 0, 0] = torch.inf
    x[0, 2, 0, 0] = -torch.inf
    x[0, 3, 0, 0] = -0.0
    x[0, 4, 0, 0] = -200.0  # exp(200) overflows inside the sigmoid: SiLU is -0.0
    x[0, 5, 0, 0] = 1e-30
    method, got, want, eager = _run(SqueezeExcite(), (x,))
    runs = [_ops(method, run) for run in method.plan.fused_runs]
    # the SiLU is stored for the gate's product anyway: the mean does not recompute it
    # row by row but reads it after a flat loop
    assert ["aten::sigmoid.out", "aten::mul.out"] in runs, runs
    assert ["aten::mean.out", "aten::mul.out", "aten::sigmoid.out", "aten::mul.out"] in runs, runs
    tol = 2e-6 if dtype == torch.float32 else 1e-12
    for g_, w, e in zip(got, want, eager, strict=True):
        np.testing.assert_array_equal(np.isnan(g_), np.isnan(w))
        ok = ~np.isnan(w)  # a NaN's sign is whatever the arithmetic made
        np.testing.assert_array_equal(np.signbit(g_[ok]), np.signbit(w[ok]))
        np.testing.assert_allclose(g_, w, rtol=tol * 4, atol=tol)
        np.testing.assert_allclose(g_, e, rtol=tol * 4, atol=tol)
