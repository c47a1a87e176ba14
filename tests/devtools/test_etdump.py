"""ETDump recording and the Inspector, against the official runtime and Inspector.

Programs come from the official exporter (cached); the official runtime's
pybindings record ETDump with ``enable_etdump=True`` (the 1.5.1 wheel is built
with the event tracer), so both traces of the same program are compared.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch import portable_lib as pl
from pyexecutorch.devtools import Inspector
from pyexecutorch.runtime import Runtime
from pyexecutorch.runtime.etdump import DebugBufferFullError
from pyexecutorch.schema.etdump import (
    DEBUG_BUFFER_ALIGNMENT,
    OUTPUT_CHAIN,
    decode_etdump,
    encode_etdump,
)
from tests import models, official

DEBUG_SIZE = 1 << 16


@pytest.fixture(scope="module")
def mlp():
    case = models.CASES_BY_NAME["mlp"]
    return official.official_export(case), [x.numpy() for x in case.inputs()]


@pytest.fixture(scope="module")
def mlp_xnnpack():
    case = models.CASES_BY_NAME["mlp"]
    pte = official.official_export_xnnpack(case)
    assert pte is not None
    return pte, [x.numpy() for x in case.inputs()]


def ours(
    pte, inputs, tmp_path, name, debug_buffer_size=DEBUG_SIZE, runs=1, log_delegate_outputs=False
):
    program = Runtime.get().load_program(
        pte,
        enable_etdump=True,
        debug_buffer_size=debug_buffer_size,
        log_delegate_outputs=log_delegate_outputs,
    )
    method = program.load_method("forward")
    for _ in range(runs):
        method.execute(inputs)
    etdp, buf = tmp_path / f"{name}.etdp", tmp_path / f"{name}.bin"
    program.write_etdump_result_to_file(etdp, buf if debug_buffer_size else None)
    return str(etdp), str(buf) if debug_buffer_size else None


def theirs(pte, inputs, tmp_path, name, debug_buffer_size=DEBUG_SIZE, runs=1):
    from executorch.extension.pybindings import portable_lib as official_pl

    pte = bytes(pte)
    module = official_pl._load_for_executorch_from_buffer(
        pte, enable_etdump=True, debug_buffer_size=debug_buffer_size
    )
    for _ in range(runs):
        module.forward([torch.from_numpy(x.copy()) for x in inputs])
    etdp, buf = tmp_path / f"{name}.etdp", tmp_path / f"{name}.bin"
    module.write_etdump_result_to_file(str(etdp), str(buf) if debug_buffer_size else None)
    return str(etdp), str(buf) if debug_buffer_size else None


def official_inspector(etdp, buf=None, etrecord=None):
    from executorch.devtools import Inspector as OfficialInspector

    return OfficialInspector(etdump_path=etdp, debug_buffer_path=buf, etrecord=etrecord)


def listing(inspector):
    """(block, event name, instruction) of every event, as the Inspector lists them."""
    return [(b.name, e.name, e._instruction_id) for b in inspector.event_blocks for e in b.events]


@pytest.mark.parametrize("debug", [0, DEBUG_SIZE])
def test_official_inspector_lists_the_official_runtimes_events(mlp, tmp_path, debug):
    pte, inputs = mlp
    ours_insp = official_inspector(*ours(pte, inputs, tmp_path, "ours", debug, runs=2))
    theirs_insp = official_inspector(*theirs(pte, inputs, tmp_path, "theirs", debug, runs=2))
    assert listing(ours_insp) == listing(theirs_insp)
    names = [e.name for e in ours_insp.event_blocks[1].events]
    assert names[:2] == ["native_call_linear.out", "OPERATOR_CALL"] or "OPERATOR_CALL" in names
    assert all(len(e.perf_data.raw) == 2 for e in ours_insp.event_blocks[1].events)
    if debug:
        # Intermediate outputs agree with the official runtime's, event by event.
        for a, b in zip(
            ours_insp.event_blocks[1].events, theirs_insp.event_blocks[1].events, strict=True
        ):
            assert len(a.debug_data) == len(b.debug_data), a.name
            for x, y in zip(a.debug_data, b.debug_data, strict=True):
                np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-5, atol=1e-6)
        [out] = ours_insp.event_blocks[1].run_output
        np.testing.assert_allclose(out.numpy(), official.official_run(pte, inputs)[0], rtol=1e-5)


def test_our_inspector_reads_the_official_runtimes_etdump(mlp, tmp_path):
    pte, inputs = mlp
    etdp, buf = theirs(pte, inputs, tmp_path, "theirs")
    mine, reference = (
        Inspector(etdump_path=etdp, debug_buffer_path=buf),
        official_inspector(etdp, buf),
    )
    assert listing(mine) == listing(reference)
    for a, b in zip(mine.event_blocks[1].events, reference.event_blocks[1].events, strict=True):
        assert a.perf_data.raw == pytest.approx(b.perf_data.raw)
        for x, y in zip(a.debug_data, b.debug_data, strict=True):
            np.testing.assert_array_equal(x, y.numpy())
    np.testing.assert_array_equal(
        mine.event_blocks[1].run_output[0], reference.event_blocks[1].run_output[0].numpy()
    )


def test_etdump_layout(mlp, tmp_path):
    pte, inputs = mlp
    etdp, buf = ours(pte, inputs, tmp_path, "ours")
    data = open(etdp, "rb").read()
    assert data[8:12] == b"ED00"  # size-prefixed: [size][root][identifier]
    assert int.from_bytes(data[:4], "little") == len(data) - 4
    etdump = decode_etdump(data)
    assert decode_etdump(encode_etdump(etdump)) == etdump
    default, execute = etdump.run_data
    assert [e.profile_event.name for e in default.events] == [
        "Method::init",
        "Program::load_method",
    ]
    debug = [e.debug_event for e in execute.events if e.debug_event]
    assert all(d.debug_entry.tensor.offset % DEBUG_BUFFER_ALIGNMENT == 0 for d in debug)
    assert debug[-1].chain_index == OUTPUT_CHAIN and debug[-1].debug_entry.output.bool_val
    profile = [e.profile_event for e in execute.events if e.profile_event]
    assert all(p.end_time >= p.start_time > 0 for p in profile)
    assert profile[-1].name == "Method::execute"
    assert profile[-1].start_time <= profile[0].start_time


def test_xnnpack_delegate_events(mlp_xnnpack, tmp_path):
    pte, inputs = mlp_xnnpack
    etdp, buf = ours(pte, inputs, tmp_path, "ours")
    mine = Inspector(etdump_path=etdp, debug_buffer_path=buf)
    execute = mine.event_blocks[1]
    inside = [e for e in execute.events if e.is_delegated_op]
    # As the official delegate, ours logs no output of its nodes unless asked to at load.
    assert inside and not any(e.debug_data for e in inside)
    etdp, buf = ours(pte, inputs, tmp_path, "ours", log_delegate_outputs=True)
    mine = Inspector(etdump_path=etdp, debug_buffer_path=buf)
    execute = mine.event_blocks[1]
    inside = [e for e in execute.events if e.is_delegated_op]
    assert all(len(e.debug_data) == 1 for e in inside)
    # One event per XNNPACK node, identified by the node's debug handle, its type in the metadata.
    assert inside and all(isinstance(e.delegate_debug_identifier, int) for e in inside)
    assert b"XNNFullyConnected" in [e.delegate_debug_metadatas[0] for e in inside]
    call = next(e for e in execute.events if e.name == "DELEGATE_CALL")
    assert all(e.instruction_id == call.instruction_id for e in inside)
    assert sum(e.perf_data.avg for e in inside) <= call.perf_data.avg
    # The last node's logged output is the delegate's (and method's) output.
    np.testing.assert_allclose(
        inside[-1].debug_data[-1], official.official_run(pte, inputs)[0], rtol=1e-5, atol=1e-6
    )
    # The official Inspector lists the same events (delegate events by their ids).
    assert listing(official_inspector(etdp, buf)) == listing(mine)
    # ... and the official runtime lists DELEGATE_CALL and Method::execute too.
    theirs_names = [
        e.name
        for e in official_inspector(*theirs(pte, inputs, tmp_path, "t")).event_blocks[1].events
    ]
    assert {"DELEGATE_CALL", "Method::execute"} <= set(theirs_names)


class Residual(torch.nn.Module):
    """A depthwise then 1x1 convolution whose output adds the input (MobileNetV2's block)."""

    def __init__(self) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = torch.nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pw(torch.relu(self.dw(x)))


def test_profiled_delegate_runs_compiled(tmp_path):
    """Profiling (no outputs logged) times what the compiled tier runs: the delegate's
    compiled plan, one event per node or per group of nodes one kernel fuses (a
    convolution and the add after it, named by their types joined by ``+``), with the
    untraced compiled tier's bits over calls on changing inputs."""
    shape = (1, 8, 10, 10)
    pte = official.module_xnnpack_pte("profiled_residual", "v1", Residual, (torch.randn(shape),))
    plain = Runtime.get().load_program(pte, jit=True).load_method("forward")
    program = Runtime.get().load_program(pte, jit=True, enable_etdump=True)
    traced = program.load_method("forward")
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(plain.execute([x])[0], traced.execute([x])[0])
    (_, handle) = traced._loaded._delegates[0]  # (its one delegate)
    assert all(plan.compiled for plan in handle.plans.values())
    etdp = tmp_path / "p.etdp"
    program.write_etdump_result_to_file(etdp, None)
    execute = Inspector(etdump_path=str(etdp)).event_blocks[1]
    inside = [
        (e.delegate_debug_identifier, e.delegate_debug_metadatas[0])
        for e in execute.events
        if e.is_delegated_op
    ]
    # Nodes by debug handle (the layout transposes have none: by type and index); the 1x1
    # convolution and the add are one kernel, one event (numpy's plan: 3 and 4 apart).
    assert inside == [
        ("XNNStaticTranspose #0", b"XNNStaticTranspose"),
        (1, b"XNNDepthwiseConv2d"),
        (3, b"XNNConv2d+XNNAdd"),
        ("XNNStaticTranspose #4", b"XNNStaticTranspose"),
    ]
    assert all(len(e.perf_data.raw) == 3 for e in execute.events if e.is_delegated_op)


def test_untraced_code_has_no_hooks(mlp):
    pte, inputs = mlp
    plain = Runtime.get().load_program(pte).load_method("forward").plan
    traced = Runtime.get().load_program(pte, enable_etdump=True).load_method("forward").plan
    assert "clk" not in plain.sources[0] and not plain.traced and traced.traced
    # One clock reading per call: a call ends when the next begins.
    assert traced.sources[0].count("clk") == len(traced.instructions) + 1
    # Untraced, the weights' permutes are views made at load; traced, each runs, so BLAS
    # multiplies a contiguous copy instead of a transposed view: its sums may round apart.
    np.testing.assert_allclose(
        Runtime.get().load_program(pte).load_method("forward").execute(inputs)[0],
        Runtime.get()
        .load_program(pte, enable_etdump=True)
        .load_method("forward")
        .execute(inputs)[0],
        rtol=1e-6,
        atol=1e-7,
    )


def test_tracing_keeps_the_compiled_tiers_numbers(mlp):
    """Traced, a method never compiles whole; its products take the whole method's forms
    (a loop up to 2**13 multiply-adds), so its outputs stay the same bits."""
    pte, inputs = mlp
    plain = Runtime.get().load_program(pte, jit=True).load_method("forward")
    traced = Runtime.get().load_program(pte, jit=True, enable_etdump=True).load_method("forward")
    assert plain.plan.whole_source is not None and traced.plan.whole_source is None
    np.testing.assert_array_equal(plain.execute(inputs)[0], traced.execute(inputs)[0])


def test_debug_buffer_too_small(mlp):
    pte, inputs = mlp
    method = (
        Runtime.get()
        .load_program(pte, enable_etdump=True, debug_buffer_size=64)
        .load_method("forward")
    )
    with pytest.raises(Exception, match="64-byte ETDump debug buffer is full") as info:
        method.execute(inputs)
    assert isinstance(info.value.__cause__, DebugBufferFullError)


def test_bad_debug_buffer_size(mlp):
    with pytest.raises(ValueError, match="debug_buffer_size must be a non-negative int, got -1"):
        Runtime.get().load_program(mlp[0], enable_etdump=True, debug_buffer_size=-1)


def test_module_api(mlp, tmp_path):
    pte, inputs = mlp
    module = pl._load_for_executorch_from_buffer(
        pte, enable_etdump=True, debug_buffer_size=DEBUG_SIZE
    )
    assert module.has_etdump()
    module.forward(inputs)
    module.forward(inputs)
    module.write_etdump_result_to_file(str(tmp_path / "m.etdp"), str(tmp_path / "m.bin"))
    insp = Inspector(etdump_path=tmp_path / "m.etdp", debug_buffer_path=tmp_path / "m.bin")
    assert [b.name for b in insp.event_blocks] == ["Default", "Execute"]
    assert insp.event_blocks[1].runs == 2
    rows = insp.to_dataframe()
    assert "avg (ms)" in rows.columns and len(rows) == sum(len(b.events) for b in insp.event_blocks)
    insp.save_data_to_tsv(tmp_path / "m.tsv")
    header = (tmp_path / "m.tsv").read_text().splitlines()[0].split("\t")
    assert header[:3] == ["event_block_name", "event_name", "raw"]
    ops = insp.get_op_list()
    assert "OPERATOR_CALL" not in ops and any(k.startswith("native_call_") for k in ops)


def test_corrupt_etdump():
    from pyexecutorch.schema.errors import FormatError

    with pytest.raises(FormatError, match="too short"):
        Inspector(etdump_data=b"\x00" * 8)
    with pytest.raises(ValueError, match="exactly one of etdump_path and etdump_data"):
        Inspector()
