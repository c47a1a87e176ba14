"""ETRecord: our file in the official layout, read by the official Inspector and by ours."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
import torch

from pyexecutorch import portable_lib as pl
from pyexecutorch.devtools import Inspector
from pyexecutorch.devtools.etrecord import ETRecordError, parse_etrecord
from pyexecutorch.exir import to_edge, to_edge_transform_and_lower


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(3, 4)

    def forward(self, x):
        return torch.sigmoid(torch.relu(self.fc(x)) + 1.0)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    d = tmp_path_factory.mktemp("etrecord")
    x = torch.randn(2, 3)
    manager = to_edge(torch.export.export(Net().eval(), (x,)), generate_etrecord=True)
    et = manager.to_executorch()
    et.get_etrecord().save(d / "net.etrecord")
    module = pl._load_for_executorch_from_buffer(
        et.buffer, enable_etdump=True, debug_buffer_size=1 << 16
    )
    module.forward([x.numpy()])
    module.write_etdump_result_to_file(str(d / "net.etdp"), str(d / "net.bin"))
    return d, et


def test_layout(traced):
    d, et = traced
    names = zipfile.ZipFile(d / "net.etrecord").namelist()
    assert names[0] == "ETRECORD_V0"
    for base in ("exported_program", "edge_dialect_exported_program/forward"):
        assert {base, f"{base}_state_dict", f"{base}_constants", f"{base}_example_inputs"} <= set(
            names
        )
    assert {"debug_handle_map", "delegate_map", "instruction_id_to_num_outs_map"} <= set(names)
    assert {"representative_inputs", "reference_outputs"} <= set(names)


def test_official_inspector_maps_our_events_to_nodes(traced):
    from executorch.devtools import Inspector as OfficialInspector
    from executorch.devtools.etrecord import parse_etrecord as official_parse

    d, et = traced
    record = official_parse(str(d / "net.etrecord"))
    assert record._debug_handle_map == {"forward": {"0": 1, "1": 2, "2": 3, "3": 4}}
    theirs = OfficialInspector(
        etdump_path=str(d / "net.etdp"),
        etrecord=str(d / "net.etrecord"),
        debug_buffer_path=str(d / "net.bin"),
    )
    ours = Inspector(
        etdump_path=d / "net.etdp", etrecord=d / "net.etrecord", debug_buffer_path=d / "net.bin"
    )
    ops = {e.name: e.op_types for e in theirs.event_blocks[1].events if e.name.startswith("native")}
    # edge operators name themselves as the official ones do: "aten.relu.default"
    assert ops == {
        "native_call_addmm.out": ["aten.permute_copy.default", "aten.addmm.default"],
        "native_call_relu.out": ["aten.relu.default"],
        "native_call_add.out": ["aten.add.Tensor"],
        "native_call_sigmoid.out": ["aten.sigmoid.default"],
    }
    mine = {e.name: e.op_types for e in ours.event_blocks[1].events if e.name.startswith("native")}
    assert mine == ops
    # With the ETRecord, the same events as for the official runtime's trace of the program.
    from executorch.extension.pybindings import portable_lib as official_pl

    pte = bytes(et.buffer)
    module = official_pl._load_for_executorch_from_buffer(pte, enable_etdump=True)
    module.forward([torch.randn(2, 3)])
    module.write_etdump_result_to_file(str(d / "official.etdp"))
    official = OfficialInspector(
        etdump_path=str(d / "official.etdp"), etrecord=str(d / "net.etrecord")
    )

    def listing(insp):
        return [(b.name, e.name, e.op_types) for b in insp.event_blocks for e in b.events]

    assert listing(theirs) == listing(official)
    # Source lines of the nodes, from the recorded graph.
    relu = next(e for e in ours.event_blocks[1].events if e.name == "native_call_relu.out")
    assert any("torch.relu(self.fc(x))" in t for t in relu.stack_traces.values())


def _gap_rows(table):
    return [
        (list(r["aot_ops"]), list(r["runtime_ops"]), sorted(r["stacktraces"]))
        for r in table.to_dict("records")
    ]


def test_numeric_gap(traced):
    """The official Inspector's table from the same trace and record: rows, operator
    names (the ATen program's, its debug handles carried back), gaps and stack traces."""
    from executorch.devtools import Inspector as OfficialInspector

    d, _ = traced
    files = {
        "etdump_path": str(d / "net.etdp"),
        "etrecord": str(d / "net.etrecord"),
        "debug_buffer_path": str(d / "net.bin"),
    }
    insp = Inspector(**files)
    theirs = OfficialInspector(**files)
    for distance in ("MSE", "L1", "SNR"):
        rows = insp.calculate_numeric_gap(distance)
        expected = theirs.calculate_numeric_gap(distance)
        assert _gap_rows(rows) == _gap_rows(expected)
        assert [r[0] for r in _gap_rows(rows)] == [["linear"], ["relu"], ["add"], ["sigmoid"]]
        np.testing.assert_allclose(
            [g[0] for g in rows["gap"]], [g[0] for g in expected["gap"]], rtol=1e-9
        )
    # The edge program as the reference: its node names, the same values.
    edge = insp.calculate_numeric_gap("MSE", reference_graph="edge_dialect_exported_program")
    assert [r[0] for r in _gap_rows(edge)] == [
        ["aten_permute_copy_default", "aten_addmm_default"],
        ["aten_relu_default"],
        ["aten_add_tensor"],
        ["aten_sigmoid_default"],
    ]
    assert all(r["stacktraces"][op] for r in edge.to_dict("records") for op in r["aot_ops"])
    with pytest.raises(ValueError, match="Unsupported distance metric 'cosine'"):
        insp.calculate_numeric_gap("cosine")
    with pytest.raises(ValueError, match="Reference graph 'nowhere/forward' not found"):
        insp.calculate_numeric_gap("MSE", reference_graph="nowhere")


def test_round_trip_and_errors(traced, tmp_path):
    d, et = traced
    record = parse_etrecord(d / "net.etrecord")
    assert record._delegate_map == {"forward": {}}
    nodes = [
        n for n in record.edge_dialect_program.graph_module.graph.nodes if n.op == "call_function"
    ]
    assert [n.meta["debug_handle"] for n in nodes] == [1, 1, 2, 3, 4]
    torch.testing.assert_close(
        record._reference_outputs["forward"][0][0], Net().eval()(*record._representative_inputs)
    )
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(ETRecordError, match="not an ETRecord file"):
        parse_etrecord(tmp_path / "bad.zip")
    with zipfile.ZipFile(tmp_path / "empty.zip", "w") as z:
        z.writestr("x", "")
    with pytest.raises(ETRecordError, match="no ETRECORD_V0 entry"):
        parse_etrecord(tmp_path / "empty.zip")
    plain = to_edge(torch.export.export(Net().eval(), (torch.randn(2, 3),))).to_executorch()
    with pytest.raises(
        RuntimeError, match="ETRecord was not generated: pass generate_etrecord=True"
    ):
        plain.get_etrecord()


def test_delegated_program_records_the_graph_before_lowering(tmp_path):
    from pyexecutorch.backends.example.aot import ExamplePartitioner

    x = torch.randn(2, 3)
    et = to_edge_transform_and_lower(
        torch.export.export(Net().eval(), (x,)),
        partitioner=[ExamplePartitioner()],
        generate_etrecord=True,
    ).to_executorch()
    record = et.get_etrecord()
    [(instruction, delegate)] = record._delegate_map["forward"].items()
    assert delegate["name"] == "ExampleBackend" and delegate["delegate_map"]
    record.save(tmp_path / "d.etrecord")
    from executorch.devtools.etrecord import parse_etrecord as official_parse

    again = official_parse(str(tmp_path / "d.etrecord"))
    # the saved maps are JSON: keys are strings there, whatever they were in memory
    saved = again._delegate_map["forward"][str(instruction)]["delegate_map"]
    assert saved == json.loads(json.dumps(delegate["delegate_map"]))
