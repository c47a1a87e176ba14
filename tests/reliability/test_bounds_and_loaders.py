"""Issue 29, part A: allocation bounded before it happens, a default instruction budget,
jumps only on Bool conditions, loaders that never let a changed file or buffer change (or
kill) a loaded program, and a data-flow check in verification.

Each test names the symptom it had before the fix (main d6b6e7f).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pyexecutorch import portable_lib
from pyexecutorch.kernels import bounds
from pyexecutorch.kernels.index.index import index_tensor_out
from pyexecutorch.kernels.pool.pad import constant_pad_nd
from pyexecutorch.kernels.pool.upsample import upsample_nearest2d
from pyexecutorch.kernels.registry import KernelError
from pyexecutorch.kernels.shape.creation import arange, arange_start, full, zeros
from pyexecutorch.kernels.shape.shape import repeat, repeat_interleave
from pyexecutorch.runtime import (
    BufferDataLoader,
    FileDataLoader,
    InvalidProgramError,
    MmapDataLoader,
    Runtime,
    Verification,
    limits,
)
from pyexecutorch.runtime.limits import DEFAULT_MAX_INSTRUCTIONS, InstructionBudgetError
from pyexecutorch.runtime.loader import owned_bytes
from pyexecutorch.schema import FormatError, decode_pte, encode_pte
from pyexecutorch.schema.program import (
    Bool,
    EValue,
    Instruction,
    Int,
    JumpFalseCall,
    KernelCall,
    ScalarType,
)
from pyexecutorch.schema.pte import ExtendedHeader

from .harness import CORPUS, inputs_for

REPO = Path(__file__).resolve().parents[2]
UNPLANNED = np.empty(0, np.float32)  # an output memory planning left unplanned


def _seed(name: str) -> bytes:
    return (CORPUS / name).read_bytes()


def _edited(name: str, edit) -> bytes:  # noqa: ANN001
    f = decode_pte(_seed(name))
    edit(f.program.execution_plan[0])
    return encode_pte(f)


def _inputs(data: bytes, seed: int = 0) -> list:
    plan = decode_pte(data).program.execution_plan[0]
    return inputs_for(plan, np.random.default_rng(seed))


# ------------------------------------------------------------------------ 5: bounds


@pytest.mark.parametrize(
    ("call", "message"),
    [
        # Was: MemoryError from np.arange (an 8 TiB range built before the output check;
        # a smaller hostile end ran for minutes and took gigabytes).
        (
            lambda: arange(float(1 << 40), np.empty(10, np.float32)),
            r"arange: an output of shape \[1099511627776\] \(1099511627776 elements\) does "
            r"not fit the planned output of shape \[10\] \(10 elements\)",
        ),
        (
            lambda: arange_start(0, 1 << 40, 1, np.empty(10, np.int64)),
            r"arange: an output of shape \[1099511627776\] .* planned output of shape \[10\]",
        ),
        # Was: MemoryError ("Unable to allocate 4.00 TiB") for each unplanned output below.
        (
            lambda: arange(float(1 << 40), UNPLANNED),
            r"arange: an output of shape \[1099511627776\] would take 4398046511104 bytes, "
            r"more than the 4294967296 an unplanned output may",
        ),
        (
            lambda: full([1 << 20, 1 << 20], 1.0, UNPLANNED),
            r"full: an output of shape \[1048576, 1048576\] would take 4398046511104 bytes",
        ),
        (
            lambda: zeros([1 << 21, 1 << 20], UNPLANNED),
            r"zeros: an output of shape \[2097152, 1048576\]",
        ),
        (
            lambda: repeat(np.ones((2, 2), np.float32), [1 << 20, 1 << 20], UNPLANNED),
            r"repeat: an output of shape \[2097152, 2097152\]",
        ),
        (
            lambda: repeat_interleave(np.full(4, 1 << 40, np.int64), None, np.empty(0, np.int64)),
            r"repeat_interleave: an output of shape \[4398046511104\]",
        ),
        (
            lambda: upsample_nearest2d(
                np.ones((1, 1, 2, 2), np.float32), [1 << 20, 1 << 20], None, UNPLANNED
            ),
            r"upsample_nearest2d: an output of shape \[1, 1, 1048576, 1048576\]",
        ),
        (
            lambda: constant_pad_nd(
                np.ones((2, 2), np.float32), [1 << 20, 0, 1 << 20, 0], 0.0, UNPLANNED
            ),
            r"constant_pad_nd: an output of shape \[1048578, 1048578\]",
        ),
        # Advanced indices broadcast (N, 1) x (1, M): the gather was computed before the
        # output check.
        (
            lambda: index_tensor_out(
                np.ones((4, 4), np.float32),
                [np.zeros((1 << 16, 1), np.int64), np.zeros((1, 1 << 16), np.int64)],
                np.empty(16, np.float32),
            ),
            r"index: an output of shape \[4294967296\] \(4294967296 elements\) does not fit "
            r"the planned output of shape \[16\]",
        ),
    ],
)
def test_value_sized_outputs_are_bounded_before_allocating(call, message):
    start = time.process_time()
    with pytest.raises(KernelError, match=message):
        call()
    assert time.process_time() - start < 1.0  # refused before any work


def test_bounded_outputs_still_fill_planned_and_unplanned_outputs():
    np.testing.assert_array_equal(arange(5.0, np.empty(5, np.float32)), np.arange(5.0))
    np.testing.assert_array_equal(arange_start(2, 11, 3, UNPLANNED.copy()), [2, 5, 8])
    got = repeat(np.array([[1, 2]], np.float32), [2, 2], UNPLANNED.copy())
    np.testing.assert_array_equal(got, np.tile([[1, 2]], (2, 2)))
    # A dynamic-bound output (planned at its upper bound) takes a prefix.
    np.testing.assert_array_equal(arange(3.0, np.empty(8, np.float32)), [0, 1, 2])


def test_unplanned_limit_is_settable():
    before = bounds.max_unplanned_bytes()
    try:
        bounds.set_max_unplanned_bytes(64)
        with pytest.raises(KernelError, match=r"full: an output of shape \[17\] would take 68"):
            full([17], 0.0, UNPLANNED)
        np.testing.assert_array_equal(full([16], 2.0, UNPLANNED), np.full(16, 2.0))
        with pytest.raises(ValueError, match="must be a positive int"):
            bounds.set_max_unplanned_bytes(0)
    finally:
        bounds.set_max_unplanned_bytes(before)


# -------------------------------------------------- 6: instruction budget, jump conditions


def _self_jump(name: str) -> bytes:
    """``forward`` ending in a jump to itself on a condition that is always false."""

    def edit(plan):  # noqa: ANN001
        plan.values.append(EValue(Bool(False)))
        chain = plan.chains[0]
        here = len(chain.instructions)
        chain.instructions.append(Instruction(JumpFalseCall(len(plan.values) - 1, here)))

    return _edited(name, edit)


@pytest.mark.parametrize("jit", [False, True])
def test_endless_loop_stops_at_the_default_budget(jit, monkeypatch):
    # Was: with no max_instructions the call never returned (both tiers, both APIs).
    # The default is ten million (a few seconds of this loop); the test lowers it.
    assert DEFAULT_MAX_INSTRUCTIONS == 10_000_000
    assert Runtime.get().load_program(_seed("ours_mlp.pte")).limits.max_instructions == (
        DEFAULT_MAX_INSTRUCTIONS
    )
    monkeypatch.setattr(limits, "DEFAULT_MAX_INSTRUCTIONS", 5000)
    data = _self_jump("ours_mlp.pte")
    for load in (
        lambda: Runtime.get().load_program(data, jit=jit).load_method("forward").execute,
        lambda: portable_lib._load_for_executorch_from_buffer(data).forward,
    ):
        run = load()
        for seed in range(2):
            with pytest.raises(
                InstructionBudgetError,
                match=r"method 'forward' chain 0 would run more than 5000 instructions "
                r"\(max_instructions=5000\)",
            ):
                run(_inputs(data, seed))


def test_portable_lib_sets_the_instruction_budget():
    # Was: TypeError, portable_lib's loaders took no max_instructions.
    data = _self_jump("official_mlp.pte")
    x = _inputs(data)
    for module in (
        portable_lib._load_for_executorch_from_buffer(data, max_instructions=500),
        portable_lib._load_program_from_buffer(data, max_instructions=500).load_method("forward"),
    ):
        run = module.forward if hasattr(module, "forward") else module.call
        for _ in range(2):
            with pytest.raises(InstructionBudgetError, match=r"max_instructions=500\)"):
                run(x)


def test_bounded_loop_runs_under_the_default_budget():
    data = _seed("ours_while_loop.pte")
    for seed in range(3):
        x = _inputs(data, seed)
        ours = Runtime.get().load_program(data).load_method("forward").execute(x)
        unbounded = Runtime.get().load_program(data, max_instructions=1 << 40)
        expected = unbounded.load_method("forward").execute(x)
        assert all(np.array_equal(a, b) for a, b in zip(ours, expected, strict=True))


def _int_condition(name: str) -> bytes:
    def edit(plan):  # noqa: ANN001
        plan.values.append(EValue(Int(1)))
        chain = plan.chains[0]
        chain.instructions.insert(0, Instruction(JumpFalseCall(len(plan.values) - 1, 0)))

    return _edited(name, edit)


@pytest.mark.parametrize("verification", list(Verification))
def test_jump_on_an_int_is_refused_at_load(verification):
    # Was: `if not v[i]` on Int 1: a chain that never left its loop (hang).
    data = _int_condition("official_mlp.pte")
    message = (
        r"method 'forward': chain 0 instruction 0 \(JumpFalseCall\): condition value \d+ "
        r"is Int, expected a Bool or a Bool tensor"
    )
    with pytest.raises(InvalidProgramError, match=message):
        Runtime.get().load_program(data, verification=verification).load_method("forward")


def test_jump_on_a_float_tensor_is_refused_at_load():
    def edit(plan):  # noqa: ANN001
        chain = plan.chains[0]
        x = plan.inputs[0]
        chain.instructions.insert(0, Instruction(JumpFalseCall(x, 1)))

    data = _edited("official_mlp.pte", edit)
    with pytest.raises(InvalidProgramError, match=r"is a FLOAT tensor, expected a Bool"):
        Runtime.get().load_program(data)


# ------------------------------------------------------------- 7, 8: loaders and memory


def _zero_segments(buf: bytearray) -> None:
    """Overwrite every segment (the weights) of the program in ``buf`` with zeros."""
    header = ExtendedHeader.read(memoryview(buf)[:64])
    buf[header.segment_base_offset :] = bytes(len(buf) - header.segment_base_offset)


@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(lambda b: b, id="bytearray"),
        pytest.param(lambda b: memoryview(b).toreadonly(), id="readonly-view-of-bytearray"),
        pytest.param(lambda b: np.frombuffer(b, np.uint8), id="numpy-view"),
        pytest.param(BufferDataLoader, id="BufferDataLoader"),
    ],
)
@pytest.mark.parametrize("api", ["runtime", "portable_lib"])
def test_changing_the_callers_buffer_after_load_changes_nothing(wrap, api):
    # Was: outputs off by 0.03-0.07 (the program borrowed the caller's memory).
    data = _seed("official_mlp.pte")
    buf = bytearray(data)
    source = wrap(buf)
    if api == "runtime":
        program = Runtime.get().load_program(source)
    elif isinstance(source, BufferDataLoader):
        program = portable_lib._load_for_executorch_from_data_loader(source)
    else:
        program = portable_lib._load_for_executorch_from_buffer(source)
    _zero_segments(buf)  # before the method loads and after
    method = program.load_method("forward") if api == "runtime" else None
    _zero_segments(buf)
    reference = Runtime.get().load_program(data).load_method("forward")
    for seed in range(3):
        x = _inputs(data, seed)
        got = method.execute(x) if method is not None else program.forward(x)
        expected = reference.execute(x)
        assert all(np.array_equal(np.asarray(a), b) for a, b in zip(got, expected, strict=True))


def test_immutable_bytes_are_not_copied():
    data = _seed("official_mlp.pte")
    assert owned_bytes(data) is data
    view = memoryview(data)[8:]
    assert owned_bytes(view) is view
    assert owned_bytes(memoryview(bytearray(data)).toreadonly()) is not None
    assert type(owned_bytes(bytearray(data))) is bytes


_SUBPROCESS = """
import os, shutil, sys
from pyexecutorch.runtime import FileDataLoader, MmapDataLoader, Runtime
from pyexecutorch.schema import FormatError
seed, work = sys.argv[1], sys.argv[2]
for loader in (MmapDataLoader, FileDataLoader):
    for how in ("truncate", "rewrite"):
        path = os.path.join(work, f"{loader.__name__}-{how}.pte")
        shutil.copyfile(seed, path)
        program = Runtime.get().load_program(loader(path))
        size = os.path.getsize(path)
        if how == "truncate":
            os.truncate(path, 64)
        else:  # rewritten in place: same size, other weights
            with open(path, "r+b") as f:
                f.seek(size - 64)
                f.write(bytes(64))
        try:
            program.load_method("forward")
            print(loader.__name__, how, "loaded", flush=True)
        except FormatError as e:
            print(loader.__name__, how, "FormatError:", e, flush=True)
