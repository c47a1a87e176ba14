"""Fused elementwise loops (the compiled tier) compute what the numpy kernels and torch compute.

Each program applies many operators side by side and returns every result, so
one fused loop stores each operator's output and every formula of
``kernels/elementwise/formulas.py`` is checked on its own: against the numpy
tier's result (NaN where it has NaN, signed zeros as it has them, integers
bit for bit) and against torch eager.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.kernels.elementwise.formulas import FORMULAS
from pyexecutorch.runtime import Runtime
from tests.runtime._tiers import both_tiers, program

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

F = torch.nn.functional


def _assert_same_floats(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype, what
    if got.dtype == np.bool_:  # a comparison's result
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=what)
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=what)
    # within one ulp or so; absolute where a formula cancels (gelu's tail)
    np.testing.assert_allclose(got, want, rtol=4e-6, atol=1e-6, err_msg=what)


class FloatOps(torch.nn.Module):
    def forward(self, x, y, c):
        return (
            x + y,
            torch.add(x, y, alpha=2.5),
            x - y,
            torch.sub(x, y, alpha=-0.5),
            2.5 - x,
            x * y,
            x * 3.0,
            x / y,
            x / 0.0,
            -x,
            torch.abs(x),
            torch.relu(x),
            torch.sigmoid(x),
            torch.reciprocal(x),
            torch.rsqrt(x),
            torch.exp(x),
            torch.expm1(x),
            torch.log(x),
            torch.log1p(x),
            torch.sqrt(x),
            torch.tanh(x),
            torch.sin(x),
            torch.cos(x),
            torch.erf(x),
            torch.floor(x),
            torch.ceil(x),
            torch.trunc(x),
            x**2,
            x**3,
            x**0.5,
            x**-0.5,
            x**-1,
            x**-2,
            F.leaky_relu(x, 0.1),
            F.hardtanh(x, -1.0, 2.0),
            torch.clamp(x, min=-0.5),
            torch.clamp(x, max=0.5),
            torch.clamp(x, -0.25, 0.75),
            torch.clamp(x, 1.0, -1.0),
            F.elu(x, 0.7),
            F.gelu(x),
            F.gelu(x, approximate="tanh"),
            torch.where(c, x, y),
            x.masked_fill(c, -1.5),
            x == y,
            x == 1.5,
            x != y,
            x < y,
            x < 0.25,
            x >= -0.5,
            x <= 0.0,
            x > 0.5,
            x >= y,
            torch.where(x > y, x, y),  # a test's result in a register
            torch.where(torch.logical_not(x > y), x, y),
            torch.full_like(x, 0.5),
            torch.maximum(x, y),
            torch.minimum(y, x),
            torch.round(x),
            torch.atan2(x, y),
            x**1.5,
            x**-1.25,
        )


def _edge_floats(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3)).to(dtype) * 3
    flat = x.view(-1)
    flat[:9] = torch.tensor(
        [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-30, -1e30, 88.0, -104.0]
    )
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_formulas_match_numpy_kernels_and_torch(dtype):
    x = _edge_floats((5, 8), dtype)
    y = torch.rand(1, 8, generator=torch.Generator().manual_seed(4)).to(dtype) + 0.5
    c = torch.rand(5, 8, generator=torch.Generator().manual_seed(5)) > 0.5
    compiled, want, got, eager = both_tiers(FloatOps(), (x, y, c))
    # one loop stores all outputs (a scalar op's constant tensor may stay outside)
    fused = sum(len(run) for run in compiled.plan.fused_runs)
    assert fused >= len(want) - 2, compiled.plan.sources[0]
    # torch's vectorized float32 GELU gives NaN at +inf on AVX-512 CPUs, its scalar path
    # (and float64) +inf = 0.5 * inf * (1 + erf(inf)): the formula's value is the oracle
    eager = list(eager)
    eager[40] = F.gelu(x.double()).to(dtype).numpy()
    for k, (g, w, e) in enumerate(zip(got, want, eager, strict=True)):
        _assert_same_floats(g, w, f"output {k}")
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6, err_msg=f"output {k} vs eager")


class HalfArithmetic(torch.nn.Module):
    """float16 operators numpy's float16 kernels round exactly once each, in a chain."""

    def forward(self, x, y, c):
        h = x * y + 1.5
        return (
            x + y,
            x - y * 2.5,
            x / y,
            torch.sqrt(x),
            torch.relu(h) / y,
            torch.clamp(h, -0.5, 0.75),
            torch.where(c, h, -x),
            -torch.abs(x) * 3.0,
            h > x,
            torch.maximum(h, x),
            torch.minimum(x, -h),
            torch.round(h * 4.0),
        )


