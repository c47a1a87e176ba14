"""A mutable buffer read and updated only inside a delegate moves into it: the
delegate's program holds the buffer and its update, the method neither passes nor
writes it back; a buffer whose new value the method also returns cannot move."""

from __future__ import annotations

import pytest
import torch
from torch.export.graph_signature import InputKind, OutputKind

from pyexecutorch.exir import to_edge
from pyexecutorch.exir.backend.partitioner import (
    DELEGATION_TAG,
    DelegationSpec,
    Partitioner,
    PartitionResult,
)
from pyexecutorch.exir.backend.utils import get_delegates


class _TagAllWithBuffers(Partitioner):
    def __init__(self) -> None:
        super().__init__()
        self.delegation = DelegationSpec("ExampleBackend", [])

    def partition(self, exported_program):  # noqa: ANN001, ANN201
        buffers = exported_program.graph_signature.inputs_to_buffers
        for node in exported_program.graph.nodes:
            if node.op == "call_function" or node.name in buffers:
                node.meta[DELEGATION_TAG] = "all"
        return PartitionResult(exported_program, {"all": self.delegation})


class _Accumulate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.ones(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total.add_(x)
        return x * self.total


def test_the_delegate_owns_a_buffer_it_alone_reads_and_updates():
    x = torch.arange(6.0).reshape(2, 3)
    lowered = to_edge(torch.export.export(_Accumulate(), (x,))).to_backend(_TagAllWithBuffers())
    ep = lowered.exported_program()
    assert not ep.graph_signature.buffers_to_mutate and not ep.state_dict
    (delegate,) = get_delegates(ep.graph)
    (call,) = delegate.users
    assert len(call.args) == 2  # the lowered module and x: no buffer passed
    inner = getattr(ep.graph_module, delegate.name).original_module
    kinds = [s.kind for s in inner.graph_signature.input_specs]
    assert kinds == [InputKind.BUFFER, InputKind.USER_INPUT]
    outs = [(s.kind, s.target) for s in inner.graph_signature.output_specs]
    assert outs == [(OutputKind.BUFFER_MUTATION, "total"), (OutputKind.USER_OUTPUT, None)]
    torch.testing.assert_close(inner.state_dict["total"], torch.ones(2, 3))
    # The buffer's state lives in the delegate's program across calls, as in eager.
    eager = _Accumulate()
    for value in (x, -x, x * 0.5):
        torch.testing.assert_close(ep.module()(value), eager(value))


class _ReturnsUpdate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.state.add_(x)


def test_a_buffer_whose_update_is_returned_stays():
    edge = to_edge(torch.export.export(_ReturnsUpdate(), (torch.ones(2),)))
    with pytest.raises(AssertionError, match="buffer 'state' would live in the delegate"):
        edge.to_backend(_TagAllWithBuffers())
