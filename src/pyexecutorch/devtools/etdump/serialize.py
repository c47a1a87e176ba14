"""ETDump files to and from the official devtools' dataclasses
(``executorch.devtools.etdump.serialize``): the bytes are written and read by
pyexecutorch's own ETDump codec (:mod:`pyexecutorch.schema.etdump`); this module
only converts between its classes and :mod:`.schema_flatcc`'s, field by field."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from pyexecutorch.devtools.etdump import schema_flatcc as official
from pyexecutorch.schema import etdump as ours
from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.flatbuffer import Encoder, decode_root

# Classes whose names differ between the two descriptions (the rest share names).
_OURS_NAME = {"ETDumpFlatCC": "ETDump"}
_OFFICIAL_NAME = {v: k for k, v in _OURS_NAME.items()}


def _to_ours(value: Any) -> Any:
    if isinstance(value, list):
        return [_to_ours(v) for v in value]
    if not dataclasses.is_dataclass(value):
        return value
    name = type(value).__name__
    cls = getattr(ours, _OURS_NAME.get(name, name))
    fields = {f.name: _to_ours(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, official.Value):
        fields["val"] = ours.ValueType[official.ValueType(value.val).value]
    if isinstance(value, official.TensorList) and isinstance(value.tensors, official.Tensor):
        fields["tensors"] = [fields["tensors"]]
    # None stands for "unset" in the official classes; ours keep their defaults then.
    return cls(**{k: v for k, v in fields.items() if v is not None})


def _to_official(value: Any) -> Any:
    if isinstance(value, list):
        return [_to_official(v) for v in value]
    if not dataclasses.is_dataclass(value):
        return value
    name = type(value).__name__
    cls = getattr(official, _OFFICIAL_NAME.get(name, name))
    fields = {f.name: _to_official(getattr(value, f.name)) for f in dataclasses.fields(cls)}
    if isinstance(value, ours.Value):
        fields["val"] = official.ValueType(value.val.name).value
    if isinstance(value, ours.Tensor):
        fields["scalar_type"] = ours.ScalarType(value.scalar_type)
    return cls(**fields)


def serialize_to_etdump_flatcc(etdump: official.ETDumpFlatCC) -> bytes:
    """The ETDump flatbuffer of ``etdump`` (not size-prefixed, as the official helper writes)."""
    if not isinstance(etdump, official.ETDumpFlatCC):
        raise TypeError(f"serialize_to_etdump_flatcc takes an ETDumpFlatCC, not {type(etdump)}")
    return Encoder().finish(_to_ours(etdump), ours.FILE_IDENTIFIER)


def deserialize_from_etdump_flatcc(
    data: bytes, size_prefixed: bool = True
) -> official.ETDumpFlatCC:
    """Read an ETDump file (size-prefixed, as the runtimes write it, unless told otherwise)."""
    view = memoryview(data).cast("B")
    if size_prefixed:
        if len(view) < 4:
            raise FormatError(f"size-prefixed ETDump is {len(view)} bytes, shorter than its prefix")
        (size,) = struct.unpack_from("<I", view, 0)
        if size + 4 > len(view):
            raise FormatError(f"ETDump size prefix says {size} bytes; {len(view) - 4} follow it")
        view = view[4 : 4 + size]
    return _to_official(decode_root(view, ours.ETDump, ours.FILE_IDENTIFIER))
