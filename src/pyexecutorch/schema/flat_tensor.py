"""The ``.ptd`` file layout: named tensors outside the program (external data).

::

    [0:4]    root table offset          ┐
    [4:8]    "FT01"                     │ the FlatTensor flatbuffer, with its
    [8:48]   header "FH01"              │ header spliced in after the identifier
    [48:56]  padding to 16              │ (always present)
    ...      FlatTensor tables          ┘
    padding to segment_alignment
    segment 0, padding, segment 1, ...   (offsets relative to segment_base_offset)

Header (little endian): magic ``FH01``, header length (u32, 40), flatbuffer
offset (u64: the header's padded length, 48), flatbuffer size (u64: the
flatbuffer's size without the header, so that offset + size is where the
tables end), segment base offset (u64), segment data size (u64).

Each named entry names a segment and, for tensors, its ``TensorLayout``.
Segments are laid out in the order their keys first appear, each aligned to
``lcm(segment_alignment, tensor_alignment)``; entries with equal bytes share
one segment. The defaults give the official serializer's layout (its tensor
alignment is 1, but 16 divides its segment alignment of 128).
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.flat_tensor_schema import (
    FILE_IDENTIFIER,
    FLAT_TENSOR_VERSION,
    DataSegment,
    FlatTensor,
    NamedData,
    TensorLayout,
)
from pyexecutorch.schema.flatbuffer import decode_root, encode_root, splice_header
from pyexecutorch.schema.scalar_type import SCALAR_TYPE_ITEMSIZE, ScalarType, dtype_of

HEADER_MAGIC = b"FH01"
HEADER_LENGTH = 40
# The flatbuffer (after the spliced-in header) stays aligned to this.
FLATBUFFER_ALIGNMENT = 16
DEFAULT_SEGMENT_ALIGNMENT = 128
DEFAULT_TENSOR_ALIGNMENT = 16
# Packed sub-byte types: their sizes do not give a byte count.
_PACKED = (ScalarType.QUINT4X2, ScalarType.QUINT2X4)


@dataclass
class FlatTensorHeader:
    flatbuffer_offset: int
    flatbuffer_size: int
    segment_base_offset: int
    segment_data_size: int

    def to_bytes(self) -> bytes:
        return HEADER_MAGIC + struct.pack(
            "<IQQQQ",
            HEADER_LENGTH,
            self.flatbuffer_offset,
            self.flatbuffer_size,
            self.segment_base_offset,
            self.segment_data_size,
        )

    @staticmethod
    def read(data: memoryview) -> FlatTensorHeader:
        """The header after the file identifier; :class:`FormatError` when absent or cut."""
        if len(data) < 8 + 8:
            raise FormatError(
                f"file is {len(data)} bytes, too short for the flat tensor header at offset 8"
            )
        if bytes(data[8:12]) != HEADER_MAGIC:
            found = bytes(data[8:12])
            raise FormatError(
                f"flat tensor header magic at offset 8 is {found!r}, expected {HEADER_MAGIC!r}"
            )
        (length,) = struct.unpack_from("<I", data, 12)
        if length < HEADER_LENGTH:
            raise FormatError(f"flat tensor header length {length} < {HEADER_LENGTH} at offset 12")
        if len(data) < 8 + HEADER_LENGTH:
            raise FormatError(
                f"flat tensor header at offset 8 is cut: the file is {len(data)} bytes, "
                f"the header needs {8 + HEADER_LENGTH}"
            )
        return FlatTensorHeader(*struct.unpack_from("<QQQQ", data, 16))


class PtdEntry(NamedTuple):
    """One named blob: its tensor layout (``None`` for opaque data) and its bytes."""

    layout: TensorLayout | None
    data: Any  # a zero-copy memoryview when decoded; any buffer when encoding


@dataclass
class PtdFile:
    """A decoded ``.ptd``: named entries, each a layout and a view of its bytes."""

    entries: dict[str, PtdEntry] = field(default_factory=dict)
    version: int = FLAT_TENSOR_VERSION
    header: FlatTensorHeader | None = None

    def array(self, key: str) -> np.ndarray:
        """The tensor ``key`` as a read-only numpy view in logical dimension order."""
        layout, data = self.entries[key]
        if layout is None:
            raise TypeError(f"named data {key!r} is not a tensor (it has no layout)")
        dtype = dtype_of(layout.scalar_type)
        physical = [layout.sizes[d] for d in layout.dim_order]
        count = math.prod(physical)
        arr = np.frombuffer(data, dtype=dtype, count=count).reshape(physical)
        return arr.transpose(np.argsort(layout.dim_order))


def _as_view(data: Any) -> memoryview:
    view = memoryview(data)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


def _check_layout(layout: TensorLayout, size: int, what: str) -> None:
    sizes, dim_order = layout.sizes, layout.dim_order
    if any(s < 0 for s in sizes):
        raise FormatError(f"{what}: negative size in {sizes}")
    if sorted(dim_order) != list(range(len(sizes))):
        raise FormatError(
            f"{what}: dim_order {dim_order} is not a permutation of the {len(sizes)} dims"
        )
    if layout.scalar_type in _PACKED:
        return
    need = math.prod(sizes) * SCALAR_TYPE_ITEMSIZE[layout.scalar_type]
    if need > size:
        raise FormatError(
            f"{what}: a {layout.scalar_type.name} tensor of sizes {sizes} needs {need} bytes, "
            f"but its segment holds {size}"
        )


def decode_ptd(data: Any) -> PtdFile:
    """Decode a ``.ptd`` from bytes, a ``memoryview`` or an ``mmap``.

    Entries' bytes stay views into ``data``. Raises :class:`FormatError` for
    truncated, corrupt or foreign files.
    """
    view = _as_view(data)
    size = len(view)
    if size < 8:
        raise FormatError(f"file is {size} bytes, too short to be a .ptd (8 bytes minimum)")
    ident = bytes(view[4:8])
    if ident[:2] != b"FT" or not ident[2:].isalnum():
        raise FormatError(
            f"not an ExecuTorch data file: file identifier {ident!r} at offset 4, expected {FILE_IDENTIFIER!r}"
        )
    if ident != FILE_IDENTIFIER:
        raise FormatError(
            f"unsupported data file version: file identifier {ident!r}, expected {FILE_IDENTIFIER!r}"
        )
    header = FlatTensorHeader.read(view)
    fb_end = header.flatbuffer_offset + header.flatbuffer_size
    if fb_end > size:
        raise FormatError(
            f"flat tensor header: flatbuffer offset {header.flatbuffer_offset} + size "
            f"{header.flatbuffer_size} > file size {size}"
        )
    flat: FlatTensor = decode_root(view[:fb_end], FlatTensor, FILE_IDENTIFIER)
    if flat.version > FLAT_TENSOR_VERSION:
        raise FormatError(
            f"FlatTensor.version is {flat.version}, newer than the supported {FLAT_TENSOR_VERSION}"
        )

    base = header.segment_base_offset
    segments: list[memoryview] = []
    for i, seg in enumerate(flat.segments):
        start = base + seg.offset
        if start + seg.size > size:
            raise FormatError(
                f"segment {i} extends past the end of the file: offset {start} + size {seg.size} > {size}"
            )
        segments.append(view[start : start + seg.size])

    entries: dict[str, PtdEntry] = {}
    for i, entry in enumerate(flat.named_data):
        what = f"named_data[{i}] ({entry.key!r})"
        if entry.segment_index >= len(segments):
            raise FormatError(
                f"{what} refers to segment {entry.segment_index}, but the file has {len(segments)} segments"
            )
        if entry.key in entries:
            raise FormatError(f"{what}: duplicate key")
        blob = segments[entry.segment_index]
        if entry.tensor_layout is not None:
            _check_layout(entry.tensor_layout, len(blob), what)
        entries[entry.key] = PtdEntry(entry.tensor_layout, blob)
    return PtdFile(entries, flat.version, header)


def _padding(size: int, alignment: int) -> int:
    return -size % alignment


def _check_alignment(name: str, value: int) -> None:
    if value <= 0 or value & (value - 1):
        raise ValueError(f"{name} must be a power of 2, got {value}")


def encode_ptd_chunks(
    ptd_file: PtdFile,
    *,
    segment_alignment: int = DEFAULT_SEGMENT_ALIGNMENT,
    tensor_alignment: int = DEFAULT_TENSOR_ALIGNMENT,
) -> Iterator[Any]:
    """The ``.ptd`` bytes as a sequence of chunks, for streaming to a file."""
    _check_alignment("segment_alignment", segment_alignment)
    _check_alignment("tensor_alignment", tensor_alignment)
    alignment = math.lcm(segment_alignment, tensor_alignment)

    blobs: list[memoryview] = []
    seen: dict[bytes, int] = {}
    named: list[NamedData] = []
    for key, (layout, data) in ptd_file.entries.items():
        view = _as_view(data)
        digest = hashlib.sha256(view).digest()
        index = seen.get(digest)
        if index is None:
            index = seen[digest] = len(blobs)
            blobs.append(view)
        named.append(NamedData(key, index, layout))

    table: list[DataSegment] = []
    pos = 0
    for blob in blobs:
        pos += _padding(pos, alignment)
        table.append(DataSegment(pos, len(blob)))
        pos += len(blob)
    segment_data_size = pos

    flat = encode_root(FlatTensor(ptd_file.version, table, named), FILE_IDENTIFIER)
    header_size = HEADER_LENGTH + _padding(HEADER_LENGTH, FLATBUFFER_ALIGNMENT)
    end = header_size + len(flat)
    # The base is aligned like the segments, so that absolute file offsets are too.
    base = end + _padding(end, alignment)
    header = FlatTensorHeader(header_size, len(flat), base, segment_data_size).to_bytes()
    head, rest = splice_header(flat, header + bytes(header_size - HEADER_LENGTH))
    yield head
    yield rest
    yield bytes(base - end)
    pos = 0
    for seg, blob in zip(table, blobs, strict=True):
        if seg.offset > pos:
            yield bytes(seg.offset - pos)
        yield blob
        pos = seg.offset + seg.size


def encode_ptd(
    ptd_file: PtdFile,
    *,
    segment_alignment: int = DEFAULT_SEGMENT_ALIGNMENT,
    tensor_alignment: int = DEFAULT_TENSOR_ALIGNMENT,
) -> bytes:
    """Encode a :class:`PtdFile` as ``.ptd`` bytes (see :func:`encode_ptd_chunks`).

    Every segment starts at a multiple of ``lcm(segment_alignment, tensor_alignment)``
    in the file (the segment base is one too).
    """
    return b"".join(
        encode_ptd_chunks(
            ptd_file, segment_alignment=segment_alignment, tensor_alignment=tensor_alignment
        )
    )
