"""Writing and reading bundled programs in the official ``BP08`` flatbuffer format."""

from __future__ import annotations

from typing import Any

from pyexecutorch.devtools.bundled_program.core import BundledProgram
from pyexecutorch.schema import bundled_program as schema


def serialize_from_bundled_program_to_flatbuffer(bundled_program: BundledProgram) -> bytes:
    """The ``.bpte`` bytes of ``bundled_program``."""
    return schema.encode_bundled_program(bundled_program.serialize_to_schema())


def deserialize_from_flatbuffer_to_bundled_program(flatbuffer: Any) -> schema.BundledProgram:
    """The tables of a ``.bpte`` (program and tensor data are views of ``flatbuffer``)."""
    return schema.decode_bundled_program(flatbuffer)
