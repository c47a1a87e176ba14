"""State shared by every method of one program: constant data, initial
values of mutable buffers, delegate blobs, named data and external constants.

Every pool is deduplicated by content with dictionaries: a cheap key (size
plus a few sampled bytes) finds candidates, a full comparison confirms them,
so equal weights shared by two methods are stored once and distinct weights
are never hashed in full.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from pyexecutorch.exir.emit._convert import EmitError
from pyexecutorch.schema.flat_tensor import PtdEntry, PtdFile
from pyexecutorch.schema.flat_tensor_schema import TensorLayout
from pyexecutorch.schema.program import (
    BackendDelegateDataReference,
    BackendDelegateInlineData,
    Buffer,
    DataLocation,
)
from pyexecutorch.schema.pte import NamedBlob


def _as_bytes_array(data: Any) -> np.ndarray:
    if isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1:
        return data
    return np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)


def _prekey(arr: np.ndarray) -> tuple:
    n = arr.size
    if n <= 96:
        return (n, arr.tobytes())
    step = max(1, n // 32)
    return (n, arr[:32].tobytes(), arr[-32:].tobytes(), arr[::step][:32].tobytes())


class _BlobPool:
    """A list of byte blobs deduplicated by content; ``add`` returns the blob's index."""

    def __init__(self, first: list[Any] | None = None) -> None:
        self.blobs: list[np.ndarray] = []
        self._index: dict[tuple, list[int]] = {}
        for blob in first or []:
            self.add(blob)

    def add(self, data: Any) -> int:
        arr = _as_bytes_array(data)
        key = _prekey(arr)
        candidates = self._index.get(key)
        if candidates is not None:
            if arr.size <= 96:
                return candidates[0]
            for i in candidates:
                if np.array_equal(self.blobs[i], arr):
                    return i
        else:
            candidates = self._index[key] = []
        index = len(self.blobs)
        self.blobs.append(arr)
        candidates.append(index)
        return index


class ProgramState:
    """Everything the methods of a program share."""

    def __init__(self, extract_delegate_segments: bool = True) -> None:
        # Index 0 of the constant and mutable pools is the empty placeholder
        # that non-constant tensors point at.
        self.constants = _BlobPool([b""])
        self.mutable = _BlobPool([b""])
        self.extract_delegate_segments = extract_delegate_segments
        self.inline_delegate_data: list[BackendDelegateInlineData] = []
        self.delegate_segments: list[Any] = []
        self._delegate_refs: dict[bytes, BackendDelegateDataReference] = {}
        self.named_data: dict[str, NamedBlob] = {}
        # External data files: {file tag: {key: (layout or None, bytes)}}.
        self.external: dict[str, dict[str, PtdEntry]] = {}

    # -- constants ---------------------------------------------------------

    def add_constant(self, data: np.ndarray) -> int:
        return self.constants.add(data)

    def add_mutable_initial(self, data: np.ndarray) -> int:
        return self.mutable.add(data)

    def add_external(self, tag: str, key: str, data: Any, layout: TensorLayout | None) -> str:
        """Store ``data`` under ``key`` in file ``tag``; returns the key it is stored under.

        A name derived from weights (``l.weight:permute_copy``, see
        ``passes.const_fold.derived_name``) that two different values share, as when
        two methods fold one weight differently, gets a digest of its bytes appended.
        """
        group = self.external.setdefault(tag, {})
        old = group.get(key)
        if old is not None:
            if np.array_equal(_as_bytes_array(old.data), _as_bytes_array(data)):
                return key
            if ":" not in key:
                raise EmitError(
                    f"external data {key!r} (file tag {tag!r}) is given twice with different contents"
                )
            digest = hashlib.sha1(_as_bytes_array(data).tobytes()).hexdigest()[:8]
            return self.add_external(tag, f"{key}@{digest}", data, layout)
        group[key] = PtdEntry(layout, data)
        return key

    def ptd_files(self) -> dict[str, PtdFile]:
        return {tag: PtdFile(entries=dict(entries)) for tag, entries in self.external.items()}

    def constant_buffers(self) -> list[Buffer]:
        return [Buffer(storage=b) for b in self.constants.blobs]

    def mutable_buffers(self) -> list[Buffer] | None:
        if len(self.mutable.blobs) <= 1:
            return None
        return [Buffer(storage=b) for b in self.mutable.blobs]

    # -- delegates -----------------------------------------------------------

    def add_delegate_data(self, processed: Any) -> BackendDelegateDataReference:
        view = memoryview(processed).cast("B") if not isinstance(processed, bytes) else processed
        digest = hashlib.sha256(view).digest()
        ref = self._delegate_refs.get(digest)
        if ref is not None:
            return BackendDelegateDataReference(ref.location, ref.index)
        if self.extract_delegate_segments and len(view) > 0:
            ref = BackendDelegateDataReference(DataLocation.SEGMENT, len(self.delegate_segments))
            self.delegate_segments.append(processed)
        else:
            ref = BackendDelegateDataReference(DataLocation.INLINE, len(self.inline_delegate_data))
            self.inline_delegate_data.append(BackendDelegateInlineData(data=bytes(view)))
        self._delegate_refs[digest] = ref
        return BackendDelegateDataReference(ref.location, ref.index)

    def add_named_data(self, store: Any, who: str) -> None:
        """Merge a backend's named data (``data_store_output``) into the program's.

        Accepts the official ``NamedDataStoreOutput`` layout (``buffers``,
        ``pte_data``, ``external_data``) or a mapping of key to bytes,
        :class:`NamedBlob` or ``(bytes, alignment)``.
        """
        if store is None:
            return
        if hasattr(store, "pte_data") and hasattr(store, "buffers"):
            buffers = store.buffers
            for key, entry in store.pte_data.items():
                self._add_named(
                    key, buffers[entry.buffer_index], int(getattr(entry, "alignment", 1) or 1), who
                )
            for tag, entries in (getattr(store, "external_data", None) or {}).items():
                for key, entry in entries.items():
                    self.add_external(tag, key, buffers[entry.buffer_index], _layout(entry))
            return
        if isinstance(store, Mapping):
            for key, item in store.items():
                if isinstance(item, NamedBlob):
                    self._add_named(key, item.data, item.alignment, who)
                elif isinstance(item, tuple):
                    self._add_named(key, item[0], int(item[1]), who)
                else:
                    self._add_named(key, item, 1, who)
            return
        raise EmitError(f"{who}: unsupported named data of type {type(store).__name__}")

    def _add_named(self, key: str, data: Any, alignment: int, who: str) -> None:
        old = self.named_data.get(key)
        if old is not None:
            if not np.array_equal(_as_bytes_array(old.data), _as_bytes_array(data)):
                raise EmitError(
                    f"{who}: named data {key!r} differs from the data another delegate stored under the same key"
                )
            old.alignment = max(old.alignment, alignment)
            return
        self.named_data[key] = NamedBlob(data, alignment)


def _layout(entry: Any) -> TensorLayout | None:
    """An official ``DataEntry``'s tensor layout as ours (``None`` for opaque data)."""
    layout = getattr(entry, "tensor_layout", None)
    if layout is None:
        return None
    return TensorLayout(
        int(layout.scalar_type), [int(s) for s in layout.sizes], [int(d) for d in layout.dim_order]
    )
