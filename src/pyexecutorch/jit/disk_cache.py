"""Reading numba's disk cache faster than numba does: machine code without its bitcode.

numba's cached machine code for one function comes with the LLVM bitcode of the
function and every callee it inlined, kept so that a later compilation can link it
into a caller. Reading it back parses all of that bitcode and walks every symbol in it
(most of a warm load_method: ~35 ms of ~40 for a small method compiled whole), though
only a function that some new compilation calls ever needs it. The reader here
installs the machine code alone, as an object file, and parses the bitcode when numba
first asks for it to link (the files on disk are numba's own). It also refreshes
numba's registries once per process rather than once per read, and does not import a
generated module that a cached function's environment names (:func:`rebuild_env`).

Where this numba is not the one the reader was written for, numba's own reader stays.
"""

from __future__ import annotations

import importlib
import io
import pickle
import sys
import types
from collections.abc import MutableMapping
from types import ModuleType
from typing import Any

from pyexecutorch.jit import generated, numba_env

_lazy_impl: Any = None
_refreshed: set[int] = set()  # the target contexts refreshed once in this process


def read_lazily(dispatcher: Any) -> None:
    """Make ``dispatcher``'s disk cache read machine code without parsing its bitcode.

    Leaves numba's own reader where this numba is not the one it was written
    for (the cache files stay numba's format either way).
    """
    impl = getattr(getattr(dispatcher, "_cache", None), "_impl", None)
    lazy = _lazy_cache_impl()
    if lazy is not None and type(impl) is lazy.__base__:
        impl.__class__ = lazy


def lazy_rebuilder() -> Any:
    """The function making numba's compile result from its serialized form with its
    bitcode unparsed (see :func:`_payload_rebuilder`), or None for a numba it does not
    know."""
    lazy = _lazy_cache_impl()
    return None if lazy is None else lazy.rebuild_payload


def lazily_linked_library() -> Any:
    """The class of numba's JIT code library made from machine code, its bitcode parsed
    when a compilation links it (see :func:`_lazily_linked_library`), or None for a numba
    it does not know."""
    lazy = _lazy_cache_impl()
    return None if lazy is None else lazy.library_class


def entry_rebuilder() -> Any:
    """The function making a plain function's entry point from its light record (see
    :func:`_entry_rebuilder`), or None for a numba it does not know."""
    lazy = _lazy_cache_impl()
    return None if lazy is None else lazy.rebuild_entry


def refresh_once(context: Any) -> None:
    """Refresh numba's typing and target registries of ``context`` once in this process,
    before the first compile result is read back (under numba's compiler lock)."""
    if id(context) not in _refreshed:
        from pyexecutorch.jit import runtime_library  # noqa: PLC0415 - (it imports this)

        runtime_library.start(context)  # (the refresh starts it too, its library compiled)
        context.refresh()
        _refreshed.add(id(context))


def runtime_once(context: Any) -> None:
    """Start numba's runtime (NRT: the allocator compiled code calls) for ``context``, as its
    registries' refresh does first, without the refresh (under numba's compiler lock)."""
    if id(context) not in _refreshed:
        from pyexecutorch.jit import runtime_library  # noqa: PLC0415 - (it imports this)

        runtime_library.start(context)


def read_cache(cache: Any, context: Any, signature: tuple[Any, ...]) -> Any:
    """numba's compile result for ``signature`` from ``cache`` (a function's disk cache) and
    the data it was read from, or None (not cached, or a numba this does not know).

    Two differences from numba's reader: numba refreshes its typing and target
    registries before every read (about 1 ms, most of a small method's read), which a
    read needs once (a compilation refreshes them itself); and a generated module that
    a cached function's environments name is not imported for them (see rebuild_env).
    """
    cache_file = getattr(cache, "_cache_file", None)
    impl = getattr(cache, "_impl", None)
    if (
        not getattr(cache, "_enabled", False)
        or not hasattr(cache, "_index_key")
        or not all(hasattr(cache_file, a) for a in ("_load_index", "_data_path"))
        or not hasattr(impl, "rebuild")
    ):
        return None
    from numba.core.compiler_lock import global_compiler_lock  # noqa: PLC0415

    with global_compiler_lock:
        refresh_once(context)
        data_name = cache_file._load_index().get(cache._index_key(signature, context.codegen()))
        if data_name is None:
            return None
        try:
            with open(cache_file._data_path(data_name), "rb") as f:
                data = f.read()
        except OSError:  # removed while its index still named it
            return None
        return impl.rebuild(context, CacheDataReader(io.BytesIO(data)).load()), data


