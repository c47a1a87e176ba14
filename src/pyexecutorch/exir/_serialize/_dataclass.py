"""Dataclasses as JSON (the official ``exir._serialize._dataclass._DataclassEncoder``
name): for printing and diffing program or trace objects, not for the file format."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any


class _DataclassEncoder(json.JSONEncoder):
    """A dataclass as the dict of its fields, bytes as a list of ints, an enum as its value."""

    def default(self, o: Any) -> Any:
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
        if isinstance(o, (bytes, bytearray, memoryview)):
            return list(bytes(o))
        if isinstance(o, enum.Enum):
            return o.value
        return super().default(o)
