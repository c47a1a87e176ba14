"""Work memory the kernels reuse across calls, and arrays derived from constant tensors.

Scratch buffers (column buffers and views of them, temporaries) are cached per thread in
an LRU bounded in entries and bytes (:func:`scratch`, :func:`scratch_object`); arrays
computed from constant weights (reshaped, converted, bias-fused) in another, keyed by the
constants' identities and dropped with them (:func:`derived`). A method that runs
repeatedly thus allocates nothing after its first execution.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

_SCRATCH: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()
_SCRATCH_MAX_ENTRIES = 256
_SCRATCH_MAX_BYTES = 512 << 20
_scratch_bytes = 0


def scratch_object(key: Any, make: Callable[[], tuple[Any, int]]) -> Any:
    """A per-thread work object (buffers and views of them) reused across calls.

    ``make()`` returns ``(object, nbytes)``; the cache is an LRU bounded in
    entries and bytes, so a rarely used shape eventually releases its memory.
    """
    global _scratch_bytes
    k = (threading.get_ident(), key)
    entry = _SCRATCH.get(k)
    if entry is not None:
        _SCRATCH.move_to_end(k)
        return entry[0]
    entry = make()
    _SCRATCH[k] = entry
    _scratch_bytes += entry[1]
    while len(_SCRATCH) > 1 and (
        len(_SCRATCH) > _SCRATCH_MAX_ENTRIES or _scratch_bytes > _SCRATCH_MAX_BYTES
    ):
        _, old = _SCRATCH.popitem(last=False)
        _scratch_bytes -= old[1]
    return entry[0]


def scratch(
    key: Any,
    shape: tuple[int, ...],
    dtype: np.dtype | type,
    init: Callable[[np.ndarray], None] | None = None,
) -> np.ndarray:
    """A zero-initialised work buffer reused across calls with the same key.

    Buffers are private to the calling thread. ``init`` runs once when the
    buffer is created (after zeroing); a caller that relies on parts of the
    buffer staying as initialised must never write those parts.
    """

    def make() -> tuple[np.ndarray, int]:
        buf = np.zeros(shape, dtype)
        if init is not None:
            init(buf)
        return buf, buf.nbytes

    return scratch_object((key, shape, np.dtype(dtype).char), make)


_DERIVED: OrderedDict[tuple, tuple[tuple, Any]] = OrderedDict()
_DERIVED_MAX_ENTRIES = 128


def _dead() -> None:
    return None


def derived(tag: Any, arrays: Sequence[np.ndarray | None], make: Callable[[], Any]) -> Any:
    """``make()``, cached while every array in ``arrays`` is alive and read-only.

    Constant tensors (weights, biases) reach kernels as read-only views that
    live as long as their program, so anything computed from them alone can
    be kept. Writable arrays (activations, planned memory) may change between
    calls: for them ``make()`` runs every time. Entries hold weak references,
    so a cached value never keeps a program's constants alive.
    """
    for a in arrays:
        if a is not None and a.flags.writeable:
            return make()
    key = (tag, *(None if a is None else id(a) for a in arrays))
    entry = _DERIVED.get(key)
    if entry is not None:
        refs, value = entry
        if all(r() is a for r, a in zip(refs, arrays, strict=True)):
            _DERIVED.move_to_end(key)
            return value
    value = make()
    refs = tuple(_dead if a is None else weakref.ref(a) for a in arrays)
    _DERIVED[key] = (refs, value)
    _DERIVED.move_to_end(key)
    if len(_DERIVED) > _DERIVED_MAX_ENTRIES:
        _DERIVED.popitem(last=False)
    return value
