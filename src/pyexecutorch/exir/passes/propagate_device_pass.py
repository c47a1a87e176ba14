"""Which device a delegate's tensors live on: the ``target_device`` compile spec.

A partitioner that targets a device other than the host names it in its delegation
compile specs as ``CompileSpec(TARGET_DEVICE_COMPILE_SPEC_KEY, b"cuda:0")``."""

from __future__ import annotations

from pyexecutorch.schema.program import DeviceType

TARGET_DEVICE_COMPILE_SPEC_KEY = "target_device"


def parse_device_spec_value(value: bytes | str) -> tuple[DeviceType, int]:
    """``b"cuda:1"`` -> ``(DeviceType.CUDA, 1)``; the type is matched without case and
    the index defaults to 0."""
    text = (value.decode() if isinstance(value, bytes) else value).strip().lower()
    type_name, _, index = text.partition(":")
    by_name = {d.name.lower(): d for d in DeviceType}
    if type_name not in by_name:
        raise ValueError(
            f"compile spec {TARGET_DEVICE_COMPILE_SPEC_KEY!r}: unknown device type "
            f"{type_name!r} (known: {', '.join(d.name for d in DeviceType)})"
        )
    if index and not index.isdigit():
        raise ValueError(
            f"compile spec {TARGET_DEVICE_COMPILE_SPEC_KEY!r}: device index {index!r} "
            "is not a non-negative integer"
        )
    return by_name[type_name], int(index or 0)


__all__ = ["TARGET_DEVICE_COMPILE_SPEC_KEY", "parse_device_spec_value"]
