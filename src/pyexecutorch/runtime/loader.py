"""Opening program and data files: memory-mapped, never copied."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

from pyexecutorch.schema.errors import FormatError


def open_bytes(source: Any, what: str = "program") -> Any:
    """A buffer over ``source``: a path (memory-mapped), bytes-like, or a binary file object."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    raise FormatError(f"{what} file {str(path)!r} is empty")
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise FileNotFoundError(f"{what} file not found: {str(path)!r}") from None
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