class CacheDataReader(pickle.Unpickler):
    """numba's cache data, its environments rebuilt by :func:`rebuild_env`."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "numba.core.environment" and name == "_rebuild_env":
            return rebuild_env
        return super().find_class(module, name)


def rebuild_env(modname: str | None, consts: Any, env_name: str) -> Any:
    """numba's environment rebuild, without importing the module it names.

    A whole-method function's data holds the environment of every loop it calls, and a
    kernel's the environments of what it inlined; numba imports each one's module to
    rebuild it, for its globals, which only object-mode code reads at run time (our
    functions are all nopython). A generated module not imported yet gets an empty module
    of its name instead, which :func:`~.generated.generated_module` runs its code into if
    the module is ever needed; any other module not imported yet gets globals of its name
    alone (a warm start of MobileNetV2 imported the linear algebra kernels and
    ``numba.np.arrayobj`` for them: 20 ms of its 0.6 s of CPU).
    """
    from numba.core import environment  # noqa: PLC0415

    if modname and modname not in sys.modules:
        if modname.startswith(generated.GENERATED_PREFIX):
            placeholder = ModuleType(modname)
            placeholder.__dict__[generated.PLACEHOLDER] = True
            sys.modules[modname] = placeholder
        elif isinstance(getattr(environment.Environment, "_memo", None), MutableMapping):
            env = environment.lookup_environment(env_name)
            if env is None:
                # (as numba's rebuild, with the module's name for globals: written again,
                # the environment names its module as before)
                env = environment.Environment({"__name__": modname})
                env.consts[:] = consts
                env.env_name = env_name
                environment.Environment._memo[env_name] = env
            return env
    return environment._rebuild_env(modname, consts, env_name)


def _lazy_cache_impl() -> Any:
    """The subclass of numba's cache reader that links lazily, made once (None: unsupported)."""
    global _lazy_impl
    if _lazy_impl is None:
        with numba_env.lock:
            if _lazy_impl is None:
                _lazy_impl = _make_lazy_cache_impl() or False
    return _lazy_impl or None


def _make_lazy_cache_impl() -> Any:
    from numba import _dynfunc  # noqa: PLC0415 - compiled tier only
    from numba.core import caching, codegen, compiler, funcdesc  # noqa: PLC0415
    from numba.core.codegen import JITCodeLibrary  # noqa: PLC0415

    needed = (
        hasattr(caching, "CompileResultCacheImpl")
        and hasattr(JITCodeLibrary, "_set_compiled_object")
        and hasattr(JITCodeLibrary, "_finalize_final_module")
        and hasattr(codegen, "JitEngine")
        and hasattr(codegen.JitEngine, "finalize_object")
        and hasattr(codegen.ll.ExecutionEngine, "add_object_file")
        and hasattr(codegen.ll, "object_file")
        and hasattr(codegen, "RuntimeLinker")
        and hasattr(_dynfunc, "make_function")
        and hasattr(funcdesc, "_dynamic_module")
        and getattr(compiler, "CR_FIELDS", None) is not None
        and "reload_init" in compiler.CR_FIELDS
    )
    if not needed:
        return None
    library_class = _lazily_linked_library()
    rebuild_payload = _payload_rebuilder(library_class)

    class LazyLinkingCacheImpl(caching.CompileResultCacheImpl):
        def rebuild(self, target_context: Any, payload: Any) -> Any:
            result = rebuild_payload(target_context, payload)
            return super().rebuild(target_context, payload) if result is None else result

    LazyLinkingCacheImpl.library_class = library_class
    LazyLinkingCacheImpl.rebuild_payload = staticmethod(rebuild_payload)
    LazyLinkingCacheImpl.rebuild_entry = staticmethod(_entry_rebuilder(library_class))
    return LazyLinkingCacheImpl


def _lazily_linked_library() -> type:
    """numba's JIT code library made from cached machine code, its bitcode parsed on demand."""
    from numba.core import codegen  # noqa: PLC0415 - compiled tier only
    from numba.core.codegen import CodeLibrary, JITCodeLibrary  # noqa: PLC0415

    parse_bitcode = codegen.ll.parse_bitcode
    object_file = codegen.ll.object_file

    class LazilyLinkedLibrary(JITCodeLibrary):
        """A library made from cached machine code, its linking bitcode parsed on demand."""

        def __init__(self, codegen_: Any, name: str, object_code: bytes) -> None:
            # numba's library of cached machine code is an empty module (parsed from IR
            # text) that the engine compiles by asking numba's object cache, which hands it
            # the machine code. This one hands the machine code to the engine itself, as
            # an object file: no module, no IR parser, no call back into Python, one copy
            # fewer (~0.5-1 ms of a warm load's first library, mostly first-touched code).
            CodeLibrary.__init__(self, codegen_, name)
            self._linking_libraries = []
            self._final_module = None  # (only a compilation of it, or inspection, reads it)
            self._shared_module = None
            engine = codegen_._engine
            engine._ee.add_object_file(object_file.ObjectFileRef.from_data(object_code))
            engine.finalize_object()
            codegen_._rtlinker.resolve(engine)  # as numba does after adding a module
            self._finalized = True

        @property
        def _shared_module(self) -> Any:
            held = self.__dict__
            if held.get("_linking_module") is None and held.get("_linking_bitcode"):
                module = parse_bitcode(held.pop("_linking_bitcode"))
                self._codegen._engine._load_defined_symbols(module)  # as numba's reader does
                held["_linking_module"] = module
            return held.get("_linking_module")

        @_shared_module.setter
        def _shared_module(self, module: Any) -> None:
            self.__dict__["_linking_module"] = module

    return LazilyLinkedLibrary


