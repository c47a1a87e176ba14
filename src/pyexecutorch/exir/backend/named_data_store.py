"""Named data: blobs a backend stores once in the program and finds again by key.

``preprocess`` may put weights (or anything) in a :class:`NamedDataStore` and
return ``store.get_named_data_store_output()`` as ``data_store_output``. Equal
keys from different delegates must hold equal bytes and are stored once; the
runtime half reads them through ``context.named_data[key]`` in ``init``.
Blobs given an ``external_tag`` go to the ``<tag>.ptd`` file instead of the
``.pte`` (``ExecutorchProgramManager.write_tensor_data_to_file``).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass
class DataEntry:
    """One key's entry: which buffer, its alignment, and its tensor layout (if a tensor)."""

    buffer_index: int
    alignment: int = 1
    tensor_layout: Any = None


@dataclass
class NamedDataStoreOutput:
    """The store's content: unique ``buffers``, keys stored in the ``.pte``
    (``pte_data``) and keys stored in external files (``external_data[tag]``)."""

    buffers: list[bytes] = field(default_factory=list)
    pte_data: dict[str, DataEntry] = field(default_factory=dict)
    external_data: dict[str, dict[str, DataEntry]] = field(default_factory=dict)


def _tensor_layout(t: torch.Tensor) -> Any:
    from pyexecutorch.exir.tensor_spec import dim_order_from_strides, scalar_type_of_torch
    from pyexecutorch.schema.flat_tensor_schema import TensorLayout

    return TensorLayout(
        scalar_type_of_torch(t.dtype),
        list(t.shape),
        list(dim_order_from_strides(tuple(t.stride()))),
    )


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().cpu()
    if t.is_contiguous():
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        return t.numpy().tobytes()
    # A tensor in another dim order (channels last): its storage as laid out.
    return bytes(t.untyped_storage())


class NamedDataStore:
    """Collects named blobs; identical bytes under several keys are stored once."""

    def __init__(self) -> None:
        self.buffers: list[bytes] = []
        self.pte_data: dict[str, DataEntry] = {}
        self.external_data: dict[str, dict[str, DataEntry]] = {}
        self._by_digest: dict[bytes, int] = {}
        self._digests: list[bytes] = []
        self._key_buffer: dict[str, int] = {}

    def add_named_data(
        self,
        key: str,
        data: bytes | bytearray | memoryview | np.ndarray | torch.Tensor,
        alignment: int | None = 1,
        external_tag: str | None = None,
        tensor_layout: Any = None,
    ) -> None:
        """Store ``data`` under ``key``. Raises ``ValueError`` if ``key`` already holds
        other bytes; adding the same bytes again only raises their alignment."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"named data key must be a non-empty str, got {key!r}")
        alignment = 1 if alignment is None else alignment
        if not isinstance(alignment, int) or alignment <= 0:
            raise ValueError(
                f"named data {key!r}: alignment must be a positive int, got {alignment!r}"
            )
        if isinstance(data, torch.Tensor):
            tensor_layout = tensor_layout if tensor_layout is not None else _tensor_layout(data)
            blob = _tensor_bytes(data)
        elif isinstance(data, np.ndarray):
            blob = np.ascontiguousarray(data).tobytes()
        elif isinstance(data, (bytes, bytearray, memoryview)):
            blob = bytes(data)
        else:
            raise TypeError(f"named data {key!r}: unsupported data of type {type(data).__name__}")
        digest = hashlib.sha256(blob).digest()
        old = self._key_buffer.get(key)
        if old is not None:
            if self._digests[old] != digest:
                raise ValueError(
                    f"named data {key!r} is already stored with other contents "
                    f"({len(self.buffers[old])} bytes stored, {len(blob)} bytes given)"
                )
            entry = self._entry(key)
            entry.alignment = math.lcm(entry.alignment, alignment)
            return
        index = self._by_digest.get(digest)
        if index is None:
            index = len(self.buffers)
            self.buffers.append(blob)
            self._digests.append(digest)
            self._by_digest[digest] = index
        table = (
            self.pte_data
            if external_tag is None
            else self.external_data.setdefault(external_tag, {})
        )
        table[key] = DataEntry(index, alignment, tensor_layout)
        self._key_buffer[key] = index

    def _entry(self, key: str) -> DataEntry:
        if key in self.pte_data:
            return self.pte_data[key]
        for entries in self.external_data.values():
            if key in entries:
                return entries[key]
        raise KeyError(key)

    def get_named_data_store_output(self) -> NamedDataStoreOutput:
        return NamedDataStoreOutput(
            list(self.buffers),
            dict(self.pte_data),
            {tag: dict(entries) for tag, entries in self.external_data.items()},
        )

    def merge_named_data_store(self, other: NamedDataStoreOutput) -> None:
        """Add every entry of another store's output."""
        for key, entry in other.pte_data.items():
            self.add_named_data(
                key, other.buffers[entry.buffer_index], entry.alignment, None, entry.tensor_layout
            )
        for tag, entries in other.external_data.items():
            for key, entry in entries.items():
                self.add_named_data(
                    key,
                    other.buffers[entry.buffer_index],
                    entry.alignment,
                    tag,
                    entry.tensor_layout,
                )


__all__ = ["DataEntry", "NamedDataStore", "NamedDataStoreOutput"]
