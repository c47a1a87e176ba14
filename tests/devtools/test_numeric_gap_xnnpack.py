"""Inspector.calculate_numeric_gap on an XNNPACK program: the official Inspector's table.

The official XNNPACK delegate logs only its call's outputs, so the table has one row per
delegate output, matched to the ATen program's nodes. Ours logs its nodes' outputs only
when asked at load (``log_delegate_outputs``); then each node has a row of its own.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch import exir as pyexecutorch_exir
from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from pyexecutorch.devtools import Inspector
from pyexecutorch.runtime import Runtime


class TwoHeads(torch.nn.Module):
    """Three linears in one delegate with two outputs (as the official suite's model)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(32, 32)
        self.second = torch.nn.Linear(32, 32)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.relu(self.first(x))
        return torch.relu(self.second(x)), self.head(x)


def _rows(table) -> list[tuple]:
    return [
        (tuple(r["aot_debug_handle"]), list(r["aot_ops"]), list(r["runtime_ops"]))
        for r in table.to_dict("records")
    ]


def _lower(exir, partitioner, x):
    edge = exir.to_edge_transform_and_lower(
        torch.export.export(TwoHeads().eval(), (x,)),
        partitioner=[partitioner],
        compile_config=exir.EdgeCompileConfig(_check_ir_validity=False),
        generate_etrecord=True,
    )
    et = edge.to_executorch()
    record = et.get_etrecord()
    record.update_representative_inputs([x])
    return bytes(et.buffer), record


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Traces of the program and their ETRecords: the official exporter's program on the
    official runtime ("official"), ours on ours ("ours"), and ours with the delegate's
    node outputs ("nodes")."""
    import executorch.exir as official_exir
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackPartitioner as OfficialPartitioner,
    )
    from executorch.extension.pybindings import portable_lib as official_pl

    d = tmp_path_factory.mktemp("gap")
    x = torch.randn(1, 8, 32)
    pte, record = _lower(official_exir, OfficialPartitioner(), x)
    record.save(str(d / "official.record"))
    module = official_pl._load_for_executorch_from_buffer(
        pte, enable_etdump=True, debug_buffer_size=1 << 20
    )
    module.run_method("forward", (x,))
    module.write_etdump_result_to_file(str(d / "official.etdp"), str(d / "official.bin"))
    pte, record = _lower(pyexecutorch_exir, XnnpackPartitioner(), x)
    for name, nodes in (("ours", False), ("nodes", True)):
        record.save(d / f"{name}.record")
        program = Runtime.get().load_program(
            pte, enable_etdump=True, debug_buffer_size=1 << 20, log_delegate_outputs=nodes
        )
        program.load_method("forward").execute([x.numpy()])
        program.write_etdump_result_to_file(d / f"{name}.etdp", d / f"{name}.bin")
    return d


def _inspector(kind, d, trace):
    return kind(
        etdump_path=str(d / f"{trace}.etdp"),
        etrecord=str(d / f"{trace}.record"),
        debug_buffer_path=str(d / f"{trace}.bin"),
    )


def test_our_table_is_the_official_table(traces):
    """Ours (exporter, runtime, Inspector) against the official three on the same model."""
    from executorch.devtools import Inspector as OfficialInspector

    official = _inspector(OfficialInspector, traces, "official").calculate_numeric_gap("SNR")
    # The delegate call's two outputs, each against the last node of all five handles.
    ops = ["linear", "relu", "linear_1", "relu_1", "linear_2"]
    expected = [((1, 2, 3, 4, 5), ops, ["DELEGATE_CALL"])] * 2
    assert _rows(official) == expected
    for trace in ("official", "ours"):
        mine = _inspector(Inspector, traces, trace).calculate_numeric_gap("SNR")
        assert _rows(mine) == expected
        assert [sorted(s) for s in mine["stacktraces"]] == [sorted(ops)] * 2
        # Both run XNNPACK's arithmetic (and the same weights): gaps alike.
        np.testing.assert_allclose(
            [g[0] for g in mine["gap"]], [g[0] for g in official["gap"]], rtol=1e-2
        )
        assert all(g[0] > 100 for g in mine["gap"])  # dB: float rounding only
    # Reading the official files, our table is the official one to the last bit.
    mine = _inspector(Inspector, traces, "official").calculate_numeric_gap("MSE")
    theirs = _inspector(OfficialInspector, traces, "official").calculate_numeric_gap("MSE")
    assert [g[0] for g in mine["gap"]] == [g[0] for g in theirs["gap"]]


def test_node_outputs_make_a_row_each(traces):
    """With the delegate's node outputs logged, each XNNPACK node is a row: the first node
    (id 0, linear + relu) included, its output against the ATen program's relu."""
    insp = _inspector(Inspector, traces, "nodes")
    inside = [e for e in insp.event_blocks[1].events if e.is_delegated_op]
    assert [e.delegate_debug_identifier for e in inside] == [0, 1, 2]
    assert [e.debug_handles for e in inside] == [(1, 2), (3, 4), (5,)]
    table = insp.calculate_numeric_gap("MSE")
    assert _rows(table) == [
        ((1, 2), ["linear", "relu"], ["0"]),
        ((3, 4), ["linear_1", "relu_1"], ["1"]),
        ((5,), ["linear_2"], ["2"]),
    ]
    model = TwoHeads().eval()
    x = insp._etrecord._representative_inputs[0]
    with torch.no_grad():
        hidden = torch.relu(model.first(x))
        want = [hidden, torch.relu(model.second(hidden)), model.head(hidden)]
    for row, expected in zip(table.to_dict("records"), want, strict=True):
        np.testing.assert_allclose(
            np.asarray(row["runtime_intermediate_output"]), expected.numpy(), rtol=1e-5, atol=1e-6
        )
        assert row["gap"][0] < 1e-10