"""


def test_file_changed_before_load_method_is_a_format_error(tmp_path):
    # Was: MmapDataLoader + truncation killed the process with SIGBUS (exit 135); a
    # rewritten file loaded other weights. Run apart so a fault shows as a failure here.
    done = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS, str(CORPUS / "official_mlp.pte"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    lines = done.stdout.splitlines()
    assert len(lines) == 4, lines
    for line, (loader, how) in zip(
        lines,
        [(m, h) for m in ("MmapDataLoader", "FileDataLoader") for h in ("truncate", "rewrite")],
        strict=True,
    ):
        expected = "too short for" if how == "truncate" else "changed on disk after it was opened"
        assert line.startswith(f"{loader} {how} FormatError:") and expected in line, line


def test_file_loaders_keep_working_on_an_unchanged_file(tmp_path):
    data = _seed("official_mlp.pte")
    path = tmp_path / "model.pte"
    path.write_bytes(data)
    expected = Runtime.get().load_program(data).load_method("forward")
    for make in (MmapDataLoader, FileDataLoader):
        method = Runtime.get().load_program(make(path)).load_method("forward")
        for seed in range(2):
            x = _inputs(data, seed)
            got = method.execute(x)
            assert all(np.array_equal(a, b) for a, b in zip(got, expected.execute(x), strict=True))
    with pytest.raises(FormatError, match=r"too short for \[0, 200\)"):
        loader = MmapDataLoader(path)
        path.write_bytes(data[:100])
        loader.load(0, 200)


# ------------------------------------------------------------------ 10: data flow


def _kernel_positions(plan) -> list[int]:  # noqa: ANN001
    return [
        pc
        for pc, i in enumerate(plan.chains[0].instructions)
        if isinstance(i.instr_args, KernelCall)
    ]


def test_reordered_instructions_are_refused():
    # Was: loaded and ran; the two tiers returned different outputs (read-before-write).
    def edit(plan):  # noqa: ANN001
        ins = plan.chains[0].instructions
        ins[0], ins[1] = ins[1], ins[0]  # addmm before the relu... of its input

    data = _edited("ours_mlp.pte", edit)
    plan = decode_pte(data).program.execution_plan[0]
    op = plan.operators[plan.chains[0].instructions[0].instr_args.op_index].name
    for verification in Verification:
        with pytest.raises(
            InvalidProgramError,
            match=rf"method 'forward': chain 0 instruction 0 \({op}[.\w]*\) reads value \d+ "
            r"before it is written on every path",
        ):
            Runtime.get().load_program(data, verification=verification).load_method("forward")


def test_deleted_instruction_is_refused():
    def edit(plan):  # noqa: ANN001
        del plan.chains[0].instructions[0]

    data = _edited("official_mlp.pte", edit)
    with pytest.raises(InvalidProgramError, match=r"reads value \d+ before it is written"):
        Runtime.get().load_program(data).load_method("forward")


def _jump_over_first_kernel(condition: str) -> bytes:
    """``ours_mlp.pte`` whose first instruction is a jump over the next one (which writes
    what the one after reads), on a constant ``Bool`` or on a new Bool tensor input."""
    f = decode_pte(_seed("ours_mlp.pte"))
    plan = f.program.execution_plan[0]
    if condition == "tensor":
        # A copy of the first input, retyped Bool: a value known only when the method runs.
        copy = decode_pte(_seed("ours_mlp.pte")).program.execution_plan[0]
        tensor = copy.values[copy.inputs[0]].val
        tensor.scalar_type = ScalarType.BOOL
        plan.values.append(EValue(tensor))
        plan.inputs.append(len(plan.values) - 1)
    else:
        plan.values.append(EValue(Bool(condition == "true")))
    plan.chains[0].instructions.insert(0, Instruction(JumpFalseCall(len(plan.values) - 1, 2)))
    return encode_pte(f)


def test_a_value_written_on_one_path_only_is_refused():
    # With a jump that may skip the write, the read after it is undefined on that path.
    with pytest.raises(
        InvalidProgramError,
        match=r"chain 0 instruction 2 \(aten::\w+[.\w]*\) reads value \d+ before it is "
        r"written on every path through the chain",
    ):
        Runtime.get().load_program(_jump_over_first_kernel("tensor")).load_method("forward")
    # A constant True never jumps (the write always happens); a constant False always
    # skips it.
    Runtime.get().load_program(_jump_over_first_kernel("true")).load_method("forward")
    with pytest.raises(InvalidProgramError, match=r"chain 0 instruction 2 .* reads value"):
        Runtime.get().load_program(_jump_over_first_kernel("false")).load_method("forward")
