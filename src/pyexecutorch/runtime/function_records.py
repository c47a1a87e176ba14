"""Whole-method functions on disk: one record per function and argument types.

A method compiled whole is one generated numba function of up to hundreds of array
parameters (see :mod:`pyexecutorch.runtime.whole_method`). numba's own cache finds a
function's machine code through the function: its module imported, its source file
stamped, its bytecode hashed into an index key with every argument's numba type, the
index read; about 2 ms of a small method's warm load before any machine code is read.
Its record here is found by name instead, from what it is made of:

- the generated module's name, which is the hash of its source and of the build key
  (numba's and numpy's builds, the stamps of every compiled kernel it may call or
  inline: see :func:`pyexecutorch.runtime.compiled.build_key`),
- the function's name and the argument types (:func:`types_key`: each array's dtype,
  rank, layout and writability, read from its flags without numba's typeof, and finer
  than the numba type they determine),
- what numba's index adds: numba's and Python's versions, and the machine (target
  triple, CPU name and features) the code was compiled for,
- and this record format.

A record holds numba's own serialized compile result (as its cache data files do)
without the bitcode numba keeps for linking a function into a later caller (nothing
calls a whole-method function) or its annotated source. Records are written atomically, read whole, and one
that cannot be read is compiled again and overwritten.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from pyexecutorch.runtime import compiled

# Bump when what a record holds, or how it is read, changes.
FORMAT = "1"
_FOLDER = "functions"


def types_key(arrays: tuple[Any, ...]) -> str | None:
    """The argument types of ``arrays`` as text, one ``<dtype><rank><layout><w|r>`` each
    (layout as numba maps it: C, else F, else A), or None when one is not a plain array
    (its numba type is not read from its flags)."""
    parts = []
    for a in arrays:
        if type(a) is not np.ndarray:
            return None
        flags = a.flags
        layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
        parts.append(f"{a.dtype.str}{a.ndim}{layout}{'w' if flags.writeable else 'r'}")
    return ",".join(parts)


@functools.cache
def _machine() -> str:
    """What a record's machine code is valid for, besides its source: numba's index key
    parts that are not the function's (numba and Python versions, target machine)."""
    from numba.core.registry import cpu_target  # noqa: PLC0415 - compiled tier only

    numba = compiled.numba_module()
    magic = cpu_target.target_context.codegen().magic_tuple()
    return f"{FORMAT}\n{numba.__version__}\n{sys.version_info[:2]}\n{magic}"


def path_of(function: compiled.GeneratedFunction, types: str) -> Path:
    """The record of ``function`` (a function of a generated module) for argument types
    ``types`` (see :func:`types_key`)."""
    digest = hashlib.sha256(f"{_machine()}\n{types}".encode()).hexdigest()[:20]
    module = function.module_name[len(compiled.GENERATED_PREFIX) :]
    return compiled.cache_dir() / _FOLDER / f"{module}.{function.name}.{digest}.nbr"


def read(path: Path) -> Any:
    """numba's compile result held by the record at ``path``, its machine code installed;
    None when there is none or it cannot be read."""
    rebuilder = compiled.lazy_rebuilder()
    if rebuilder is None:
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    from numba.core.compiler_lock import global_compiler_lock  # noqa: PLC0415
    from numba.core.registry import cpu_target  # noqa: PLC0415

    context = cpu_target.target_context
    with global_compiler_lock:
        compiled.refresh_once(context)
        try:
            payload = compiled.CacheDataReader(io.BytesIO(data)).load()
        except Exception:  # noqa: BLE001 - an unreadable record is compiled again
            compiled.logger.debug("unreadable function record %s", path)
            return None
        if not isinstance(payload, tuple):
            return None
        return rebuilder(context, payload)


def write(path: Path, result: Any) -> None:
    """Write numba's compile ``result`` as the record at ``path`` (without its linking
    bitcode), atomically: another process may be reading it."""
    if compiled.lazy_rebuilder() is None:
        return  # a numba whose results this module cannot read back
    from numba.core.serialize import dumps  # noqa: PLC0415

    libdata, fndesc, env, signature, objectmode, lifted, _typeann, *rest = result._reduce()
    name, kind, (object_code, _bitcode) = libdata
    # (nor numba's annotated source, which only inspect_types prints: 100 KB for a CNN)
    data = dumps(
        ((name, kind, (object_code, None)), fndesc, env, signature, objectmode, lifted, "", *rest)
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
