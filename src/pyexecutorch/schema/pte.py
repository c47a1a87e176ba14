"""The ``.pte`` file layout around the program flatbuffer.

::

    [0:4]   root table offset      ┐
    [4:8]   "ET12"                 │ the flatbuffer, with the extended header
    [8:40]  extended header "eh00" │ spliced in after its identifier when the
    ...     program tables         ┘ file has segments
    padding to segment_alignment
    segment 0, padding, segment 1, ...   (offsets relative to segment_base_offset)

Extended header (little endian): magic ``eh00``, header length (u32),
program size (u64, header included), segment base offset (u64), segment data
size (u64).

Segments are written in the official serializer's order: the constant
segment (every constant buffer, each padded to ``constant_tensor_alignment``),
the mutable data segment, delegate blobs, then named data blobs.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.flatbuffer import decode_root, encode_root, splice_header
from pyexecutorch.schema.program import (
    FILE_IDENTIFIER,
    BackendDelegateDataReference,
    BackendDelegateInlineData,
    Buffer,
    DataLocation,
    DataSegment,
    NamedData,
    Program,
    SubsegmentOffsets,
    Tensor,
    TensorDataLocation,
)
from pyexecutorch.schema.scalar_type import SCALAR_TYPE_ITEMSIZE, ScalarType

_PACKED = (ScalarType.QUINT4X2, ScalarType.QUINT2X4)
_MAX_INFERRED_ALIGNMENT = 4096

HEADER_MAGIC = b"eh00"
HEADER_LENGTH = 32
_HEADER_MIN_LENGTH = 24  # older files lack the segment data size
DEFAULT_TENSOR_ALIGNMENT = 16
DEFAULT_SEGMENT_ALIGNMENT = 128


@dataclass
class ExtendedHeader:
    program_size: int
    segment_base_offset: int
    segment_data_size: int

    def to_bytes(self) -> bytes:
        return HEADER_MAGIC + struct.pack(
            "<IQQQ",
            HEADER_LENGTH,
            self.program_size,
            self.segment_base_offset,
            self.segment_data_size,
        )

    @staticmethod
    def read(data: memoryview) -> ExtendedHeader | None:
        """The header after the identifier, or ``None`` when the file has none."""
        if len(data) < 8 + _HEADER_MIN_LENGTH or bytes(data[8:12]) != HEADER_MAGIC:
            return None
        (length,) = struct.unpack_from("<I", data, 12)
        if length < _HEADER_MIN_LENGTH:
            raise FormatError(
                f"extended header length {length} < {_HEADER_MIN_LENGTH} at offset 12"
            )
        if len(data) < 8 + min(length, HEADER_LENGTH):
            raise FormatError(
                f"extended header at offset 8 is cut: the file is {len(data)} bytes, "
                f"the header needs {8 + min(length, HEADER_LENGTH)}"
            )
        program_size, base = struct.unpack_from("<QQ", data, 16)
        seg_size = struct.unpack_from("<Q", data, 32)[0] if length >= HEADER_LENGTH else 0
        return ExtendedHeader(program_size, base, seg_size)


@dataclass
class NamedBlob:
    """Named data: bytes shared by delegates (and external tensors) by key."""

    data: Any
    alignment: int = 1


@dataclass
class SegmentMap:
    """Where a decoded file's segments were: ``spans[i]`` is segment ``i``'s (absolute
    offset, size); the others name which segment holds the constants, the mutable
    data, each entry of ``delegate_segments`` and each named blob. A loader that reads
    segments on demand uses it; encoding ignores it."""

    spans: list[tuple[int, int]] = field(default_factory=list)
    constants: int | None = None
    mutable: int | None = None
    delegates: list[int] = field(default_factory=list)
    named: dict[str, int] = field(default_factory=dict)


@dataclass
class PteFile:
    """A decoded ``.pte``: the program and the data that lives in segments.

    ``program.constant_buffer`` holds every constant tensor's bytes (zero-copy
    views into the file, cut to the size of the tensors using them: the file
    stores only start offsets); delegates with ``DataLocation.SEGMENT`` index
    ``delegate_segments``; ``mutable_data`` holds initial values of mutable
    buffers (``Buffer`` objects when decoded); ``named_data`` maps keys to
    blobs, each with the alignment it was found at. The program's
    ``segments``, ``constant_segment``, ``mutable_data_segments`` and
    ``named_data`` fields are recomputed by :func:`encode_pte`.
    """

    program: Program
    delegate_segments: list[Any] = field(default_factory=list)
    mutable_data: list[Any] | None = None
    named_data: dict[str, NamedBlob] = field(default_factory=dict)
    header: ExtendedHeader | None = None
    segment_map: SegmentMap | None = None


def _as_view(data: Any) -> memoryview:
    view = memoryview(data)
    if view.ndim != 1 or view.format not in ("B", "b", "c"):
        view = view.cast("B")
    return view


def decode_pte(data: Any) -> PteFile:
    """Decode a ``.pte`` from bytes, a ``memoryview`` or an ``mmap``.

    Constant, delegate, mutable and named data stay views into ``data``.
    Raises :class:`FormatError` for truncated, corrupt or foreign files.
    """
    view = _as_view(data)
    size = len(view)
    if size < 8:
        raise FormatError(f"file is {size} bytes, too short to be a program (8 bytes minimum)")
    ident = bytes(view[4:8])
    if ident[:2] != b"ET" or not ident[2:].isalnum():
        raise FormatError(
            f"not an ExecuTorch program: file identifier {ident!r} at offset 4, expected b'ET12'"
        )
    if ident != FILE_IDENTIFIER:
        raise FormatError(
            f"unsupported program version: file identifier {ident!r}, expected b'ET12'"
        )
    header = ExtendedHeader.read(view)
    fb_view = view
    if header is not None:
        if header.program_size > size:
            raise FormatError(
                f"extended header: program size {header.program_size} > file size {size}"
            )
        fb_view = view[: header.program_size]
    program: Program = decode_root(fb_view, Program, FILE_IDENTIFIER)

    # The official serializer omits the header when all segments are empty
    # (a program without constants still lists one empty constant segment).
    segments: list[memoryview] = []
    where = SegmentMap()
    for i, seg in enumerate(program.segments):
        if header is None:
            if seg.size:
                raise FormatError(
                    f"segment {i} holds {seg.size} bytes but the file has no extended header"
                )
            segments.append(view[0:0])
            continue
        start = header.segment_base_offset + seg.offset
        if start + seg.size > size:
            raise FormatError(
                f"segment {i} extends past the end of the file: offset {start} + size {seg.size} > {size}"
            )
        segments.append(view[start : start + seg.size])
        where.spans.append((start, seg.size))

    def segment(index: int, what: str) -> memoryview:
        if index >= len(segments):
            raise FormatError(
                f"{what} refers to segment {index}, but the file has {len(segments)} segments"
            )
        return segments[index]

    # Constants: split the constant segment back into buffers.
    cs = program.constant_segment
    if cs is not None and cs.offsets:
        blob = segment(cs.segment_index, "constant_segment")
        where.constants = cs.segment_index
        program.constant_buffer = _split_subsegments(blob, cs.offsets, "constant_segment")
        _trim_to_tensors(program.constant_buffer, program, mutable=False)
    program.constant_segment = None

    mutable = None
    if program.mutable_data_segments:
        if len(program.mutable_data_segments) > 1:
            raise FormatError(
                f"{len(program.mutable_data_segments)} mutable data segments; at most 1 is supported"
            )
        ms = program.mutable_data_segments[0]
        where.mutable = ms.segment_index
        mutable = _split_subsegments(
            segment(ms.segment_index, "mutable_data_segments[0]"),
            ms.offsets,
            "mutable_data_segments[0]",
        )
        _trim_to_tensors(mutable, program, mutable=True)
    program.mutable_data_segments = None

    # Delegates: renumber segment references into delegate_segments.
    delegate_segments: list[Any] = []
    renumber: dict[int, int] = {}
    for p, plan in enumerate(program.execution_plan):
        for d, delegate in enumerate(plan.delegates):
            ref = delegate.processed
            what = f"execution_plan[{p}].delegates[{d}]"
            if ref is None:
                raise FormatError(f"{what} has no processed data reference")
            if ref.location == DataLocation.SEGMENT:
                if ref.index not in renumber:
                    renumber[ref.index] = len(delegate_segments)
                    delegate_segments.append(segment(ref.index, what))
                    where.delegates.append(ref.index)
                delegate.processed = BackendDelegateDataReference(
                    DataLocation.SEGMENT, renumber[ref.index]
                )
            elif ref.index >= len(program.backend_delegate_data):
                raise FormatError(
                    f"{what} refers to inline data {ref.index}, but the program has "
                    f"{len(program.backend_delegate_data)}"
                )

    # Blob alignments are not stored; the alignment each blob was found at
    # (capped at a page) re-encodes to the same layout.
    named: dict[str, NamedBlob] = {}
    for i, entry in enumerate(program.named_data or []):
        blob = segment(entry.segment_index, f"named_data[{i}] ({entry.key!r})")
        offset = program.segments[entry.segment_index].offset
        alignment = min(offset & -offset, _MAX_INFERRED_ALIGNMENT) if offset else 1
        named[entry.key] = NamedBlob(blob, alignment)
        where.named[entry.key] = entry.segment_index
    program.named_data = None
    program.segments = []
    return PteFile(program, delegate_segments, mutable, named, header, where)


def _split_subsegments(blob: memoryview, offsets: list[int], what: str) -> list[Buffer]:
    buffers = []
    for i, start in enumerate(offsets):
        end = offsets[i + 1] if i + 1 < len(offsets) else len(blob)
        if not start <= end <= len(blob):
            raise FormatError(
                f"{what}: buffer {i} spans [{start}, {end}) outside the {len(blob)}-byte segment"
            )
        buffers.append(Buffer(blob[start:end]))
    return buffers


def _trim_to_tensors(buffers: list[Buffer], program: Program, *, mutable: bool) -> None:
    """Drop the alignment padding that subsegment offsets leave after each buffer.

    The format stores only where each buffer starts; its length is that of
    the tensors using it (constants: no allocation info; mutable data: planned
    tensors with a data buffer). Buffers that no tensor uses, or that a
    packed sub-byte tensor uses, keep their padding; a buffer shorter than
    its tensors is left for the verifier to report.
    """
    need: dict[int, int | None] = {}
    for plan in program.execution_plan:
        for value in plan.values:
            t = value.val
            if not isinstance(t, Tensor) or not t.data_buffer_idx:
                continue
            if (t.allocation_info is not None) != mutable:
                continue
            if (
                t.extra_tensor_info is not None
                and t.extra_tensor_info.location == TensorDataLocation.EXTERNAL
            ):
                continue
            itemsize = None if t.scalar_type in _PACKED else SCALAR_TYPE_ITEMSIZE.get(t.scalar_type)
            nbytes = None
            if itemsize is not None and all(s >= 0 for s in t.sizes):
                nbytes = math.prod(t.sizes) * itemsize
            idx = t.data_buffer_idx
            before = need.get(idx, 0)
            need[idx] = None if before is None or nbytes is None else max(before, nbytes)
    for idx, nbytes in need.items():
        if nbytes is not None and idx < len(buffers) and nbytes < len(buffers[idx].storage):
            buffers[idx] = Buffer(buffers[idx].storage[:nbytes])


def _padding(size: int, alignment: int) -> int:
    return -size % alignment


def _check_alignment(name: str, value: int) -> None:
    if value <= 0 or value & (value - 1):
        raise ValueError(f"{name} must be a power of 2, got {value}")


def encode_pte_chunks(
    pte_file: PteFile,
    *,
    segment_alignment: int = DEFAULT_SEGMENT_ALIGNMENT,
    constant_tensor_alignment: int | None = None,
    delegate_alignment: int | None = None,
) -> Iterator[Any]:
    """The ``.pte`` bytes as a sequence of chunks, for streaming to a file."""
    tensor_alignment = constant_tensor_alignment or DEFAULT_TENSOR_ALIGNMENT
    _check_alignment("segment_alignment", segment_alignment)
    _check_alignment("constant_tensor_alignment", tensor_alignment)
    if delegate_alignment is not None:
        _check_alignment("delegate_alignment", delegate_alignment)
    program = replace(pte_file.program)
    program.execution_plan = [replace(plan) for plan in program.execution_plan]

    # Each segment: (chunks, size, alignment).
    segments: list[tuple[list[Any], int, int]] = []

    def add_packed(buffers: list[Any], pad_to: int) -> SubsegmentOffsets:
        chunks: list[Any] = []
        offsets: list[int] = []
        pos = 0
        for i, buf in enumerate(buffers):
            storage = buf.storage if isinstance(buf, Buffer) else buf
            n = len(memoryview(storage).cast("B"))
            offsets.append(pos)
            chunks.append(storage)
            pos += n
            if i + 1 < len(buffers):
                pad = _padding(n, pad_to)
                if pad:
                    chunks.append(bytes(pad))
                    pos += pad
        segments.append((chunks, pos, 1))
        return SubsegmentOffsets(len(segments) - 1, offsets)

    if program.constant_buffer:
        program.constant_segment = add_packed(program.constant_buffer, tensor_alignment)
        program.constant_buffer = []
    if pte_file.mutable_data:
        program.mutable_data_segments = [add_packed(pte_file.mutable_data, 1)]

    first_delegate_segment = len(segments)
    for blob in pte_file.delegate_segments:
        segments.append(([blob], len(memoryview(blob).cast("B")), 1))
    if pte_file.delegate_segments:
        for plan in program.execution_plan:
            plan.delegates = [replace(d) for d in plan.delegates]
            for d in plan.delegates:
                if d.processed is not None and d.processed.location == DataLocation.SEGMENT:
                    d.processed = BackendDelegateDataReference(
                        DataLocation.SEGMENT, first_delegate_segment + d.processed.index
                    )

    if pte_file.named_data:
        seen: dict[bytes, int] = {}
        entries = []
        for key, blob in pte_file.named_data.items():
            view = memoryview(blob.data).cast("B")
            digest = hashlib.sha256(view).digest()
            index = seen.get(digest)
            if index is None:
                index = len(segments)
                seen[digest] = index
                segments.append(([view], len(view), blob.alignment))
            entries.append(NamedData(key, index))
        program.named_data = entries

    seg_table: list[DataSegment] = []
    layout: list[tuple[int, list[Any]]] = []  # (padding before, chunks)
    pos = 0
    for chunks, n, align in segments:
        alignment = math.lcm(segment_alignment, align)
        pad = _padding(pos, alignment)
        pos += pad
        seg_table.append(DataSegment(pos, n))
        layout.append((pad, chunks))
        pos += n
    program.segments = seg_table
    segment_data_size = pos

    alignments = {
        (Buffer, "storage"): tensor_alignment,
        (BackendDelegateInlineData, "data"): delegate_alignment or DEFAULT_TENSOR_ALIGNMENT,
    }
    flat = encode_root(program, FILE_IDENTIFIER, alignments)
    if segment_data_size == 0:  # as the official serializer: no header for empty segments
        yield flat
        return
    max_alignment = max(DEFAULT_TENSOR_ALIGNMENT, tensor_alignment, delegate_alignment or 0)
    header_size = HEADER_LENGTH + _padding(HEADER_LENGTH, max_alignment)
    program_size = header_size + len(flat)
    base = program_size + _padding(program_size, segment_alignment)
    header = ExtendedHeader(program_size, base, segment_data_size).to_bytes()
    yield from splice_header(flat, header + bytes(header_size - HEADER_LENGTH))
    yield bytes(base - program_size)
    for pad, chunks in layout:
        if pad:
            yield bytes(pad)
        yield from chunks


def encode_pte(
    pte_file: PteFile,
    *,
    segment_alignment: int = DEFAULT_SEGMENT_ALIGNMENT,
    constant_tensor_alignment: int | None = None,
    delegate_alignment: int | None = None,
) -> bytes:
    """Encode a :class:`PteFile` as ``.pte`` bytes (see :func:`encode_pte_chunks`)."""
    return b"".join(
        encode_pte_chunks(
            pte_file,
            segment_alignment=segment_alignment,
            constant_tensor_alignment=constant_tensor_alignment,
            delegate_alignment=delegate_alignment,
        )
    )