def _edge_halves(shape: tuple[int, ...]) -> torch.Tensor:
    x = _edge_floats(shape, torch.float16)
    flat = x.view(-1)
    flat[9:14] = torch.tensor([65504.0, -6e-8, 6.1e-5, 1e-7, 3.0e4], dtype=torch.float16)
    return x


def test_float16_arithmetic_is_bit_exact_with_the_numpy_kernels():
    x = _edge_halves((5, 8))
    y = torch.rand(1, 8, generator=torch.Generator().manual_seed(4)).half() * 4 - 2
    c = torch.rand(5, 8, generator=torch.Generator().manual_seed(5)) > 0.5
    compiled, want, got, eager = both_tiers(HalfArithmetic(), (x, y, c))
    assert sum(len(run) for run in compiled.plan.fused_runs) >= 10
    for k, (g, w, e) in enumerate(zip(got, want, eager, strict=True)):
        assert g.dtype == w.dtype, k
        # the same bits, NaN aside (its payload is the platform's)
        same = (g.view(np.uint16) == w.view(np.uint16)) if g.dtype == np.float16 else g == w
        np.testing.assert_array_equal(same | (np.isnan(g) & np.isnan(w)), True, f"output {k}")
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-6, err_msg=f"output {k} vs eager")


def test_float16_formulas_match_numpy_kernels_and_torch():
    x = _edge_halves((5, 8))
    y = torch.rand(1, 8, generator=torch.Generator().manual_seed(4)).half() + 0.5
    c = torch.rand(5, 8, generator=torch.Generator().manual_seed(5)) > 0.5
    compiled, want, got, eager = both_tiers(FloatOps(), (x, y, c))
    # all but the powers (see formulas.py) and a scalar op's constant tensor or two
    assert sum(len(run) for run in compiled.plan.fused_runs) >= len(want) - 9
    finite = np.isfinite(x.numpy())
    for k, (g, w, e) in enumerate(zip(got, want, eager, strict=True)):
        assert g.dtype == w.dtype, k
        if g.dtype == np.bool_:
            np.testing.assert_array_equal(g, w, err_msg=f"output {k}")
            continue
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"output {k}")
        zeros = w == 0
        np.testing.assert_array_equal(np.signbit(g[zeros]), np.signbit(w[zeros]), f"output {k}")
        # library functions (exp, erf, ...) may round the other way once: one half ulp,
        # a few subnormal steps where a formula cancels (gelu's tail)
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=3e-7, err_msg=f"output {k}")
        # torch's float16 pow takes C's pow at infinities (pow(-inf, 0.5) is inf), where
        # the numpy kernels take sqrt: eager is compared past the NaN and infinite inputs
        g, e = g[finite], e[finite]
        np.testing.assert_allclose(g, e, rtol=2e-3, atol=1e-3, err_msg=f"output {k} vs eager")


class IntOps(torch.nn.Module):
    def forward(self, x, y, c):
        return (
            x + y,
            torch.add(x, y, alpha=3),
            x - y,
            x * y,
            x * 7,
            x + 2**31 - 1,
            -x,
            torch.abs(x),
            torch.relu(x),
            torch.clamp(x, -5, 9),
            torch.where(c, x, y),
            x.masked_fill(c, 4),
            x == y,
            x != 3,
            x < y,
            x <= y,
            x > -2,
            x >= y,
            torch.maximum(x, y),
            torch.minimum(x, y),
        )


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_formulas_are_bit_exact(dtype):
    info = torch.iinfo(dtype)
    x = torch.randint(-50, 50, (4, 6), generator=torch.Generator().manual_seed(6), dtype=dtype)
    x.view(-1)[:4] = torch.tensor([info.min, info.max, 0, -1], dtype=dtype)
    y = torch.randint(-9, 9, (4, 1), generator=torch.Generator().manual_seed(7), dtype=dtype)
    c = torch.rand(4, 6, generator=torch.Generator().manual_seed(8)) > 0.5
    compiled, want, got, eager = both_tiers(IntOps(), (x, y, c))
    assert compiled.plan.fused_runs
    for k, (g, w, e) in enumerate(zip(got, want, eager, strict=True)):
        assert g.dtype == w.dtype, k
        np.testing.assert_array_equal(g, w, err_msg=f"output {k}")
        np.testing.assert_array_equal(g, e, err_msg=f"output {k} vs eager")


