"""``compare`` and ``pyexecutorch debug``: a wrong kernel is named as the first divergence,
in the portable kernels and inside a delegate."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.backends.example import runtime as example_runtime
from pyexecutorch.backends.example.aot import ExamplePartitioner
from pyexecutorch.cli.main import main
from pyexecutorch.devtools import compare
from pyexecutorch.exir import to_edge, to_edge_transform_and_lower
from pyexecutorch.kernels import registry
from tests import official

MODEL = """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return torch.tanh(self.fc2(h) * 2.0)
"""


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    d = tmp_path_factory.mktemp("numeric")
    (d / "net.py").write_text(MODEL)
    namespace: dict = {}
    exec(compile(MODEL, str(d / "net.py"), "exec"), namespace)
    model = namespace["Net"]().eval()
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(1))
    return d, model, x


def off_by_a_hundredth(fn):
    def wrong(*args):
        out = fn(*args)
        out += np.float32(1e-2)
        return out

    return wrong


@pytest.fixture
def wrong_relu_kernel(monkeypatch):
    """The portable relu adds 1e-2 to its output (its fast path is turned off so the kernel runs)."""
    kernel = registry.get_kernel("aten::relu.out")

    def wrong(x, out):
        kernel.fn(x, out)
        out += np.float32(1e-2)
        return out

    monkeypatch.setitem(
        registry._KERNELS, kernel.name, registry.Kernel(kernel.name, wrong, kernel.n_outs)
    )
    monkeypatch.delitem(registry._SPECIALIZERS, kernel.name, raising=False)


@pytest.fixture
def wrong_relu_in_delegate(monkeypatch):
    make = example_runtime._kernel

    def kernel(op, attrs):
        fn = make(op, attrs)
        return off_by_a_hundredth(fn) if op == "relu" else fn

    monkeypatch.setattr(example_runtime, "_kernel", kernel)


def test_matches_when_right(net, portable_pte):
    _, model, x = net
    result = compare(model, portable_pte, [x])
    assert result.first_divergence is None
    assert [r.operator for r in result.rows] == [
        "aten::addmm.out",
        "aten::relu.out",
        "aten::addmm.out",
        "aten::mul.out",
        "aten::tanh.out",
    ]
    assert all(r.max_abs_error < 1e-6 for r in result.rows)
    assert str(result).endswith("every output is within rtol 1e-05, atol 1e-06")


def test_wrong_kernel_is_the_first_divergence(net, portable_pte, wrong_relu_kernel):
    _, model, x = net
    result = compare(model, portable_pte, [x], rtol=1e-5, atol=1e-6)
    first = result.first_divergence
    assert (first.instruction, first.operator, first.graph_nodes) == (
        1,
        "aten::relu.out",
        ["aten.relu.default"],
    )
    assert first.max_abs_error == pytest.approx(1e-2, rel=1e-4)
    assert first.source == "net.py:12: h = torch.relu(self.fc1(x))"
    assert result.rows[0].within_tolerance  # the operator before it is fine
    assert "first divergence: instruction 1, aten::relu.out (aten.relu.default)" in str(result)


def test_wrong_op_inside_a_delegate(net, wrong_relu_in_delegate):
    _, model, x = net
    partitioner = [ExamplePartitioner()]
    ep = torch.export.export(model, (x,))
    pte = to_edge_transform_and_lower(ep, partitioner=partitioner).to_executorch().buffer
    result = compare(model, pte, [x], partitioner=partitioner)
    assert [r.operator for r in result.rows] == [
        "ExampleBackend:linear",
        "ExampleBackend:relu",
        "ExampleBackend:linear",
        "ExampleBackend:mul",
        "ExampleBackend:tanh",
    ]
    first = result.first_divergence
    assert (first.operator, first.graph_nodes) == ("ExampleBackend:relu", ["aten.relu.default"])
    assert first.max_abs_error == pytest.approx(1e-2, rel=1e-4)
    assert first.source == "net.py:12: h = torch.relu(self.fc1(x))"


@pytest.fixture(scope="module")
def official_xnnpack(net):
    """The official exporter's XNNPACK program of the model and its ETRecord file (cached:
    exporting with the official tools takes tens of seconds)."""
    import hashlib

    d, model, x = net
    key = hashlib.sha256((MODEL + official.versions()).encode()).hexdigest()[:16]
    pte_path = official.cache_dir() / f"devtools-numeric.xnnpack.{key}.pte"
    record_path = official.cache_dir() / f"devtools-numeric.xnnpack.{key}.etrecord"
    with official.exclusive(pte_path):
        if not (pte_path.exists() and record_path.exists()):
            _official_numeric_files(model, x, d, pte_path, record_path)
    return pte_path.read_bytes(), record_path


def _official_numeric_files(model, x, d, pte_path, record_path) -> None:  # noqa: ANN001
    """The official exporter's XNNPACK program of ``model`` and its ETRecord."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower as official_lower

    et = official_lower(
        torch.export.export(model, (x,)),
        partitioner=[XnnpackPartitioner()],
        generate_etrecord=True,
    ).to_executorch()
    tmp = d / "official.etrecord"
    et.get_etrecord().save(tmp)
    official._write_atomic(record_path, tmp.read_bytes())
    official._write_atomic(pte_path, et.buffer)


