"""``Method.plan``: what loading decided, as a typed record, consistent with what runs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.export import Dim, export

from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import InstructionPlan, MethodPlan, Runtime

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")


class _Gate(torch.nn.Module):
    """A product, then an elementwise run the compiled tier fuses into one loop."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return torch.sigmoid(y) * torch.tanh(y) + y * 0.5


def _program(module: torch.nn.Module, example: tuple, dynamic_shapes=None) -> bytes:  # noqa: ANN001
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = export(module.eval(), example, dynamic_shapes=dynamic_shapes)
        return to_edge(ep).to_executorch().buffer


@pytest.fixture(scope="module")
def gate() -> tuple[torch.nn.Module, bytes]:
    torch.manual_seed(0)
    module = _Gate()
    return module, _program(module, (torch.randn(4, 16),))


def _kernel_calls(pte: bytes) -> int:
    from pyexecutorch.schema.program import KernelCall  # noqa: PLC0415
    from pyexecutorch.schema.pte import decode_pte  # noqa: PLC0415

    (plan,) = decode_pte(pte).program.execution_plan
    return sum(isinstance(i.instr_args, KernelCall) for i in plan.chains[0].instructions)


def test_compiled_plan_records_the_whole_function_and_the_fused_run(gate):
    module, pte = gate
    method = Runtime.get().load_program(pte, jit=True).load_method("forward")
    plan = method.plan
    assert isinstance(plan, MethodPlan) and plan.method == "forward"
    assert plan.tier == "compiled" and not plan.traced and not plan.shape_plans
    assert plan.whole and "def whole(" in plan.whole_source
    assert len(plan.instructions) == _kernel_calls(pte)
    assert all(isinstance(i, InstructionPlan) and i.kernel_call for i in plan.instructions)
    (run,) = plan.fused_runs
    # the run's last instruction is the loop; the others are computed by it
    assert plan.kinds()[run[-1]] == "fused"
    assert all(plan.kinds()[pc] == "skip" and not plan.instructions[pc].runs for pc in run[:-1])
    assert {"aten::sigmoid.out", "aten::tanh.out"} <= set(plan.operators(run))
    # the record is decided at load: the same after calls with other inputs
    for seed in (1, 2):
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            want = module(x).numpy()
        np.testing.assert_allclose(method.execute([x.numpy()])[0], want, rtol=1e-5, atol=1e-6)
        assert method.plan == plan


def test_numpy_plan_calls_every_kernel(gate):
    _, pte = gate
    plan = Runtime.get().load_program(pte, jit=False).load_method("forward").plan
    assert plan.tier == "numpy" and not plan.whole and plan.whole_source is None
    assert plan.fused_runs == () and plan.conv_epilogues == () and not plan.channels_last
    assert set(plan.kinds()) <= {"call", "inline", "view", "load_time_view", "folded"}
    assert len(plan.sources) == 1 and "def run(v):" in plan.sources[0]


def test_traced_plan_never_compiles_whole(gate):
    _, pte = gate
    program = Runtime.get().load_program(pte, jit=True, enable_etdump=True)
    plan = program.load_method("forward").plan
    assert plan.traced and plan.tier == "compiled" and not plan.whole
    assert plan.folded == () and plan.conv_epilogues == ()


def test_dynamic_method_lists_its_static_plans():
    torch.manual_seed(3)
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    pte = _program(module, (torch.randn(4, 8),), ({0: Dim("batch", min=1, max=6)},))
    method = Runtime.get().load_program(pte, jit=True).load_method("forward")
    assert method.plan.shape_plans and method.plan.static_plans == {}
    for size in (2, 2, 5, 5, 2):
        x = torch.randn(size, 8, generator=torch.Generator().manual_seed(size))
        with torch.no_grad():
            want = module(x).numpy()
        np.testing.assert_allclose(method.execute([x.numpy()])[0], want, rtol=1e-5, atol=1e-6)
    plan = method.plan
    # a shape's plan is built on its second call
    assert sorted(plan.static_plans) == [((2, 8),), ((5, 8),)]
    assert all(p.whole and p.tier == "compiled" for p in plan.static_plans.values())
    assert "static plan for input shapes [(2, 8)]" in plan.describe()


def test_describe_lists_decisions_and_with_verbose_the_code(gate):
    _, pte = gate
    plan = Runtime.get().load_program(pte, jit=True).load_method("forward").plan
    text = plan.describe()
    assert text.startswith("method 'forward': compiled tier, compiled whole")
    assert f"fused runs: {[list(r) for r in plan.fused_runs]}" in text
    assert "def whole(" not in text
    assert len([line for line in text.splitlines() if line.startswith("  [0:")]) == len(
        plan.instructions
    )
    verbose = plan.describe(verbose=True)
    assert "chain 0 source:" in verbose and "def whole(" in verbose
