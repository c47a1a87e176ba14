"""What kept an LLM's decode step (one token: sequence dimensions of size 1) from compiling
whole on the compiled tier, one piece at a time, each checked against torch eager over
several calls with changing inputs.

- A delegate's transpose that moves only a dimension of size 1 leaves its output the
  input's memory (a view): the delegate's steps bind the caller's input, and a copy
  makes the caller's output.
- A constant the program passes to a delegate (a norm's weight, a scalar) is a read-only
  view of the program's data, which numba types apart from the writable arrays the
  delegate's steps were compiled for: the whole method hands the delegate a writable copy.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from pyexecutorch.backends.xnnpack import XnnpackPartitioner
from pyexecutorch.exir import to_edge_transform_and_lower
from pyexecutorch.runtime import Runtime
from pyexecutorch.schema.pte import decode_pte


class DecodeStepPieces(torch.nn.Module):
    """A decode step's shapes: ``[1, 1, heads, dim]`` transposed to ``[1, heads, 1, dim]``,
    an RMSNorm whose weight the program passes to the delegate, and an operator XNNPACK
    leaves to the portable kernels between two delegates."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.transpose(1, 2)
        y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight
        z = torch.remainder(y, 0.75)
        return (z.transpose(1, 2) * self.weight).sum(-1)


@pytest.fixture(scope="module")
def program() -> bytes:
    model = DecodeStepPieces().eval()
    ep = torch.export.export(model, (torch.randn(1, 1, 4, 16),))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        et = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    return et.buffer


def test_the_program_has_the_pieces(program):
    plan = decode_pte(program).program.execution_plan[0]
    assert len(plan.delegates) >= 2
    assert "aten::remainder" in {op.name for op in plan.operators}


@pytest.mark.parametrize("jit", [False, True], ids=["numpy", "compiled"])
def test_compiles_whole_and_matches_eager(program, jit):
    model = DecodeStepPieces().eval()
    method = Runtime.get().load_program(program, jit=jit).load_method("forward")
    gen = torch.Generator().manual_seed(0)
    for _ in range(4):
        x = torch.randn(1, 1, 4, 16, generator=gen)
        (got,) = method.execute([x])
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    # the delegates' steps bound into one function (before: each delegate a call of its own)
    assert method.plan.whole == jit
