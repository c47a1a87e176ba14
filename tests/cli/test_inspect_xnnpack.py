"""``pyexecutorch inspect`` on XNNPACK delegates: the official exporter's programs and
ours, hand-built payloads (constants in the payload, quantized values), broken ones,
and a run without torch."""

from __future__ import annotations

import dataclasses
import re

import pytest

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.schema.program import DataLocation
from pyexecutorch.schema.pte import decode_pte, encode_pte
from tests import models, official

from .conftest import run_blocked_torch


@pytest.fixture(scope="module")
def small_cnn_xnnpack(tmp_path_factory):
    path = tmp_path_factory.mktemp("xnn") / "small_cnn_xnnpack.pte"
    path.write_bytes(official.official_export_xnnpack(models.get_case("small_cnn")))
    return path


def _payloads(path):
    """(pte, [(method, delegate index, decoded payload)]) of a program file."""
    pte = decode_pte(path.read_bytes())
    out = []
    for plan in pte.program.execution_plan:
        for k, d in enumerate(plan.delegates):
            assert d.processed.location == DataLocation.SEGMENT
            out.append((plan.name, k, S.decode_payload(pte.delegate_segments[d.processed.index])))
    return pte, out


def _section(out: str, method: str, k: int) -> str:
    start = out.index(f"XNNPACK delegate {k} of method {method!r}:")
    end = out.find("\nXNNPACK delegate ", start + 1)
    stop = out.index("\noperator histogram")
    return out[start : stop if end < 0 else min(end, stop)]


def _check_listing(out: str, path, verbose: bool) -> None:
    """Every delegate's node count, node types, constant bytes and each node's line
    agree with the payload decoded here."""
    pte, payloads = _payloads(path)
    assert payloads
    for method, k, payload in payloads:
        g = payload.graph
        text = _section(out, method, k)
        assert f"XNNPACK graph: {len(g.xnodes)} node" in text
        stored = {}  # storage -> bytes: values sharing a named key count once
        for v in g.xvalues:
            entry = g.constant_data[v.tensor.constant_buffer_idx]
            if v.tensor.constant_buffer_idx and entry.named_key:
                stored[entry.named_key] = pte.named_data[entry.named_key].data.nbytes
            elif v.tensor.constant_buffer_idx:
                stored[entry.offset] = entry.size
        nbytes = sum(stored.values())
        assert f"constant bytes: {nbytes} " in text
        node_lines = re.findall(r"^      (\d+): (XNN\w+)\(", text, re.M)
        assert [(int(i), t) for i, t in node_lines] == [
            (i, type(n.xnode_union).__name__) for i, n in enumerate(g.xnodes)
        ]
        value_lines = re.findall(r"^      %(\d+): ", text, re.M)
        assert len(value_lines) == (len(g.xvalues) if verbose else 0)


def test_inspect_lists_official_xnnpack_delegate(cli, small_cnn_xnnpack):
    r = cli("inspect", small_cnn_xnnpack)
    assert r.rc == 0, r.err
    _check_listing(r.out, small_cnn_xnnpack, verbose=False)
    text = _section(r.out, "forward", 0)
    # the first convolution: NHWC input, weights and bias from named data, fused ReLU
    assert re.search(
        r"^      1: XNNConv2d\(%1, filter %2, bias %4 -> %3\)  kernel=3x3 stride=1x1 "
        r"dilation=1x1 padding=1,1,1,1 group_channels=3->8 groups=1  fused relu \[0, inf\]",
        text,
        re.M,
    )
    assert re.search(r"^      0: XNNStaticTranspose\(%0 -> %1\)  perm=\[0, 2, 3, 1\]", text, re.M)
    assert "node types: XNNConv2d x3, XNNDepthwiseConv2d x1, XNNFullyConnected x1," in text
    assert "(1 external input, 1 external output, 10 constants)" in text
    assert r.out.rstrip().endswith("verification: ok")


def test_inspect_verbose_lists_xnnpack_values(cli, small_cnn_xnnpack):
    r = cli("inspect", small_cnn_xnnpack, "--verbose")
    assert r.rc == 0, r.err
    _check_listing(r.out, small_cnn_xnnpack, verbose=True)
    text = _section(r.out, "forward", 0)
    assert "      %0: fp32[1, 3, 32, 32]  external input 0\n" in text
    assert "      %1: fp32[1, 32, 32, 3]\n" in text
    assert re.search(
        r"%2: fp32\[8, 3, 3, 3\]  constant #1 \(named '[0-9a-f]{16}\.\.\.', 864 bytes\)", text
    )
    assert re.search(r"%21: fp32\[1, 10\]  external output 1$", text, re.M)


def test_inspect_lists_our_xnnpack_delegates(cli, tmp_path):
    from pyexecutorch.backends.xnnpack import XnnpackPartitioner
    from pyexecutorch.exir import to_edge_transform_and_lower

    case = models.get_case("gpt_block_sdpa")
    edge = to_edge_transform_and_lower(models.export(case), partitioner=[XnnpackPartitioner()])
    path = tmp_path / "ours.pte"
    path.write_bytes(edge.to_executorch().buffer)
    r = cli("inspect", path, "--verbose")
    assert r.rc == 0, r.err
    _check_listing(r.out, path, verbose=True)
    assert "XNNPACK delegate 1 of method 'forward':" in r.out


def _with_payload(src, dst, payload: bytes):
    """``src`` with its first delegate's data replaced by ``payload``, written to ``dst``."""
    pte = decode_pte(src.read_bytes())
    ref = pte.program.execution_plan[0].delegates[0].processed
    pte.delegate_segments[ref.index] = payload
    dst.write_bytes(encode_pte(pte))
    return dst


