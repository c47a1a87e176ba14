"""Programs of every exir dialect, planned ones included, written as the official exporter's
serializer writes them (pyexecutorch.exir.serde.serialize) and read back, by ours and by
the official reader; and ETRecords made after to_executorch, which record those programs."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from pyexecutorch.exir import memory, to_edge, to_edge_transform_and_lower
from pyexecutorch.exir.serde.serialize import (
    SerializedArtifact,
    SerializeError,
    deserialize,
    serialize,
)


class SplitViewLinear(nn.Module):
    """A planned program with a view (memory.view) and a tensor-list out (alloc_list)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = torch.split(self.linear(x).reshape(4, 2), 2)
        return torch.cat([b, a]).sum(0), a + 1


def _inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 6),)


def _graphs(ep):
    return [m for m in ep.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]


def _same_graph(live, read) -> None:
    """What the Inspector reads of a graph (the official ETRecord test's closeness check)."""
    assert len(_graphs(live)) == len(_graphs(read))
    for g_live, g_read in zip(_graphs(live), _graphs(read), strict=True):
        nodes = list(g_read.graph.nodes)
        assert len(nodes) == len(g_live.graph.nodes)
        for a, b in zip(g_live.graph.nodes, nodes, strict=True):
            # schema 5.4 keeps no argument kinds: an argument with a default value is read
            # as a keyword one (by the official reader too)
            assert (a.op, a.name, len(a.args) + len(a.kwargs)) == (
                b.op,
                b.name,
                len(b.args) + len(b.kwargs),
            ), (a.format_node(), b.format_node())
            if a.op == "call_function":
                assert a.target == b.target, (a.format_node(), b.format_node())
                assert a.meta.get("debug_handle") == b.meta.get("debug_handle"), a.name


def _target_names(ep) -> list[str]:
    # by name, in any order: the official reader's operators and markers are its own
    # objects, it names a view node "view" and reads a tensor list's getitems first; an
    # operator by its name and overload (ours name their namespace too)
    return sorted(
        ".".join(getattr(n.target, "__name__", str(n.target)).split(".")[-2:])
        for n in ep.graph_module.graph.nodes
        if n.op == "call_function"
    )


def test_planned_program_round_trips_as_the_official_writes_it():
    from executorch.exir import to_edge as official_to_edge
    from executorch.exir.serde import serialize as official_serde

    exported = torch.export.export(SplitViewLinear(), _inputs())
    edge = to_edge(exported)
    edge.to_executorch()
    planned = edge.exported_program()
    targets = {n.target for n in planned.graph_module.graph.nodes}
    assert memory.alloc in targets and memory.view in targets
    assert any(isinstance(n.args[0], list) for n in planned.graph.nodes if n.target is memory.alloc)
    artifact = serialize(planned)
    nodes = json.loads(artifact.exported_program)["graph_module"]["graph"]["nodes"]
    allocs = [n for n in nodes if n["target"] == "memory.alloc"]
    assert {i["name"] for n in allocs for i in n["inputs"]} == {"alloc_arg", "alloc_list"}
    assert allocs[0]["inputs"][0]["arg"] == {"as_string": "(2, 4);7"}  # shape; torch.float32
    assert any(n["target"] == "executorch.exir.memory.view" for n in nodes)
    _same_graph(planned, deserialize(artifact))
    # the official reader reads ours, and ours the official writer's
    theirs = official_serde.deserialize(artifact)
    assert _target_names(theirs) == _target_names(planned)
    official_edge = official_to_edge(torch.export.export(SplitViewLinear(), _inputs()))
    official_edge.to_executorch()
    official_planned = official_edge.exported_program()
    read = deserialize(official_serde.serialize(official_planned))
    assert _target_names(read) == _target_names(official_planned)
    assert "alloc" in _target_names(read) and "view" in _target_names(read)


def test_delegated_planned_program_keeps_its_lowered_module():
    from executorch.exir.serde import serialize as official_serde

    from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    edge = to_edge_transform_and_lower(
        torch.export.export(SplitViewLinear(), _inputs()), partitioner=[XnnpackPartitioner()]
    )
    edge.to_executorch()
    planned = edge.exported_program()
    read = deserialize(serialize(planned))
    _same_graph(planned, read)
    name = next(n.target for n in planned.graph.nodes if n.op == "get_attr")
    live, back = getattr(planned.graph_module, name), getattr(read.graph_module, name)
    assert (back.backend_id, back.processed_bytes) == (live.backend_id, live.processed_bytes)
    assert back.named_data_store_output.buffers == [
        bytes(b) for b in live.named_data_store_output.buffers
    ]
    assert back.named_data_store_output.pte_data == live.named_data_store_output.pte_data
    _same_graph(live.original_module, back.original_module)
    theirs = getattr(official_serde.deserialize(serialize(planned)).graph_module, name)
    assert theirs.processed_bytes == live.processed_bytes


def test_etrecord_after_to_executorch_records_the_planned_program(tmp_path):
    from executorch.devtools.etrecord import parse_etrecord as official_parse

    from pyexecutorch.devtools.etrecord import generate_etrecord, parse_etrecord

    exported = torch.export.export(SplitViewLinear(), _inputs())
    edge = to_edge(exported)
    et = edge.to_executorch()
    path = tmp_path / "etrecord.bin"
    generate_etrecord(path, edge, et, extra_recorded_export_modules={"aten": exported})
    record = parse_etrecord(path)
    _same_graph(edge.exported_program(), record.edge_dialect_program)
    assert any(n.target is memory.alloc for n in record.edge_dialect_program.graph.nodes)
    assert list(record.graph_map) == ["aten/forward"]
    assert _target_names(official_parse(str(path)).edge_dialect_program) == _target_names(
        edge.exported_program()
    )


def test_a_program_torch_cannot_write_is_refused_by_name():
    class Branches(nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: x + 1, lambda x: x * 2, (x,))

    edge = to_edge(torch.export.export(Branches(), (torch.randn(3),)))
    edge.to_executorch()
    with pytest.raises(SerializeError, match=r"^program: Failed serializing node cond"):
        serialize(edge.exported_program())
    with pytest.raises(TypeError, match="serialize takes an ExportedProgram, not GraphModule"):
        serialize(edge.exported_program().graph_module)
    with pytest.raises(SerializeError, match="schema version"):
        deserialize(SerializedArtifact(b'{"schema_version": {"major": 8}}', b"", b"", b""))
