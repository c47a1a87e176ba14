"""constant_prop_pass: constant subexpressions become constant inputs, what nothing
reads leaves the program, and the program still computes what eager does; an edge
program holding dim-order operators runs through ``ExportedProgram.module()``."""

from __future__ import annotations

import pytest
import torch
from torch.export.graph_signature import InputKind

from pyexecutorch.exir import to_edge
from pyexecutorch.exir.passes.constant_prop_pass import constant_prop_pass
from tests.isolated import in_own_process


class _Weights(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.arange(6.0).reshape(1, 2, 3))
        self.b = torch.nn.Parameter(torch.ones(1, 2, 3))  # read only with x: stays

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = torch.cat([self.a, self.a * 2]).expand(2, 2, 3)  # zero strides
        return c + x + self.b, torch.rand(2, 2, 3) * 0 + c.sum()


def test_constant_subexpressions_become_constant_inputs():
    ep = torch.export.export(_Weights(), (torch.zeros(2, 2, 3),))
    before = ep.module()
    new = constant_prop_pass(ep)
    kinds = [(s.kind, s.arg.name) for s in new.graph_signature.input_specs]
    assert kinds == [
        (InputKind.PARAMETER, "p_b"),
        (InputKind.CONSTANT_TENSOR, "_prop_tensor_constant0"),
        (InputKind.CONSTANT_TENSOR, "_prop_tensor_constant1"),
        (InputKind.USER_INPUT, "x"),
    ]
    assert set(new.state_dict) == {"b"}
    assert all(t.is_contiguous() for t in new.constants.values())
    targets = {n.target for n in new.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.cat.default not in targets
    assert torch.ops.aten.rand.default in targets  # random draws stay computed
    after = new.module()
    for x in (torch.randn(2, 2, 3), torch.full((2, 2, 3), -3.0)):
        for got, want in zip(after(x), before(x), strict=True):
            torch.testing.assert_close(got, want)


def test_quantization_steps_are_left_for_the_backend():
    import torch.ao.quantization.fx._decomposed  # noqa: F401, PLC0415 - registers the operators

    class Dequant(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("w", torch.ones(3, 3, dtype=torch.int8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            qd = torch.ops.quantized_decomposed.dequantize_per_tensor.default
            return x @ qd(self.w, 0.5, 1, -128, 127, torch.int8)

    ep = constant_prop_pass(torch.export.export(Dequant(), (torch.ones(2, 3),)))
    assert not ep.constants
    x = torch.randn(2, 3)
    torch.testing.assert_close(ep.module()(x), x @ torch.zeros(3, 3))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
@in_own_process  # the dim-order operators torch holds depend on what the process imported
def test_edge_dim_order_operators_run_in_module(dtype):
    class Cast(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.to(dtype).clone() * 2

    program = to_edge(torch.export.export(Cast(), (torch.ones(3),))).exported_program()
    assert "dim_order_ops__to_dim_order_copy_default" in program.graph_module.code
    for x in (torch.arange(3.0), -torch.ones(3)):
        torch.testing.assert_close(program.module()(x), Cast()(x))
