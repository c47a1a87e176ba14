"""Delegates whose compile specs name a device: the copies ``PropagateDevicePass`` puts
at their boundary, the per-device arenas, the program against the official exporter's,
and our host-only runtime refusing such a method at load as the official runtime does."""

from __future__ import annotations

import hashlib
import inspect
import json
import warnings

import numpy as np
import pytest
import torch

from pyexecutorch.backends.example.aot import ExamplePartitioner
from pyexecutorch.exir import ExecutorchBackendConfig, PropagateDeviceConfig, to_edge
from pyexecutorch.exir.backend import CompileSpec
from pyexecutorch.exir.passes._device_copy_ops_registry import d2h_copy, h2d_copy
from pyexecutorch.exir.passes.propagate_device_pass import PropagateDevicePass
from pyexecutorch.runtime import Runtime
from pyexecutorch.runtime.errors import DeviceMemoryError
from pyexecutorch.schema import decode_pte
from pyexecutorch.schema.program import DeviceType
from tests import official


class AddThenMul(torch.nn.Module):
    def forward(self, x, y):
        return (x + y) * y


INPUTS = (torch.ones(2, 2), torch.full((2, 2), 2.0))


def _on(device: bytes, ops: set[str]) -> ExamplePartitioner:
    return ExamplePartitioner(ops=ops, compile_specs=[CompileSpec("target_device", device)])


def _compile(partitioners, config: ExecutorchBackendConfig | None = None):  # noqa: ANN001
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(AddThenMul(), INPUTS, strict=True)
        edge = to_edge({"forward": ep, "forward2": ep})
        for partitioner in partitioners:
            edge = edge.to_backend({"forward2": partitioner})
    return edge.to_executorch(config or ExecutorchBackendConfig())


def _targets(et, method: str = "forward2") -> list[str]:  # noqa: ANN001
    gm = et.exported_program(method).graph_module
    named = {h2d_copy.out: "h2d", d2h_copy.out: "d2h"}  # out variants by now
    return [named[n.target] for n in gm.graph.nodes if n.target in named]


def _plan(et, method: str):  # noqa: ANN001
    (plan,) = [p for p in et.executorch_program.execution_plan if p.name == method]
    return plan


def _official_pte() -> bytes:
    """The official exporter's program: add delegated by its device-aware demo
    partitioner on cuda:0 in forward2, cached like tests/official.py's exports."""

    def build() -> bytes:
        from executorch.exir import ExecutorchBackendConfig as TheirConfig
        from executorch.exir import to_edge as their_to_edge
        from executorch.exir.backend.test.device_util import DeviceAwarePartitioner

        ep = torch.export.export(AddThenMul(), INPUTS, strict=True)
        edge = their_to_edge({"forward": ep, "forward2": ep})
        edge = edge.to_backend({"forward2": DeviceAwarePartitioner("cuda:0")})
        return edge.to_executorch(TheirConfig(enable_non_cpu_memory_planning=True)).buffer

    key = hashlib.sha256(
        (inspect.getsource(AddThenMul) + inspect.getsource(build) + official.versions()).encode()
    ).hexdigest()[:20]
    return official.cached_file(official.cache_dir() / f"device_copies.{key}.pte", build)


def test_copies_and_device_arena_match_the_official_program():
    ours = _compile([_on(b"cuda:0", {"add"})])
    assert _targets(ours) == ["h2d", "h2d", "d2h"]
    assert _targets(ours, "forward") == []
    theirs = decode_pte(_official_pte()).program
    mine = decode_pte(ours.buffer).program
    # forward2 only: in forward (no device) our planner writes a result over a dying
    # input, deliberately unlike the official; with device tensors it does not.
    (a,) = [p for p in theirs.execution_plan if p.name == "forward2"]
    (b,) = [p for p in mine.execution_plan if p.name == "forward2"]
    # The delegates' own bytes are each backend's; all else is the planned program.
    for field in (
        "values",
        "chains",
        "operators",
        "inputs",
        "outputs",
        "non_const_buffer_sizes",
        "non_const_buffer_device",
    ):
        assert getattr(b, field) == getattr(a, field), field
    plan = _plan(ours, "forward2")
    assert plan.non_const_buffer_sizes == [0, 48, 48]
    assert [
        (d.buffer_idx, d.device_type, d.device_index) for d in plan.non_const_buffer_device
    ] == [(2, DeviceType.CUDA, 0)]


