"""The official devtools module paths pyexecutorch provides for ported code: the
ETDump dataclasses and codec, the Inspector's helper modules, the operator graph."""

from __future__ import annotations

import pytest
import torch

from pyexecutorch.devtools.debug_format.base_schema import OperatorGraph, OperatorNode
from pyexecutorch.devtools.debug_format.et_schema import FXOperatorGraph
from pyexecutorch.devtools.etdump import schema_flatcc as flatcc
from pyexecutorch.devtools.etdump.serialize import (
    deserialize_from_etdump_flatcc,
    serialize_to_etdump_flatcc,
)
from pyexecutorch.devtools.inspector import Inspector
from pyexecutorch.devtools.inspector._inspector import (
    EventSignature,
    InstructionEvent,
    ProfileEventSignature,
)
from pyexecutorch.devtools.inspector._inspector_utils import (
    calculate_snr,
    create_debug_handle_to_op_node_mapping,
    map_runtime_aot_intermediate_outputs,
    merge_runtime_overlapping_debug_handles,
)
from pyexecutorch.schema.errors import FormatError


def _profile(name: str, instruction: int, start: int, end: int, did: int = -1) -> flatcc.Event:
    event = flatcc.ProfileEvent(name, 0, instruction, did, "", b"", start, end)
    return flatcc.Event(profile_event=event, allocation_event=None, debug_event=None)


def _etdump(runs: list[list[flatcc.Event]]) -> flatcc.ETDumpFlatCC:
    return flatcc.ETDumpFlatCC(
        version=0,
        run_data=[
            flatcc.RunData(name="Execute", bundled_input_index=-1, allocators=[], events=r)
            for r in runs
        ],
    )


def test_etdump_codec_round_trips_and_our_inspector_reads_its_bytes(tmp_path):
    runs = [
        [_profile("native_call_add.out", 0, 10, 30), _profile("DELEGATE_CALL", 1, 30, 70, did=7)],
        [
            _profile("native_call_add.out", 0, 100, 150),
            _profile("DELEGATE_CALL", 1, 150, 160, did=7),
        ],
    ]
    etdump = _etdump(runs)
    data = serialize_to_etdump_flatcc(etdump)
    assert deserialize_from_etdump_flatcc(data, size_prefixed=False) == etdump
    (tmp_path / "t.etdp").write_bytes(data)
    inspector = Inspector(etdump_path=str(tmp_path / "t.etdp"))
    [block] = inspector.event_blocks  # both runs have the same events: one block
    add = next(e for e in block.events if e.name == "native_call_add.out")
    assert add.perf_data.raw == pytest.approx([20e-6, 50e-6])  # ticks in ns, shown in ms
    with pytest.raises(FormatError, match="size prefix"):
        deserialize_from_etdump_flatcc(data[:3] + b"\xff" + data[4:])
    with pytest.raises(TypeError, match="takes an ETDumpFlatCC"):
        serialize_to_etdump_flatcc(runs)


def test_event_signatures_tell_instructions_and_delegate_events_apart():
    events = [_profile("a", 0, 0, 1), _profile("b", 1, 1, 2, did=3), _profile("a", 0, 2, 3)]
    instruction_events = InstructionEvent.gen_from_events(events)
    assert [len(e.profile_events) for e in instruction_events] == [2, 1]
    pairs = EventSignature.gen_from_instruction_event(instruction_events[1])
    assert [s for s, _ in pairs] == [EventSignature(1, ProfileEventSignature("b", 1, 3, None))]


def test_runtime_outputs_merge_and_map_to_aot_outputs_by_debug_handle():
    t = torch.arange(4.0)
    merged = merge_runtime_overlapping_debug_handles(
        {(1, 2): (0, "first", 1), (2, 3): (1, t, 1), (7,): (2, "alone", 1)}
    )
    assert merged == {(1, 2, 3): (1, t, 1), (7,): (2, "alone", 1)}
    mapping = map_runtime_aot_intermediate_outputs(
        {(1,): "a1", (3,): t + 1, (9,): "unmatched"},
        {(1, 2, 3): (t, 1), (4, 5): ("runtime only", 1)},
    )
    # the runtime value stands for its last handle's AOT output
    ((aot_key, aot_value), (rt_key, rt_value)) = next(iter(mapping.items()))
    assert len(mapping) == 1 and aot_key == rt_key == (1, 2, 3)
    assert torch.equal(aot_value, t + 1) and rt_value is t
    [snr] = calculate_snr([t + 1], [t + 1.001])
    assert snr > 60


def test_operator_graph_of_an_exported_program_keeps_debug_handles():
    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.sin(x) + 1

    # an fx trace is enough (and cheaper than torch.export): the graph is what is read
    gm = torch.fx.symbolic_trace(Net())
    for i, node in enumerate(n for n in gm.graph.nodes if n.op == "call_function"):
        node.meta["debug_handle"] = i + 1
    graph = FXOperatorGraph.gen_operator_graph(gm)
    assert [g.graph_name for g in graph.elements] == ["inputs", "forward", "outputs"]
    mapping = create_debug_handle_to_op_node_mapping(graph)
    assert {h: [n.op for n in nodes] for h, nodes in mapping.items()} == {
        1: ["sin"],
        2: ["add"],
    }
    assert isinstance(mapping[1][0], OperatorNode) and isinstance(graph, OperatorGraph)
