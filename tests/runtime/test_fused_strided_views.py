"""A fused elementwise run over strided 4-D views, in a method that runs instruction by
instruction on the compiled tier.

The rotary embedding of LLM programs reads the even and odd halves of the last dimension
as stride-2 views. A 4-D operand that is not C-contiguous is taken for channels-last and
the fused loop is reordered to run in memory order (``FusedCall.in_memory_order``); the
generated line once passed that loop the arrays in their logical order, so it read the
wrong elements (errors of 4-10 here; official export_llama programs went wrong from the
second position). A method compiled whole was right: its steps took the transposed arrays.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime


class RotaryThenArctangent(torch.nn.Module):
    """export_llama's rotary step; the arctangent (no compiled step) keeps the method
    instruction by instruction, where the line form of the fused call runs."""

    def forward(self, q, cos, sin):  # noqa: ANN001, ANN201
        pairs = q.reshape(q.shape[:-1] + (-1, 2))
        even, odd = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
        return rotated.flatten(3), torch.atan(q)


def test_fused_run_on_strided_views_reads_the_right_elements():
    shapes = [(1, 3, 4, 8), (1, 3, 1, 4), (1, 3, 1, 4)]
    example = tuple(torch.randn(s) for s in shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = to_edge(torch.export.export(RotaryThenArctangent(), example)).to_executorch()
    method = Runtime.get().load_program(program.buffer, jit=True).load_method("forward")
    assert method.plan.whole_source is None
    generator = torch.Generator().manual_seed(7)
    for _ in range(3):
        inputs = [torch.randn(s, generator=generator) for s in shapes]
        got = method.execute([x.numpy() for x in inputs])
        want = RotaryThenArctangent()(*inputs)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-6, atol=1e-6)
