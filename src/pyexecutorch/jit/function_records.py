"""Compiled functions on disk: one record per function and argument types.

A method compiled whole is one generated numba function of up to hundreds of array
parameters (see :mod:`pyexecutorch.runtime.whole_method`). numba's own cache finds a
function's machine code through the function: its module imported, its source file
stamped, its bytecode hashed into an index key with every argument's numba type, the
index read; about 2 ms of a small method's warm load before any machine code is read.
Its record here is found by name instead, from what it is made of:

- the generated module's name, which is the hash of its source and of the build key
  (numba's and numpy's builds, the stamps of every compiled kernel it may call or
  inline: see :func:`pyexecutorch.jit.generated.build_key`),
- the function's name and the argument types (:func:`types_key`: each array's dtype,
  rank, layout and writability, read from its flags without numba's typeof, and finer
  than the numba type they determine),
- what numba's index adds: numba's and Python's versions, and the machine (target
  triple, CPU name and features) the code was compiled for,
- and this record format.

A record holds numba's own serialized compile result (as its cache data files do)
without the bitcode numba keeps for linking a function into a later caller (nothing
calls a whole-method function) or its annotated source.

The functions a method that keeps its lines calls through their numba dispatchers (a
kernel's compiled form, a fused loop) have records too (:func:`dispatcher_path`), with
their bitcode, keyed also by their compile options and, outside generated modules, their
source file's stamp and the build key: a record read back is added to its dispatcher as
numba's own reader would add it, so later compilations link it. Their data is copied from
numba's cache the first time it serves them, or written when they compile.

Records are written atomically, read whole, and one that cannot be read is compiled
(or read from numba's cache) again and overwritten.
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

from pyexecutorch.jit import disk_cache, generated, numba_env

# Bump when what a record holds, or how it is read, changes.
FORMAT = "3"
# The first item of a plain function's record (the rest: see write).
_LIGHT = "plain entry point"
_FOLDER = "functions"


def types_key(arguments: tuple[Any, ...]) -> str | None:
    """The types of ``arguments`` as text, or None when one's numba type is not read here.

    An array is ``<dtype><rank><layout><w|r>`` (layout as numba maps it: C, else F, else
    A); a Python bool, int (in int64's range) or float, or a numpy scalar, its type. Each
    is finer than the numba type it determines.
    """
    parts = []
    for a in arguments:
        kind = type(a)
        if kind is np.ndarray:
            flags = a.flags
            layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
            parts.append(f"{a.dtype.str}{a.ndim}{layout}{'w' if flags.writeable else 'r'}")
        elif kind is bool or kind is float:
            parts.append(kind.__name__)
        elif kind is int and -(1 << 63) <= a < 1 << 63:
            parts.append("int")
        elif isinstance(a, (np.bool_, np.number)) and kind.__module__ == "numpy":
            parts.append(f"scalar{a.dtype.str}")
        else:
            return None
    return ",".join(parts)


@functools.cache
def _machine() -> str:
    """What a record's machine code is valid for, besides its source: numba's index key
    parts that are not the function's (numba and Python versions, target machine)."""
    from numba.core.registry import cpu_target  # noqa: PLC0415 - compiled tier only

    numba = numba_env.numba_module()
    magic = cpu_target.target_context.codegen().magic_tuple()
    return f"{FORMAT}\n{numba.__version__}\n{sys.version_info[:2]}\n{magic}"


def path_of(function: generated.GeneratedFunction, types: str) -> Path:
    """The record of ``function`` (a function of a generated module) for argument types
    ``types`` (see :func:`types_key`)."""
    digest = hashlib.sha256(f"{_machine()}\n{types}".encode()).hexdigest()[:20]
    module = function.module_name[len(generated.GENERATED_PREFIX) :]
    return folder() / f"{module}.{function.name}.{digest}.nbr"


def folder() -> Path:
    """Where the records are kept (under the cache directory)."""
    return numba_env.cache_dir() / _FOLDER


def read(path: Path, plain: bool = False) -> Any:
    """numba's compile result held by the record at ``path``, its machine code installed;
    None when there is none or it cannot be read. ``plain``: a plain function's record (see
    :func:`write`), read without refreshing numba's registries."""
    rebuilder = disk_cache.lazy_rebuilder()
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
        if not plain:
            disk_cache.refresh_once(context)
        try:
            payload = disk_cache.CacheDataReader(io.BytesIO(data)).load()
        except Exception:  # noqa: BLE001 - an unreadable record is compiled again
            numba_env.logger.debug("unreadable function record %s", path)
            return None
        if not isinstance(payload, tuple) or not payload:
            return None
        if payload[0] == _LIGHT:
            # Installing machine code needs numba's runtime (NRT) and no typing or lowering
            # registry: their refresh, which imports scipy.linalg, cost half a warm start
            disk_cache.runtime_once(context)
            result = disk_cache.entry_rebuilder()(context, payload[1:-1])
            result.return_type = payload[-1]
            return result
        if plain:
            disk_cache.refresh_once(context)
        return rebuilder(context, payload)


def dispatcher_path(dispatcher: Any, types: str) -> Path | None:
    """The record of a numba dispatcher's function (a kernel's compiled form, or a loop of
    a generated module) for argument types ``types``; None for one it cannot name (a
    closure). Besides what :func:`path_of` keys, its compile options, and for a function
    of a source file its file's stamp (as numba's index) and the build key."""
    py = getattr(dispatcher, "py_func", None)
    options = getattr(dispatcher, "targetoptions", None)
    if py is None or options is None or py.__closure__ is not None:
        return None
    if not getattr(getattr(dispatcher, "_cache", None), "_enabled", False):
        return None  # a function numba does not cache (cache=False) has no record either
    module = py.__module__
    if module.startswith(generated.GENERATED_PREFIX):
        stamp, module = "", module[len(generated.GENERATED_PREFIX) :]  # (its source's hash)
    else:
        try:
            st = os.stat(py.__code__.co_filename)
        except OSError:
            return None
        stamp = f"{py.__code__.co_filename}:{st.st_size}:{st.st_mtime_ns}:{generated.build_key()}"
    text = f"{_machine()}\n{types}\n{module}.{py.__qualname__}\n{stamp}\n{sorted(options.items())}"
    digest = hashlib.sha256(text.encode()).hexdigest()[:20]
    return folder() / f"{module}.{py.__qualname__}.{digest}.nbr"


def write(path: Path, result: Any, linkable: bool = False) -> None:
    """Write numba's compile ``result`` as the record at ``path``, atomically (another
    process may be reading it); without its linking bitcode unless ``linkable`` (a
    function a later compilation may call)."""
    if disk_cache.lazy_rebuilder() is None:
        return  # a numba whose results this module cannot read back
    if not can_record(result):
        numba_env.logger.debug("not recording %s: it cannot be cached", path.name)
        return
    held = result.library.__dict__.get("object_code")  # (read back: see disk_cache)
    if held is None and getattr(result.library, "_compiled_object", None) is None:
        # read by numba's own reader, whose library holds no machine code to write
        numba_env.logger.debug("not recording %s: read from numba's cache", path.name)
        return
    from numba.core.serialize import dumps  # noqa: PLC0415

    if not linkable:
        # A plain function, called only through its entry point: its light record, what
        # numba's get_executable needs (see disk_cache.entry_rebuilder).
        fndesc = result.fndesc
        if held is None:
            name, _, (object_code, _bitcode) = result.library.serialize_using_object_code()
        else:
            name, object_code = result.library.name, held
        symbols = (fndesc.llvm_func_name, fndesc.llvm_cpython_wrapper_name)
        if held is None:
            envs = tuple(result._find_referenced_environments())
        else:  # (no module to search: as numba's reader rebuilt them)
            envs = tuple(result.referenced_envs or ())
        light = (name, object_code, symbols, fndesc.modname, fndesc.qualname)
        returns = result.signature.return_type
        light += (result.environment, envs, result.reload_init, returns)
        write_data(path, dumps((_LIGHT, *light)))
        return
    libdata, fndesc, env, signature, objectmode, lifted, _typeann, *rest = result._reduce()
    # (not numba's annotated source, which only inspect_types prints: 100 KB for a CNN)
    write_data(path, dumps((libdata, fndesc, env, signature, objectmode, lifted, "", *rest)))


def can_record(result: Any) -> bool:
    """Whether numba's compile ``result`` can be recorded: as numba's cache, not machine
    code holding this process's addresses."""
    return not result.library.has_dynamic_globals and all(f.can_cache for f in result.lifted)


def native_name(result: Any) -> str:
    """The symbol of the native entry (numba's calling convention) of ``result``, a compile
    result or a plain function read back."""
    fndesc = getattr(result, "fndesc", None)
    return result.symbols[0] if fndesc is None else fndesc.llvm_func_name


def return_type(result: Any) -> Any:
    """The numba type ``result`` (a compile result, or a plain function read back) returns."""
    signature = getattr(result, "signature", None)
    return result.return_type if signature is None else signature.return_type


def write_data(path: Path, data: bytes) -> None:
    """Write ``data`` (a compile result as numba serializes it) as the record at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
