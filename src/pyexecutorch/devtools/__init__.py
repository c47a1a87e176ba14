"""Developer tools: ETDump traces, the Inspector, bundled programs, ETRecord, numeric comparison.

The trace and bundled-program reading side (:class:`Inspector`,
:mod:`.bundled_program` loading) needs numpy only; ETRecord, expected outputs
and :func:`compare` import torch when used.
"""

from __future__ import annotations

from typing import Any

from pyexecutorch.devtools.inspector import Event, EventBlock, Inspector, PerfData, TimeScale

_LAZY = {
    "ETRecord": "pyexecutorch.devtools.etrecord",
    "generate_etrecord": "pyexecutorch.devtools.etrecord",
    "parse_etrecord": "pyexecutorch.devtools.etrecord",
    "compare": "pyexecutorch.devtools.numeric",
    "BundledProgram": "pyexecutorch.devtools.bundled_program.core",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pyexecutorch.devtools' has no attribute {name!r}")
    import importlib  # noqa: PLC0415

    return getattr(importlib.import_module(module), name)


__all__ = [
    "BundledProgram",
    "ETRecord",
    "Event",
    "EventBlock",
    "Inspector",
    "PerfData",
    "TimeScale",
    "compare",
    "generate_etrecord",
    "parse_etrecord",
]
