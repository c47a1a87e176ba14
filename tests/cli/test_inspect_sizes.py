"""``pyexecutorch inspect --sizes [--against OTHER]``: every byte of a program attributed to
one category, checked against what the decoders say the file holds."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.cli.sizes import breakdown
from pyexecutorch.schema.program import DataLocation
from pyexecutorch.schema.pte import ExtendedHeader, decode_pte, encode_pte
from tests import models, official

from .conftest import run_blocked_torch


@pytest.fixture(scope="module")
def small_cnn_xnnpack(tmp_path_factory):
    path = tmp_path_factory.mktemp("sizes") / "small_cnn_xnnpack.pte"
    path.write_bytes(official.official_export_xnnpack(models.get_case("small_cnn")))
    return path


@pytest.fixture(scope="module")
def kv_cache_portable(tmp_path_factory):
    path = tmp_path_factory.mktemp("sizes") / "kv_cache.pte"
    path.write_bytes(official.official_export(models.get_case("kv_cache")))
    return path


def _stored_payloads(data: bytes) -> list[memoryview]:
    pte = decode_pte(data)
    return [
        pte.delegate_segments[d.processed.index]
        for plan in pte.program.execution_plan
        for d in plan.delegates
        if d.processed.location == DataLocation.SEGMENT
    ]


def _section(b, prefix: str) -> int:
    return sum(v for k, v in b.bytes.items() if k.startswith(prefix))


@pytest.mark.parametrize("kind", ["portable", "xnnpack"])
def test_every_byte_has_one_category(kind, kv_cache_portable, small_cnn_xnnpack):
    path = kv_cache_portable if kind == "portable" else small_cnn_xnnpack
    data = path.read_bytes()
    b = breakdown(data)
    assert sum(b.bytes.values()) == len(data) == b.size
    assert all(v > 0 for v in b.bytes.values())
    pte = decode_pte(data)
    header = ExtendedHeader.read(memoryview(data))
    # The program flatbuffer, header included, is all "program: " rows.
    assert _section(b, "program: ") == (header.program_size if header else len(data))
    assert b.bytes["program: plan name"] == 4 + len("forward") + 1  # length, text, NUL
    named = sum(len(blob.data) for blob in pte.named_data.values())
    assert b.bytes["named data (delegate weights)"] == named
    payloads = _stored_payloads(data)
    assert _section(b, "xnn ") == sum(len(p) for p in payloads)
    if kind == "portable":
        assert not payloads
        (cs,) = [s for i, s in enumerate(pte.segment_map.spans) if i == pte.segment_map.constants]
        assert b.bytes["constant segment (portable weights)"] == cs[1]
        assert b.counts["instructions: KernelCall"] == sum(
            len(c.instructions) for p in pte.program.execution_plan for c in p.chains
        )
        return
    graphs = [S.decode_payload(p).graph for p in payloads]
    assert b.bytes["xnn XH00 header"] == S.HEADER_LENGTH * len(payloads)
    assert b.bytes["xnn version"] == sum(4 + len(g.version) + 1 for g in graphs)
    nodes = Counter(type(n.xnode_union).__name__ for g in graphs for n in g.xnodes)
    assert {k[len("XNNPACK nodes: ") :]: v for k, v in b.counts.items() if "nodes" in k} == nodes
    assert all(b.bytes[f"xnn nodes: {t}"] > 0 for t in nodes)


def _with_extra_nodes(src: bytes, n: int) -> bytes:
    """``src`` with ``n`` more copies of the first delegate's last node."""
    pte = decode_pte(src)
    ref = pte.program.execution_plan[0].delegates[0].processed
    payload = S.decode_payload(pte.delegate_segments[ref.index])
    g = payload.graph
    g.xnodes += [copy.deepcopy(g.xnodes[-1]) for _ in range(n)]
    constants = bytes(payload.constant_data) if payload.constant_data is not None else b""
    pte.delegate_segments[ref.index] = S.encode_payload(g, constants)
    return encode_pte(pte)


def test_against_names_the_rows_that_differ(cli, small_cnn_xnnpack, tmp_path):
    bigger = tmp_path / "bigger.pte"
    bigger.write_bytes(_with_extra_nodes(small_cnn_xnnpack.read_bytes(), 3))
    a, b = breakdown(bigger.read_bytes()), breakdown(small_cnn_xnnpack.read_bytes())
    extra = S.decode_payload(_stored_payloads(bigger.read_bytes())[0]).graph.xnodes[-1]
    name = type(extra.xnode_union).__name__
    assert a.counts[f"XNNPACK nodes: {name}"] == b.counts[f"XNNPACK nodes: {name}"] + 3
    assert a.bytes[f"xnn nodes: {name}"] > b.bytes[f"xnn nodes: {name}"]
    assert a.bytes["xnn xnodes"] == b.bytes["xnn xnodes"] + 3 * 4  # one offset per node
    assert a.bytes["named data (delegate weights)"] == b.bytes["named data (delegate weights)"]

    r = cli("inspect", bigger, "--sizes", "--against", small_cnn_xnnpack)
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == (f"A: {bigger} ({a.size} bytes); B: {small_cnn_xnnpack} ({b.size} bytes)")
    file_row = next(line for line in lines if line.startswith("file "))
    assert file_row.split() == ["file", str(a.size), str(b.size), f"{a.size - b.size:+d}"]
    diff_sum = sum(
        int(line.split()[-1]) for line in lines[2 : lines.index(file_row)] if line.strip()
    )
    assert diff_sum == a.size - b.size
    count_row = next(line for line in lines if line.startswith(f"XNNPACK nodes: {name} "))
    assert count_row.split()[-3:] == [
        str(a.counts[f"XNNPACK nodes: {name}"]),
        str(b.counts[f"XNNPACK nodes: {name}"]),
        "*",
    ]
    assert "named data only in A: 0 blob(s), 0 bytes" in lines


def test_sizes_of_one_file(cli, small_cnn_xnnpack):
    data = small_cnn_xnnpack.read_bytes()
    r = cli("inspect", small_cnn_xnnpack, "--sizes")
    assert r.rc == 0, r.err
    assert r.out.splitlines()[0] == f"{small_cnn_xnnpack}: {len(data)} bytes"
    assert ["file", str(len(data)), "100.0%"] in [x.split() for x in r.out.splitlines()]
    named = breakdown(data).bytes["named data (delegate weights)"]
    row = next(x for x in r.out.splitlines() if x.startswith("named data (delegate weights)"))
    assert row.split()[-2:] == [str(named), f"{100 * named / len(data):.1f}%"]


def test_sizes_errors(cli, small_cnn_xnnpack, tmp_path):
    r = cli("inspect", small_cnn_xnnpack, "--against", small_cnn_xnnpack)
    assert (r.rc, r.err.strip()) == (
        1,
        "pyexecutorch inspect: error: --against compares sizes: use it with --sizes",
    )
    bad = tmp_path / "bad.pte"
    bad.write_bytes(small_cnn_xnnpack.read_bytes()[:64])
    r = cli("inspect", small_cnn_xnnpack, "--sizes", "--against", bad)
    assert r.rc == 1
    assert r.err.startswith(f"pyexecutorch inspect: error: {bad} is not a valid program: ")


def test_sizes_without_torch(small_cnn_xnnpack):
    p = run_blocked_torch("inspect", small_cnn_xnnpack, "--sizes")
    assert p.returncode == 0, p.stderr
    assert "xnn nodes: " in p.stdout and "XNNPACK nodes: " in p.stdout
