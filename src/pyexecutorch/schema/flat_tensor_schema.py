"""The external tensor data format (``flat_tensor.fbs``, file identifier ``FT01``).

The one description of the ``.ptd`` flatbuffer's tables, in the style of
:mod:`pyexecutorch.schema.program` (each field carries its flatbuffer type in
``metadata["fb"]``) and read by the same generic codec. Table and field names
are the official schema's (namespace ``flat_tensor_flatbuffer``).

``DataSegment`` is the same table as the program format's and is shared.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyexecutorch.schema.program import DataSegment, _list, fb
from pyexecutorch.schema.scalar_type import ScalarType

FILE_IDENTIFIER = b"FT01"
# The newest ``FlatTensor.version`` this reader understands (the official one writes 0).
FLAT_TENSOR_VERSION = 0

__all__ = [
    "FILE_IDENTIFIER",
    "FLAT_TENSOR_VERSION",
    "DataSegment",
    "FlatTensor",
    "NamedData",
    "TensorLayout",
]


@dataclass
class TensorLayout:
    """Scalar type, sizes and dim order of a tensor stored as named data."""

    scalar_type: ScalarType = fb(("enum", ScalarType, "int8"), ScalarType.BYTE)
    sizes: list[int] = fb(("vector", "int32"), factory=_list())
    dim_order: list[int] = fb(("vector", "uint8"), factory=_list())


@dataclass
class NamedData:
    """A key naming one segment; ``tensor_layout`` is set when the blob is a tensor."""

    key: str = fb("string", "")
    segment_index: int = fb("uint32", 0)
    tensor_layout: TensorLayout | None = fb(("table", TensorLayout), None)


@dataclass
class FlatTensor:
    version: int = fb("uint32", 0)
    segments: list[DataSegment] = fb(("tables", DataSegment), factory=_list())
    named_data: list[NamedData] = fb(("tables", NamedData), factory=_list())
