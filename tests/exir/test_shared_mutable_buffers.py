"""``MemoryPlanningPass(share_mutable_buffers=True)``: three methods of one module share
its state. The same script exports with pyexecutorch and with the official exporter;
both programs run in both runtimes (ours, and the official ``executorch.runtime``,
which gives a program's methods one copy of the shared arena)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.exir.memory_planning import MemoryPlanError
from pyexecutorch.runtime import Runtime
from pyexecutorch.schema.pte import decode_pte
from tests import official


class _State(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(4))
        self.register_buffer("steps", torch.zeros(1, dtype=torch.int64))

    def forward(self, x):
        self.state.add_(x)
        self.steps.add_(1)
        return self.state * 2

    def get_state(self):
        return self.state.clone(), self.steps.clone()

    def set_state(self, x):
        self.state.copy_(x)
        return x.sum()


class _Bound(torch.nn.Module):
    def __init__(self, m: torch.nn.Module, name: str) -> None:
        super().__init__()
        self.m, self.name = m, name

    def forward(self, *args):
        return getattr(self.m, self.name)(*args)


def _programs() -> dict[str, torch.export.ExportedProgram]:
    m = _State()
    x = torch.ones(4)
    return {
        "forward": torch.export.export(_Bound(m, "forward"), (x,)),
        "get_state": torch.export.export(_Bound(m, "get_state"), ()),
        "set_state": torch.export.export(_Bound(m, "set_state"), (x,)),
    }


def _export(exir, passes) -> bytes:
    """The same lines for both exporters (``exir``, ``exir.passes`` of either package)."""
    edge = exir.to_edge(_programs())
    config = exir.ExecutorchBackendConfig(
        memory_planning_pass=passes.MemoryPlanningPass(share_mutable_buffers=True),
        emit_mutable_buffer_names=True,
    )
    return edge.to_executorch(config).buffer


_CACHE: dict[str, bytes] = {}


def _pte(which: str) -> bytes:
    if which not in _CACHE:
        if which == "ours":
            import pyexecutorch.exir as exir
            import pyexecutorch.exir.passes as passes
        else:
            official.silence_noise()
            import executorch.exir as exir
            import executorch.exir.passes as passes
        _CACHE[which] = _export(exir, passes)
    return _CACHE[which]


def _ours(pte: bytes):
    program = Runtime.get().load_program(pte)
    return lambda name, *args: [
        np.asarray(o) for o in program.load_method(name).execute([a.numpy() for a in args])
    ]


def _theirs(pte: bytes):
    official.silence_noise()
    from executorch.runtime import Runtime as OfficialRuntime

    program = OfficialRuntime.get().load_program(pte)
    methods = {}

    def call(name, *args):
        if name not in methods:
            methods[name] = program.load_method(name)
        return [official.to_numpy(o) for o in methods[name].execute(list(args))]

    call.keep = (pte, program)  # the program reads the bytes it was given
    return call


@pytest.mark.parametrize("runtime", ["ours", "official"])
@pytest.mark.parametrize("exporter", ["ours", "official"])
def test_methods_share_state(exporter: str, runtime: str):
    pte = _pte(exporter)
    call = (_ours if runtime == "ours" else _theirs)(pte)
    a, b = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([0.5, -1.0, 0.0, 2.0])
    state, steps = call("get_state")
    np.testing.assert_array_equal(state, np.zeros(4, np.float32))
    np.testing.assert_array_equal(call("set_state", a)[0], np.float32(10.0))
    np.testing.assert_array_equal(call("forward", b)[0], (a + b).numpy() * 2)
    np.testing.assert_array_equal(call("forward", b)[0], (a + 2 * b).numpy() * 2)
    state, steps = call("get_state")
    np.testing.assert_array_equal(state, (a + 2 * b).numpy())
    np.testing.assert_array_equal(steps, np.array([2]))


def test_our_plan_matches_the_official_layout():
    ours, theirs = decode_pte(_pte("ours")).program, decode_pte(_pte("official")).program

    def layout(program):
        out = {}
        for plan in program.execution_plan:
            shared = sorted(
                (v.val.extra_tensor_info.fully_qualified_name, v.val.allocation_info.memory_id)
                for v in plan.values
                if getattr(v.val, "allocation_info", None) is not None
                and v.val.allocation_info.memory_id == 2
            )
            out[plan.name] = (
                len(plan.non_const_buffer_sizes),
                plan.non_const_buffer_sizes[2],
                shared,
            )
        return out

    assert layout(ours) == layout(theirs)
    assert layout(ours)["get_state"][2] == [("m.state", 2), ("m.steps", 2)]


def test_share_needs_planned_mutable_buffers():
    from pyexecutorch.exir import MemoryPlanningPass

    with pytest.raises(ValueError, match="share_mutable_buffers needs alloc_mutable_buffers"):
        MemoryPlanningPass(share_mutable_buffers=True, alloc_mutable_buffers=False)
    assert issubclass(MemoryPlanError, AssertionError)
