"""The example backend's serialized form, shared by both halves (numpy and the
standard library only, so the runtime half stays free of torch).

Layout of ``processed`` bytes::

    offset 0   b"EXB1"                  magic
    offset 4   uint32 little endian     length N of the JSON header
    offset 8   N bytes                  the header, UTF-8 JSON
    then       zero padding to a multiple of ALIGNMENT
    then       the weights blob: each inline constant at an ALIGNMENT-aligned offset

The header::

    {"values":    [{"dtype": "float32", "shape": [4, 16]}, ...],   # every tensor, by id
     "inputs":    [ids of the delegate's inputs, in call order],
     "outputs":   [ids of its outputs, in order],
     "constants": [{"value": id, "offset": byte offset in the blob, "nbytes": n}
                   | {"value": id, "key": named data key}],
     "ops":       [{"op": "addmm", "args": [ids], "out": id, "attrs": {...}}, ...]}

Shapes hold ``null`` for dimensions that vary at run time.
"""

from __future__ import annotations

import json
import struct
from typing import Any

MAGIC = b"EXB1"
ALIGNMENT = 16
BACKEND_ID = "ExampleBackend"

# Operator names of the format and the attributes each takes.
OPS: dict[str, tuple[str, ...]] = {
    "add": ("alpha",),
    "sub": ("alpha",),
    "mul": (),
    "relu": (),
    "sigmoid": (),
    "tanh": (),
    "linear": (),
    "addmm": ("beta", "alpha"),
    "mm": (),
    "permute": ("dims",),
}


class FormatError(ValueError):
    """``processed`` bytes that are not a valid example-backend program."""


def pad(n: int) -> int:
    return -n % ALIGNMENT


def pack(header: dict[str, Any], blob: bytes) -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode()
    head = MAGIC + struct.pack("<I", len(text)) + text
    return head + bytes(pad(len(head))) + blob


def unpack(data: memoryview) -> tuple[dict[str, Any], memoryview]:
    """``(header, blob)`` of ``processed`` bytes; :class:`FormatError` if malformed."""
    if len(data) < 8 or bytes(data[:4]) != MAGIC:
        raise FormatError(
            f"not an example-backend program (magic {bytes(data[:4])!r}, expected {MAGIC!r})"
        )
    (n,) = struct.unpack_from("<I", data, 4)
    if 8 + n > len(data):
        raise FormatError(f"header of {n} bytes runs past the end of the {len(data)}-byte program")
    try:
        header = json.loads(bytes(data[8 : 8 + n]))
    except ValueError as e:
        raise FormatError(f"header is not valid JSON: {e}") from None
    start = 8 + n + pad(8 + n)
    for key in ("values", "inputs", "outputs", "constants", "ops"):
        if key not in header:
            raise FormatError(f"header has no {key!r}")
    return header, data[start:]
