"""Entry points: a compiled function for exactly one set of argument types.

Calling an entry point skips the dispatcher's type resolution (about half a small
call). A warm load reads machine code back without numba's index or argument typing
where a function record has it (:mod:`.function_records`), else from numba's cache
read lazily (:mod:`.disk_cache`), and compiles only what neither holds.
"""

from __future__ import annotations

import collections
import contextlib
from typing import Any

from pyexecutorch.jit import (
    compile_lock,
    disk_cache,
    function_records,
    generated,
    numba_env,
    symbol_calls,
)
from pyexecutorch.jit.generated import GeneratedFunction


def entry_point(dispatcher: Any, arrays: tuple[Any, ...]) -> Any:
    """The compiled function of ``dispatcher`` (or of a :class:`~.generated.GeneratedFunction`)
    for exactly these arguments' types.

    Calling it skips the dispatcher's type resolution (about half a small
    call); only valid when every call passes arguments of those same types.
    Machine code read back from the disk cache is read without its linking
    bitcode (see :func:`~.disk_cache.read_lazily`), from the function's record where it
    has one (:mod:`.function_records`: no numba index, no argument typing), else from
    numba's cache, which then gives the record its data.
    """
    numba = numba_env.numba_module()
    dispatcher = generated.dispatcher_of(dispatcher)
    signature = None
    if dispatcher.overloads:  # (none loaded: nothing to look up, and none read twice)
        signature = tuple(numba.typeof(a) for a in arrays)
        overload = dispatcher.overloads.get(signature)
        if overload is not None:
            return overload.entry_point
    types = function_records.types_key(arrays)
    record = None if types is None else function_records.dispatcher_path(dispatcher, types)
    if record is not None:
        result = function_records.read(record)
        if result is not None and _install(dispatcher, result):
            return result.entry_point
    if signature is None:
        signature = tuple(numba.typeof(a) for a in arrays)
    disk_cache.read_lazily(dispatcher)
    cached = from_disk_cache(dispatcher, signature, record)
    if cached is not None:
        return cached
    name = (
        f"{getattr(dispatcher, '__module__', '')}.{getattr(dispatcher, '__qualname__', dispatcher)}"
    )
    with compile_lock.compiling_alone(f"{name}{signature}") as waited:
        if waited:  # another process compiled it meanwhile: its machine code is on disk
            cached = from_disk_cache(dispatcher, signature, record)
            if cached is not None:
                return cached
        short = getattr(dispatcher, "__qualname__", name)
        with numba_env.compiling(f"{name}{signature}", announce=short):
            compiled_entry = dispatcher.compile(signature)
    if record is not None:
        function_records.write(record, dispatcher.overloads[signature], linkable=True)
    return compiled_entry


def _install(dispatcher: Any, result: Any) -> bool:
    """Add a compile result read back to ``dispatcher``, as its ``compile`` does with one
    read from numba's cache; False for a dispatcher this does not know."""
    context = getattr(dispatcher, "targetctx", None)
    if context is None or not hasattr(dispatcher, "_cache_hits"):
        return False
    dispatcher._cache_hits[tuple(result.signature.args)] += 1
    if not result.objectmode:
        context.insert_user_function(result.entry_point, result.fndesc, [result.library])
    dispatcher.add_overload(result)
    return True


def from_disk_cache(dispatcher: Any, signature: tuple[Any, ...], record: Any = None) -> Any:
    """The entry point of ``dispatcher`` for ``signature`` read from numba's disk cache, as
    its ``compile`` would read it (see :func:`~.disk_cache.read_cache`), or None. Its data
    is copied to ``record`` (a function record's path), if given."""
    context = getattr(dispatcher, "targetctx", None)
    if context is None or not hasattr(dispatcher, "_cache_hits"):
        return None
    read = disk_cache.read_cache(getattr(dispatcher, "_cache", None), context, signature)
    if read is None:
        return None
    result, data = read
    if record is not None:
        function_records.write_data(record, data)
    _install(dispatcher, result)
    return result.entry_point


