"""Delegate calls: programs lowered by the official XNNPACK partitioner (the only
backend the official runtime ships) emitted by our emitter and run in the official
runtime, and the delegate tables and segments checked directly."""

from __future__ import annotations

import copy
import types
import warnings

import numpy as np
import pytest
import torch

from pyexecutorch.exir import to_edge
from pyexecutorch.exir.emit import EmitError, emit_program
from pyexecutorch.schema import decode_pte, encode_pte
from pyexecutorch.schema.program import DataLocation, DelegateCall, JumpFalseCall, Tensor
from tests import models, official
from tests.exir._emit_support import case_execution_programs


@pytest.fixture(scope="module")
def mlp_xnnpack():
    case = models.get_case("mlp")
    methods, _ = case_execution_programs(case, partitioner=official._xnnpack_partitioner())
    return case, methods


def test_whole_program_delegate_runs_in_the_official_runtime(mlp_xnnpack):
    case, methods = mlp_xnnpack
    out = emit_program(methods, None, None)
    plan = out.program.execution_plan[0]
    calls = [i.instr_args for i in plan.chains[0].instructions]
    assert len(calls) == 1 and isinstance(calls[0], DelegateCall)
    (delegate,) = out.pte_file.program.execution_plan[0].delegates
    assert delegate.id == "XnnpackBackend"
    assert delegate.processed.location == DataLocation.SEGMENT and delegate.processed.index == 0
    assert len(out.pte_file.delegate_segments) == 1
    # The emitter's own program holds the same data inline (as the official emitter's).
    (inline,) = plan.delegates
    assert inline.processed.location == DataLocation.INLINE
    data = out.program.backend_delegate_data[inline.processed.index].data
    assert bytes(data) == bytes(out.pte_file.delegate_segments[0])
    # XNNPACK keeps its weights as named data, shared by key.
    assert out.pte_file.named_data and all(
        b.alignment >= 1 for b in out.pte_file.named_data.values()
    )
    assert out.delegate_map["forward"][0]["name"] == "XnnpackBackend"
    assert isinstance(out.debug_handle_map["forward"][0], list)
    assert out.instruction_id_to_num_outs_map["forward"][0] == 1
    pte = encode_pte(out.pte_file)
    decoded = decode_pte(pte)
    assert set(decoded.named_data) == set(out.pte_file.named_data)
    got = official.OfficialRunner(pte).run(case.inputs())
    official.assert_close(case, got, official.eager_outputs(case))


@pytest.mark.parametrize("alignment", [16, 256])
def test_inline_delegate_data_and_alignment(mlp_xnnpack, alignment):
    case, methods = mlp_xnnpack
    config = types.SimpleNamespace(extract_delegate_segments=False)
    out = emit_program(methods, None, config)
    (delegate,) = out.program.execution_plan[0].delegates
    assert delegate.processed.location == DataLocation.INLINE
    assert len(out.program.backend_delegate_data) == 1 and not out.pte_file.delegate_segments
    blob = bytes(out.program.backend_delegate_data[0].data)
    pte = encode_pte(out.pte_file, delegate_alignment=alignment)
    position = pte.find(blob)
    assert position > 0 and position % alignment == 0
    got = official.OfficialRunner(pte).run(case.inputs())
    official.assert_close(case, got, official.eager_outputs(case))


def test_partial_delegation_runs_in_the_official_runtime():
    case = models.get_case("gpt_block_sdpa")
    methods, _ = case_execution_programs(case, partitioner=official._xnnpack_partitioner())
    out = emit_program(methods, None, None)
    plan = out.program.execution_plan[0]
    kinds = {type(i.instr_args).__name__ for i in plan.chains[0].instructions}
    assert {"DelegateCall", "KernelCall"} <= kinds
    # Equal processed blobs are stored once.
    file_plan = out.pte_file.program.execution_plan[0]
    refs = {(d.processed.location, d.processed.index) for d in file_plan.delegates}
    assert len(refs) == len(out.pte_file.delegate_segments)
    got = official.OfficialRunner(encode_pte(out.pte_file)).run(case.inputs())
    official.assert_close(case, got, official.eager_outputs(case))


