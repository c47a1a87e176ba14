"""Inference batch norms folded into the convolution before them (runtime/batch_norm_fold.py).

A portable program keeps ``Conv2d -> BatchNorm2d`` as two kernel calls; the compiled
tier folds the batch norm into the convolution's weights at load, so that the pair
takes the XNNPACK program's path (epilogues, channels-last). Checked: which pairs fold
(both ways the planner may place the batch norm's output), which are left alone, the
plan's record, and every result against eager, the numpy tier and the official runtime
over several calls with changing inputs.
"""

from __future__ import annotations

import hashlib
import inspect

import numpy as np
import pytest
import torch
from torch import nn

from pyexecutorch.runtime import Runtime
from pyexecutorch.runtime.batch_norm_fold import fold_batch_norms
from pyexecutorch.schema.program import KernelCall
from tests import official

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

CONVOLUTION = "aten::convolution.out"
BATCH_NORM = "aten::_native_batch_norm_legit_no_training.out"


def _bn(c: int, affine: bool = True) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c, affine=affine)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
        if affine:
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    return bn


class Blocks(nn.Module):
    """A stem (convolution without bias, batch norm, ReLU6), an inverted residual whose
    linear projection's batch norm feeds the residual add, and a convolution with a bias
    before its batch norm and SiLU."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), _bn(8), nn.ReLU6())
        self.expand = nn.Sequential(nn.Conv2d(8, 24, 1, bias=False), _bn(24), nn.ReLU6())
        self.dw = nn.Sequential(
            nn.Conv2d(24, 24, 3, padding=1, groups=24, bias=False), _bn(24), nn.ReLU6()
        )
        self.project = nn.Sequential(nn.Conv2d(24, 8, 1, bias=False), _bn(8))
        self.head = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), _bn(16), nn.SiLU())

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.stem(x)
        return self.head(h + self.project(self.dw(self.expand(h))))


class ActivationChain(nn.Module):
    """Convolutions each followed by a batch norm and SiLU or hardswish, whose output the
    planner puts over the convolution's input (dead after it), then a global mean."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *(nn.Conv2d(3, 16, 3, 2, 1, bias=False), _bn(16), nn.SiLU()),
            *(nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False), _bn(16), nn.SiLU()),
            *(nn.Conv2d(16, 24, 1, bias=False), _bn(24), nn.SiLU()),
            *(nn.Conv2d(24, 24, 3, 1, 1, groups=24, bias=False), _bn(24), nn.Hardswish()),
            *(nn.Conv2d(24, 16, 1), nn.SiLU()),
        )

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.body(x).mean(dim=(2, 3))


class ExpandHardswish(nn.Module):
    """MobileNetV3's expansion: a batch norm's output planned over the convolution's
    input, read by a hardswish whose first step writes over the convolution's output."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *(nn.Conv2d(3, 16, 3, 2, 1, bias=False), _bn(16), nn.Hardswish()),
            *(nn.Conv2d(16, 48, 1, bias=False), _bn(48), nn.Hardswish()),
            *(nn.Conv2d(48, 48, 3, 1, 1, groups=48, bias=False), _bn(48), nn.Hardswish()),
            *(nn.Conv2d(48, 16, 1, bias=False), _bn(16)),
        )

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.body(x).mean(dim=(2, 3))


class Unfoldable(nn.Module):
    """A convolution whose output is read after its batch norm too, and one without a
    bias before an affine-free batch norm (nowhere to put the folded bias)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), _bn(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 1, bias=False), _bn(8, affine=False)

    def forward(self, x):  # noqa: ANN001, ANN201
        c = self.conv1(x)
        h = torch.relu(self.bn1(c)) + c
        return self.bn2(self.conv2(h))


