"""The ExecuTorch program format: one description, one encoder, one decoder.

``decode_pte(data) -> PteFile`` and ``encode_pte(pte_file, ...) -> bytes``
read and write ``.pte`` files byte-compatibly with the official tools;
``decode_ptd`` / ``encode_ptd`` do the same for external tensor data
(``.ptd``), and ``format_program`` lists a program for people.
"""

from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.flat_tensor import (
    FlatTensorHeader,
    PtdEntry,
    PtdFile,
    decode_ptd,
    encode_ptd,
    encode_ptd_chunks,
)
from pyexecutorch.schema.flat_tensor_schema import FlatTensor, TensorLayout
from pyexecutorch.schema.printer import format_program, format_ptd
from pyexecutorch.schema.program import *  # noqa: F403 - the schema's tables are the API
from pyexecutorch.schema.pte import (
    ExtendedHeader,
    NamedBlob,
    PteFile,
    decode_pte,
    encode_pte,
    encode_pte_chunks,
)
from pyexecutorch.schema.scalar_type import ScalarType, dtype_of, scalar_type_of

__all__ = [
    "ExtendedHeader",
    "FlatTensor",
    "FlatTensorHeader",
    "FormatError",
    "NamedBlob",
    "PtdEntry",
    "PtdFile",
    "PteFile",
    "ScalarType",
    "TensorLayout",
    "decode_ptd",
    "decode_pte",
    "dtype_of",
    "encode_ptd",
    "encode_ptd_chunks",
    "encode_pte",
    "encode_pte_chunks",
    "format_program",
    "format_ptd",
    "scalar_type_of",
]