# numba's optimisation level of a whole-method function that calls all its steps by symbol
# (see symbol_calls.glue_level): MobileNetV2's (a few hundred calls) compiled in 5.2 s of CPU
# at 1 against 6.9 at numba's usual 3, its calls as fast (13.5 against 14.0 ms, load 10).
GLUE_LEVEL = 1

# Generated functions compiled or read without a dispatcher (see plain_entry_point), by
# (module, name, argument types): their compile results, which hold their machine code.
_plain_results: dict[tuple[str, str, str], Any] = {}
# How those were obtained in this process: "cache_hits" (read back) and "compilations".
plain_stats: collections.Counter[str] = collections.Counter()


def plain_entry_point(
    function: GeneratedFunction, arrays: tuple[Any, ...], prepare: Any = None
) -> Any:
    """The compiled function of ``function`` (a plain Python function at the top level of
    a generated module, named before the module is imported) for exactly these
    arguments' types, as ``njit(error_model="numpy")`` compiles it.

    Its machine code is kept in a record of its own (:mod:`.function_records`): read back,
    it needs neither the generated module nor a numba dispatcher, whose making costs
    5-10 ms for a function of a few hundred parameters (a CNN compiled whole), more than
    reading its machine code. Otherwise ``prepare`` (if given) runs, the module is
    imported and a dispatcher compiles the function, which is then recorded; where
    ``prepare`` returns True (the function only calls others by symbol), at
    :data:`GLUE_LEVEL`.
    """
    numba = numba_env.numba_module()
    types = function_records.types_key(arrays)
    if types is None:  # not every argument's type is read from its flags
        types = repr(tuple(numba.typeof(a) for a in arrays))
    key = (function.module_name, function.name, types)
    result = _plain_results.get(key)
    if result is None:
        record = function_records.path_of(function, types)
        result = function_records.read(record, plain=True)
        if result is None:
            what = f"{function.module_name}.{function.name}{types}"
            with compile_lock.compiling_alone(what) as waited:
                # (another process may have compiled it meanwhile and written its record)
                result = function_records.read(record, plain=True) if waited else None
                if result is None:
                    result = _compile_plain(function, arrays, prepare)
                    function_records.write(record, result)
                    plain_stats["compilations"] += 1
                else:
                    plain_stats["cache_hits"] += 1
        else:
            plain_stats["cache_hits"] += 1
        _plain_results[key] = result
    return result.entry_point


def _compile_plain(function: GeneratedFunction, arrays: tuple[Any, ...], prepare: Any) -> Any:
    """numba's compile result of ``function`` for these arguments' types (see
    :func:`plain_entry_point`)."""
    numba = numba_env.numba_module()
    signature = tuple(numba.typeof(a) for a in arrays)
    glue = prepare is not None and prepare() is True
    numba_env.logger.info(
        "compiling a method whole (%d arguments, one function): the first load takes "
        "seconds to a minute; later loads read it from %s",
        len(signature),
        numba_env.cache_dir(),
    )
    # (where records cannot be read back, by a numba this module does not know, numba's own
    # cache keeps the function, and its compile reads it from there)
    cache = disk_cache.lazy_rebuilder() is None
    dispatcher = numba.njit(cache=cache, error_model="numpy")(function.load())
    with (
        numba_env.compiling(f"{function.module_name}.{function.name}"),
        symbol_calls.glue_level(GLUE_LEVEL) if glue else contextlib.nullcontext(),
    ):
        dispatcher.compile(signature)
    return dispatcher.overloads[signature]


def forget_modules() -> None:
    """Forget the generated modules this process imported and the generated functions it
    read (benchmarks time loads from disk)."""
    with numba_env.lock:
        generated.forget()
        _plain_results.clear()
