"""What official Inspector code expects of ours: events built with the official
constructor's names, intermediate outputs as torch tensors once torch is imported,
and ETRecords whose edge programs hold dim-order operators read back runnable."""

from __future__ import annotations

import zipfile

import torch

from pyexecutorch.devtools.etrecord import parse_etrecord
from pyexecutorch.devtools.inspector import Event, Inspector
from pyexecutorch.exir import to_edge
from pyexecutorch.portable_lib import _load_for_executorch_from_buffer
from tests.isolated import in_own_process


class _Cast(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x.to(torch.float64)).to(torch.float32) * 3


def test_event_takes_the_official_constructor_names():
    event = Event(name="op", _instruction_id=4, _delegate_debug_metadatas=[b"m"])
    assert (event.instruction_id, event._instruction_id) == (4, 4)
    assert event.delegate_debug_metadatas == [b"m"]
    assert Event(name="op")._instruction_id is None


@in_own_process  # the dim-order operators torch holds depend on what the process imported
def test_dim_order_programs_round_trip_and_debug_data_are_tensors(tmp_path):
    x = torch.tensor([[-1.0, 2.0, 0.5]])
    edge = to_edge(torch.export.export(_Cast(), (x,)), generate_etrecord=True)
    et = edge.to_executorch()
    et.get_etrecord().save(tmp_path / "cast.etrecord")
    with zipfile.ZipFile(tmp_path / "cast.etrecord") as z:
        entry = z.read("edge_dialect_exported_program/forward").decode()
    # named as the official exporter names its edge operators
    assert "executorch.exir.dialects.edge.ops.dim_order_ops._to_dim_order_copy.default" in entry
    program = parse_etrecord(tmp_path / "cast.etrecord").edge_dialect_program
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "dim_order_ops._to_dim_order_copy.default" in targets
    for value in (x, torch.full((1, 3), -2.0)):
        torch.testing.assert_close(program.module()(value), _Cast()(value))

    module = _load_for_executorch_from_buffer(
        et.buffer, enable_etdump=True, debug_buffer_size=1 << 14
    )
    module.forward([x])
    etdp, buf = tmp_path / "cast.etdp", tmp_path / "cast.bin"
    module.write_etdump_result_to_file(str(etdp), str(buf))
    inspector = Inspector(etdump_path=etdp, debug_buffer_path=buf)
    logged = [d for b in inspector.event_blocks for e in b.events for d in e.debug_data]
    assert logged and all(isinstance(d, torch.Tensor) for d in logged)
    torch.testing.assert_close(logged[-1], _Cast()(x))
