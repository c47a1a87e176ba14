"""VGF neural-accelerator statistics, as the official VGF delegate embeds them in an
ETDump's delegate debug metadata (``executorch.devtools.inspector.vgf_neural_statistics``):
a JSON record (schema ``executorch.vgf.neural_statistics``, version 1) per delegate call
whose segments carry base64 blobs. Parsed here, each blob gains ``raw_data`` (its bytes).
Reading needs no backend: the records come from the trace."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

SCHEMA = "executorch.vgf.neural_statistics"
SCHEMA_VERSION = 1
# The blobs of one segment.
BLOB_KEYS = ("debug_database", "statistics_info", "statistics_memory")

DelegateMetadataBytes = bytes | bytearray | str


def _to_bytes(metadata: DelegateMetadataBytes) -> bytes:
    if isinstance(metadata, (bytes, bytearray)):
        return bytes(metadata)
    if isinstance(metadata, str):
        return metadata.encode("utf-8")
    raise TypeError(f"delegate metadata is bytes or str, not {type(metadata).__name__}")


def _decode_blob(blob: dict[str, Any]) -> dict[str, Any]:
    decoded = dict(blob)
    if not decoded.get("available", False):
        decoded.setdefault("raw_data", b"")
        return decoded
    if decoded.get("encoding") != "base64":
        raise ValueError(
            f"Unsupported VGF neural statistics blob encoding: {decoded.get('encoding')!r}"
        )
    try:
        decoded["raw_data"] = base64.b64decode(decoded.get("data", ""), validate=True)
    except (binascii.Error, TypeError) as e:
        raise ValueError("Malformed base64 data in VGF neural statistics blob") from e
    return decoded


def parse_vgf_neural_statistics_metadata(metadata: DelegateMetadataBytes) -> dict[str, Any]:
    """One VGF statistics record: its JSON with each segment's blobs decoded."""
    payload = json.loads(_to_bytes(metadata).decode("utf-8"))
    if payload.get("schema") != SCHEMA:
        raise ValueError(f"Not VGF neural statistics metadata: {payload.get('schema')!r}")
    if payload.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            "Unsupported VGF neural statistics metadata schema version: "
            f"{payload.get('schema_version')!r} (this reader knows {SCHEMA_VERSION})"
        )
    segments = []
    for segment in payload.get("segments", []):
        segment = dict(segment)
        for key in BLOB_KEYS:
            if isinstance(segment.get(key), dict):
                segment[key] = _decode_blob(segment[key])
        segments.append(segment)
    return {**payload, "segments": segments}


def parse_vgf_neural_statistics_delegate_metadata(
    delegate_metadata_list: Sequence[DelegateMetadataBytes | None],
) -> list[dict[str, Any]]:
    """The VGF statistics records among an event's delegate metadata; other backends'
    metadata is skipped, a malformed record that names the VGF schema is an error."""
    records = []
    for metadata in delegate_metadata_list:
        if metadata in (None, b"", ""):
            continue
        try:
            data = _to_bytes(metadata)
        except TypeError:
            continue  # not metadata a delegate writes
        try:
            payload = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            if SCHEMA.encode("utf-8") in data:
                raise ValueError("Malformed VGF neural statistics delegate metadata") from e
            continue
        if isinstance(payload, dict) and payload.get("schema") == SCHEMA:
            records.append(parse_vgf_neural_statistics_metadata(data))
    return records
