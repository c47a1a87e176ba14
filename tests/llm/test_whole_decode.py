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

from tests import official

official.silence_noise()
# The official llama:: kernels (for the official runtime), loaded before our exporter
# registers its operators: the other order aborts the process.
import executorch.extension.llm.custom_ops.custom_ops  # noqa: E402, F401

from pyexecutorch.backends.xnnpack import XnnpackPartitioner  # noqa: E402
from pyexecutorch.exir import to_edge_transform_and_lower  # noqa: E402
from pyexecutorch.runtime import Runtime  # noqa: E402
from pyexecutorch.schema.pte import decode_pte  # noqa: E402


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


def test_our_export_decodes_whole_over_changing_positions(tmp_path):
    """Our export_llm program (XNNPACK, dynamic length, forward(tokens, input_pos)): its
    decode step's static plan compiles whole (input_pos + arange folded where the decode
    length fixes it, the delegates bound), and each call's logits equal the official
    runtime's on the same file as the positions move."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from pyexecutorch.extension.llm.export import export_llm

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        config = LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=256,
        )
        hf = LlamaForCausalLM(config).eval()
    pte = export_llm(hf, max_seq_length=32, xnnpack=True, progress=False).buffer
    theirs = official.OfficialRunner(pte)
    method = Runtime.get().load_program(pte, jit=True).load_method("forward")
    prompt = [3, 17, 42, 99, 150]
    calls = [(prompt, 0)] + [([7 + 11 * k], len(prompt) + k) for k in range(8)]
    for tokens, start in calls:
        inputs = [torch.tensor([tokens]), torch.tensor([start])]
        (want,) = theirs.run(inputs)
        got = np.asarray(method.execute(inputs)[0])
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, err_msg=f"{tokens} at {start}")
    decode = [p for key, p in method.plan.static_plans.items() if key[0][-1] == 1]
    assert decode and decode[0].whole
