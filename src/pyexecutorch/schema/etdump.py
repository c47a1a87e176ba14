"""The ETDump trace format (``etdump_schema_flatcc.fbs``, file identifier ``ED00``).

An ETDump holds one :class:`RunData` per block of events (the official
runtime writes a ``Default`` block for loading and one ``Execute`` block per
run); each event is a profile event (a name or a delegate debug id, start
and end time), an allocation event or a debug event (a value, e.g. an
intermediate tensor whose bytes lie at ``offset`` in the separate debug
buffer). Files are size-prefixed flatbuffers, as flatcc writes them.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any

from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.flatbuffer import Encoder, decode_root
from pyexecutorch.schema.program import Bool, Double, Int, _list, fb
from pyexecutorch.schema.scalar_type import ScalarType

FILE_IDENTIFIER = b"ED00"
# Debug buffer entries start at multiples of this many bytes, as ETDumpGen aligns them.
DEBUG_BUFFER_ALIGNMENT = 64
UNSET = -1  # instruction_id / delegate_debug_id_int of events that have none
# chain_index of the debug events holding a run's outputs: (size_t)-1.
OUTPUT_CHAIN = 0xFFFFFFFFFFFFFFFF


class ValueType(enum.IntEnum):
    Null = 0
    Int = 1
    Bool = 2
    Float = 3
    Double = 4
    Tensor = 5
    TensorList = 6
    String = 7


@dataclass
class Tensor:
    scalar_type: ScalarType = fb(("enum", ScalarType, "int8"), ScalarType.BYTE)
    sizes: list[int] = fb(("vector", "int64"), factory=_list())
    strides: list[int] = fb(("vector", "int64"), factory=_list())
    offset: int = fb("int64", 0)  # of the tensor's bytes in the debug buffer


@dataclass
class Float:
    float_val: float = fb("float32", 0.0)


@dataclass
class TensorList:
    tensors: list[Tensor] = fb(("tables", Tensor), factory=_list())


@dataclass
class Value:
    """One logged value: ``val`` says which of the other fields holds it."""

    val: ValueType = fb(("enum", ValueType, "int8"), ValueType.Null)
    tensor: Tensor | None = fb(("table", Tensor), None)
    tensor_list: TensorList | None = fb(("table", TensorList), None)
    int_value: Int | None = fb(("table", Int), None)
    float_value: Float | None = fb(("table", Float), None)
    double_value: Double | None = fb(("table", Double), None)
    bool_value: Bool | None = fb(("table", Bool), None)
    output: Bool | None = fb(("table", Bool), None)  # set on a run's outputs


@dataclass
class DebugEvent:
    chain_index: int = fb("uint64", 0)
    instruction_id: int = fb("int32", UNSET)
    debug_entry: Value | None = fb(("table", Value), None)
    delegate_debug_id_int: int = fb("int32", UNSET)
    delegate_debug_id_str: str | None = fb("string", None)
    name: str | None = fb("string", None)


@dataclass
class AllocationEvent:
    allocator_id: int = fb("int32", 0)
    allocation_size: int = fb("uint64", 0)


@dataclass
class ProfileEvent:
    name: str | None = fb("string", None)
    chain_index: int = fb("int32", 0)
    instruction_id: int = fb("int32", UNSET)
    delegate_debug_id_int: int = fb("int32", UNSET)
    delegate_debug_id_str: str | None = fb("string", None)
    delegate_debug_metadata: Any = fb("bytes", None)
    start_time: int = fb("uint64", 0)
    end_time: int = fb("uint64", 0)


@dataclass
class Event:
    """Exactly one of the three fields is set."""

    profile_event: ProfileEvent | None = fb(("table", ProfileEvent), None)
    allocation_event: AllocationEvent | None = fb(("table", AllocationEvent), None)
    debug_event: DebugEvent | None = fb(("table", DebugEvent), None)


@dataclass
class Allocator:
    name: str | None = fb("string", None)


@dataclass
class RunData:
    name: str | None = fb("string", None)
    bundled_input_index: int = fb("int32", UNSET)
    allocators: list[Allocator] = fb(("tables", Allocator), factory=_list())
    events: list[Event] = fb(("tables", Event), factory=_list())


@dataclass
class ETDump:
    version: int = fb("uint32", 0)
    run_data: list[RunData] = fb(("tables", RunData), factory=_list())


def encode_etdump(etdump: ETDump) -> bytes:
    """The size-prefixed flatbuffer of ``etdump``."""
    return Encoder().finish(etdump, FILE_IDENTIFIER, size_prefixed=True)


def decode_etdump(data: Any) -> ETDump:
    """Decode an ETDump file (size-prefixed, as the runtimes write it)."""
    view = memoryview(data).cast("B")
    if len(view) < 12:
        raise FormatError(f"ETDump is {len(view)} bytes, too short (12 bytes minimum)")
    (size,) = struct.unpack_from("<I", view, 0)
    if size + 4 > len(view) or bytes(view[8:12]) != FILE_IDENTIFIER:
        # Not size-prefixed: accept a plain flatbuffer too.
        return decode_root(view, ETDump, FILE_IDENTIFIER)
    return decode_root(view[4 : 4 + size], ETDump, FILE_IDENTIFIER)
