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

from pyexecutorch.schema.errors import FormatError as SchemaFormatError

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


class FormatError(SchemaFormatError):
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
    if n > len(data):
        raise FormatError(f"header of {n} bytes runs past the end of the {len(data)}-byte program")
    if 8 + n > len(data):
        raise FormatError(f"header of {n} bytes runs past the end of the {len(data)}-byte program")
    try:
        header = json.loads(bytes(data[8 : 8 + n]))
    except ValueError as e:
        raise FormatError(f"header is not valid JSON: {e}") from None
    start = 8 + n + pad(8 + n)
    blob = data[start:]
    validate(header, len(blob))
    return header, blob


# Operands each op takes (``linear``'s bias may be -1: none).
ARITY: dict[str, int] = {
    "add": 2,
    "sub": 2,
    "mul": 2,
    "relu": 1,
    "sigmoid": 1,
    "tanh": 1,
    "linear": 3,
    "addmm": 3,
    "mm": 2,
    "permute": 1,
}


def _ids(what: str, items: Any, n: int, *, none_ok: bool = False) -> list[int]:
    if not isinstance(items, list) or not all(type(i) is int for i in items):
        raise FormatError(f"{what} must be a list of value ids")
    for i in items:
        if not (0 <= i < n or (none_ok and i == -1)):
            raise FormatError(f"{what}: value {i} does not exist ({n} values)")
    return items


def _number(what: str, x: Any) -> None:
    if type(x) not in (int, float):
        raise FormatError(f"{what} must be a number, got {x!r}")


def validate(header: Any, blob_size: int) -> None:
    """Check every id, shape, size and offset of a header, so that ``init`` can trust it."""
    if not isinstance(header, dict):
        raise FormatError("header is not a JSON object")
    for key in ("values", "inputs", "outputs", "constants", "ops"):
        if key not in header:
            raise FormatError(f"header has no {key!r}")
    values = header["values"]
    if not isinstance(values, list):
        raise FormatError("'values' must be a list")
    n = len(values)
    sizes: list[int | None] = []
    for i, v in enumerate(values):
        shape = v.get("shape") if isinstance(v, dict) else None
        if not isinstance(v, dict) or v.get("dtype") != "float32" or not isinstance(shape, list):
            raise FormatError(f"value {i} must be {{'dtype': 'float32', 'shape': [...]}}")
        if len(shape) > 16 or not all(d is None or (type(d) is int and d >= 0) for d in shape):
            raise FormatError(f"value {i}: shape {shape} is not a list of sizes")
        sizes.append(None if None in shape else 4 * _prod(shape))
    known = set(_ids("inputs", header["inputs"], n))
    _ids("outputs", header["outputs"], n)
    if not isinstance(header["constants"], list):
        raise FormatError("'constants' must be a list")
    for k, c in enumerate(header["constants"]):
        what = f"constant {k}"
        if not isinstance(c, dict) or type(c.get("value")) is not int or not 0 <= c["value"] < n:
            raise FormatError(f"{what}: needs a 'value' id below {n}")
        vid = c["value"]
        if sizes[vid] is None:
            raise FormatError(f"{what}: value {vid} has a dynamic shape")
        if "key" in c:
            if not isinstance(c["key"], str):
                raise FormatError(f"{what}: 'key' must be a string")
        else:
            start, nbytes = c.get("offset"), c.get("nbytes")
            if type(start) is not int or type(nbytes) is not int or start < 0 or start % 4:
                raise FormatError(f"{what}: needs a 4-aligned 'offset' and an 'nbytes'")
            if nbytes != sizes[vid]:
                raise FormatError(f"{what}: {nbytes} bytes, value {vid} needs {sizes[vid]}")
            if start + nbytes > blob_size:
                raise FormatError(
                    f"{what}: {nbytes} bytes at {start} run past the {blob_size}-byte weights blob"
                )
        known.add(vid)
    if not isinstance(header["ops"], list):
        raise FormatError("'ops' must be a list")
    for k, op in enumerate(header["ops"]):
        what = f"op {k}"
        name = op.get("op") if isinstance(op, dict) else None
        if name not in ARITY:
            raise FormatError(f"{what}: unknown op {name!r} (known: {sorted(ARITY)})")
        args = _ids(f"{what} ({name}) args", op.get("args"), n, none_ok=name == "linear")
        if len(args) != ARITY[name] or (-1 in args and args.index(-1) != 2):
            raise FormatError(f"{what} ({name}) takes {ARITY[name]} operands, got {args}")
        for a in args:
            if a != -1 and a not in known:
                raise FormatError(f"{what} ({name}) reads value {a} before anything writes it")
        out = op.get("out")
        if type(out) is not int or not 0 <= out < n:
            raise FormatError(f"{what} ({name}): 'out' must be a value id below {n}")
        attrs = op.get("attrs", {})
        if not isinstance(attrs, dict) or not set(attrs) <= set(OPS[name]):
            raise FormatError(f"{what} ({name}): attributes {attrs!r}, allowed {OPS[name]}")
        for key in ("alpha", "beta"):
            if key in attrs:
                _number(f"{what} ({name}) {key}", attrs[key])
        if name == "permute":
            dims = attrs.get("dims")
            rank = len(values[args[0]]["shape"])
            if not isinstance(dims, list) or sorted(d for d in dims if type(d) is int) != list(
                range(rank)
            ):
                raise FormatError(
                    f"{what} (permute): dims {dims!r} are not a permutation of {rank}"
                )
        known.add(out)
    for vid in header["outputs"]:
        if vid not in known:
            raise FormatError(f"output value {vid} is never written")


def _prod(shape: list[int]) -> int:
    total = 1
    for d in shape:
        total *= d
    return total
