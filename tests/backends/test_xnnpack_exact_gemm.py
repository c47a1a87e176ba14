"""The numpy tier's XNNPACK fully connected node in the official delegate's arithmetic:
XNNPACK's float32 GEMM starts each output at its bias and adds the depth's products in
order, one fused multiply-add each (a BLAS sums otherwise: an LLM's logits came out ~10
ulps from the official's). Bit for bit against the official runtime over several calls;
past ``EXACT_GEMM_LIMIT`` the node takes numpy's product."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.backends.xnnpack import nodes
from pyexecutorch.runtime import Runtime
from tests import official

CALLS = 3


class _Linears(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.w1 = torch.nn.Parameter(torch.randn(40, 96, generator=gen) * 0.3)
        self.b1 = torch.nn.Parameter(torch.randn(40, generator=gen))
        self.w2 = torch.nn.Parameter(torch.randn(24, 40, generator=gen) * 0.3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.nn.functional.linear(x, self.w1, self.b1)  # with a bias
        return h, torch.nn.functional.linear(torch.relu(h), self.w2)  # without


def _input(call: int) -> np.ndarray:
    return np.random.default_rng(call).normal(0, 2, (7, 96)).astype(np.float32)


@pytest.fixture(scope="module")
def program() -> bytes:
    inputs = (torch.from_numpy(_input(0)),)
    return official.module_xnnpack_pte(
        "exact_gemm", "exact_gemm v1", lambda: _Linears().eval(), inputs
    )


def test_fully_connected_equals_the_official_bit_for_bit(program):
    theirs = official.OfficialRunner(program)
    ours = Runtime.get().load_program(program, jit=False).load_method("forward")
    for call in range(CALLS):
        x = _input(call)
        expected = theirs.run([x])
        got = [np.asarray(o) for o in ours.execute([x])]
        for name, g, e in zip(("with bias", "without bias"), got, expected, strict=True):
            assert np.array_equal(g.view(np.uint32), e.view(np.uint32)), (
                f"call {call}, {name}: {int((g != e).sum())} of {g.size} differ"
            )


def test_past_the_limit_the_node_takes_numpys_product(program, monkeypatch):
    monkeypatch.setattr(nodes, "EXACT_GEMM_LIMIT", 0)
    ours = Runtime.get().load_program(program, jit=False).load_method("forward")
    model = _Linears().eval()
    for call in range(CALLS):
        x = _input(call)
        want = [t.detach().numpy() for t in model(torch.from_numpy(x))]
        for g, e in zip(ours.execute([x]), want, strict=True):
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-5, atol=1e-5)


def test_sequential_fma_product_rounds_each_step_once():
    # bias 1 + 2^-23 plus the product 2^-24 - 2^-70: the float64 sum rounds to the float32
    # midpoint 1 + 2^-23 + 2^-24 (then to even, 1 + 2^-22); a fused step rounds the exact
    # sum, below the midpoint, to 1 + 2^-23.
    a = np.array([[2.0**-24 * (1 + 2.0**-23)]], np.float32)
    w = np.array([[1 - 2.0**-23]], np.float32)
    bias = np.array([1 + 2.0**-23], np.float32)
    twice = np.float32(np.float64(a[0, 0]) * np.float64(w[0, 0]) + np.float64(bias[0]))
    assert twice == np.float32(1 + 2.0**-22)
    got = nodes.sequential_fma_product(a, w, bias)
    assert got.dtype == np.float32
    assert got[0, 0] == np.float32(1 + 2.0**-23)
