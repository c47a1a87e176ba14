"""The official serializer's private entry points (``executorch.exir._serialize``),
for code that writes a program object to ``.pte`` bytes itself: over pyexecutorch's
one program-format codec, :mod:`pyexecutorch.schema.pte`."""

from __future__ import annotations

from pyexecutorch.schema.pte import DEFAULT_SEGMENT_ALIGNMENT, encode_pte
from pyexecutorch.schema.pte import PteFile as _PTEFile


def _serialize_pte_binary(
    pte_file: _PTEFile,
    *,
    segment_alignment: int = DEFAULT_SEGMENT_ALIGNMENT,
    constant_tensor_alignment: int | None = None,
    delegate_alignment: int | None = None,
) -> bytes:
    """The ``.pte`` bytes of ``pte_file`` (its program and segment data)."""
    return encode_pte(
        pte_file,
        segment_alignment=segment_alignment,
        constant_tensor_alignment=constant_tensor_alignment,
        delegate_alignment=delegate_alignment,
    )


__all__ = ["_PTEFile", "_serialize_pte_binary"]
