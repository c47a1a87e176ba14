"""Calls by symbol: compiled code calling another function's machine code, not a copy of it.

numba links the LLVM module of every function a compiled function calls into the caller's
and optimises and generates machine code for the linked whole again, at every level: a
whole-method function compiled all its kernels' code once more (a CNN's dense convolution
was optimised four times in one cold load). A callee called by symbol here is compiled,
or read back, once, in a record of its own; its native entry is published in this process
under a name made from what it is (its module, name, argument types, source stamps and the
machine: the same in every process) and the caller declares that name and calls it with
numba's calling convention. Calls by symbol are not inlined: for callees that do enough
work per call (a kernel, a parallel region), not for small helpers.

A caller's compile result lists a :class:`Binding` per callee among numba's reload
functions (``reload_init``, kept in its records and numba's cache files), so reading the
caller back first reads the callee's record and publishes its name, before the caller's
machine code, which needs the name resolved, is installed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyexecutorch.jit import disk_cache, function_records, generated, numba_env

# The records of callees, beside the function records (see Binding.record).
_SUFFIX = ".symbol.nbr"
# numba's optimisation level while a caller optimised as glue compiles (see glue_level),
# restored for the callees it compiles meanwhile; None outside one.
_usual_level: list[Any] = []
# What this process published: symbol name -> the compile result holding its code (kept
# alive: the name points into its machine code).
_published: dict[str, Any] = {}


@dataclass(frozen=True)
class Callee:
    """A compiled function found by name in any process: ``attribute`` of ``module`` (a
    dotted name or ``name[k]``, an item of a module-level tuple), or of the generated
    module of ``source`` (and ``tag``)."""

    module: str
    attribute: str
    source: str | None = None
    tag: str | None = None

    def dispatcher(self) -> Any:
        """Its numba dispatcher (importing its module, or making a generated one)."""
        if self.source is not None:
            function = generated.GeneratedFunction(self.source, self.tag, self.attribute)
            return generated.dispatcher_of(function)
        held: Any = importlib.import_module(self.module)
        name, _, index = self.attribute.partition("[")
        for part in name.split("."):
            held = getattr(held, part)
        return held[int(index[:-1])] if index else held


def callee_of(function: Any) -> Callee | None:
    """The :class:`Callee` naming ``function`` (a :class:`~.generated.GeneratedFunction`,
    or a dispatcher at the top level of its module, or in a module-level tuple of
    them), or None."""
    if type(function) is generated.GeneratedFunction:
        return Callee(function.module_name, function.name, function.source, function.tag)
    py = getattr(function, "py_func", None)
    module = getattr(py, "__module__", None)
    owner = None if module is None else importlib.import_module(module)
    if owner is None:
        return None
    name = getattr(py, "__name__", None)
    if name is not None and getattr(owner, name, None) is function:
        return Callee(module, name)
    for attribute, held in vars(owner).items():  # (serial and parallel pairs)
        if isinstance(held, tuple) and not attribute.startswith("_"):
            for k, item in enumerate(held):
                if item is function:
                    return Callee(module, f"{attribute}[{k}]")
    return None


@dataclass(frozen=True)
class Binding:
    """What a caller's machine code needs published before it is installed: ``symbol``
    naming ``callee`` compiled for ``signature`` (numba's argument types), whose record is
    ``record`` (a file name under the function records' folder). Called with no
    arguments, as numba calls a reload function."""

    symbol: str
    callee: Callee
    signature: tuple[Any, ...]
    record: str

    def __call__(self) -> None:
        if self.symbol in _published:
            return
        path = function_records.folder() / self.record
        result = function_records.read(path, plain=True)
        if result is None:  # (no record, or an unreadable one): compiled again
            dispatcher = self.callee.dispatcher()
            result = _compiled(dispatcher, self.signature)
            function_records.write(path, result)
        _publish(self.symbol, result)


def _compiled(dispatcher: Any, signature: tuple[Any, ...]) -> Any:
    """numba's compile result of ``dispatcher`` for ``signature``, compiled if needed (at
    numba's usual optimisation level, also inside :func:`glue_level`)."""
    from pyexecutorch.jit import entry_points  # noqa: PLC0415 - (it imports this module)

    result = dispatcher.overloads.get(signature)
    if result is None:
        # numba's cache first, read so that the machine code can be recorded (disk_cache)
        disk_cache.read_lazily(dispatcher)
        if entry_points.from_disk_cache(dispatcher, signature) is not None:
            return dispatcher.overloads[signature]
        name = f"{dispatcher.py_func.__module__}.{dispatcher.py_func.__qualname__}"
        with (
            _level(_usual_level[-1]) if _usual_level else contextlib.nullcontext(),
            numba_env.compiling(f"{name}{signature}", announce=dispatcher.py_func.__qualname__),
        ):
            dispatcher.compile(signature)
        result = dispatcher.overloads[signature]
    return result


@contextlib.contextmanager
def glue_level(level: int) -> Iterator[None]:
    """numba's optimisation level ``level`` for what compiles meanwhile on this thread,
    except the callees it calls by symbol (at the usual level): for a function that only
    calls others, whose code LLVM's full optimisation hardly changes but, for a method of
    hundreds of calls, takes seconds over (its allocas' scalar replacement mostly)."""
    from numba.core import config  # noqa: PLC0415
    from numba.core.compiler_lock import global_compiler_lock  # noqa: PLC0415

    with global_compiler_lock:
        _usual_level.append(config.OPT)
        try:
            with _level(level):
                yield
        finally:
            _usual_level.pop()


@contextlib.contextmanager
def _level(level: Any) -> Iterator[None]:
    """numba's optimisation level set to ``level`` meanwhile (under numba's compiler lock:
    numba's pass managers read it when each function compiles)."""
    from numba.core import config  # noqa: PLC0415

    saved = config.OPT
    config.OPT = type(saved)(level)
    try:
        yield
    finally:
        config.OPT = saved


def _publish(symbol: str, result: Any) -> None:
    """Publish the native entry of compile ``result`` in this process as ``symbol``."""
    from llvmlite import binding  # noqa: PLC0415 - numba's own dependency

    native = function_records.native_name(result)
    address = result.library.get_pointer_to_function(native)
    if not address:
        raise RuntimeError(f"compiled code defines no {native!r} to call as {symbol!r}")
    binding.add_symbol(symbol, address)
    _published[symbol] = result


def binding_for(dispatcher: Any, callee: Callee, signature: tuple[Any, ...]) -> Binding | None:
    """The :class:`Binding` of ``dispatcher`` (named by ``callee``) for ``signature``, its
    callee compiled (or read) and published; None where it cannot be recorded (a function
    numba does not cache, or code holding this process's addresses)."""
    path = function_records.dispatcher_path(dispatcher, f"symbol:{signature}")
    if path is None:
        return None
    record = path.name[: -len(path.suffix)] + _SUFFIX
    digest = hashlib.sha256(record.encode()).hexdigest()[:24]
    binding = Binding(f"_pyexecutorch_symbol_{digest}", callee, signature, record)
    if binding.symbol in _published:
        return binding
    result = function_records.read(path.parent / record, plain=True)
    if result is None:
        result = _compiled(dispatcher, signature)
        if not function_records.can_record(result):
            return None
        function_records.write(path.parent / record, result)
    _publish(binding.symbol, result)
    return binding


@functools.cache
def by_symbol(callee: Callee) -> Any:
    """A function for compiled code calling ``callee`` by symbol (see the module's
    docstring); a callee that cannot be recorded is linked into its caller as usual."""
    from numba.core import cgutils, types  # noqa: PLC0415 - compiled tier only
    from numba.extending import intrinsic  # noqa: PLC0415

    dispatcher = callee.dispatcher()

    def typer(arguments: tuple[Any, ...]) -> Any:
        signature = tuple(types.unliteral(t) for t in arguments)
        binding = binding_for(dispatcher, callee, signature)
        if binding is None:
            return _linked(dispatcher, signature)
        result = _published[binding.symbol]
        returned = function_records.return_type(result)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            conv = context.call_conv
            declared = conv.get_function_type(returned, signature)
            function = cgutils.get_or_insert_function(builder.module, declared, binding.symbol)
            status, value = conv.call_function(builder, function, returned, signature, args)
            with cgutils.if_unlikely(builder, status.is_error):
                conv.return_status_propagate(builder, status)
            # read back, the caller's machine code needs the symbol published first
            context.active_code_library._reload_init.add(binding)
            return value

        return returned(*signature), codegen

    # (numba's intrinsics take no *args: one parameter per argument of the callee)
    count = dispatcher.py_func.__code__.co_argcount
    names = ", ".join(f"a{k}" for k in range(count))
    namespace = {"typer": typer}
    exec(f"def by_symbol(typingctx, {names}):\n    return typer(({names},))\n", namespace)  # noqa: S102
    return intrinsic(namespace["by_symbol"])


def _linked(dispatcher: Any, signature: tuple[Any, ...]) -> Any:
    """The typing and code of a call of ``dispatcher`` linked into its caller, as numba
    calls a dispatcher: for a callee that cannot be recorded."""
    result = _compiled(dispatcher, signature)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        context.add_linking_libs([result.library])
        return context.call_internal(builder, result.fndesc, result.signature, args)

    return result.signature, codegen
