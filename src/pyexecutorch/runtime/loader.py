"""Opening program and data files: read into memory once, never mapped.

A memory-mapped file that is truncated or rewritten on disk while a program
still uses it pulls its pages from under the process: the next read of a
constant raises SIGBUS and kills the interpreter. Reading the file once gives
the program bytes of its own, so that deleting, truncating or replacing the
file afterwards changes nothing; decoding stays zero-copy from those bytes.
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
        return source
    if hasattr(source, "read"):
        data = source.read()
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"{what}: file object must be opened in binary mode")
        return data
    try:
        return memoryview(source)
    except TypeError:
        raise TypeError(
            f"{what} must be a path, bytes, bytearray, memoryview or a binary file object, "
            f"got {type(source).__name__}"
        ) from None
