"""A program lowered through the example backend, written and decoded: its
delegate entries, segments, inline data, named data and alignment follow the
``ExecutorchBackendConfig``."""

from __future__ import annotations

import hashlib
import math
import warnings

import numpy as np
import pytest
import torch

from pyexecutorch.backends.example.aot import ExamplePartitioner
from pyexecutorch.exir import ExecutorchBackendConfig, to_edge
from pyexecutorch.exir.backend import CompileSpec, get_lowered_backend_modules
from pyexecutorch.runtime import Runtime
from pyexecutorch.schema import DataLocation, DelegateCall, decode_pte


class TwinLinear(torch.nn.Module):
    """Two linear layers with equal weights, apart (sin is not delegated): two
    delegates whose weights are the same bytes."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)
        self.b.load_state_dict(self.a.state_dict())

    def forward(self, x):
        return self.b(torch.sin(self.a(x)))


X = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))


def _compile(weights: bytes, config: ExecutorchBackendConfig):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge = to_edge(torch.export.export(TwinLinear().eval(), (X,)))
    edge = edge.to_backend(ExamplePartitioner(compile_specs=[CompileSpec("weights", weights)]))
    lowered = get_lowered_backend_modules(edge.exported_program().graph_module)
    return lowered, edge.to_executorch(config)


def _write(et, tmp_path) -> bytes:  # noqa: ANN001
    path = tmp_path / "model.pte"
    with open(path, "wb") as f:
        et.write_to_file(f)
    data = path.read_bytes()
    assert data == et.buffer
    return data


def _offset_in(data: bytes, view: memoryview) -> int:
    """Where the bytes of ``view`` (a view into ``data``) start in the file."""
    base = np.frombuffer(data, np.uint8).ctypes.data
    return np.frombuffer(view, np.uint8).ctypes.data - base


def _runs(data: bytes) -> None:
    with torch.no_grad():
        want = TwinLinear().eval()(X).numpy()
    (got,) = Runtime.get().load_program(data).load_method("forward").execute([X])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _delegate_calls(plan) -> list[DelegateCall]:  # noqa: ANN001
    return [
        i.instr_args
        for c in plan.chains
        for i in c.instructions
        if isinstance(i.instr_args, DelegateCall)
    ]


@pytest.mark.parametrize("segment_alignment", [128, 1024])
def test_delegates_in_segments_with_named_weights(tmp_path, segment_alignment: int):
    lowered, et = _compile(b"named", ExecutorchBackendConfig(segment_alignment=segment_alignment))
    data = _write(et, tmp_path)
    pte = decode_pte(data)
    (plan,) = pte.program.execution_plan
    assert len(lowered) == 2
    assert [d.id for d in plan.delegates] == ["ExampleBackend", "ExampleBackend"]
    for d in plan.delegates:
        assert [(s.key, s.value) for s in d.compile_specs] == [("weights", b"named")]
        assert d.processed.location == DataLocation.SEGMENT
    calls = _delegate_calls(plan)
    assert [c.delegate_index for c in calls] == [0, 1]
    assert [len(c.args) for c in calls] == [2, 2]  # one input, one output each
    # Equal weights (keyed by content) make equal delegate bytes: stored once.
    assert lowered[0].processed_bytes == lowered[1].processed_bytes
    assert plan.delegates[0].processed.index == plan.delegates[1].processed.index
    assert len(pte.delegate_segments) == 1
    assert pte.program.backend_delegate_data == []
    segment = pte.delegate_segments[0]
    assert bytes(segment) == lowered[0].processed_bytes
    assert _offset_in(data, segment) % segment_alignment == 0
    assert (_offset_in(data, segment) - pte.header.segment_base_offset) % segment_alignment == 0
    # The weight and the bias, each under one key shared by both delegates.
    assert len(pte.named_data) == 2
    weight = TwinLinear().a.weight.detach().numpy().tobytes()
    key = f"example_backend/{hashlib.sha256(weight).hexdigest()[:32]}"
    assert bytes(pte.named_data[key].data) == weight
    for blob in pte.named_data.values():
        assert _offset_in(data, blob.data) % math.lcm(segment_alignment, 16) == 0
    _runs(data)


@pytest.mark.parametrize("delegate_alignment", [None, 64, 256])
def test_inline_delegate_data(tmp_path, delegate_alignment: int | None):
    config = ExecutorchBackendConfig(
        extract_delegate_segments=False, delegate_alignment=delegate_alignment
    )
    lowered, et = _compile(b"inline", config)
    data = _write(et, tmp_path)
    pte = decode_pte(data)
    (plan,) = pte.program.execution_plan
    assert pte.delegate_segments == []
    assert pte.named_data == {}
    refs = [d.processed for d in plan.delegates]
    assert [r.location for r in refs] == [DataLocation.INLINE] * 2
    inline = pte.program.backend_delegate_data
    assert len(inline) == 1  # equal bytes, stored once
    assert bytes(inline[refs[0].index].data) == lowered[0].processed_bytes
    start = data.find(lowered[0].processed_bytes)
    assert start > 0
    assert start % (delegate_alignment or 16) == 0
    _runs(data)


def test_delegate_bytes_differ_when_weights_differ(tmp_path):
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.b(torch.sin(self.a(x)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge = to_edge(torch.export.export(Two().eval(), (X,)))
    et = edge.to_backend(ExamplePartitioner()).to_executorch()
    pte = decode_pte(_write(et, tmp_path))
    (plan,) = pte.program.execution_plan
    assert [d.processed.index for d in plan.delegates] == [0, 1]
    assert len(pte.delegate_segments) == 2