def _module(cls: type[nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    return cls().eval()


def _pte(cls: type[nn.Module], shape: tuple[int, ...]) -> bytes:
    """The official exporter's portable program of ``cls`` (ours folds a batch norm into
    the convolution before it while exporting; the official one keeps both), cached."""

    def build() -> bytes:
        exported = torch.export.export(_module(cls), (torch.randn(shape),))
        return official.export_programs({"forward": exported})

    key = official.versions() + inspect.getsource(cls) + inspect.getsource(_bn) + str(shape)
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    return official.cached_file(official.cache_dir() / f"bn-fold-{cls.__name__}.{name}.pte", build)


def _batch_norms(pte: bytes) -> list[int]:
    """The program's batch norm instructions."""
    method = Runtime.get().load_program(pte, jit=False).load_method("forward")
    return [i.pc for i in method.plan.instructions if i.operator == BATCH_NORM]


def _check_runs(module: nn.Module, pte: bytes, shape: tuple[int, ...]):  # noqa: ANN202
    """The compiled tier against eager, the numpy tier and the official runtime over three
    calls with different inputs; returns the compiled method."""
    compiled = Runtime.get().load_program(pte, jit=True).load_method("forward")
    numpy_tier = Runtime.get().load_program(pte, jit=False).load_method("forward")
    runner = official.official_runner(pte)
    for seed in (1, 2, 3):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            expected = module(x).numpy()
        got = compiled.execute([x.numpy()])[0].numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got, numpy_tier.execute([x.numpy()])[0].numpy(), 1e-4, 1e-5)
        np.testing.assert_allclose(got, runner.run([x])[0], rtol=1e-4, atol=1e-5)
    return compiled


def test_conv_batch_norm_pairs_fold_and_match_eager_and_the_official_runtime():
    shape = (1, 3, 20, 18)
    module = _module(Blocks)
    pte = _pte(Blocks, shape)
    batch_norms = _batch_norms(pte)
    assert len(batch_norms) == 5
    method = _check_runs(module, pte, shape)
    plan = method.plan
    assert plan.folded_batch_norms == tuple(batch_norms)
    assert BATCH_NORM not in [i.operator for i in plan.instructions]
    assert plan.whole_source is not None
    # the folded convolutions then apply their ReLU6 / SiLU / residual add as they store
    assert len(plan.conv_epilogues) >= 4
    assert "batch norms folded into convolutions: " + str(batch_norms) in plan.describe()


def test_the_fold_writes_the_batch_norms_output_or_renames_it_to_the_convolutions():
    """Where the planner put the batch norm's output over the convolution's input, the
    convolution keeps its own output and the batch norm's readers read that; else the
    convolution writes the batch norm's output. The model has both."""
    pte = _pte(Blocks, (1, 3, 20, 18))
    loaded = Runtime.get().load_program(pte, jit=False).load_method("forward")._loaded
    facts = loaded.facts
    program = [i.instr_args for i in facts.plan.chains[0].instructions]
    folded = fold_batch_norms(facts)
    assert folded is not None
    into_batch_norm, kept_own = 0, 0
    for new_pc, pc in enumerate(folded.instruction_numbers):
        a = folded.plan.chains[0].instructions[new_pc].instr_args
        if not isinstance(a, KernelCall) or facts.kernels[a.op_index].name != CONVOLUTION:
            continue
        bn = program[pc + 1]
        assert facts.kernels[bn.op_index].name == BATCH_NORM
        if a.args[9] == bn.args[7]:
            into_batch_norm += 1
        else:
            assert a.args[9] == program[pc].args[9]
            # every reader of the batch norm's output reads the convolution's instead
            later = [i.instr_args.args for i in folded.plan.chains[0].instructions[new_pc + 1 :]]
            assert not any(bn.args[7] in args for args in later)
            assert any(a.args[9] in args for args in later)
            kept_own += 1
    assert into_batch_norm and kept_own
    assert into_batch_norm + kept_own == len(folded.batch_norms) == 5


def test_pairs_whose_fold_would_change_the_result_are_left_alone():
    shape = (1, 3, 12, 10)
    module = _module(Unfoldable)
    pte = _pte(Unfoldable, shape)
    batch_norms = _batch_norms(pte)
    assert len(batch_norms) == 2
    plan = _check_runs(module, pte, shape).plan
    assert plan.folded_batch_norms == ()
    assert [i.operator for i in plan.instructions].count(BATCH_NORM) == 2


def test_activations_over_a_convolutions_input_move_and_run_in_its_stores():
    """The planner puts each SiLU / hardswish output over the convolution's input: moved
    to a scratch arena at load, each convolution applies its activation as it stores."""
    shape = (1, 3, 24, 20)
    module = _module(ActivationChain)
    pte = _pte(ActivationChain, shape)
    method = _check_runs(module, pte, shape)
    loaded, plan = method._loaded, method.plan
    planned = len(loaded.plan.non_const_buffer_sizes)
    assert len(loaded.arenas) > planned  # scratch arenas after the planned ones
    assert all(a.ctypes.data % 64 == 0 for a in loaded.arenas[planned:])
    assert len(plan.folded_batch_norms) == 4
    assert len(plan.conv_epilogues) == 5
    # the channels-last convolutions apply the activation in their stores: the one fused
    # loop left is the last convolution's SiLU, on the NCHW tensor the mean reads
    assert plan.whole_source.count("_generated_fused_") == 1


def test_a_batch_norm_output_whose_bytes_are_reused_moves_to_a_scratch_arena():
    shape = (1, 3, 24, 20)
    pte = _pte(ExpandHardswish, shape)
    loaded = Runtime.get().load_program(pte, jit=False).load_method("forward")._loaded
    folded = fold_batch_norms(loaded.facts)
    assert folded is not None and len(folded.batch_norms) == 4
    assert len(folded.arenas) == 1 and folded.arenas[0].ctypes.data % 64 == 0
    method = _check_runs(_module(ExpandHardswish), pte, shape)
    assert len(method.plan.folded_batch_norms) == 4


class DynamicBatch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), _bn(8), nn.ReLU())
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.head(self.body(x))


def test_static_plans_of_a_dynamic_batch_fold_and_number_instructions_as_the_program():
    """A dynamic-shape method runs through static plans per input shapes (runtime.shape_plans):
    each folds its batch norm at its load, and its instructions keep the program's numbers."""

    def build() -> bytes:
        batch = torch.export.Dim("batch", min=1, max=4)
        example = (torch.randn(2, 3, 10, 10),)
        exported = torch.export.export(_module(DynamicBatch), example, dynamic_shapes=({0: batch},))
        return official.export_programs({"forward": exported})

    key = official.versions() + inspect.getsource(DynamicBatch) + inspect.getsource(_bn)
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    pte = official.cached_file(official.cache_dir() / f"bn-fold-dynamic.{name}.pte", build)
    module = _module(DynamicBatch)
    method = Runtime.get().load_program(pte, jit=True).load_method("forward")
    for n, batch in enumerate((2, 2, 3, 3, 1)):
        x = torch.randn(batch, 3, 10, 10, generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            expected = module(x).numpy()
        got = method.execute([x.numpy()])[0].numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    program = _batch_norms(pte)
    plans = method._loaded.shape_plans.plans
    assert len(plans) == 2  # (a shape's first call runs on the numpy tier)
    for static in plans.values():
        assert static.method_plan.folded_batch_norms
        assert not set(program) & set(static.instruction_numbers)
