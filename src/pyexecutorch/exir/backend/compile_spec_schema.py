"""Compile specs: static key/value settings a partitioner hands its backend.

They travel with each delegate into the program (``BackendDelegate.compile_specs``)
and reach the runtime half's ``init`` as ``{key: bytes}``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompileSpec:
    """One setting: ``key`` names it, ``value`` is its raw bytes (the backend decides
    how to encode numbers or strings in them). A ``str`` value, as official scripts
    pass, is kept as given and stored in the program as its UTF-8 bytes."""

    key: str
    value: bytes | str

    def __post_init__(self) -> None:
        if not isinstance(self.key, str):
            raise TypeError(f"CompileSpec key must be a str, got {type(self.key).__name__}")
        if isinstance(self.value, (bytearray, memoryview)):
            object.__setattr__(self, "value", bytes(self.value))
        elif not isinstance(self.value, (bytes, str)):
            raise TypeError(
                f"CompileSpec {self.key!r}: value must be bytes or str, got {type(self.value).__name__} "
                "(encode it, e.g. str(x).encode())"
            )


def spec_bytes(value: bytes | str) -> bytes:
    """A compile spec's value as the program stores it."""
    return value.encode() if isinstance(value, str) else bytes(value)


def compile_specs_dict(specs: list[CompileSpec] | None) -> dict[str, bytes]:
    """``specs`` as ``{key: value}``, as the runtime half sees them."""
    return {s.key: spec_bytes(s.value) for s in specs or ()}


__all__ = ["CompileSpec", "compile_specs_dict", "spec_bytes"]