def _hand_built_payload() -> bytes:
    """A graph whose constant lies in the payload, with a per-channel quantized filter."""
    t = S.XNNTensorValue
    filt = S.XNNQuantizedTensorValue(
        t(S.XNNDatatype.qcint8, 2, [4, 3], 1, S.INVALID_ID, 0, 1),
        S.PerChannelQuant([0.5, 0.25, 1.0, 2.0], 0),
    )
    graph = S.XNNGraph(
        version="0",
        xnodes=[
            S.XNode(
                S.NODE_TYPES["XNNFullyConnected"](0, 1, S.INVALID_ID, 2, 0),
                7,
                S.OutputMinMax(0.0, 6.0),
            )
        ],
        xvalues=[
            S.XValue(
                t(
                    S.XNNDatatype.fp32,
                    2,
                    [2, 3],
                    0,
                    0,
                    S.VALUE_FLAG_EXTERNAL_INPUT,
                    0,
                    S.XNNDatatype.qdint8,
                )
            ),
            S.XValue(filt),
            S.XValue(t(S.XNNDatatype.fp32, 2, [2, 4], 0, 1, S.VALUE_FLAG_EXTERNAL_OUTPUT, 2)),
            S.XValue(t(S.XNNDatatype.fp32, 1, [4], 1, S.INVALID_ID, 0, 3)),  # used by no node
        ],
        num_externs=2,
        input_ids=[0],
        output_ids=[2],
        constant_data=[S.ConstantDataOffset(0, 0), S.ConstantDataOffset(16, 12)],
    )
    return S.encode_payload(graph, bytes(32))


def test_inspect_hand_built_payload(cli, small_cnn_xnnpack, tmp_path):
    path = _with_payload(small_cnn_xnnpack, tmp_path / "hand.pte", _hand_built_payload())
    r = cli("inspect", path, "--verbose")
    text = _section(r.out, "forward", 0)
    assert (
        "constant bytes: 12 stored: 0 named keys (0 bytes), 1 in the payload (12 bytes)\n" in text
    )
    assert "  values no node uses: 1 (%3)\n" in text
    assert "(1 external input, 1 external output, 2 constants)" in text
    assert (
        "      0: XNNFullyConnected(%0, filter %1 -> %2)  fused relu6 [0, 6]  [debug 7]\n" in text
    )
    assert "      %0: fp32[2, 3]  quantized at run time to qdint8  external input 0\n" in text
    assert (
        "      %1: qcint8[4, 3]  per-channel 4 scales on dim 0  "
        "constant #1 (inline at offset 16, 12 bytes)\n" in text
    )
    # (verification checks the program's tables, not what a delegate's graph computes)
    assert r.rc == 0, r.err


def test_inspect_undecodable_payload_fails(cli, small_cnn_xnnpack, tmp_path):
    path = _with_payload(small_cnn_xnnpack, tmp_path / "bad.pte", b"\0\0\0\0XH00" + bytes(40))
    r = cli("inspect", path)
    assert r.rc == 1
    text = _section(r.out, "forward", 0)
    assert "  cannot be decoded: XNNPACK payload: header length 0, expected at least 30" in text


def test_inspect_xnnpack_without_torch(small_cnn_xnnpack):
    p = run_blocked_torch("inspect", small_cnn_xnnpack)
    assert p.returncode == 0, p.stderr
    assert "XNNPACK delegate 0 of method 'forward':" in p.stdout
    assert "fused relu [0, inf]" in p.stdout


def test_describe_covers_every_node_table():
    """Every node type lists its value ids as inputs or outputs (no id shown as a
    parameter), so a new table in the schema cannot be listed wrongly."""
    from pyexecutorch.backends.xnnpack.describe import _node_line

    for name, cls in S.NODE_TYPES.items():
        ids = {
            f.name: 100 + k for k, f in enumerate(dataclasses.fields(cls)) if f.name.endswith("_id")
        }
        node = cls(**ids)
        line = _node_line(0, S.XNode(node), {})
        assert line.startswith(f"0: {name}("), line
        assert "_id=" not in line, line
        assert "->" in line and re.search(r"-> .*%1\d\d", line), line


def test_inspect_official_quantized_delegate(cli, tmp_path):
    """Quantized values (per-token dynamic inputs, per-channel weights whose scales are
    constants of their own) and every named-data byte counted once."""
    from tests.backends._quantized_programs import official_pte, quantize

    path = tmp_path / "mlp_dynamic.pte"
    path.write_bytes(official_pte(quantize("mlp", "dynamic"), "xnnpack"))
    r = cli("inspect", path, "--verbose")
    assert r.rc == 0, r.err
    text = _section(r.out, "forward", 0)
    pte = decode_pte(path.read_bytes())
    named = sum(blob.data.nbytes for blob in pte.named_data.values())
    assert (
        f"constant bytes: {named} stored: {len(pte.named_data)} named keys ({named} bytes)" in text
    )
    assert re.search(r"^      %1: qdint8\[4, 64\]  per-token dynamic$", text, re.M)
    assert re.search(
        r"^      %2: qcint8\[96, 64\]  per-channel 96 scales on dim 0 \(in constant #2: named "
        r"'scale_[0-9a-f]+\.\.\.', 384 bytes\)  constant #1 \(named '[0-9a-f.]+', 6144 bytes\)$",
        text,
        re.M,
    )
    assert "      1: XNNFullyConnected(%1, filter %2, bias %3 -> %4)  fused relu [0, inf]" in text
