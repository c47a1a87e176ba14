"""Data loaders, as in the official runtime: where a program's (or a ``.pte``'s data
file's) bytes come from.

A loader is any object with ``size`` (an int attribute, or a method returning one) and
``load(offset, size)`` returning that many bytes (any bytes-like object). The runtime
reads the header and the program tables when a program opens, and each segment
(constants, mutable data, delegate blobs, named data) the first time a method that
needs it loads. Three loaders come with it:

- :class:`FileDataLoader`: reads the file with positioned reads, on demand;
- :class:`MmapDataLoader`: maps the file; ``load`` returns views of the mapping;
- :class:`BufferDataLoader`: over bytes already in memory (views, no copy of ``bytes``;
  writable memory is copied once).

A program never changes after it loads: the file loaders refuse, with
``FormatError``, to read a file truncated or rewritten since they opened it (a
method loaded later fails instead of running on other weights, and a mapped file
never faults), and memory a caller can still change is copied.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pyexecutorch.runtime.loader import owned_bytes
from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.pte import ExtendedHeader, PteFile


@runtime_checkable
class DataLoader(Protocol):
    """What the runtime needs of a loader (``size`` may also be a plain int attribute)."""

    def size(self) -> int: ...

    def load(self, offset: int, size: int) -> Any: ...


def loader_size(loader: Any) -> int:
    """The byte size a loader reports, checked."""
    size = (
        loader.size() if callable(getattr(loader, "size", None)) else getattr(loader, "size", None)
    )
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise TypeError(
            f"data loader {type(loader).__name__}: size must be a non-negative int, got {size!r}"
        )
    return size


def is_data_loader(value: Any) -> bool:
    return callable(getattr(value, "load", None)) and hasattr(value, "size")


def load_checked(loader: Any, offset: int, size: int, total: int) -> memoryview:
    """``loader.load(offset, size)`` as a byte view, checked against the loader's size."""
    if offset < 0 or size < 0 or offset + size > total:
        raise FormatError(
            f"data loader {type(loader).__name__}: range [{offset}, {offset + size}) lies outside "
            f"its {total} bytes"
        )
    data = loader.load(offset, size)
    try:
        view = memoryview(data).cast("B")
    except TypeError:
        raise TypeError(
            f"data loader {type(loader).__name__}: load() must return a bytes-like object, "
            f"got {type(data).__name__}"
        ) from None
    if len(view) != size:
        raise FormatError(
            f"data loader {type(loader).__name__}: load({offset}, {size}) returned "
            f"{len(view)} bytes"
        )
    return view


class BufferDataLoader:
    """Bytes already in memory; ``load`` returns views of them. Memory the caller can
    still change (a ``bytearray``, a writable array, a read-only view of either) is
    copied once here, so that changing it later cannot change a program loaded through
    this loader; ``bytes`` are used as they are."""

    def __init__(self, data: Any) -> None:
        self._view = memoryview(owned_bytes(data, "BufferDataLoader data")).cast("B")

    def size(self) -> int:
        return len(self._view)

    def load(self, offset: int, size: int) -> memoryview:
        return self._view[offset : offset + size]


