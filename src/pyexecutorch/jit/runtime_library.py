"""numba's runtime library read back from a record rather than compiled at each start.

numba compiles its runtime's own LLVM functions (NRT's atomic reference counts, its
meminfo accessor, the abort for unresolved symbols) the first time a process starts its
runtime, before any machine code can be installed: 22 ms of CPU of a warm start that reads
every function of a program from its record. Here the library's machine code and its
linking bitcode (every later compilation links it) are kept in a record of their own,
keyed as the function records are (numba's and Python's versions, the machine), and the
library is made from it as a cached function's is (:mod:`.disk_cache`). numba's own start
of its runtime runs as before (its C helpers' symbols, its statistics switch); only its
compile of the library is replaced.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path
from typing import Any

from pyexecutorch.jit import disk_cache, function_records

# Bump when what the record holds changes.
_FORMAT = "1"


def start(context: Any) -> None:
    """Start numba's runtime for ``context`` (under numba's compiler lock), its library read
    from the record, or compiled and recorded; as numba starts it where this numba's
    runtime is not the one this was written for."""
    from numba.core.runtime import nrt, nrtdynmod  # noqa: PLC0415 - compiled tier only

    runtime = nrt.rtsys
    if getattr(runtime, "_init", True) or not _supported(nrtdynmod):
        runtime.initialize(context)  # (a no-op once started)
        return
    compile_library = nrtdynmod.compile_nrt_functions
    nrtdynmod.compile_nrt_functions = _library
    try:
        runtime.initialize(context)
    finally:
        nrtdynmod.compile_nrt_functions = compile_library


def _supported(nrtdynmod: Any) -> bool:
    from numba.core.codegen import JITCodeLibrary  # noqa: PLC0415

    return (
        hasattr(nrtdynmod, "create_nrt_module")
        and hasattr(JITCodeLibrary, "enable_object_caching")
        and hasattr(JITCodeLibrary, "serialize_using_object_code")
        and disk_cache.lazy_rebuilder() is not None
    )


def record_path() -> Path:
    """The runtime library's record (beside the function records, in a format of its own)."""
    digest = hashlib.sha256(f"{function_records._machine()}\n{_FORMAT}".encode()).hexdigest()
    return function_records.folder() / f"numba-runtime.{digest[:20]}.record"


def _library(context: Any) -> Any:
    """The runtime library of ``context``'s code generator, read from its record, else
    compiled as numba compiles it (with its machine code kept) and recorded."""
    from numba.core.runtime import nrtdynmod  # noqa: PLC0415

    path = record_path()
    library = _read(path, context)
    if library is not None:
        return library
    module, library = nrtdynmod.create_nrt_module(context)
    library.enable_object_caching()
    library.add_ir_module(module)
    library.finalize()
    name, _, (object_code, bitcode) = library.serialize_using_object_code()
    symbols = tuple(f.name for f in library._final_module.functions if not f.is_declaration)
    data = pickle.dumps((_FORMAT, name, object_code, bitcode, symbols), protocol=4)
    function_records.write_data(path, data)
    return library


def _read(path: Path, context: Any) -> Any:
    """The library held by the record at ``path``, its machine code installed; None when
    there is none or it cannot be read."""
    try:
        with open(path, "rb") as f:
            held = pickle.loads(f.read())  # noqa: S301 - our own record, as numba's cache
    except Exception:  # noqa: BLE001 - an unreadable record is compiled again
        return None
    if not (isinstance(held, tuple) and len(held) == 5 and held[0] == _FORMAT):
        return None
    _, name, object_code, bitcode, symbols = held
    codegen = context.codegen()
    library = disk_cache.lazily_linked_library()(codegen, name, object_code)
    library.__dict__["_linking_bitcode"] = bitcode
    codegen._engine._defined_symbols.update(symbols)
    return library
