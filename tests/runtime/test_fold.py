"""Kernel calls on constants run once at load; views of their outputs follow them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.kernels.registry import facts_of
from pyexecutorch.runtime import Runtime
from tests import models, official
from tests.runtime._suite import assert_program_matches_eager


def _operators_run(method) -> list[str]:  # noqa: ANN001
    """Names of the operators the compiled code still calls."""
    return [i.operator for i in method.plan.instructions if i.kernel_call and i.runs]


def _official_method(name: str):  # noqa: ANN202
    case = models.CASES_BY_NAME[name]
    program = Runtime.get().load_program(official.official_export(case))
    return case, program, program.load_method("forward")


def test_weight_permutes_of_official_programs_run_at_load():
    case, program, method = _official_method("mlp")
    plan_ops = [i.operator for i in method.plan.instructions if i.kernel_call]
    assert "aten::permute_copy.out" in plan_ops  # the official program permutes its weights
    assert "aten::permute_copy.out" not in _operators_run(method)
    assert_program_matches_eager(program, case)


@pytest.mark.parametrize("name", ["gpt_block_sdpa", "transformer_encoder", "kv_cache"])
def test_views_of_folded_values_read_the_folded_data(name):
    # These official programs view (no instruction: shared planned memory) the
    # outputs of calls on constants, e.g. an expanded permuted weight before bmm.
    case, program, method = _official_method(name)
    assert len(_operators_run(method)) < sum(i.kernel_call for i in method.plan.instructions)
    assert_program_matches_eager(program, case)


def test_folded_constants_are_read_only():
    _, _, method = _official_method("mlp")
    loaded = method._loaded
    folded = [
        j for j in loaded.constant_values if loaded.plan.values[j].val.allocation_info is not None
    ]
    assert folded and all(not loaded.values[j].flags.writeable for j in folded)


class _Noisy(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand(64)  # rand's arguments are all constants


def test_random_operators_are_never_folded():
    case = models.ModelCase("noisy", _Noisy, lambda: (torch.zeros(64),))
    program = Runtime.get().load_program(official.official_export(case, use_cache=False))
    method = program.load_method("forward")
    assert "aten::rand.out" in _operators_run(method)
    x = np.zeros(64, np.float32)
    first = np.asarray(method.execute([x])[0])
    second = np.asarray(method.execute([x])[0])
    assert not np.array_equal(first, second)
    assert facts_of("aten::rand.out").impure


class _ConstantOnly(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        return x + 1, self.w.t() * 2  # the second output is computed from constants only


def test_an_output_computed_from_constants_is_a_fresh_array_each_run():
    case = models.ModelCase("constant_only", _ConstantOnly, lambda: (torch.randn(2),))
    program = Runtime.get().load_program(official.official_export(case, use_cache=False))
    method = program.load_method("forward")
    first = method.execute([np.ones(2, np.float32)], clone_outputs=False)[1]
    np.asarray(first)[...] = 0  # the caller may write into a returned view
    second = method.execute([np.ones(2, np.float32)], clone_outputs=False)[1]
    with torch.no_grad():
        expected = case.make().w.t() * 2
    np.testing.assert_allclose(np.asarray(second), expected.numpy(), rtol=1e-6)
