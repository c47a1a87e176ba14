"""Errors a person can act on: each names the operator (or input), the user's
source line, and what to do."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.export import Dim

from pyexecutorch.exir import (
    DynamicShapeError,
    EdgeCompileConfig,
    ExecutorchBackendConfig,
    IRValidityError,
    MissingKernelError,
    MissingOutVariantError,
    to_edge,
)
from pyexecutorch.exir.passes.ir_validity import check_ir_validity

THIS_FILE = "test_compile_errors.py"


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x) * 2  # the line the error must point at


def test_non_core_op_is_named_with_its_source_line():
    ep = torch.export.export(Linear(), (torch.randn(2, 4),))  # not decomposed: aten.linear stays
    with pytest.raises(IRValidityError) as info:
        check_ir_validity(ep.graph_module)
    msg = str(info.value)
    assert "aten.linear.default" in msg
    assert THIS_FILE in msg and "self.fc(x) * 2" in msg
    assert "_core_aten_ops_exception_list" in msg and "_check_ir_validity=False" in msg
    check_ir_validity(ep.graph_module, [torch.ops.aten.linear.default])  # excepted: fine


def test_transform_reverifies_ir():
    ep = torch.export.export(Linear(), (torch.randn(2, 4),))
    edge = to_edge(ep)

    def to_non_core(gm):
        for node in gm.graph.nodes:
            if node.target == torch.ops.aten.mul.Tensor:  # an edge operator equals ATen's
                node.target = torch.ops.aten.rrelu.default
                node.args = node.args[:1]
        gm.recompile()

    with pytest.raises(IRValidityError, match="aten.rrelu.default"):
        edge.transform([to_non_core])
    relaxed = EdgeCompileConfig(_core_aten_ops_exception_list=[torch.ops.aten.rrelu.default])
    edge.transform([to_non_core], compile_config=relaxed)  # accepted


@torch.library.custom_op("pyet_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


class UsesCustomOp(nn.Module):
    def forward(self, x):
        return twice(x) + 1  # custom op without an out variant


def test_missing_out_variant_names_op_and_line():
    ep = torch.export.export(UsesCustomOp(), (torch.randn(3),))
    edge = to_edge(ep)
    with pytest.raises(MissingOutVariantError) as info:
        edge.to_executorch()
    msg = str(info.value)
    assert "pyet_test.twice.default" in msg
    assert THIS_FILE in msg and "twice(x) + 1" in msg
    assert "transform" in msg and "backend" in msg


class Dyn(nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1


def test_dynamic_dim_without_upper_bound_is_planned_at_the_example():
    # As the official exporter: torch bounds the size by int_oo, the plan takes the
    # example's size (with a warning), and the runtime refuses anything larger.
    from pyexecutorch.portable_lib import _load_for_executorch_from_buffer

    ep = torch.export.export(Dyn(), (torch.randn(4, 3),), dynamic_shapes=({0: Dim("batch")},))
    with pytest.warns(UserWarning, match=r"no upper bound: .* example's size 4.*max="):
        et = to_edge(ep).to_executorch()
    plan = et.executorch_program.execution_plan[0]
    assert list(plan.values[plan.inputs[0]].val.sizes) == [4, 3]
    module = _load_for_executorch_from_buffer(et.buffer)
    for rows in (4, 1, 3):
        x = torch.randn(rows, 3)
        assert torch.equal(module.forward((x,))[0], Dyn()(x))
    with pytest.raises(RuntimeError, match=r"size 5 in dimension 0, above its upper bound 4"):
        module.forward((torch.randn(5, 3),))


def test_unbacked_size_without_upper_bound():
    class OnesOfLength(nn.Module):
        def forward(self, n):
            length = n.item()
            torch._check(length >= 0)
            return torch.ones(length) + 1

    ep = torch.export.export(OnesOfLength(), (torch.tensor(3),))
    with pytest.raises(DynamicShapeError) as info:
        to_edge(ep).to_executorch()
    msg = str(info.value)
    assert "no upper bound" in msg and "Dim(" in msg and "torch._check" in msg
    assert "ones" in msg or "add" in msg


def test_dynamic_dim_with_upper_bound_is_planned_at_the_bound():
    ep = torch.export.export(
        Dyn(), (torch.randn(4, 3),), dynamic_shapes=({0: Dim("batch", max=10)},)
    )
    et = to_edge(ep).to_executorch()
    from pyexecutorch.schema import TensorShapeDynamism

    plan = et.executorch_program.execution_plan[0]
    x = plan.values[plan.inputs[0]].val
    assert list(x.sizes) == [10, 3]
    assert x.shape_dynamism == TensorShapeDynamism.DYNAMIC_BOUND
    assert plan.non_const_buffer_sizes[1] >= 10 * 3 * 4


def test_kernel_check_warns_and_errors(monkeypatch):
    import pyexecutorch.kernels

    real = pyexecutorch.kernels.operator_names()
    monkeypatch.setattr(
        pyexecutorch.kernels, "operator_names", lambda: [n for n in real if "relu" not in n]
    )
    ep = torch.export.export(Dyn(), (torch.randn(4, 3),))
    edge = to_edge(ep)
    with pytest.warns(UserWarning, match=r"aten::relu\.out"):
        edge.to_executorch()
    with pytest.raises(MissingKernelError, match=r"aten::relu\.out") as info:
        edge.to_executorch(ExecutorchBackendConfig(check_kernels=True))
    assert THIS_FILE in str(info.value)


def test_no_kernel_warning_when_all_present(monkeypatch):
    import pyexecutorch.kernels

    monkeypatch.setattr(
        pyexecutorch.kernels, "operator_names", lambda: ["aten::relu.out", "aten::add.out"]
    )
    ep = torch.export.export(Dyn(), (torch.randn(4, 3),))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        to_edge(ep).to_executorch(ExecutorchBackendConfig(check_kernels=True))