class _FakeLowered(torch.nn.Module):
    """Stands in for a lowered backend module (only what the emitter reads)."""

    def __init__(self, blob: bytes, named: dict[str, bytes]):
        super().__init__()
        self.backend_id = "FakeBackend"
        self.processed_bytes = blob
        self.compile_specs = [types.SimpleNamespace(key="level", value=b"\x02")]
        self.named_data_store_output = named
        self.meta = {"debug_handle_map": {1: (1, 2)}}


def _cond_with_delegate(named_a, named_b):
    """The compiled cond case with a delegate call appended to each branch."""
    official.silence_noise()
    from executorch.exir.delegate import executorch_call_delegate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        et = to_edge(models.export(models.get_case("cond"))).to_executorch()
    methods = {"forward": et.exported_program()}
    ep = methods["forward"]
    gm = ep.graph_module
    branches = [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    for k, (branch, named) in enumerate(zip(branches, (named_a, named_b), strict=True)):
        branch.lowered = _FakeLowered(b"blob", named)
        graph = branch.graph
        out = graph.output_node()
        (result,) = out.args[0]
        with graph.inserting_before(out):
            attr = graph.get_attr("lowered")
            call = graph.call_function(executorch_call_delegate, (attr, result))
        spec = copy.copy(result.meta["spec"])
        spec.mem_offset = 1024 + 64 * k
        call.meta["spec"] = spec
        call.meta["val"] = result.meta["val"]
        out.args = ((call,),)
    gm.meta["non_const_buffer_sizes"] = [0, 4096]
    return methods


def test_delegates_inside_control_flow():
    methods = _cond_with_delegate(
        {"shared": b"\x01" * 8}, {"shared": b"\x01" * 8, "other": b"\x02"}
    )
    out = emit_program(methods, None, None)
    plan = out.program.execution_plan[0]
    instrs = [i.instr_args for i in plan.chains[0].instructions]
    delegate_calls = [k for k, a in enumerate(instrs) if isinstance(a, DelegateCall)]
    jumps = [k for k, a in enumerate(instrs) if isinstance(a, JumpFalseCall)]
    assert len(delegate_calls) == 2 and delegate_calls[0] < jumps[1] < delegate_calls[1]
    assert [d.id for d in plan.delegates] == ["FakeBackend", "FakeBackend"]
    assert plan.delegates[0].compile_specs[0].key == "level"
    assert plan.delegates[0].compile_specs[0].value == b"\x02"
    # One blob for both calls, named data merged by key.
    assert len(out.pte_file.delegate_segments) == 1
    assert sorted(out.pte_file.named_data) == ["other", "shared"]
    args = instrs[delegate_calls[0]].args
    assert isinstance(plan.values[args[-1]].val, Tensor)
    assert out.delegate_map["forward"][delegate_calls[0]]["delegate_map"] == {1: (1, 2)}
    decoded = decode_pte(encode_pte(out.pte_file))
    assert bytes(decoded.delegate_segments[0]) == b"blob"
    assert bytes(decoded.named_data["shared"].data) == b"\x01" * 8


def test_conflicting_named_data_is_an_error():
    methods = _cond_with_delegate({"key": b"\x01"}, {"key": b"\x02"})
    with pytest.raises(EmitError, match="named data 'key'"):
        emit_program(methods, None, None)


def test_delegate_outputs_are_planned_values(mlp_xnnpack):
    _, methods = mlp_xnnpack
    plan = emit_program(methods, None, None).program.execution_plan[0]
    (call,) = [i.instr_args for i in plan.chains[0].instructions]
    out = plan.values[call.args[-1]].val
    assert out.allocation_info is not None and np.prod(out.sizes) > 0
