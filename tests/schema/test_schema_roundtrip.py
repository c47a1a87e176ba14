"""Programs built here: encode -> decode -> encode is byte-identical; alignments hold."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from pyexecutorch.schema import (
    AllocationDetails,
    BackendDelegate,
    BackendDelegateDataReference,
    BackendDelegateInlineData,
    Bool,
    BoolList,
    Buffer,
    Chain,
    CompileSpec,
    ContainerMetadata,
    DataLocation,
    DelegateCall,
    DeviceType,
    Double,
    DoubleList,
    EValue,
    ExecutionPlan,
    ExtraTensorInfo,
    Frame,
    FrameList,
    FreeCall,
    Instruction,
    Int,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    NamedBlob,
    NonConstBufferDevice,
    Null,
    Operator,
    OptionalTensorList,
    Program,
    PteFile,
    ScalarType,
    String,
    Tensor,
    TensorDataLocation,
    TensorList,
    TensorShapeDynamism,
    decode_pte,
    encode_pte,
    encode_pte_chunks,
)
from pyexecutorch.schema.flatbuffer import decode_root


def _address(view) -> int:
    return np.frombuffer(view, dtype=np.uint8).__array_interface__["data"][0] if len(view) else -1


def _plan(name: str, delegates: list[BackendDelegate]) -> ExecutionPlan:
    values = [
        EValue(Null()),
        EValue(Int(-(2**62))),
        EValue(Bool(True)),
        EValue(Double(float("inf"))),
        EValue(String("héllo ✓")),
        EValue(Tensor(ScalarType.FLOAT, 0, [2, 3], [0, 1], False, 1)),  # constant #1
        EValue(
            Tensor(
                ScalarType.HALF,
                0,
                [1, 4, 2, 2],
                [0, 2, 3, 1],
                allocation_info=AllocationDetails.at(1, 5 * 2**32 + 64),
                shape_dynamism=TensorShapeDynamism.DYNAMIC_BOUND,
            )
        ),
        EValue(IntList([1, 2, 1])),
        EValue(DoubleList([0.5, -1.25])),
        EValue(BoolList([True, False, True])),
        EValue(TensorList([5, 6])),
        EValue(OptionalTensorList([5, -1, 0])),
        EValue(
            Tensor(
                ScalarType.LONG,
                0,
                [3],
                [0],
                data_buffer_idx=1,
                allocation_info=AllocationDetails.at(1, 0),
                extra_tensor_info=ExtraTensorInfo(0, "state.count", TensorDataLocation.SEGMENT),
            )
        ),
        EValue(Tensor(ScalarType.BYTE, 0, [5], [0], data_buffer_idx=2)),
        EValue(Tensor(ScalarType.FLOAT, 0, [5, 5], [0, 1], data_buffer_idx=3)),
        EValue(
            Tensor(
                ScalarType.BFLOAT16,
                0,
                [8],
                [0],
                extra_tensor_info=ExtraTensorInfo(
                    0, "ext.w", TensorDataLocation.EXTERNAL, DeviceType.CUDA, 1
                ),
            )
        ),
    ]
    instructions = [
        Instruction(KernelCall(0, [5, 6, 7, 6])),
        Instruction(DelegateCall(0, [6, 12])),
        Instruction(MoveCall(6, 12)),
        Instruction(JumpFalseCall(2, 0)),
        Instruction(FreeCall(6)),
        Instruction(None),
    ]
    frames = [FrameList([Frame("model.py", 12, "forward", "y = x + 1")]) for _ in instructions]
    return ExecutionPlan(
        name=name,
        container_meta_type=ContainerMetadata("[1, {}]", "[1, []]"),
        values=values,
        inputs=[6],
        outputs=[12],
        chains=[
            Chain([6], [12], instructions, frames),
            Chain([], [], [Instruction(FreeCall(5))], None),
        ],
        operators=[Operator("aten::add", "out"), Operator("aten::relu", "")],
        delegates=delegates,
        non_const_buffer_sizes=[0, 5 * 2**32 + 128],
        non_const_buffer_device=[NonConstBufferDevice(1, DeviceType.CPU, 0)],
    )


def _sample(*, inline_delegates: bool = True, segments: bool = True) -> PteFile:
    rng = np.random.default_rng(1)
    delegates = [
        BackendDelegate(
            "BackendA",
            BackendDelegateDataReference(DataLocation.SEGMENT, 0),
            [CompileSpec("mode", b"fast"), CompileSpec("threads", struct.pack("<i", 4))],
        )
    ]
    inline = []
    if inline_delegates:
        delegates.append(
            BackendDelegate("BackendB", BackendDelegateDataReference(DataLocation.INLINE, 0), [])
        )
        inline = [BackendDelegateInlineData(rng.bytes(37))]
    program = Program(
        version=0,
        execution_plan=[_plan("forward", delegates), _plan("other", [])],
        constant_buffer=[
            Buffer(b""),
            Buffer(rng.bytes(24)),
            Buffer(rng.bytes(5)),
            Buffer(rng.bytes(100)),
        ],
        backend_delegate_data=inline,
    )
    if not segments:
        program.execution_plan[0].delegates = delegates[1:]
        return PteFile(program)
    shared = rng.bytes(200)
    return PteFile(
        program,
        delegate_segments=[rng.bytes(300)],
        mutable_data=[Buffer(b""), Buffer(rng.bytes(24))],
        named_data={
            "k1": NamedBlob(shared, 64),
            "k2": NamedBlob(shared, 64),  # same bytes: one segment
            "k3": NamedBlob(rng.bytes(33), 1),
        },
    )


def _raw_program(data: bytes) -> tuple[Program, int, int]:
    """The program tables as written (segments and offsets kept), the base and program size."""
    if data[8:12] == b"eh00":
        program_size, base = struct.unpack_from("<QQ", data, 16)
    else:
        program_size, base = len(data), 0
    return decode_root(memoryview(data)[:program_size], Program, b"ET12"), base, program_size


ALIGNMENTS = [
    dict(),
    dict(segment_alignment=64, constant_tensor_alignment=32, delegate_alignment=64),
    dict(segment_alignment=16, constant_tensor_alignment=8, delegate_alignment=1),
    dict(segment_alignment=4096, constant_tensor_alignment=128, delegate_alignment=256),
]


@pytest.mark.parametrize("options", ALIGNMENTS, ids=str)
def test_round_trip_is_byte_identical(options):
    pte = _sample()
    data = encode_pte(pte, **options)
    back = decode_pte(data)
    assert encode_pte(back, **options) == data
    assert b"".join(bytes(c) for c in encode_pte_chunks(back, **options)) == data
    # Contents survive: tables equal, blobs equal.
    assert back.program == pte.program
    assert [bytes(b) for b in back.delegate_segments] == [bytes(b) for b in pte.delegate_segments]
    assert [bytes(b.storage) for b in back.mutable_data] == [
        bytes(b.storage) for b in pte.mutable_data
    ]
    assert {k: bytes(v.data) for k, v in back.named_data.items()} == {
        k: bytes(v.data) for k, v in pte.named_data.items()
    }


@pytest.mark.parametrize("options", ALIGNMENTS, ids=str)
def test_alignments_are_respected(options):
    pte = _sample()
    data = encode_pte(pte, **options)
    segment_alignment = options.get("segment_alignment", 128)
    tensor_alignment = options.get("constant_tensor_alignment") or 16
    delegate_alignment = options.get("delegate_alignment") or 16
    raw, base, program_size = _raw_program(data)
    assert base % segment_alignment == 0 and base >= program_size
    # Segments: constants, mutable data, one delegate blob, two named blobs (k1 = k2).
    assert len(raw.segments) == 5
    named_alignment = {s.segment_index: pte.named_data[s.key].alignment for s in raw.named_data}
    assert raw.named_data[0].segment_index == raw.named_data[1].segment_index
    end = 0
    for i, seg in enumerate(raw.segments):
        align = math.lcm(segment_alignment, named_alignment.get(i, 1))
        assert seg.offset % align == 0 and seg.offset >= end
        end = seg.offset + seg.size
    assert base + end == len(data)
    # Constant sub-offsets: each buffer starts at a multiple of the tensor alignment.
    cs = raw.constant_segment
    assert cs.segment_index == 0
    assert all(off % tensor_alignment == 0 for off in cs.offsets)
    assert len(cs.offsets) == len(pte.program.constant_buffer)
    # Inline delegate data is aligned within the file.
    file_view = memoryview(data)
    back = decode_pte(file_view)
    start = _address(file_view)
    inline = back.program.backend_delegate_data[0].data
    assert (_address(inline) - start) % delegate_alignment == 0
    # Named blobs and delegate segments start where the table says.
    assert (_address(back.delegate_segments[0]) - start) == base + raw.segments[2].offset


def test_without_segment_data_there_is_no_header():
    pte = _sample(segments=False)
    pte.program.constant_buffer = [Buffer(b"")]  # the reserved placeholder only
    data = encode_pte(pte)
    assert data[8:12] != b"eh00"
    raw, _, _ = _raw_program(data)
    assert [s.size for s in raw.segments] == [0]  # as the official writes it
    back = decode_pte(data)
    assert back.header is None
    assert [bytes(b.storage) for b in back.program.constant_buffer] == [b""]
    assert encode_pte(back) == data


def test_inline_only_program_round_trips():
    pte = _sample(segments=False)
    data = encode_pte(pte)
    assert encode_pte(decode_pte(data)) == data


def test_empty_program_round_trips():
    data = encode_pte(PteFile(Program()))
    back = decode_pte(data)
    assert back.program == Program()
    assert encode_pte(back) == data


def test_encoding_is_deterministic_and_does_not_mutate():
    pte = _sample()
    before = repr(pte.program)
    assert encode_pte(pte) == encode_pte(pte)
    assert repr(pte.program) == before
