"""The program-manager API (official names) and the shape of its graphs."""

from __future__ import annotations

import copy
import io
import pickle

import numpy as np
import pytest
import torch
from torch import nn

from pyexecutorch.exir import (
    EdgeCompileConfig,
    ExecutorchBackendConfig,
    MemoryPlanningPass,
    TensorSpec,
    exir_ops,
    memory,
    to_edge,
    to_edge_transform_and_lower,
    to_edge_with_preserved_ops,
)
from pyexecutorch.exir.memory_planning import naive
from tests import models, official

aten = torch.ops.aten


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        y = self.fc(x).relu().view(2, 2, 2)
        return y.to(torch.float16) + 1, y.sum(dim=0)


def _model() -> Small:
    torch.manual_seed(0)
    return Small().eval()


def _export():
    return torch.export.export(_model(), (torch.randn(2, 6),))


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_exir_ops_namespace_edge_operators():
    from pyexecutorch.exir.dialects.edge._ops import EdgeOpOverload, aten_of

    edge_add = exir_ops.edge.aten.add.Tensor
    assert isinstance(edge_add, EdgeOpOverload) and edge_add is exir_ops.edge.aten.add.Tensor
    # equal to torch's operator, with its hash: tables keyed by either find both
    assert edge_add == aten.add.Tensor and aten.add.Tensor == edge_add
    assert {aten.add.Tensor: 1}[edge_add] == 1 and edge_add in {aten.add.Tensor}
    assert edge_add != aten.add.Scalar and aten_of(edge_add) is aten.add.Tensor
    assert edge_add.__name__ == "aten.add.Tensor" and edge_add.name() == "aten::add.Tensor"
    assert edge_add._op is aten.add.Tensor and edge_add.to_out_variant() is aten.add.out
    torch.testing.assert_close(edge_add(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))
    assert copy.deepcopy(edge_add) is edge_add and pickle.loads(pickle.dumps(edge_add)) is edge_add
    op = exir_ops.edge.dim_order_ops._to_dim_order_copy.default
    assert op._schema.name == "dim_order_ops::_to_dim_order_copy"
    assert op._overloadpacket.out._schema.overload_name == "out"


def test_a_traced_forward_may_be_the_first_to_touch_an_edge_operator():
    # Fresh namespaces: the forward below is the first to reach each operator through
    # them, under dynamo (strict export), which refuses to trace building a packet.
    import torch.ao.quantization.fx._decomposed  # noqa: F401, PLC0415 - registers the operators

    from pyexecutorch.exir.dialects._ops import _Ops  # noqa: PLC0415

    fresh = _Ops()

    class Dequantized(nn.Module):
        def forward(self, x):
            edge = fresh.edge
            y = edge.quantized_decomposed.dequantize_per_tensor.default(
                x, 0.5, 0, -127, 127, torch.int8
            )
            return edge.aten.relu.default(y)

    x = torch.tensor([[-4, 3, 0], [7, -1, 2]], dtype=torch.int8)
    ep = torch.export.export(Dequantized(), (x,), strict=True)
    assert [str(t) for t in _targets(ep.graph_module)] == [
        "quantized_decomposed.dequantize_per_tensor.default",
        "aten.relu.default",
    ]
    torch.testing.assert_close(ep.module()(x), (x.float() * 0.5).relu())
    # the namespaces made while tracing are the ones an eager lookup finds
    assert fresh.edge.aten.relu.default is exir_ops.edge.aten.relu.default


def test_edge_dialect_graph():
    ep = _export()
    before = ep.graph_module.code
    edge = to_edge(ep)
    assert ep.graph_module.code == before  # the input program is left alone
    assert edge.methods == {"forward"} and edge.config_methods == set()
    targets = _targets(edge.exported_program().graph_module)
    assert aten.view.default not in targets and aten.view_copy.default in targets
    assert exir_ops.edge.dim_order_ops._to_dim_order_copy.default in targets
    assert aten._to_copy.default not in targets
    skip = to_edge(ep, compile_config=EdgeCompileConfig(_skip_dim_order=True))
    assert aten._to_copy.default in _targets(skip.exported_program().graph_module)
    nodes = edge.exported_program().graph_module.graph.nodes
    assert all("debug_handle" in n.meta for n in nodes if n.op == "call_function")


