"""ETRecord: what the compiler knew, saved next to a ``.pte`` for the Inspector (needs torch).

The implementation lives with the compiler that writes it, :mod:`pyexecutorch.exir.etrecord`;
:mod:`._etrecord`, the official package's module path
(``executorch.devtools.etrecord._etrecord``), which code and tests import helpers from,
offers its names.
"""

from pyexecutorch.devtools.etrecord._etrecord import (
    ETRecord,
    ETRecordError,
    ETRecordReservedFileNames,
    NodeInfo,
    complete,
    edge_program_of,
    generate_etrecord,
    nodes_by_debug_handle,
    parse_etrecord,
    record_programs,
)

__all__ = [
    "ETRecord",
    "ETRecordError",
    "ETRecordReservedFileNames",
    "NodeInfo",
    "complete",
    "edge_program_of",
    "generate_etrecord",
    "nodes_by_debug_handle",
    "parse_etrecord",
    "record_programs",
]
