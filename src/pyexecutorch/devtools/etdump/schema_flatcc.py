"""The ETDump trace as the official devtools' Python dataclasses
(``executorch.devtools.etdump.schema_flatcc``): same class and field names, field
order and value conventions (``Value.val`` holds a :class:`ValueType` value, a
string), so code that builds or reads these objects ports by its import.

The file format itself is described once, in :mod:`pyexecutorch.schema.etdump`;
:mod:`.serialize` converts between the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pyexecutorch.schema.scalar_type import ScalarType

__all__ = [
    "PROFILE_EVENT_ENUM",
    "AllocationEvent",
    "Allocator",
    "Bool",
    "ContainerMetadata",
    "DebugEvent",
    "Double",
    "ETDumpFlatCC",
    "Event",
    "Float",
    "Int",
    "Null",
    "ProfileEvent",
    "RunData",
    "ScalarType",
    "String",
    "Tensor",
    "TensorList",
    "Value",
    "ValueType",
]


@dataclass
class Tensor:
    scalar_type: ScalarType
    sizes: list[int]
    strides: list[int]
    offset: int | None  # of the tensor's bytes in the debug buffer


@dataclass
class TensorList:
    tensors: list[Tensor]


@dataclass
class Null:
    pass


@dataclass
class Int:
    int_val: int


@dataclass
class Bool:
    bool_val: bool


@dataclass
class Double:
    double_val: float


@dataclass
class Float:
    float_val: float


@dataclass
class String:
    string_val: str


@dataclass
class ContainerMetadata:
    encoded_inp_str: str
    encoded_out_str: str


class ValueType(Enum):
    """Which member of a :class:`Value` holds it; ``Value.val`` is one of these values."""

    NULL = "Null"
    INT = "Int"
    BOOL = "Bool"
    FLOAT = "Float"
    DOUBLE = "Double"
    TENSOR = "Tensor"
    TENSOR_LIST = "TensorList"
    STRING = "String"


@dataclass
class Value:
    val: str  # a ValueType value
    tensor: Tensor | None
    tensor_list: TensorList | None
    int_value: Int | None
    float_value: Float | None
    double_value: Double | None
    bool_value: Bool | None
    output: Bool | None  # set on a run's outputs


@dataclass
class DebugEvent:
    name: str | None
    chain_index: int
    instruction_id: int
    delegate_debug_id_int: int | None
    delegate_debug_id_str: str | None
    debug_entry: Value


class PROFILE_EVENT_ENUM(Enum):  # noqa: N801 - the official name
    """Names the runtimes give their own profile events."""

    RUN_MODEL = "Method::execute"
    OPERATOR_CALL = "OPERATOR_CALL"
    DELEGATE_CALL = "DELEGATE_CALL"
    LOAD_MODEL = "Program::load_method"


@dataclass
class ProfileEvent:
    name: str | None
    chain_index: int
    instruction_id: int
    delegate_debug_id_int: int | None
    delegate_debug_id_str: str | None
    delegate_debug_metadata: bytes | None
    start_time: int
    end_time: int


@dataclass
class AllocationEvent:
    allocator_id: int
    allocation_size: int


@dataclass
class Allocator:
    name: str


@dataclass
class Event:
    """Exactly one of the three is set."""

    profile_event: ProfileEvent | None
    allocation_event: AllocationEvent | None
    debug_event: DebugEvent | None


@dataclass
class RunData:
    name: str
    bundled_input_index: int | None
    allocators: list[Allocator] | None
    events: list[Event] | None


@dataclass
class ETDumpFlatCC:
    version: int
    run_data: list[RunData]