def test_executorch_dialect_graph():
    et = to_edge(_export()).to_executorch()
    gm = et.exported_program().graph_module
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            schema = node.target._schema
            assert any(a.is_out for a in schema.arguments) or schema.is_mutable, node.target
            for a in schema.arguments:
                if a.is_out:
                    assert node.kwargs[a.name].target is memory.alloc
        spec = node.meta.get("spec")
        if isinstance(node.meta.get("val"), torch.Tensor) and node.op != "output":
            assert isinstance(spec, TensorSpec), node
            assert spec.const or spec.mem_id == 1
    assert memory.view in _targets(gm)  # the reshape became a free view
    assert gm.meta["non_const_buffer_sizes"][0] == 0


def test_methods_and_constant_methods():
    case = models.get_case("multi_method")
    edge = to_edge(models.export(case), constant_methods=case.constant_methods)
    assert edge.methods == {"forward", "decode"}
    assert edge.config_methods == set(case.constant_methods)
    et = edge.to_executorch()
    assert et.methods == {"forward", "decode"} and et.config_methods == set(case.constant_methods)
    names = [p.name for p in et.executorch_program.execution_plan]
    assert set(names) == {"forward", "decode", *case.constant_methods}
    with pytest.raises(KeyError, match="decode"):
        edge.exported_program("nope")


def test_transform_list_and_dict():
    ep = _export()
    edge = to_edge(ep)

    def relu_to_sigmoid(gm):
        for node in gm.graph.nodes:
            if node.target == exir_ops.edge.aten.relu.default:  # an edge operator, equal to ATen's
                node.target = aten.sigmoid.default
        gm.recompile()

    for passes in ([relu_to_sigmoid], {"forward": [relu_to_sigmoid]}):
        new = edge.transform(passes)
        assert aten.sigmoid.default in _targets(new.exported_program().graph_module)
        assert aten.relu.default in _targets(edge.exported_program().graph_module)  # unchanged
        x = torch.randn(2, 6)
        got = official.OfficialRunner(new.to_executorch().buffer).run((x,))
        with torch.no_grad():
            y = torch.sigmoid(_model().fc(x)).view(2, 2, 2)
        torch.testing.assert_close(torch.from_numpy(got[1]), y.sum(dim=0))


def test_to_edge_transform_and_lower_and_preserved_ops():
    ep = _export()
    seen = []
    edge = to_edge_transform_and_lower(ep, transform_passes=[lambda gm: seen.append(gm)])
    assert seen and edge.methods == {"forward"}
    kept = to_edge_with_preserved_ops(ep, preserve_ops=(aten.linear.default,))
    assert aten.linear.default in _targets(kept.exported_program().graph_module)


def test_to_executorch_twice_and_configs():
    edge = to_edge(_export())
    a = edge.to_executorch()
    b = edge.to_executorch(ExecutorchBackendConfig(remove_view_copy=False))
    assert memory.view not in _targets(b.exported_program().graph_module)
    c = edge.to_executorch(
        ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(memory_planning_algo=naive))
    )
    sizes = [p.exported_program().graph_module.meta["non_const_buffer_sizes"][1] for p in (a, c)]
    assert sizes[0] <= sizes[1]
    x = torch.randn(2, 6)
    outs = [official.OfficialRunner(p.buffer).run((x,)) for p in (a, b, c)]
    for o in outs[1:]:
        for u, v in zip(outs[0], o, strict=True):
            assert (u == v).all()