class Chain(torch.nn.Module):
    """A matmul feeding a chain: the chain's output may take the matmul's dying memory."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8, generator=torch.Generator().manual_seed(9)))

    def forward(self, x):
        h = x @ self.w
        a = F.hardswish(h)  # add, clamp, mul, div: one loop
        return torch.sigmoid(a) * h + 1.0


def test_chain_intermediates_stay_in_registers_and_match():
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(10))
    compiled, want, got, eager = both_tiers(Chain(), (x,))
    runs = compiled.plan.fused_runs
    assert len(runs) == 1 and len(runs[0]) >= 6, compiled.plan.sources[0]
    _assert_same_floats(got[0], want[0], "chain")
    np.testing.assert_allclose(got[0], eager[0], rtol=1e-5, atol=1e-6)


def test_every_formula_is_exercised_here():
    # the programs above reach every operator of the table
    names = {
        "aten::add.out",
        "aten::add.Scalar_out",
        "aten::sub.out",
        "aten::sub.Scalar_out",
        "aten::rsub.Scalar_out",
        "aten::mul.out",
        "aten::mul.Scalar_out",
        "aten::div.out",
        "aten::div.Scalar_out",
    }
    ops = set()
    for module, inputs in (
        (FloatOps(), (torch.randn(2, 3), torch.rand(1, 3) + 1, torch.rand(2, 3) > 0.5)),
        (IntOps(), (torch.ones(2, 3, dtype=torch.int32),) * 2 + (torch.rand(2, 3) > 0.5,)),
        (BoolChain(), (torch.rand(2, 3) > 0.5, torch.rand(2, 3) > 0.5, torch.rand(2, 3))),
    ):
        from pyexecutorch.schema.pte import decode_pte  # noqa: PLC0415

        plan = decode_pte(program(module, inputs)).program.execution_plan[0]
        ops |= {op.qualified_name for op in plan.operators}
    missing = set(FORMULAS) - ops - (names - ops)
    assert not missing, f"formulas without a test: {sorted(missing)}"


def test_jit_false_and_environment_keep_the_numpy_tier(monkeypatch):
    buf = program(Chain(), (torch.randn(3, 8),))
    assert not Runtime.get().load_program(buf, jit=False).load_method("forward").plan.fused_runs
    monkeypatch.setenv("PYEXECUTORCH_JIT", "0")
    loaded = Runtime.get().load_program(buf)
    assert not loaded.jit
    assert not loaded.load_method("forward").plan.fused_runs
    monkeypatch.setenv("PYEXECUTORCH_JIT", "1")
    assert Runtime.get().load_program(buf).jit


def test_jit_true_without_numba_raises(monkeypatch):
    from pyexecutorch.jit import numba_env  # noqa: PLC0415
    from pyexecutorch.runtime import JitUnavailableError  # noqa: PLC0415

    monkeypatch.setattr(numba_env, "numba_module", lambda: None)
    buf = program(Chain(), (torch.randn(3, 8),))
    with pytest.raises(JitUnavailableError, match=r"jit=True needs numba"):
        Runtime.get().load_program(buf, jit=True)
    assert not Runtime.get().load_program(buf).jit  # the default falls back quietly


class Gates(torch.nn.Module):
    """Gate arithmetic on equal chunks of one matmul, as GRU and LSTM cells export."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 12, generator=torch.Generator().manual_seed(11)))

    def forward(self, x, h):
        r, z, n = (x @ self.w).chunk(3, dim=-1)
        return torch.sigmoid(r) * torch.tanh(n) + (1 - torch.sigmoid(z)) * h


def test_split_pieces_are_read_by_the_loop_and_the_split_is_skipped():
    g = torch.Generator().manual_seed(12)
    x, h = torch.randn(2, 3, 6, generator=g), torch.randn(2, 3, 4, generator=g)
    compiled, want, got, eager = both_tiers(Gates(), (x, h))
    plan = compiled.plan
    (split,) = [i for i in plan.instructions if i.operator == "aten::split_with_sizes_copy.out"]
    assert len(plan.fused_runs) == 1 and len(plan.fused_runs[0]) >= 6
    assert not split.runs, plan.sources[0]
    _assert_same_floats(got[0], want[0], "gates")
    np.testing.assert_allclose(got[0], eager[0], rtol=1e-5, atol=1e-6)


class BoolChain(torch.nn.Module):
    def forward(self, p, q, x):
        a = torch.logical_and(p, q)
        b = torch.logical_or(a, ~q) ^ torch.logical_xor(p, a)
        return (b | p) & torch.logical_not(q), a, x > 0.5


def test_a_chain_of_bool_operators_is_one_loop():
    g = torch.Generator().manual_seed(12)
    p, q = torch.rand(4, 7, generator=g) > 0.5, torch.rand(4, 7, generator=g) > 0.3
    x = torch.rand(4, 7, generator=g)
    compiled, want, got, eager = both_tiers(BoolChain(), (p, q, x))
    assert max(len(run) for run in compiled.plan.fused_runs) >= 6, compiled.plan.fused_runs
    for k, (g_, w, e) in enumerate(zip(got, want, eager, strict=True)):
        assert g_.dtype == w.dtype == np.bool_, k
        np.testing.assert_array_equal(g_, w, err_msg=f"output {k}")
        np.testing.assert_array_equal(g_, e, err_msg=f"output {k} vs eager")
