"""Corrupt, truncated and foreign files: FormatError with a located message, never
another exception, never a hang, never an allocation out of proportion to the file."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyexecutorch.schema import (
    Buffer,
    EValue,
    ExecutionPlan,
    FormatError,
    Program,
    PteFile,
    Tensor,
    decode_ptd,
    decode_pte,
    encode_ptd,
    encode_pte,
    format_program,
    format_ptd,
)
from pyexecutorch.schema.flatbuffer import Encoder, decode_root

FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PTE_CASES = ["linear", "conv", "mutable", "two_methods", "xnnpack", "external"]
TIME_LIMIT = 2.0


def _file(official, name: str) -> tuple[bytes, str]:
    if name == "ptd":
        if "external" not in official:
            pytest.fail("no .ptd export")
        return official["external"].ptd.read_bytes(), "ptd"
    if name not in official:
        pytest.fail(f"{name} could not be exported")
    return official[name].data, "pte"


def _check(data: bytes, kind: str, limit) -> None:
    """Decoding ``data`` either works (and the result prints and re-encodes) or raises FormatError."""
    with limit(TIME_LIMIT, f"decoding {len(data)} bytes"):
        try:
            decoded = decode_pte(data) if kind == "pte" else decode_ptd(data)
        except FormatError as e:
            assert str(e)  # a message, always
            return
        if kind == "pte":
            format_program(decoded, verbose=True)
            encode_pte(decoded)
        else:
            format_ptd(decoded, verbose=True)
            encode_ptd(decoded)


def _flatbuffer_end(data: bytes) -> int:
    """Where the tables end (flips there are the interesting ones)."""
    if data[8:12] == b"eh00":
        return struct.unpack_from("<Q", data, 16)[0]
    if data[8:12] == b"FH01":
        offset, size = struct.unpack_from("<QQ", data, 16)
        return offset + size
    return len(data)


@pytest.mark.parametrize("name", PTE_CASES + ["ptd"])
def test_truncations(official, limit, name):
    data, kind = _file(official, name)

    @FUZZ
    @given(st.integers(0, len(data) - 1))
    def run(n):
        _check(data[:n], kind, limit)

    run()
    # Every cut inside the tables, exhaustively for the smallest file.
    if name == "linear":
        for n in range(_flatbuffer_end(data)):
            _check(data[:n], kind, limit)


@pytest.mark.parametrize("name", PTE_CASES + ["ptd"])
def test_byte_flips(official, limit, name):
    data, kind = _file(official, name)
    end = _flatbuffer_end(data)
    flips = st.lists(
        st.tuples(st.integers(0, end - 1), st.integers(1, 255)), min_size=1, max_size=8
    )

    @FUZZ
    @given(flips)
    def run(changes):
        corrupt = bytearray(data)
        for pos, xor in changes:
            corrupt[pos] ^= xor
        _check(bytes(corrupt), kind, limit)

    run()


@pytest.mark.parametrize("name", ["linear", "ptd"])
def test_word_overwrites(official, limit, name):
    """Offsets and lengths replaced by extreme values (0, -1, huge, small)."""
    data, kind = _file(official, name)
    end = _flatbuffer_end(data)
    words = st.sampled_from(
        [0, 1, 4, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFC, len(data), end]
    )

    @FUZZ
    @given(st.integers(0, (end - 4) // 4), words)
    def run(slot, word):
        corrupt = bytearray(data)
        struct.pack_into("<I", corrupt, 4 * slot, word)
        _check(bytes(corrupt), kind, limit)

    run()


# --------------------------------------------------------------------------
# Precise messages


def _raw(data: bytes) -> tuple[Program, int]:
    program_size, base = struct.unpack_from("<QQ", data, 16)
    return decode_root(memoryview(data)[:program_size], Program, b"ET12"), base


def test_segment_past_end(official):
    data = official["conv"].data
    program, base = _raw(data)
    seg = program.segments[0]
    cut = base + seg.offset + seg.size - 1
    with pytest.raises(
        FormatError,
        match=rf"^segment 0 extends past the end of the file: offset {base + seg.offset} \+ size {seg.size} > {cut}$",
    ):
        decode_pte(data[:cut])


def test_identifiers(official):
    data = official["linear"].data
    with pytest.raises(
        FormatError, match=r"not an ExecuTorch program: file identifier b'PK\\x03\\x04' at offset 4"
    ):
        decode_pte(data[:4] + b"PK\x03\x04" + data[8:])
    with pytest.raises(
        FormatError, match=r"unsupported program version: file identifier b'ET13', expected b'ET12'"
    ):
        decode_pte(data[:4] + b"ET13" + data[8:])
    with pytest.raises(FormatError, match="too short"):
        decode_pte(b"")
    with pytest.raises(FormatError, match="not an ExecuTorch program"):
        decode_pte(official["external"].ptd.read_bytes())
    with pytest.raises(FormatError, match="not an ExecuTorch data file"):
        decode_ptd(data)


def test_vtable_outside_buffer(official):
    data = bytearray(official["linear"].data)
    size = _flatbuffer_end(data)  # the program's flatbuffer, not the whole file
    (root,) = struct.unpack_from("<I", data, 0)
    struct.pack_into("<i", data, root, root + 1000)  # vtable 1000 bytes before the file
    with pytest.raises(
        FormatError,
        match=rf"^Program vtable at offset -1000 \(\+2 bytes\) is outside the {size}-byte flatbuffer$",
    ):
        decode_pte(bytes(data))
    struct.pack_into("<i", data, root, -size)  # past the end
    with pytest.raises(FormatError, match=rf"^Program vtable at offset {root + size} .* outside"):
        decode_pte(bytes(data))


def test_root_offset_outside_buffer(official):
    data = bytearray(official["linear"].data)
    struct.pack_into("<I", data, 0, 0xFFFFFF00)
    with pytest.raises(
        FormatError, match=r"^Program at offset 4294967040 \(\+4 bytes\) is outside"
    ):
        decode_pte(bytes(data))


def test_string_length_past_end(official):
    data = bytearray(official["linear"].data)
    pos = data.index(b"forward") - 4
    assert struct.unpack_from("<I", data, pos)[0] == 7
    struct.pack_into("<I", data, pos, 0x7FFFFFFF)
    with pytest.raises(
        FormatError,
        match=r"^Program\.execution_plan\[0\]\.name at offset \d+ \(\+2147483647 bytes\) is outside",
    ):
        decode_pte(bytes(data))


def test_invalid_utf8(official):
    data = bytearray(official["linear"].data)
    pos = data.index(b"forward")
    data[pos + 2] = 0xFF
    with pytest.raises(
        FormatError,
        match=rf"^Program\.execution_plan\[0\]\.name: invalid UTF-8 at offset {pos + 2}",
    ):
        decode_pte(bytes(data))


def test_unknown_enum_value():
    program = Program(execution_plan=[ExecutionPlan("m", values=[EValue(Tensor(scalar_type=99))])])
    data = encode_pte(PteFile(program))
    with pytest.raises(
        FormatError,
        match=r"^Program\.execution_plan\[0\]\.values\[0\]\.val<Tensor>\.scalar_type: unknown ScalarType value 99$",
    ):
        decode_pte(data)


def test_huge_vector_length_allocates_nothing():
    marker = 0x1122334455667788
    program = Program(execution_plan=[ExecutionPlan("m", non_const_buffer_sizes=[7, 7, marker])])
    data = bytearray(encode_pte(PteFile(program)))
    pos = data.index(struct.pack("<q", marker)) - 2 * 8 - 4
    assert struct.unpack_from("<I", data, pos)[0] == 3
    struct.pack_into("<I", data, pos, 0xFFFFFFFF)
    tracemalloc.start()
    try:
        with pytest.raises(
            FormatError,
            match=r"non_const_buffer_sizes at offset \d+ \(\+34359738360 bytes\) is outside",
        ):
            decode_pte(bytes(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100_000


def test_shared_tables_cannot_blow_up():
    """A vector of offsets all pointing at one big table decodes in proportion to the file."""
    enc = Encoder()
    plan = enc.table(ExecutionPlan("m", non_const_buffer_sizes=list(range(2000))))
    b = enc.builder
    b.StartVector(4, 5000, 4)
    for _ in range(5000):
        b.PrependUOffsetTRelative(plan)
    plans = b.EndVector()
    b.StartObject(8)
    b.PrependUOffsetTRelativeSlot(1, plans, 0)
    b.Finish(b.EndObject(), file_identifier=b"ET12")
    data = bytes(b.Output())
    tracemalloc.start()
    try:
        with pytest.raises(
            FormatError,
            match=r"overlap; decoding them would take more than the \d+-byte flatbuffer holds",
        ):
            decode_pte(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * len(data)


def test_shared_strings_are_fine():
    """Writers may share strings (ours does); that is not an overlap."""
    names = [Buffer(b"")]
    program = Program(
        execution_plan=[ExecutionPlan("same name") for _ in range(50)], constant_buffer=names
    )
    back = decode_pte(encode_pte(PteFile(program)))
    assert [p.name for p in back.program.execution_plan] == ["same name"] * 50


def test_extended_header_cut():
    data = b"\x40\0\0\0ET12eh00" + struct.pack("<I", 32) + bytes(20)
    with pytest.raises(
        FormatError,
        match=r"^extended header at offset 8 is cut: the file is 36 bytes, the header needs 40$",
    ):
        decode_pte(data)


def test_segment_without_header(official):
    data = encode_pte(PteFile(Program(constant_buffer=[Buffer(b""), Buffer(b"abc")])))
    assert data[8:12] == b"eh00"
    program_size = struct.unpack_from("<Q", data, 16)[0]
    # Remove the header magic: the segment is now unreachable.
    stripped = data[:8] + b"xx00" + data[12:program_size]
    with pytest.raises(
        FormatError, match=r"segment 0 holds 3 bytes but the file has no extended header"
    ):
        decode_pte(stripped)


def test_constant_offsets_out_of_segment(official):
    data = encode_pte(PteFile(Program(constant_buffer=[Buffer(b""), Buffer(b"abcd" * 8)])))
    program, base = _raw(data)
    # Cut the segment data short but keep the table: caught as a segment past EOF.
    with pytest.raises(FormatError, match="segment 0 extends past the end of the file"):
        decode_pte(data[: base + 10])
