"""Opening program and data files: read into memory once, never mapped.

A memory-mapped file that is truncated or rewritten on disk while a program
still uses it pulls its pages from under the process: the next read of a
constant raises SIGBUS and kills the interpreter. Reading the file once gives
the program bytes of its own, so that deleting, truncating or replacing the
file afterwards changes nothing; decoding stays zero-copy from those bytes.

The same for memory a caller hands in: a loaded program never borrows memory
its caller can still change. Immutable ``bytes`` (and read-only views whose
memory is ``bytes``) are used as they are, zero-copy; anything writable, or
a read-only view of something writable (a ``bytearray``, a numpy array, a
mapping of a file that may change), is copied once (:func:`owned_bytes`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pyexecutorch.schema.errors import FormatError


def open_bytes(source: Any, what: str = "program") -> Any:
    """The bytes of ``source``: a path (read whole), bytes-like, or a binary file object."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise FileNotFoundError(f"{what} file not found: {str(path)!r}") from None
        if not data:
            raise FormatError(f"{what} file {str(path)!r} is empty")
        return data
    if isinstance(source, (bytes, bytearray, memoryview)):
        return owned_bytes(source, what)
    if hasattr(source, "read"):
        data = source.read()
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"{what}: file object must be opened in binary mode")
        return data  # the caller never sees these bytes
    try:
        memoryview(source)
    except TypeError:
        raise TypeError(
            f"{what} must be a path, bytes, bytearray, memoryview or a binary file object, "
            f"got {type(source).__name__}"
        ) from None
    return owned_bytes(source, what)


def _owner(obj: Any) -> Any:
    """The object whose memory ``obj`` exposes: through memoryviews and numpy bases."""
    for _ in range(64):  # views of views; a cycle is impossible, the bound is cheap
        inner = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
        if inner is None or inner is obj:
            return obj
        obj = inner
    return obj


def owned_bytes(source: Any, what: str = "program") -> Any:
    """``source`` itself when no one can change its bytes (``bytes``, or a read-only view
    of ``bytes``), else a copy: a later change of the caller's memory must not change a
    loaded program."""
    if type(source) is bytes:
        return source
    try:
        view = memoryview(source)
    except TypeError:
        raise TypeError(
            f"{what} must be a bytes-like object, got {type(source).__name__}"
        ) from None
    if view.readonly and type(_owner(source)) is bytes:
        return source
    return view.tobytes()