class _OpenFile:
    """An open file and what it looked like when opened: a loader refuses to read a file
    that was truncated or rewritten since (its segments would not be those its program
    tables describe), with ``FormatError``. A file replaced by a new one (renamed over
    it) is harmless: the open descriptor still reads the old one."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except FileNotFoundError:
            raise FileNotFoundError(f"file not found: {path!r}") from None
        self.size, self._stamp = self._state()

    def _state(self) -> tuple[int, int]:
        st = os.fstat(self.fd)
        return st.st_size, st.st_mtime_ns

    def check(self, offset: int, size: int) -> None:
        """``FormatError`` unless the file is as it was and holds ``[offset, offset + size)``."""
        now, stamp = self._state()
        if now < offset + size:
            raise FormatError(
                f"{self.path!r}: the file is {now} bytes, too short for [{offset}, "
                f"{offset + size}): truncated after it was opened ({self.size} bytes then)"
            )
        if now != self.size or stamp != self._stamp:
            raise FormatError(
                f"{self.path!r} changed on disk after it was opened (size {self.size} -> {now} "
                "bytes, or rewritten): its segments no longer match its program"
            )

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


class FileDataLoader:
    """A file read on demand with positioned reads (nothing is read until asked for);
    a file truncated or rewritten after it was opened fails with ``FormatError``."""

    def __init__(self, path: str | os.PathLike, alignment: int = 16) -> None:
        self.path = str(path)
        self.alignment = alignment
        self._file = _OpenFile(self.path)
        self._size = self._file.size

    def size(self) -> int:
        return self._size

    def load(self, offset: int, size: int) -> bytes:
        self._file.check(offset, size)
        chunks = []
        while size:
            chunk = os.pread(self._file.fd, size, offset)
            if not chunk:
                raise FormatError(f"{self.path!r}: unexpected end of file at offset {offset}")
            chunks.append(chunk)
            offset += len(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def __del__(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()


class MmapDataLoader:
    """A memory-mapped file; ``load`` returns views of the mapping (no copy).

    Reading a mapped page past the end of a file truncated after it was mapped raises
    SIGBUS, which kills the interpreter. So each ``load`` first checks, with ``fstat``,
    that the file still has the size and modification time it had when mapped, and
    raises ``FormatError`` otherwise; a program copies what it loads at once (see
    :class:`LoadedBytes`), so a later truncation cannot reach it. (A truncation in the
    microseconds between that check and the copy is the one case this cannot catch.)
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(Path(path))
        self._file = _OpenFile(self.path)
        self._size = self._file.size
        self._map = mmap.mmap(self._file.fd, 0, access=mmap.ACCESS_READ) if self._size else b""

    def size(self) -> int:
        return self._size

    def load(self, offset: int, size: int) -> memoryview:
        self._file.check(offset, size)
        return memoryview(self._map)[offset : offset + size]

    def __del__(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()


# --------------------------------------------------------------------------------------
# Programs read through a loader


class LoadedBytes:
    """A program file's bytes as the decoder sees them: an anonymous mapping the size of
    the file (untouched pages cost no memory) holding the header and program tables
    from the start; :meth:`ensure` copies segments in when a method first needs them."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.total = loader_size(loader)
        if self.total < 8:
            raise FormatError(f"file is {self.total} bytes, too short to be a program")
        self.buffer = mmap.mmap(-1, self.total)
        self._loaded: set[int] = set()
        self._lock = threading.Lock()
        head = load_checked(loader, 0, min(self.total, 64), self.total)
        header = ExtendedHeader.read(head)
        tables = header.program_size if header is not None else self.total
        if tables > self.total:
            raise FormatError(f"extended header: program size {tables} > file size {self.total}")
        self._copy(0, tables)
        self.spans: list[tuple[int, int]] = []

    def _copy(self, offset: int, size: int) -> None:
        if size:
            self.buffer[offset : offset + size] = load_checked(
                self.loader, offset, size, self.total
            )

    def attach(self, pte: PteFile) -> None:
        self.spans = list(pte.segment_map.spans) if pte.segment_map is not None else []

    def ensure(self, segments: Iterable[int]) -> None:
        """Read every segment of ``segments`` not read yet."""
        with self._lock:
            for index in segments:
                if index in self._loaded or index >= len(self.spans):
                    continue
                self._copy(*self.spans[index])
                self._loaded.add(index)

    @property
    def loaded_segments(self) -> set[int]:
        return set(self._loaded)


def segments_for_method(pte: PteFile, plan: Any) -> list[int]:
    """The segments a method reads: the constant and mutable data segments, those of
    its delegates, and the named data its backends may look up."""
    where = pte.segment_map
    if where is None:
        return []
    needed = [s for s in (where.constants, where.mutable) if s is not None]
    delegates = getattr(plan, "delegates", None) or []
    for delegate in delegates:
        ref = delegate.processed
        if ref is not None and ref.location == 1 and ref.index < len(where.delegates):
            needed.append(where.delegates[ref.index])  # DataLocation.SEGMENT
    if delegates:
        needed.extend(where.named.values())
    return needed


__all__ = [
    "BufferDataLoader",
    "DataLoader",
    "FileDataLoader",
    "MmapDataLoader",
    "is_data_loader",
    "loader_size",
]
