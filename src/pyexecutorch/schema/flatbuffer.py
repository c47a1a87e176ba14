"""A flatbuffer encoder and decoder driven by the dataclass descriptions.

The decoder reads straight from a buffer with bounds checks on every offset,
so a corrupt file raises :class:`FormatError` naming the table and field
instead of crashing or reading garbage; ``[ubyte]`` vectors come back as
zero-copy ``memoryview`` slices of the input. The encoder uses the
``flatbuffers`` builder and is deterministic: equal inputs give equal bytes.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import cache
from typing import Any

import flatbuffers
import numpy as np

from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.program import Union

# Scalar kinds: struct format, size and the builder's slot-writer name.
SCALARS: dict[str, tuple[str, int, str]] = {
    "bool": ("<?", 1, "PrependBoolSlot"),
    "int8": ("<b", 1, "PrependInt8Slot"),
    "uint8": ("<B", 1, "PrependUint8Slot"),
    "int16": ("<h", 2, "PrependInt16Slot"),
    "uint16": ("<H", 2, "PrependUint16Slot"),
    "int32": ("<i", 4, "PrependInt32Slot"),
    "uint32": ("<I", 4, "PrependUint32Slot"),
    "int64": ("<q", 8, "PrependInt64Slot"),
    "uint64": ("<Q", 8, "PrependUint64Slot"),
    "float32": ("<f", 4, "PrependFloat32Slot"),
    "float64": ("<d", 8, "PrependFloat64Slot"),
}
NUMPY_OF = {
    "bool": np.dtype("?"),
    "int8": np.dtype("<i1"),
    "uint8": np.dtype("<u1"),
    "int16": np.dtype("<i2"),
    "uint16": np.dtype("<u2"),
    "int32": np.dtype("<i4"),
    "uint32": np.dtype("<u4"),
    "int64": np.dtype("<i8"),
    "uint64": np.dtype("<u8"),
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
}


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: Any
    slot: int  # vtable slot; a union's type takes ``slot`` and its value ``slot + 1``
    default: Any


@cache
def fields_of(cls: type) -> tuple[FieldSpec, ...]:
    """The flatbuffer fields of a table class, in slot order."""
    specs = []
    slot = 0
    for f in dataclasses.fields(cls):
        kind = f.metadata["fb"]
        default = f.default if f.default is not dataclasses.MISSING else None
        specs.append(FieldSpec(f.name, kind, slot, default))
        slot += 2 if isinstance(kind, tuple) and kind[0] == "union" else 1
    return tuple(specs)


def _slot_count(cls: type) -> int:
    specs = fields_of(cls)
    if not specs:
        return 0
    last = specs[-1]
    return last.slot + (2 if isinstance(last.kind, tuple) and last.kind[0] == "union" else 1)


# --------------------------------------------------------------------------
# Decoding


class Reader:
    """Bounds-checked reads from one flatbuffer.

    Besides checking every offset, the reader keeps a budget: each table,
    vector and string it decodes is charged the bytes it must occupy in a
    well-formed buffer (strings once per position, since writers may share
    them). A corrupt buffer whose offsets point many times at the same table
    or vector would otherwise decode to exponentially many objects; with the
    budget, decoding does work and allocates in proportion to the buffer's
    size, or raises :class:`FormatError`.
    """

    def __init__(self, data: Any) -> None:
        self.view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
        if self.view.format != "B" or self.view.ndim != 1:
            self.view = self.view.cast("B")
        self.size = len(self.view)
        self.budget = self.size
        self.strings: dict[int, str] = {}

    def charge(self, nbytes: int, what: str) -> None:
        """Account for ``nbytes`` of decoded content; refuse more than the buffer holds."""
        self.budget -= nbytes
        if self.budget < 0:
            raise FormatError(
                f"{what}: tables and vectors overlap; decoding them would take more "
                f"than the {self.size}-byte flatbuffer holds (shared or cyclic offsets)"
            )

    def _check(self, offset: int, length: int, what: str) -> None:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise FormatError(
                f"{what} at offset {offset} (+{length} bytes) is outside the "
                f"{self.size}-byte flatbuffer"
            )

    def scalar(self, fmt: str, size: int, offset: int, what: str) -> Any:
        self._check(offset, size, what)
        return struct.unpack_from(fmt, self.view, offset)[0]

    def uoffset(self, offset: int, what: str) -> int:
        """Follow the uoffset stored at ``offset``."""
        return offset + self.scalar("<I", 4, offset, what)

    def vtable(self, table: int, what: str) -> tuple[int, int, int]:
        """(vtable position, vtable size, table position) of the table at ``table``."""
        vt = table - self.scalar("<i", 4, table, what)
        vt_size = self.scalar("<H", 2, vt, f"{what} vtable")
        if vt_size < 4 or vt_size % 2:
            raise FormatError(f"{what}: bad vtable size {vt_size} at offset {vt}")
        self._check(vt, vt_size, f"{what} vtable")
        return vt, vt_size, table

    def field_offset(self, vt: int, vt_size: int, table: int, slot: int) -> int:
        """Absolute position of a field, or 0 when absent."""
        entry = 4 + 2 * slot
        if entry >= vt_size:
            return 0
        rel = struct.unpack_from("<H", self.view, vt + entry)[0]
        return table + rel if rel else 0

    def vector(self, at: int, elem_size: int, what: str, *, charge: bool = True) -> tuple[int, int]:
        """(start, count) of the vector referenced from ``at``."""
        vec = self.uoffset(at, what)
        count = self.scalar("<I", 4, vec, what)
        self._check(vec + 4, count * elem_size, what)
        if charge:
            self.charge(4 + count * elem_size, what)
        return vec + 4, count

    def string(self, at: int, what: str) -> str:
        pos = self.uoffset(at, what)
        cached = self.strings.get(pos)
        if cached is not None:
            return cached
        start, count = self.vector(at, 1, what)
        try:
            s = str(self.view[start : start + count], "utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(
                f"{what}: invalid UTF-8 at offset {start + e.start}: {e.reason}"
            ) from None
        self.strings[pos] = s
        return s


def decode_table(reader: Reader, cls: type, table: int, path: str, depth: int = 0) -> Any:
    """Decode the table of class ``cls`` at absolute position ``table``."""
    if depth > 64:
        raise FormatError(f"{path}: tables nested too deeply (cyclic offsets?)")
    reader.charge(4, path)
    vt, vt_size, table = reader.vtable(table, path)
    values: dict[str, Any] = {}
    for spec in fields_of(cls):
        what = f"{path}.{spec.name}"
        kind = spec.kind
        at = reader.field_offset(vt, vt_size, table, spec.slot)
        if isinstance(kind, str):
            if kind in SCALARS:
                fmt, size, _ = SCALARS[kind]
                values[spec.name] = reader.scalar(fmt, size, at, what) if at else spec.default
            elif kind == "string":
                values[spec.name] = reader.string(at, what) if at else spec.default
            elif kind == "bytes":
                if at:
                    start, count = reader.vector(at, 1, what)
                    values[spec.name] = reader.view[start : start + count]
                else:
                    values[spec.name] = b""
            else:
                raise AssertionError(kind)
            continue
        tag = kind[0]
        if tag == "enum":
            enum_cls, base = kind[1], kind[2]
            fmt, size, _ = SCALARS[base]
            raw = reader.scalar(fmt, size, at, what) if at else int(spec.default)
            try:
                values[spec.name] = enum_cls(raw)
            except ValueError:
                raise FormatError(f"{what}: unknown {enum_cls.__name__} value {raw}") from None
        elif tag == "vector":
            if at:
                dtype = NUMPY_OF[kind[1]]
                start, count = reader.vector(at, dtype.itemsize, what)
                arr = np.frombuffer(reader.view, dtype=dtype, count=count, offset=start)
                values[spec.name] = arr.tolist()
            else:
                values[spec.name] = (
                    [] if spec.default is None and _is_list_field(cls, spec.name) else spec.default
                )
        elif tag == "table":
            values[spec.name] = (
                decode_table(reader, kind[1], reader.uoffset(at, what), what, depth + 1)
                if at
                else None
            )
        elif tag == "tables":
            if at:
                start, count = reader.vector(at, 4, what, charge=False)
                reader.charge(4, what)
                values[spec.name] = [
                    decode_table(
                        reader,
                        kind[1],
                        reader.uoffset(start + 4 * i, what),
                        f"{what}[{i}]",
                        depth + 1,
                    )
                    for i in range(count)
                ]
            else:
                values[spec.name] = [] if _is_list_field(cls, spec.name) else None
        elif tag == "union":
            union: Union = kind[1]
            value_at = reader.field_offset(vt, vt_size, table, spec.slot + 1)
            code = reader.scalar("<B", 1, at, what) if at else 0
            if code == 0 or not value_at:
                values[spec.name] = None
                continue
            member = union.member(code)
            if member is None:
                raise FormatError(f"{what}: unknown {union.name} type {code}")
            values[spec.name] = decode_table(
                reader,
                member,
                reader.uoffset(value_at, what),
                f"{what}<{member.__name__}>",
                depth + 1,
            )
        else:
            raise AssertionError(kind)
    return cls(**values)


@cache
def _list_fields(cls: type) -> frozenset[str]:
    return frozenset(
        f.name for f in dataclasses.fields(cls) if f.default_factory is not dataclasses.MISSING
    )


def _is_list_field(cls: type, name: str) -> bool:
    return name in _list_fields(cls)


def decode_root(data: Any, cls: type, identifier: bytes | None) -> Any:
    """Decode a whole flatbuffer whose root table is of class ``cls``."""
    reader = Reader(data)
    if reader.size < 8:
        raise FormatError(
            f"file is {reader.size} bytes, too short for a flatbuffer (8 bytes minimum)"
        )
    if identifier is not None and bytes(reader.view[4:8]) != identifier:
        raise FormatError(
            f"file identifier is {bytes(reader.view[4:8])!r}, expected {identifier!r}"
        )
    root = reader.uoffset(0, "root table offset")
    return decode_table(reader, cls, root, cls.__name__)


# --------------------------------------------------------------------------
# Encoding


class Encoder:
    """Builds one flatbuffer from dataclass instances."""

    def __init__(self, alignments: dict[tuple[type, str], int] | None = None) -> None:
        self.builder = flatbuffers.Builder(4096)
        self.alignments = alignments or {}
        self.strings: dict[str, int] = {}

    def _string(self, s: str) -> int:
        # Identical strings share storage, as the official serializer's do not;
        # it is deterministic and smaller.
        off = self.strings.get(s)
        if off is None:
            off = self.builder.CreateString(s)
            self.strings[s] = off
        return off

    def _bytes(self, data: Any, alignment: int) -> int:
        b = self.builder
        mv = memoryview(data).cast("B")
        n = len(mv)
        b.StartVector(1, n, alignment)
        b.head = b.head - n
        b.Bytes[b.head : b.head + n] = mv
        return b.EndVector()

    def _vector(self, items: list[Any], scalar: str) -> int:
        arr = np.asarray(items, dtype=NUMPY_OF[scalar])
        if arr.ndim != 1:
            arr = arr.reshape(-1)
        return self.builder.CreateNumpyVector(arr)

    def _tables(self, items: list[Any]) -> int:
        offsets = [self.table(item) for item in items]
        b = self.builder
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    def table(self, obj: Any) -> int:
        cls = type(obj)
        specs = fields_of(cls)
        # Children first: flatbuffers are built back to front.
        children: dict[str, int] = {}
        for spec in specs:
            value = getattr(obj, spec.name)
            if value is None:
                continue
            kind = spec.kind
            if kind == "string":
                children[spec.name] = self._string(value)
            elif kind == "bytes":
                children[spec.name] = self._bytes(value, self.alignments.get((cls, spec.name), 1))
            elif isinstance(kind, tuple):
                tag = kind[0]
                if tag == "vector":
                    children[spec.name] = self._vector(value, kind[1])
                elif tag == "table":
                    children[spec.name] = self.table(value)
                elif tag == "tables":
                    children[spec.name] = self._tables(value)
                elif tag == "union":
                    children[spec.name] = self.table(value)
        b = self.builder
        b.StartObject(_slot_count(cls))
        for spec in specs:
            value = getattr(obj, spec.name)
            kind = spec.kind
            if spec.name in children:
                if isinstance(kind, tuple) and kind[0] == "union":
                    union: Union = kind[1]
                    code = union.code_of.get(type(value))
                    if code is None:
                        raise TypeError(
                            f"{cls.__name__}.{spec.name}: {type(value).__name__} is not a member of {union.name}"
                        )
                    b.PrependUOffsetTRelativeSlot(spec.slot + 1, children[spec.name], 0)
                    b.PrependUint8Slot(spec.slot, code, 0)
                else:
                    b.PrependUOffsetTRelativeSlot(spec.slot, children[spec.name], 0)
                continue
            if value is None:
                continue
            if isinstance(kind, tuple) and kind[0] == "enum":
                getattr(b, SCALARS[kind[2]][2])(spec.slot, int(value), int(spec.default))
            elif kind in SCALARS:
                if kind == "bool":
                    b.PrependBoolSlot(spec.slot, bool(value), bool(spec.default))
                elif kind in ("float32", "float64"):
                    getattr(b, SCALARS[kind][2])(spec.slot, float(value), float(spec.default))
                else:
                    getattr(b, SCALARS[kind][2])(spec.slot, int(value), int(spec.default))
        return b.EndObject()

    def finish(self, root: Any, identifier: bytes | None, *, size_prefixed: bool = False) -> bytes:
        off = self.table(root)
        if size_prefixed:
            self.builder.FinishSizePrefixed(off, file_identifier=identifier)
        else:
            self.builder.Finish(off, file_identifier=identifier)
        return bytes(self.builder.Output())


def splice_header(flat: bytes, header: bytes) -> tuple[bytes, memoryview]:
    """Insert ``header`` after the file identifier of ``flat``; (head, rest) to concatenate.

    The root offset grows by the header's length, which must keep the
    buffer's alignment (a multiple of its largest alignment).
    """
    (root,) = struct.unpack_from("<I", flat, 0)
    return struct.pack("<I", root + len(header)) + flat[4:8] + header, memoryview(flat)[8:]


def encode_root(
    root: Any, identifier: bytes | None, alignments: dict[tuple[type, str], int] | None = None
) -> bytes:
    """Encode ``root`` as a flatbuffer with the given file identifier."""
    return Encoder(alignments).finish(root, identifier)
