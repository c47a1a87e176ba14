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


def test_matches_when_right(net):
    _, model, x = net
    pte = to_edge(torch.export.export(model, (x,))).to_executorch().buffer
    result = compare(model, pte, [x])
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


def test_wrong_kernel_is_the_first_divergence(net, wrong_relu_kernel):
    _, model, x = net
    pte = to_edge(torch.export.export(model, (x,))).to_executorch().buffer
    result = compare(model, pte, [x], rtol=1e-5, atol=1e-6)
    first = result.first_divergence
    assert (first.instruction, first.operator, first.graph_nodes) == (
        1,
        "aten::relu.out",
        ["relu.default"],
    )
    assert first.max_abs_error == pytest.approx(1e-2, rel=1e-4)
    assert first.source == "net.py:12: h = torch.relu(self.fc1(x))"
    assert result.rows[0].within_tolerance  # the operator before it is fine
    assert "first divergence: instruction 1, aten::relu.out (relu.default)" in str(result)


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
    assert (first.operator, first.graph_nodes) == ("ExampleBackend:relu", ["relu.default"])
    assert first.max_abs_error == pytest.approx(1e-2, rel=1e-4)
    assert first.source == "net.py:12: h = torch.relu(self.fc1(x))"


def test_official_xnnpack_delegate_without_a_map(net):
    """The official exporter's XNNPACK delegates have an empty debug-handle map: said, and the
    delegate's outputs are still compared."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower as official_lower

    _, model, x = net
    et = official_lower(
        torch.export.export(model, (x,)), partitioner=[XnnpackPartitioner()], generate_etrecord=True
    ).to_executorch()
    result = compare(model, et.buffer, [x], etrecord=et.get_etrecord())
    assert (
        result.notes
        and "XnnpackBackend delegate at instruction 0 has an empty debug-handle map"
        in result.notes[0]
    )
    inside = [r for r in result.rows if r.operator.startswith("XnnpackBackend:")]
    assert inside and all(r.note == "not in the delegate's debug-handle map" for r in inside)
    [output] = [r for r in result.rows if r.operator == "XnnpackBackend output 0"]
    assert output.within_tolerance and output.max_abs_error < 1e-5


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


def test_debug_cli(net, tmp_path, capsys, wrong_relu_kernel):
    d, model, x = net
    pte = tmp_path / "net.pte"
    pte.write_bytes(to_edge(torch.export.export(model, (x,))).to_executorch().buffer)
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