def test_a_device_planned_method_is_refused_at_load_as_officially_and_others_still_run():
    et = _compile([_on(b"cuda:0", {"add"})])
    program = Runtime.get().load_program(et.buffer)
    forward = program.load_method("forward")
    with pytest.raises(RuntimeError) as caught:
        program.load_method("forward2")
    assert isinstance(caught.value, DeviceMemoryError)
    from executorch.extension.pybindings import portable_lib

    with pytest.raises(RuntimeError) as theirs:
        portable_lib._load_program_from_buffer(_official_pte()).load_method("forward2")
    assert str(theirs.value) == "Failed to allocate 48 bytes for buffer 1 on device 1:0"
    assert str(caught.value).startswith(str(theirs.value) + " (method 'forward2' plans memory id 2")
    for scale in (1.0, -3.0, 0.5):  # the method loaded before still runs, input after input
        x, y = INPUTS[0] * scale, INPUTS[1] + scale
        (out,) = forward.execute([x, y])
        np.testing.assert_array_equal(np.asarray(out), ((x + y) * y).numpy())


def test_without_device_planning_only_the_specs_are_tagged():
    et = _compile(
        [_on(b"cuda:1", {"add"})], ExecutorchBackendConfig(enable_non_cpu_memory_planning=False)
    )
    assert _targets(et) == []
    assert _plan(et, "forward2").non_const_buffer_device is None
    gm = et.exported_program("forward2").graph_module
    devices = {n.name: n.meta["spec"].device_index for n in gm.graph.nodes if n.name == "getitem"}
    assert devices == {"getitem": 1}
    (out,) = Runtime.get().load_program(et.buffer).load_method("forward2").execute(list(INPUTS))
    np.testing.assert_array_equal(np.asarray(out), AddThenMul()(*INPUTS).numpy())


@pytest.mark.parametrize(
    ("second", "copies"),
    [
        (b"cuda:0", ["h2d", "h2d", "h2d", "d2h"]),
        (b"cuda:1", ["h2d", "h2d", "d2h", "h2d", "h2d", "d2h"]),
    ],
)
def test_a_round_trip_between_delegates_on_one_device_is_dropped(second, copies):
    # add on cuda:0, then mul in a delegate of its own: on the same device the add's
    # result goes straight in; on another device it goes through the host.
    et = _compile([_on(b"cuda:0", {"add"}), _on(second, {"mul"})])
    assert _targets(et) == copies


def test_skip_flags_put_method_inputs_and_outputs_on_the_device():
    config = PropagateDeviceConfig(
        skip_h2d_for_method_inputs={"forward2": True}, skip_d2h_for_method_outputs=True
    )
    et = _compile(
        [_on(b"cuda:0", {"add", "mul"})],
        ExecutorchBackendConfig(propagate_device_config=config),
    )
    # y feeds the delegate twice (add and mul in one partition): one user, no copy.
    assert _targets(et) == []
    gm = et.exported_program("forward2").graph_module
    placeholders = [n.meta["spec"].device for n in gm.graph.nodes if n.op == "placeholder"]
    assert placeholders == [DeviceType.CUDA, DeviceType.CUDA]
    assert _targets(et, "forward") == []


def test_skip_flags_need_device_planning_and_a_single_user():
    with pytest.raises(ValueError, match="only with enable_non_cpu_memory_planning=True"):
        PropagateDevicePass(skip_h2d_for_method_inputs=True)
    config = PropagateDeviceConfig(skip_h2d_for_method_inputs=True)
    with pytest.raises(RuntimeError, match="method input 'y' has 2 users"):
        _compile([_on(b"cuda:0", {"add"})], ExecutorchBackendConfig(propagate_device_config=config))


def test_the_planned_program_with_copies_is_written_as_the_official_writes_it():
    from executorch.exir.serde import serialize as official_serde

    from pyexecutorch.exir.serde.serialize import deserialize, serialize

    planned = _compile([_on(b"cuda:0", {"add"})]).exported_program("forward2")
    artifact = serialize(planned)
    targets = [
        n["target"] for n in json.loads(artifact.exported_program)["graph_module"]["graph"]["nodes"]
    ]
    assert targets.count("torch.ops.et_copy._h2d_copy.out") == 2
    assert targets.count("torch.ops.et_copy._d2h_copy.out") == 1

    def copies(ep) -> list[str]:  # noqa: ANN001
        return [n.target._schema.name for n in ep.graph.nodes if "et_copy" in str(n.target)]

    want = ["et_copy::_h2d_copy", "et_copy::_h2d_copy", "et_copy::_d2h_copy"]
    assert copies(deserialize(artifact)) == want
    assert copies(official_serde.deserialize(artifact)) == want