@pytest.fixture(scope="module")
def portable_pte(net):
    _, model, x = net
    return to_edge(torch.export.export(model, (x,))).to_executorch().buffer


@pytest.fixture
def wrong_multiply_in_xnnpack(monkeypatch):
    from pyexecutorch.backends.xnnpack import nodes

    build = nodes.BUILDERS["XNNMultiply"]

    def wrong(b, node, xnode):
        build(b, node, xnode)
        out = b.env[node.output_id]
        b.step(lambda: np.add(out, np.float32(1e-2), out=out))

    monkeypatch.setitem(nodes.BUILDERS, "XNNMultiply", wrong)


def test_official_xnnpack_delegate_without_a_map(net, official_xnnpack):
    """The official exporter's XNNPACK delegates have an empty debug-handle map, which the
    report says; their nodes carry graph debug handles, by which each op is still compared
    (a fused activation's handle goes with the node it was fused into)."""
    _, model, x = net
    pte, etrecord = official_xnnpack
    # The official ETRecord file, read by our parse_etrecord (its edge operators, schema 5.4).
    result = compare(model, pte, [x], etrecord=etrecord)
    assert result.notes == [
        "XnnpackBackend delegate at instruction 0 has an empty debug-handle map: its ops are "
        "matched by the graph debug handles written in its nodes"
    ]
    assert [(r.operator, r.graph_nodes) for r in result.rows] == [
        ("XnnpackBackend:XNNFullyConnected", ["aten.linear.default", "aten.relu.default"]),
        ("XnnpackBackend:XNNFullyConnected", ["aten.linear.default"]),
        ("XnnpackBackend:XNNMultiply", ["aten.mul.Tensor"]),
        ("XnnpackBackend:XNNTanh", ["aten.tanh.default"]),
    ]
    assert result.first_divergence is None


def test_wrong_op_inside_an_xnnpack_delegate(net, official_xnnpack, wrong_multiply_in_xnnpack):
    _, model, x = net
    pte, etrecord = official_xnnpack
    first = compare(model, pte, [x], etrecord=etrecord).first_divergence
    assert (first.operator, first.graph_nodes) == (
        "XnnpackBackend:XNNMultiply",
        ["aten.mul.Tensor"],
    )
    assert first.max_abs_error == pytest.approx(1e-2, rel=1e-4)
    assert first.source == "net.py:13: return torch.tanh(self.fc2(h) * 2.0)"


def test_unknown_handles_are_refused(net):
    _, model, x = net
    pte = (
        to_edge_transform_and_lower(
            torch.export.export(model, (x,)), partitioner=[ExamplePartitioner()]
        )
        .to_executorch()
        .buffer
    )
    with pytest.raises(
        ValueError, match=r"instruction 0: DelegateCall in the .pte, aten::addmm.out here"
    ):
        compare(model, pte, [x])


def test_debug_cli(net, portable_pte, tmp_path, capsys, wrong_relu_kernel):
    d, model, x = net
    pte = tmp_path / "net.pte"
    pte.write_bytes(portable_pte)
    np.save(tmp_path / "x.npy", x.numpy())
    rc = main(
        ["debug", str(pte), "--against", f"{d / 'net.py'}:Net", "--inputs", str(tmp_path / "x.npy")]
    )
    out = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert out[0] == f"{pte} against {d / 'net.py'}:Net, inputs from {tmp_path / 'x.npy'}:"
    marked = [line for line in out if line.startswith(">>")]
    assert len(marked) == 1 and "aten::relu.out" in marked[0] and "net.py:12" in marked[0]
    assert out[-1].startswith("first divergence: instruction 1, aten::relu.out")
