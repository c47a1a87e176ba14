"""Passes behaving as official scripts expect: ExportPass keeps the graph module's
meta, to_edge drops a dequantize -> quantize pair only where that changes no value,
view passes run on graphs whose only specs are the inputs'."""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers quantized_decomposed

from pyexecutorch.exir import memory, to_edge
from pyexecutorch.exir.pass_base import ExportPass
from pyexecutorch.exir.passes.executorch_passes import ReplaceViewCopyWithViewPass
from pyexecutorch.exir.passes.normalize_view_copy_base_pass import NormalizeViewCopyBasePass
from pyexecutorch.exir.tensor_spec import TensorSpec

QD = torch.ops.quantized_decomposed


def test_export_pass_keeps_the_graph_module_meta():
    class Add(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    edge = to_edge(torch.export.export(Add(), (torch.ones(2),)))
    edge.exported_program().graph_module.meta["custom"] = {"k": [1]}
    after = edge.transform([ExportPass()]).exported_program()
    assert after.graph_module.meta["custom"] == {"k": [1]}
    torch.testing.assert_close(after.module()(torch.arange(2.0)), torch.tensor([1.0, 2.0]))


class _DqQ(torch.nn.Module):
    def __init__(self, qmin: int) -> None:
        super().__init__()
        self.qmin = qmin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = (0.5, 0, self.qmin, 127, torch.int8)
        return QD.quantize_per_tensor.default(QD.dequantize_per_tensor.default(x, *params), *params)


@pytest.mark.parametrize(("qmin", "folded"), [(-128, True), (-127, False)])
def test_a_dequantize_quantize_pair_goes_only_where_it_changes_nothing(qmin, folded):
    x = torch.tensor([-128, -5, 0, 127], dtype=torch.int8)
    program = to_edge(torch.export.export(_DqQ(qmin), (x,))).exported_program()
    names = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert (names == []) is folded
    # -128 is clamped to -127 by a range starting at -127: that pair must stay.
    torch.testing.assert_close(program.module()(x), _DqQ(qmin)(x))


class _Views(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.aten.view_copy.default(x, [2, 3])
        y = torch.ops.aten.view_copy.default(y, [3, 2])
        return torch.ops.aten.view_copy.default(y, [6]) + 1


def test_view_passes_on_a_graph_with_input_specs_only():
    gm = torch.export.export(_Views(), (torch.ones(6),)).graph_module
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            node.meta["spec"] = TensorSpec.from_tensor(torch.empty(6))
    gm = NormalizeViewCopyBasePass()(gm).graph_module
    views = [n for n in gm.graph.nodes if n.target == torch.ops.aten.view_copy.default]
    assert len(views) == 3  # rebased onto x, none removed
    assert [v.args[0].op for v in views] == ["placeholder"] * 3
    gm = ReplaceViewCopyWithViewPass()(gm).graph_module
    assert "aten.view_copy" not in gm.code and gm.code.count("memory_view(x, [6])") == 1
    assert sum(n.target is memory.view for n in gm.graph.nodes) == 1
