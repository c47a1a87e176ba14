"""The bundled program format (``bundled_program_schema.fbs``, file identifier ``BP08``).

A bundled program is a ``.pte`` with test cases: per method, inputs and the
outputs they should produce. Tensor data is 16-byte aligned and the program
32-byte aligned inside the flatbuffer, as the official serializer writes them,
so that the embedded program keeps its own alignment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyexecutorch.schema.flatbuffer import decode_root, encode_root
from pyexecutorch.schema.program import Bool, Double, Int, Union, _list, fb
from pyexecutorch.schema.scalar_type import ScalarType

FILE_IDENTIFIER = b"BP08"
SCHEMA_VERSION = 0
TENSOR_DATA_ALIGNMENT = 16
PROGRAM_ALIGNMENT = 32


@dataclass
class Tensor:
    scalar_type: ScalarType = fb(("enum", ScalarType, "int8"), ScalarType.BYTE)
    sizes: list[int] = fb(("vector", "int32"), factory=_list())
    data: Any = fb("bytes", b"")  # in dim_order's memory order
    dim_order: list[int] = fb(("vector", "uint8"), factory=_list())


ValueUnion = Union("ValueUnion", [Tensor, Int, Bool, Double])


@dataclass
class Value:
    val: Any = fb(("union", ValueUnion), None)


@dataclass
class BundledMethodTestCase:
    inputs: list[Value] = fb(("tables", Value), factory=_list())
    expected_outputs: list[Value] = fb(("tables", Value), factory=_list())


@dataclass
class BundledMethodTestSuite:
    method_name: str = fb("string", "")
    test_cases: list[BundledMethodTestCase] = fb(("tables", BundledMethodTestCase), factory=_list())


@dataclass
class BundledProgram:
    version: int = fb("uint32", SCHEMA_VERSION)
    method_test_suites: list[BundledMethodTestSuite] = fb(
        ("tables", BundledMethodTestSuite), factory=_list()
    )
    program: Any = fb("bytes", b"")  # the .pte


_ALIGNMENTS = {
    (Tensor, "data"): TENSOR_DATA_ALIGNMENT,
    (BundledProgram, "program"): PROGRAM_ALIGNMENT,
}


def encode_bundled_program(bundled: BundledProgram) -> bytes:
    return encode_root(bundled, FILE_IDENTIFIER, _ALIGNMENTS)


def decode_bundled_program(data: Any) -> BundledProgram:
    """Decode a ``.bpte``; its program and tensor data are zero-copy views of ``data``."""
    return decode_root(data, BundledProgram, FILE_IDENTIFIER)


def is_bundled_program(data: Any) -> bool:
    """Whether ``data`` starts like a bundled program (its file identifier)."""
    view = memoryview(data).cast("B")
    return len(view) >= 8 and bytes(view[4:8]) == FILE_IDENTIFIER