def _payload_rebuilder(library_class: type) -> Any:
    """The function rebuilding numba's compile result from its cache payload with
    ``library_class`` (see :func:`_lazily_linked_library`)."""
    from numba.core import compiler  # noqa: PLC0415 - compiled tier only
    from numba.core.codegen import JITCodeLibrary  # noqa: PLC0415

    def rebuild_payload(target_context: Any, payload: Any) -> Any:
        """numba's compile result from its serialized form (``payload``, as numba's cache
        data holds it), its machine code installed and its bitcode left unparsed; None for
        a payload or a code generator this does not know. A payload without bitcode (see
        :mod:`pyexecutorch.jit.function_records`) makes a function nothing can link."""
        libdata = payload[0] if isinstance(payload, tuple) else None
        codegen_ = target_context.codegen()
        if (
            len(payload) != 9
            or not (isinstance(libdata, tuple) and len(libdata) == 3)
            or libdata[1] != "object"
            or codegen_._library_class is not JITCodeLibrary
        ):
            return None
        name, _, (object_code, linking_bitcode) = libdata
        fndesc, env, signature, objectmode, lifted, typeann, reload_init, envs = payload[1:]
        for init in reload_init:
            init()
        library = library_class(codegen_, name, object_code)
        library.__dict__["_linking_bitcode"] = linking_bitcode
        # kept: a function record is written from it (numba's library drops its copy)
        library.__dict__["object_code"] = object_code
        # The symbols this load looks up; the rest are known once the bitcode is parsed.
        codegen_._engine._defined_symbols.update(
            (fndesc.llvm_func_name, fndesc.llvm_cpython_wrapper_name)
        )
        result = compiler.CompileResult(
            target_context=target_context,
            typing_context=target_context.typing_context,
            library=library,
            environment=env,
            entry_point=target_context.get_executable(library, fndesc, env),
            fndesc=fndesc,
            type_annotation=typeann,
            signature=signature,
            objectmode=objectmode,
            lifted=lifted,
            typing_error=None,
            call_helper=None,
            metadata=None,
            reload_init=reload_init,
            referenced_envs=envs,
        )
        for held in envs:
            library.codegen.set_env(held.env_name, held)
        return result

    return rebuild_payload


def _entry_rebuilder(library_class: type) -> Any:
    """The function making a plain function's entry point from its light record with
    ``library_class`` (see :func:`_lazily_linked_library`)."""
    from numba import _dynfunc  # noqa: PLC0415 - compiled tier only
    from numba.core import funcdesc  # noqa: PLC0415
    from numba.core.codegen import JITCodeLibrary  # noqa: PLC0415

    def rebuild_entry(target_context: Any, light: tuple) -> Any:
        """A plain function's entry point from its light record (see
        :func:`pyexecutorch.jit.function_records.write`): its machine code installed
        and called through numba's wrapper as ``get_executable`` makes it, without numba's
        function descriptor or signature (their types unpickled cost a small method's
        load a few tenths of a millisecond). None for a code generator this does not know."""
        name, object_code, symbols, modname, qualname, env, envs, reload_init = light
        codegen_ = target_context.codegen()
        if codegen_._library_class is not JITCodeLibrary:
            return None
        for init in reload_init:
            init()
        library = library_class(codegen_, name, object_code)
        library.__dict__["_linking_bitcode"] = None  # nothing calls a plain function
        codegen_._engine._defined_symbols.update(symbols)
        module = sys.modules.get(modname)
        if module is None:
            try:
                module = importlib.import_module(modname)
            except ImportError:
                module = funcdesc._dynamic_module
        entry = _dynfunc.make_function(
            module,
            qualname.split(".")[-1],
            f"compiled wrapper for {qualname!r}",
            library.get_pointer_to_function(symbols[1]),
            env,
            (library,),  # kept alive with the function
        )
        for held in (env, *envs):
            codegen_.set_env(held.env_name, held)
        return types.SimpleNamespace(
            entry_point=entry, library=library, environment=env, symbols=symbols
        )

    return rebuild_entry