def test_to_executorch_shows_the_plan_on_the_callers_manager():
    # As the official manager, which plans its programs in place: exported_program() is
    # the planned program after to_executorch (and an ETRecord made afterwards records it),
    # while lowering again and transforming still start from the edge program as it was.
    from pyexecutorch.exir.etrecord import _edge_of

    edge = to_edge(_export())
    before = edge.exported_program()
    edge_code = before.graph_module.code
    config = ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(memory_planning_algo=naive)
    )
    first = edge.to_executorch(config)
    shown = edge.exported_program()
    assert shown is first.exported_program() and _edge_of(edge, "edge_dialect_program") is shown
    assert (
        shown.graph_module.meta["non_const_buffer_sizes"]
        == first.executorch_program.execution_plan[0].non_const_buffer_sizes
    )
    planned = [n for n in shown.graph_module.graph.nodes if n.target is aten.addmm.out]
    assert planned and planned[0].meta["spec"].mem_offset is not None
    assert before.graph_module.code == edge_code
    assert aten.addmm.out not in _targets(before.graph_module)
    again = edge.to_executorch(config)
    assert again.buffer == first.buffer
    assert edge.exported_program() is again.exported_program()
    transformed = edge.transform([lambda gm: None])
    assert transformed.exported_program().graph_module.code == edge_code
    x = torch.randn(2, 6)
    for a, b in zip(official.OfficialRunner(first.buffer).run((x,)), _model()(x), strict=True):
        assert np.allclose(a, b.detach().numpy(), atol=1e-6)


def test_edge_graph_outputs_carry_their_values():
    class Split(nn.Module):
        def forward(self, x):
            return torch.split(x, 10)

    gm = to_edge(torch.export.export(Split(), (torch.randn(10),))).exported_program().graph_module
    out = gm.graph.output_node()
    assert isinstance(out.meta["val"], tuple) and len(out.meta["val"]) == 1
    assert out.meta["val"][0].shape == (10,)


def test_eval_upper_bound_falls_back_to_the_example():
    from torch.export import Dim

    from pyexecutorch.exir.sym_util import eval_shape_upper_bound, eval_upper_bound

    linear = nn.Linear(6, 4)
    bounded = torch.export.export(
        linear, (torch.randn(3, 6),), dynamic_shapes=({0: Dim("b", max=9)},)
    )
    unbounded = torch.export.export(linear, (torch.randn(3, 6),), dynamic_shapes=({0: Dim("b")},))
    for ep, bound in ((bounded, 9), (unbounded, 3)):
        x = [n for n in ep.graph.nodes if n.op == "placeholder"][-1]
        shape = x.meta["val"].shape
        assert isinstance(shape[0], torch.SymInt)
        assert eval_upper_bound(shape[0]) == bound
        assert eval_shape_upper_bound(shape) == [bound, 6]
    assert eval_upper_bound(7) == 7


def test_buffer_write_to_file_and_dump(tmp_path):
    et = to_edge(_export()).to_executorch()
    f = io.BytesIO()
    et.write_to_file(f)
    assert f.getvalue() == et.buffer
    text = io.StringIO()
    et.dump_executorch_program(out=text)
    assert "aten::addmm" in text.getvalue() or "addmm" in text.getvalue()
    verbose = io.StringIO()
    et.dump_executorch_program(verbose=True, out=verbose)
    assert len(verbose.getvalue()) >= len(text.getvalue())
    assert et.debug_handle_map["forward"]
    assert et.delegate_map["forward"] == {}


def test_emit_stacktrace():
    et = to_edge(_export()).to_executorch(ExecutorchBackendConfig(emit_stacktrace=True))
    chain = et.executorch_program.execution_plan[0].chains[0]
    assert chain.stacktrace and any(fl.items for fl in chain.stacktrace)


def test_external_constants(tmp_path):
    et = to_edge(_export()).to_executorch(ExecutorchBackendConfig(external_constants=True))
    inline = to_edge(_export()).to_executorch()
    assert et.data_files
    # Every weight (the permuted fc.weight included) leaves the .pte.
    weight = _model().fc.weight.detach().numpy()
    for layout in (weight, weight.T):
        data = np.ascontiguousarray(layout).tobytes()
        assert data in inline.buffer or layout is weight
        assert data not in et.buffer
    et.write_tensor_data_to_file(str(tmp_path))
    assert list(tmp_path.glob("*.ptd"))
