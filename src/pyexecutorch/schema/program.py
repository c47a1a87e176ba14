"""The ExecuTorch program format (``program.fbs``, file identifier ``ET12``).

This module is the one description of the format: each table is a dataclass
whose fields carry their flatbuffer type in ``metadata["fb"]``, in the
schema's field order. The encoder, the decoder, the verifier and the pretty
printer all read these descriptions; nothing else restates the layout.

Field kinds (see :mod:`pyexecutorch.schema.flatbuffer`):
``"bool" "int8" "uint8" "int16" "uint16" "int32" "uint32" "int64" "uint64"
"float32" "float64"`` scalars; ``"string"``; ``"bytes"`` (a ``[ubyte]`` vector, kept as a
zero-copy ``memoryview`` when decoded); ``("vector", scalar)``;
``("tables", Class)``; ``("table", Class)``; ``("union", Union)``;
``("enum", EnumClass, scalar)``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from pyexecutorch.schema.scalar_type import ScalarType

FILE_IDENTIFIER = b"ET12"


def fb(kind: Any, default: Any = None, *, factory: Any = None) -> Any:
    """A dataclass field with flatbuffer type ``kind``."""
    if factory is not None:
        return field(default_factory=factory, metadata={"fb": kind})
    return field(default=default, metadata={"fb": kind})


def _list() -> Any:
    return list


class TensorShapeDynamism(enum.IntEnum):
    STATIC = 0
    DYNAMIC_BOUND = 1
    DYNAMIC_UNBOUND = 2


class TensorDataLocation(enum.IntEnum):
    SEGMENT = 0
    EXTERNAL = 1


class DeviceType(enum.IntEnum):
    CPU = 0
    CUDA = 1


class DataLocation(enum.IntEnum):
    INLINE = 0
    SEGMENT = 1


@dataclass
class ContainerMetadata:
    encoded_inp_str: str = fb("string", "")
    encoded_out_str: str = fb("string", "")


@dataclass
class Null:
    pass


@dataclass
class AllocationDetails:
    memory_id: int = fb("uint32", 0)
    memory_offset_low: int = fb("uint32", 0)
    memory_offset_high: int = fb("uint32", 0)

    @property
    def memory_offset(self) -> int:
        return self.memory_offset_low | (self.memory_offset_high << 32)

    @staticmethod
    def at(memory_id: int, offset: int) -> AllocationDetails:
        return AllocationDetails(memory_id, offset & 0xFFFFFFFF, offset >> 32)


@dataclass
class ExtraTensorInfo:
    mutable_data_segments_idx: int = fb("uint64", 0)
    fully_qualified_name: str | None = fb("string", None)
    location: TensorDataLocation = fb(
        ("enum", TensorDataLocation, "int8"), TensorDataLocation.SEGMENT
    )
    device_type: DeviceType = fb(("enum", DeviceType, "int8"), DeviceType.CPU)
    device_index: int = fb("int8", 0)


@dataclass
class Tensor:
    scalar_type: ScalarType = fb(("enum", ScalarType, "int8"), ScalarType.BYTE)
    storage_offset: int = fb("int32", 0)
    sizes: list[int] = fb(("vector", "int32"), factory=_list())
    dim_order: list[int] = fb(("vector", "uint8"), factory=_list())
    requires_grad: bool = fb("bool", False)
    data_buffer_idx: int = fb("uint32", 0)
    allocation_info: AllocationDetails | None = fb(("table", AllocationDetails), None)
    layout: int = fb("int8", 0)
    shape_dynamism: TensorShapeDynamism = fb(
        ("enum", TensorShapeDynamism, "int8"), TensorShapeDynamism.STATIC
    )
    extra_tensor_info: ExtraTensorInfo | None = fb(("table", ExtraTensorInfo), None)


@dataclass
class Int:
    int_val: int = fb("int64", 0)


@dataclass
class Bool:
    bool_val: bool = fb("bool", False)


@dataclass
class Double:
    double_val: float = fb("float64", 0.0)


@dataclass
class String:
    string_val: str = fb("string", "")


@dataclass
class IntList:
    """A list of ints, stored as indices of ``Int`` values (so that symbolic sizes stay live)."""

    items: list[int] = fb(("vector", "int64"), factory=_list())


@dataclass
class DoubleList:
    items: list[float] = fb(("vector", "float64"), factory=_list())


@dataclass
class BoolList:
    items: list[bool] = fb(("vector", "bool"), factory=_list())


@dataclass
class TensorList:
    """Indices of ``Tensor`` values."""

    items: list[int] = fb(("vector", "int32"), factory=_list())


@dataclass
class OptionalTensorList:
    """Indices of ``Tensor`` or ``Null`` values (-1 also means absent)."""

    items: list[int] = fb(("vector", "int32"), factory=_list())


class Union:
    """A flatbuffer union: its member tables in type-code order (0 is NONE)."""

    def __init__(self, name: str, members: list[type]) -> None:
        self.name = name
        self.members = members
        self.code_of = {cls: i + 1 for i, cls in enumerate(members)}

    def member(self, code: int) -> type | None:
        return self.members[code - 1] if 0 < code <= len(self.members) else None


KernelTypes = Union(
    "KernelTypes",
    [
        Null,
        Int,
        Bool,
        Double,
        Tensor,
        String,
        IntList,
        DoubleList,
        BoolList,
        TensorList,
        OptionalTensorList,
    ],
)


@dataclass
class EValue:
    val: Any = fb(("union", KernelTypes), None)


@dataclass
class Operator:
    name: str = fb("string", "")
    overload: str = fb("string", "")

    @property
    def qualified_name(self) -> str:
        """The registry key: ``aten::add.out`` (no dot when the overload is empty)."""
        return f"{self.name}.{self.overload}" if self.overload else self.name


@dataclass
class KernelCall:
    op_index: int = fb("int32", 0)
    args: list[int] = fb(("vector", "int32"), factory=_list())


@dataclass
class DelegateCall:
    delegate_index: int = fb("int32", 0)
    args: list[int] = fb(("vector", "int32"), factory=_list())


@dataclass
class MoveCall:
    move_from: int = fb("int32", 0)
    move_to: int = fb("int32", 0)


@dataclass
class JumpFalseCall:
    cond_value_index: int = fb("int32", 0)
    destination_instruction: int = fb("int32", 0)


@dataclass
class FreeCall:
    value_index: int = fb("int32", 0)


InstructionArguments = Union(
    "InstructionArguments", [KernelCall, DelegateCall, MoveCall, JumpFalseCall, FreeCall]
)


@dataclass
class Instruction:
    instr_args: Any = fb(("union", InstructionArguments), None)


@dataclass
class Frame:
    filename: str = fb("string", "")
    lineno: int = fb("int32", 0)
    name: str = fb("string", "")
    context: str = fb("string", "")


@dataclass
class FrameList:
    items: list[Frame] = fb(("tables", Frame), factory=_list())


@dataclass
class BackendDelegateDataReference:
    location: DataLocation = fb(("enum", DataLocation, "int8"), DataLocation.INLINE)
    index: int = fb("uint32", 0)


@dataclass
class CompileSpec:
    key: str = fb("string", "")
    value: bytes = fb("bytes", b"")


@dataclass
class BackendDelegate:
    id: str = fb("string", "")
    processed: BackendDelegateDataReference | None = fb(
        ("table", BackendDelegateDataReference), None
    )
    compile_specs: list[CompileSpec] = fb(("tables", CompileSpec), factory=_list())


@dataclass
class Chain:
    inputs: list[int] = fb(("vector", "int32"), factory=_list())
    outputs: list[int] = fb(("vector", "int32"), factory=_list())
    instructions: list[Instruction] = fb(("tables", Instruction), factory=_list())
    stacktrace: list[FrameList] | None = fb(("tables", FrameList), None)


@dataclass
class NonConstBufferDevice:
    buffer_idx: int = fb("int32", 0)
    device_type: DeviceType = fb(("enum", DeviceType, "int8"), DeviceType.CPU)
    device_index: int = fb("int8", 0)


@dataclass
class ExecutionPlan:
    name: str = fb("string", "")
    container_meta_type: ContainerMetadata | None = fb(("table", ContainerMetadata), None)
    values: list[EValue] = fb(("tables", EValue), factory=_list())
    inputs: list[int] = fb(("vector", "int32"), factory=_list())
    outputs: list[int] = fb(("vector", "int32"), factory=_list())
    chains: list[Chain] = fb(("tables", Chain), factory=_list())
    operators: list[Operator] = fb(("tables", Operator), factory=_list())
    delegates: list[BackendDelegate] = fb(("tables", BackendDelegate), factory=_list())
    non_const_buffer_sizes: list[int] = fb(("vector", "int64"), factory=_list())
    non_const_buffer_device: list[NonConstBufferDevice] | None = fb(
        ("tables", NonConstBufferDevice), None
    )


@dataclass
class Buffer:
    # Aligned to the constant tensor alignment when encoded inline.
    storage: bytes = fb("bytes", b"")


@dataclass
class BackendDelegateInlineData:
    # Aligned to the delegate alignment when encoded inline.
    data: bytes = fb("bytes", b"")


@dataclass
class DataSegment:
    offset: int = fb("uint64", 0)
    size: int = fb("uint64", 0)


@dataclass
class SubsegmentOffsets:
    segment_index: int = fb("uint32", 0)
    offsets: list[int] = fb(("vector", "uint64"), factory=_list())


@dataclass
class NamedData:
    key: str = fb("string", "")
    segment_index: int = fb("uint32", 0)


@dataclass
class Program:
    version: int = fb("uint32", 0)
    execution_plan: list[ExecutionPlan] = fb(("tables", ExecutionPlan), factory=_list())
    constant_buffer: list[Buffer] = fb(("tables", Buffer), factory=_list())
    backend_delegate_data: list[BackendDelegateInlineData] = fb(
        ("tables", BackendDelegateInlineData), factory=_list()
    )
    segments: list[DataSegment] = fb(("tables", DataSegment), factory=_list())
    constant_segment: SubsegmentOffsets | None = fb(("table", SubsegmentOffsets), None)
    mutable_data_segments: list[SubsegmentOffsets] | None = fb(("tables", SubsegmentOffsets), None)
    named_data: list[NamedData] | None = fb(("tables", NamedData), None)


# Which "bytes" fields take the configurable alignment when encoded inline
# (the schema's force_align: 16, overridden by the serializer's options).
ALIGNED_BYTES_FIELDS = {
    (Buffer, "storage"): "constant_tensor_alignment",
    (BackendDelegateInlineData, "data"): "delegate_alignment",
}
