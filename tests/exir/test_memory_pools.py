"""Memory pools a pass chooses before planning, per-device arenas, specs that live
inside another spec's memory, and the in-place rewrite (``run_reinplace_pass``):
planned, emitted and run against eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.fx import Graph, GraphModule

from pyexecutorch.exir import ExecutorchBackendConfig, to_edge
from pyexecutorch.exir.memory_planning import (
    MemoryPlanningAlgorithmSuite,
    MemoryPlanningPass,
    apply_algo,
    greedy,
    naive,
)
from pyexecutorch.exir.pass_manager import PassManager
from pyexecutorch.exir.passes import SpecPropPass, ToOutVarPass
from pyexecutorch.exir.passes.reinplace import reinplace_pass
from pyexecutorch.exir.tensor_spec import TensorSpec
from pyexecutorch.runtime import Runtime
from pyexecutorch.schema.program import DeviceType

aten = torch.ops.aten


class _Chain(torch.nn.Module):
    def forward(self, a: torch.Tensor) -> torch.Tensor:
        b = a + a
        c = a * b
        d = c + b
        return c * d


class _AddsInPool3(MemoryPlanningPass):
    """Puts every ``add`` result in memory pool 3, the rest in pool 1."""

    def run(self, graph_module, graph_signature=None):  # noqa: ANN001, ANN201
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node.target == aten.add.out:
                node.meta["spec"].mem_id = 3
        return super().run(graph_module, graph_signature)


def _run(program: bytes, *inputs: torch.Tensor) -> list[np.ndarray]:
    method = Runtime.get().load_program(program).load_method("forward")
    return [np.asarray(o) for o in method.execute([i.numpy() for i in inputs])]


@pytest.mark.parametrize("algo", [greedy, naive])
def test_custom_pools_are_planned_apart_and_run(algo):
    suite = MemoryPlanningAlgorithmSuite(algo_list=[algo])
    et = to_edge(torch.export.export(_Chain(), (torch.ones(4),))).to_executorch(
        ExecutorchBackendConfig(memory_planning_pass=_AddsInPool3(suite, alignment=1))
    )
    gm = et.exported_program().graph_module
    sizes = gm.meta["non_const_buffer_sizes"]
    assert len(sizes) == 4 and sizes[2] == 0 and sizes[1] > 0 and sizes[3] > 0
    pools = {
        n.target: n.meta["spec"].mem_id
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target in (aten.add.out, aten.mul.out)
    }
    assert pools == {aten.add.out: 3, aten.mul.out: 1}
    # Two adds of 16 bytes alive together in pool 3 (b is read by the last add).
    assert sizes[3] == 32
    for x in (torch.arange(4.0), torch.full((4,), -2.5)):
        (got,) = _run(et.buffer, x)
        np.testing.assert_allclose(got, _Chain()(x).numpy(), rtol=1e-6)


def _planned_toy() -> tuple[GraphModule, object]:
    ep = to_edge(torch.export.export(_Chain(), (torch.ones(8),))).exported_program()
    gm = PassManager([SpecPropPass(), ToOutVarPass()])(ep.graph_module).graph_module
    return gm, ep.graph_signature


def _specs(gm: GraphModule) -> list[TensorSpec]:
    seen: dict[int, TensorSpec] = {}
    for node in gm.graph.nodes:
        spec = node.meta.get("spec")
        if isinstance(spec, TensorSpec) and not spec.const:
            seen.setdefault(id(spec), spec)
    return list(seen.values())


def test_each_device_gets_its_own_arenas():
    gm, sig = _planned_toy()
    specs = _specs(gm)
    specs[0].device, specs[0].device_index = DeviceType.CUDA, 1
    specs[1].device, specs[1].device_index = DeviceType.CUDA, 0
    sizes = apply_algo(MemoryPlanningAlgorithmSuite([greedy]), gm, 16, sig, True, True, True, True)
    # [constants, cpu, cuda:0, cuda:1]
    assert len(sizes) == 4 and sizes[0] == 0
    assert (specs[1].mem_id, specs[0].mem_id) == (2, 3)
    assert {s.mem_id for s in specs[2:]} == {1}
    devices = [
        (d.buffer_idx, d.device_type, d.device_index) for d in gm.meta["non_const_buffer_device"]
    ]
    assert devices == [(2, DeviceType.CUDA, 0), (3, DeviceType.CUDA, 1)]
    # Without per-device planning every tensor is in the one host arena.
    gm, sig = _planned_toy()
    for s in _specs(gm):
        s.device = DeviceType.CUDA
    assert len(apply_algo(MemoryPlanningAlgorithmSuite([greedy]), gm, 16, sig)) == 2
    assert "non_const_buffer_device" not in gm.meta


def test_device_arenas_and_custom_pools_do_not_mix():
    gm, sig = _planned_toy()
    specs = _specs(gm)
    specs[0].mem_id = 3
    specs[-1].device = DeviceType.CUDA
    with pytest.raises(NotImplementedError, match="custom memory pools"):
        apply_algo(
            MemoryPlanningAlgorithmSuite([greedy]), gm, 16, sig,
            enable_non_cpu_memory_planning=True,
        )  # fmt: skip


def test_a_spec_with_a_storage_base_is_placed_inside_it():
    base = TensorSpec.from_tensor(torch.empty(16, dtype=torch.uint8))
    child = TensorSpec.from_tensor(torch.empty(6, dtype=torch.uint8))
    grandchild = TensorSpec.from_tensor(torch.empty(2, dtype=torch.uint8))
    other = TensorSpec.from_tensor(torch.empty(16, dtype=torch.uint8))
    child.storage_base, child.storage_base_offset = base, 8
    grandchild.storage_base, grandchild.storage_base_offset = child, 4
    for s in (base, child, grandchild, other):
        s.lifetime = [0, 1]
        assert s.realign(1) == s.nbytes()
    graph = Graph()
    graph.output(())
    result = greedy(1, [base, child, grandchild, other], GraphModule({}, graph), None, 0)
    where = {id(s): result.spec_dict[s] for s in (base, child, grandchild, other)}
    assert where[id(child)].mem_offset == where[id(base)].mem_offset + 8
    assert where[id(grandchild)].mem_offset == where[id(base)].mem_offset + 12
    assert where[id(grandchild)].mem_obj_id == where[id(base)].mem_obj_id
    assert where[id(other)].mem_obj_id != where[id(base)].mem_obj_id
    # The two owners are alive together: 32 bytes, not 16 + 6 + 2 + 16.
    assert result.bufsizes == [0, 32]


class _Elementwise(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = a + b
        d = c * b  # c is read again below: not written in place
        e = c.sum() + d
        return d * b, e  # d dies at ``d * b``: that one is


def test_reinplace_pass_rewrites_only_safe_calls():
    ep = to_edge(torch.export.export(_Elementwise(), (torch.ones(5), torch.ones(5))))
    ep = reinplace_pass(ep.exported_program(), ops_to_inplace={aten.mul.Tensor})
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert targets.count(aten.mul_.Tensor) == 1 and targets.count(aten.mul.Tensor) == 1
    for a, b in ((torch.arange(5.0), torch.full((5,), 3.0)), (-torch.ones(5), torch.ones(5))):
        for g, e in zip(ep.module()(a, b), _Elementwise()(a, b), strict=True):
            torch.testing.assert_close(g, e)
    with pytest.raises(ValueError, match="add_.Tensor is not an in-place form of aten.mul.Tensor"):
        reinplace_pass(ep, inplace_overrides={aten.mul.Tensor: aten.add_.Tensor})


class _Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(4))

    def forward(self, i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        self.state.index_put_((i,), x, accumulate=True)
        return self.state * 2


def test_run_reinplace_pass_updates_the_buffer_in_place_over_calls():
    args = (torch.tensor([1]), torch.ones(1))
    et = to_edge(torch.export.export(_Counter(), args)).to_executorch(
        ExecutorchBackendConfig(run_reinplace_pass=True)
    )
    targets = [n.target for n in et.exported_program().graph.nodes if n.op == "call_function"]
    assert aten.index_put_.default in targets and aten.index_put.out not in targets
    eager = _Counter()
    method = Runtime.get().load_program(et.buffer).load_method("forward")
    for i, x in ((1, 2.0), (3, -1.0), (1, 0.5)):
        i, x = torch.tensor([i]), torch.tensor([x])
        (got,) = method.execute([i.numpy(), x.numpy()])
        np.testing.assert_allclose(np.asarray(got), eager(i, x).numpy())
