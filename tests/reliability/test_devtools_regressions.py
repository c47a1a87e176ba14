"""What fuzzing bundled programs and ETDumps found, each now a precise error or a correct
answer. Inputs are the corpus seeds with one edit each."""

from __future__ import annotations

import numpy as np
import pytest

from pyexecutorch import portable_lib
from pyexecutorch.devtools import Inspector
from pyexecutorch.devtools.bundled_program.runtime import BundledModule, BundledVerificationError
from pyexecutorch.devtools.bundled_program.values import from_value, to_value
from pyexecutorch.runtime import InvalidProgramError, Runtime
from pyexecutorch.schema import FormatError, decode_pte, encode_pte
from pyexecutorch.schema.bundled_program import (
    Int,
    Value,
    decode_bundled_program,
    encode_bundled_program,
)
from pyexecutorch.schema.etdump import ValueType, decode_etdump, encode_etdump
from pyexecutorch.schema.scalar_type import ScalarType

from .harness import CORPUS


def _bundled(edit) -> bytes:  # noqa: ANN001
    bundled = decode_bundled_program((CORPUS / "ours_mlp.bpte").read_bytes())
    edit(bundled)
    bundled.program = bytes(bundled.program)
    return encode_bundled_program(bundled)


def _verify(data: bytes) -> None:
    module = BundledModule(data)
    module.verify_result_with_bundled_expected_output("forward", 0)


def _first_input(bundled):  # noqa: ANN001, ANN202
    return bundled.method_test_suites[0].test_cases[0].inputs[0].val


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: setattr(t, "dim_order", [0, 7]), r"input 0: dim_order \[0, 7\] is not a perm"),
        (lambda t: setattr(t, "sizes", [4, 15]), r"float32\[4, 15\] needs 240 bytes, the bundled"),
        (lambda t: setattr(t, "sizes", [-4, 16]), r"input 0: negative size in \[-4, 16\]"),
        (lambda t: setattr(t, "scalar_type", ScalarType.QINT8), r"input 0: scalar type QInt8"),
    ],
)
def test_corrupt_test_case_tensor_is_a_format_error(edit, message):
    # Was: ValueError / TypeError from values.from_value.
    data = _bundled(lambda b: edit(_first_input(b)))
    with pytest.raises(FormatError, match=message):
        _verify(data)


def test_empty_test_case_value_is_a_format_error():
    def edit(bundled):  # noqa: ANN001
        bundled.method_test_suites[0].test_cases[0].expected_outputs[0] = Value(None)

    with pytest.raises(FormatError, match="test case 0: expected output 0: empty value"):
        _verify(_bundled(edit))


def test_suite_for_a_method_the_program_lacks_is_a_format_error():
    # Was: KeyError from Program.load_method.
    def edit(bundled):  # noqa: ANN001
        bundled.method_test_suites[0].method_name = "fwd"

    with pytest.raises(
        FormatError, match=r"test cases for method 'fwd', which its program does not have"
    ):
        BundledModule(_bundled(edit)).verify_result_with_bundled_expected_output("fwd", 0)


def test_scalar_expected_for_a_tensor_output_is_a_mismatch():
    # Was: "truth value of an array is ambiguous" from comparing an array with an int.
    def edit(bundled):  # noqa: ANN001
        bundled.method_test_suites[0].test_cases[0].expected_outputs[0] = Value(Int(3))

    with pytest.raises(
        BundledVerificationError, match="output 0 differs .*got a tensor, expected 3"
    ):
        _verify(_bundled(edit))


def test_zero_dim_tensors_keep_their_shape():
    # Was: np.ascontiguousarray made a 0-dim output 1-dim ([1]) in the bundle, so the seed of
    # a method returning a 0-dim tensor failed its own verification.
    value = to_value(np.array(2.5, dtype=np.float32), "output")
    assert value.val.sizes == []
    back = from_value(value, "output")
    assert back.shape == () and back.dtype == np.float32 and float(back) == 2.5
    module = BundledModule((CORPUS / "ours_scalar_input.bpte").read_bytes())
    outputs = module.verify_result_with_bundled_expected_output("forward", 0)
    assert outputs[1].shape == ()


def test_bundled_loader_wraps_format_errors():
    data = bytearray((CORPUS / "ours_mlp.bpte").read_bytes())
    with pytest.raises(RuntimeError, match="Failed to load bundled program, error: 0x23") as e:
        portable_lib._load_bundled_program_from_buffer(bytes(data[:40]))
    assert isinstance(e.value.__cause__, FormatError)


def test_huge_shared_arena_is_refused_before_allocating():
    # Was: MemoryError at load_program (the shared arenas were allocated before any limit).
    f = decode_pte((CORPUS / "ours_scalar_input.pte").read_bytes())
    plan = f.program.execution_plan[0]
    plan.non_const_buffer_sizes = [*plan.non_const_buffer_sizes[:2], 1 << 50]
    with pytest.raises(
        InvalidProgramError,
        match=r"shared arenas need 1125899906842624 bytes \(method 'forward' 1125899906842624 "
        r"bytes in memory id 2\), more than the limit of 1048576 bytes",
    ):
        Runtime.get().load_program(encode_pte(f), max_arena_bytes=1 << 20)


# ----------------------------------------------------------------------- ETDump


def _trace(edit, name: str = "ours_mlp") -> tuple[bytes, str]:  # noqa: ANN001
    etdump = decode_etdump((CORPUS / f"{name}.etdp").read_bytes())
    debug = [
        e.debug_event
        for run in etdump.run_data
        for e in run.events
        if e.debug_event is not None and e.debug_event.debug_entry is not None
    ]
    edit(debug[0].debug_entry)
    return encode_etdump(etdump), str(CORPUS / f"{name}.debug.bin")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda v: setattr(v.tensor, "offset", 1 << 40), r"at offset 1099511627776 lies outside"),
        (lambda v: setattr(v.tensor, "sizes", [-3, 8]), r"\[-3, 8\]: sizes must be non-negative"),
        (lambda v: setattr(v.tensor, "sizes", [0, 1 << 62, 8]), r"span at most"),
        (lambda v: setattr(v.tensor, "sizes", [1] * 65), r"at most 64 of them"),
        (lambda v: setattr(v.tensor, "scalar_type", ScalarType.QINT8), r"scalar type QInt8"),
        (lambda v: setattr(v, "val", ValueType.TensorList), r"kind TensorList has no tensor_list"),
        (lambda v: setattr(v, "val", ValueType.Int), r"kind Int has no int_value table"),
    ],
)
def test_corrupt_debug_event_is_a_format_error(edit, message):
    # Were: ValueError (offset outside, reshape), TypeError (dtype), AttributeError (tables).
    data, buffer = _trace(edit)
    with pytest.raises(FormatError, match=message):
        Inspector(etdump_data=data, debug_buffer_path=buffer)


def test_debug_buffer_cut_short_is_a_format_error(tmp_path):
    short = tmp_path / "short.bin"
    short.write_bytes((CORPUS / "ours_mlp.debug.bin").read_bytes()[:100])
    with pytest.raises(FormatError, match="lies outside the 100-byte debug buffer"):
        Inspector(etdump_path=CORPUS / "ours_mlp.etdp", debug_buffer_path=short)
