"""The compiled tier's switches: whether numba is used, its disk cache, its threads.

The runtime uses numba when it imports, unless ``PYEXECUTORCH_JIT=0`` or a
program is loaded with ``jit=False``; without numba everything runs on the
numpy kernels as before. Generated code (fused loops) is written once to a
file under the cache directory named by a hash of its source, and compiled
with numba's ``cache=True``, so a second process finds both the source and the
machine code there: the key is the generated source, numba's own index adds
the argument types (dtypes, ranks, layouts). numba's machine code, of the
generated loops and of the kernels' compiled forms alike, goes to ``numba/``
under the same directory unless ``NUMBA_CACHE_DIR`` says otherwise. What a warm
load reads back is kept a second way, in a record per function and argument types
under ``functions/`` (:mod:`pyexecutorch.runtime.function_records`), found by name
without numba's index: a method compiled whole keeps its one function only there.

A warm load stays cheap five ways: machine code is read back without the
LLVM bitcode numba keeps for linking (parsed only when a new caller links it), and
handed to LLVM as an object file; the generated modules keep their bytecode; a
method compiled whole reads its function's record without importing its module or
making a dispatcher; a function called through its dispatcher is read from its
record without numba's index or argument typing; and a method that may compile
whole defers its kernels' compiled functions (:func:`deferred_entry_points`) and
fast paths only a line would call (:class:`PendingFastPath`), which it makes only
if it keeps their calls.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import glob
import hashlib
import importlib.util
import io
import logging
import os
import pickle
import py_compile
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

JIT_ENV = "PYEXECUTORCH_JIT"
CACHE_ENV = "PYEXECUTORCH_CACHE_DIR"

# Reentrant: importing the compiled forms under it may ask for numba_module() again.
_lock = threading.RLock()
_numba: ModuleType | None = None
_numba_checked = False
_modules: dict[str, ModuleType] = {}
_compiled_forms_loaded = False


# Compilations go to this logger: DEBUG a line each, INFO before a method compiles whole
# (up to a minute) and once a load has compiled anything (see Program.load_method).
logger = logging.getLogger("pyexecutorch.compiled")
# What this process compiled: functions and seconds (a load reports the difference).
compile_totals: collections.Counter[str] = collections.Counter()


@contextlib.contextmanager
def compiling(what: str) -> Iterator[None]:
    """Count and time one numba compilation (of ``what``, named in the log)."""
    logger.debug("compiling %s", what)
    start = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - start
        compile_totals["functions"] += 1
        compile_totals["seconds"] += seconds
        logger.debug("compiled %s in %.2f s", what, seconds)


class JitUnavailableError(ImportError):
    """``jit=True`` was asked for but numba does not import."""


def numba_module() -> ModuleType | None:
    """numba, imported once, or None when it is not installed."""
    global _numba, _numba_checked
    if not _numba_checked:
        with _lock:
            if not _numba_checked:
                # Every machine code numba caches for us (kernel forms included, wherever the
                # package is installed) goes under our cache directory, unless the user chose
                # numba's own; numba reads this setting when it first imports.
                # Kept apart per numpy build: compiled products call numpy's own BLAS by
                # symbol, which another build may not have.
                if "numba" not in sys.modules:
                    folder = cache_dir() / "numba" / f"numpy-{numpy_build()}"
                    os.environ.setdefault("NUMBA_CACHE_DIR", str(folder))
                try:
                    import numba  # noqa: PLC0415 - optional, imported only for the compiled tier
                except ImportError:
                    numba = None
                else:
                    _start_threading_layer(numba)
                _numba = numba
                _numba_checked = True
    return _numba


# How long numba's OpenMP threads spin after a parallel region before they sleep
# (GNU libgomp's GOMP_SPINCOUNT; its default, 300000, spins for milliseconds). Two cores
# shared with other work (OpenBLAS's workers, other processes) lose more to that spinning
# than a woken thread's start costs: at two threads under load, mobilenet_like took
# 122-248 ms a call with the default, 29-63 ms with 10000, 49-116 ms with no spinning
# (OMP_WAIT_POLICY=PASSIVE, which slowed the small regions of efficientnet by 1.1-1.5x).
OPENMP_SPIN_COUNT = "10000"


def _start_threading_layer(numba: ModuleType) -> None:
    """Start numba's threading layer with :data:`OPENMP_SPIN_COUNT`, unless the user set an
    OpenMP wait setting. libgomp reads its environment once, when it loads, so the setting
    is in the environment only meanwhile: a libgomp loaded later (torch's) keeps its own."""
    user_set = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & set(os.environ)
    if user_set:
        numba.get_num_threads()
        return
    os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN_COUNT
    try:
        numba.get_num_threads()  # loads the threading layer (and its libgomp)
    finally:
        del os.environ["GOMP_SPINCOUNT"]


def enabled(requested: bool | None) -> bool:
    """Whether a program loaded with ``jit=requested`` uses the compiled tier."""
    if requested is False:
        return False
    if requested is None and os.environ.get(JIT_ENV, "").strip() == "0":
        return False
    if numba_module() is None:
        if requested:
            raise JitUnavailableError(
                "jit=True needs numba, which does not import (pip install 'pyexecutorch[jit]')"
            )
        return False
    load_compiled_forms()
    return True


def cache_dir() -> Path:
    """Where generated code and its machine code are kept (``$PYEXECUTORCH_CACHE_DIR``)."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pyexecutorch"


GENERATED_PREFIX = "pyexecutorch_generated_"
_PLACEHOLDER = "__pyexecutorch_placeholder__"


@functools.cache
def numpy_build() -> str:
    """A short hash naming this numpy build: its version and the libraries it bundles
    (their file names carry their own hashes), its BLAS among them."""
    import numpy as np  # noqa: PLC0415

    root = os.path.dirname(np.__file__)
    bundled = sorted(
        os.path.basename(p)
        for pattern in ("../numpy.libs/*", ".dylibs/*")
        for p in glob.glob(os.path.join(root, pattern))
    )
    return hashlib.sha256(f"{np.__version__}\n{bundled}".encode()).hexdigest()[:12]


@functools.cache
def build_key() -> str:
    """What generated code depends on besides its own text: numba's version, numpy's
    build (:func:`numpy_build`) and the kernels' compiled forms and compiled helpers it
    calls or inlines (each file's size and modification time, as numba stamps a source).
    numba keys a cached function by its own file only: a whole-method function holds the
    machine code of every function it calls, which their files' stamps do not reach."""
    numba = numba_module()
    import pyexecutorch.kernels as kernels  # noqa: PLC0415

    text = "\n".join([numba.__version__, numpy_build(), sources_key(Path(kernels.__path__[0]))])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def sources_key(root: Path) -> str:
    """The stamps (path, size, modification time) of the compiled code under ``root``
    (``compiled*.py`` files), as one string."""
    stamps = []
    for path in sorted(root.glob("**/compiled*.py")):
        st = path.stat()
        stamps.append(f"{path.relative_to(root).as_posix()}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(stamps)


@functools.lru_cache(maxsize=4096)
def _source_key(source: str) -> str:
    return hashlib.sha256(f"{build_key()}\n{source}".encode()).hexdigest()[:20]


def generated_module(source: str, tag: str) -> ModuleType:
    """The module of generated ``source``: written once under the cache directory, imported once.

    The file name is a hash of the source and of :func:`build_key`, so a changed
    generator, numba, numpy build or kernel never reads stale machine code.
    """
    key = _source_key(source)
    with _lock:
        module = _modules.get(key)
        if module is not None:
            return module
        folder = cache_dir() / "generated"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{tag}_{key}.py"
        # Named by the hash of its source and written atomically: a file of that name and
        # size is that source.
        encoded = source.encode()
        try:
            written = path.stat().st_size != len(encoded)
        except FileNotFoundError:
            written = True
        if written:
            # Written atomically: another process may be importing the same file.
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(encoded)
            os.replace(tmp, path)
        if written or not os.path.exists(importlib.util.cache_from_source(str(path))):
            # Its bytecode too, like its machine code, even where PYTHONDONTWRITEBYTECODE
            # is set: compiling the source again would cost each load ~0.2-1 ms a module.
            py_compile.compile(str(path), doraise=True)
        name = f"{GENERATED_PREFIX}{tag}_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = sys.modules.get(name)
        if module is not None and module.__dict__.pop(_PLACEHOLDER, False):
            # named by a cached function read before it (see _rebuild_env): run into it
            module.__spec__, module.__loader__, module.__file__ = spec, spec.loader, str(path)
        else:
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # numba's cache finds a function's globals by name
        spec.loader.exec_module(module)
        _modules[key] = module
        return module


class GeneratedFunction:
    """A function of a generated module, named before the module is imported.

    A method that compiles whole needs only its loops' names to write the function that
    calls them; when that function is in the disk cache, the loops' own modules (a
    numba dispatcher each, ~1 ms to import) are never imported.
    """

    __slots__ = ("module_name", "name", "source", "tag")

    def __init__(self, source: str, tag: str, name: str) -> None:
        self.source, self.tag, self.name = source, tag, name
        self.module_name = f"{GENERATED_PREFIX}{tag}_{_source_key(source)}"

    def loaded(self) -> Any:
        """Its dispatcher if its module is imported in this process, else None."""
        module = _modules.get(_source_key(self.source))
        return None if module is None else getattr(module, self.name)

    def load(self) -> Any:
        """Its dispatcher, importing its module first if needed."""
        return getattr(generated_module(self.source, self.tag), self.name)


def dispatcher_of(function: Any) -> Any:
    """The numba dispatcher of a dispatcher or a :class:`GeneratedFunction`."""
    return function.load() if type(function) is GeneratedFunction else function


def forget_modules() -> None:
    """Forget the generated modules this process imported (benchmarks time loads from disk)."""
    with _lock:
        _modules.clear()
        _plain_results.clear()


def load_compiled_forms() -> None:
    """Import every kernel family's compiled forms (``kernels/<family>/compiled*.py``: the
    forms and the steps they build, the channels-last ones included) once, and the
    whole-method functions' argument binding."""
    global _compiled_forms_loaded
    if _compiled_forms_loaded:
        return
    with _lock:
        if _compiled_forms_loaded:
            return
        import pyexecutorch.kernels as kernels  # noqa: PLC0415

        root = Path(kernels.__path__[0])
        for family in sorted(p.name for p in root.iterdir() if p.is_dir()):
            # (compiled.py first: it registers the forms the others serve)
            names = sorted(p.stem for p in (root / family).glob("compiled*.py"))
            for name in sorted(names, key=lambda n: n != "compiled"):
                importlib.import_module(f"pyexecutorch.kernels.{family}.{name}")
        importlib.import_module("pyexecutorch.runtime.bound_arrays")
        _compiled_forms_loaded = True


def set_threads(n: int) -> None:
    """Threads of the compiled loops (``prange``), capped at what numba started with."""
    numba = numba_module()
    if numba is not None:
        # Starting numba's OpenMP pool resets the OpenMP thread count torch shares, so a
        # torch already imported by the caller gets its own setting back (torch is never
        # imported here).
        torch = sys.modules.get("torch")
        torch_threads = torch.get_num_threads() if torch is not None else None
        numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))
        if torch is not None and torch.get_num_threads() != torch_threads:
            torch.set_num_threads(torch_threads)


def entry_point(dispatcher: Any, arrays: tuple[Any, ...]) -> Any:
    """The compiled function of ``dispatcher`` (or of a :class:`GeneratedFunction`) for
    exactly these arguments' types.

    Calling it skips the dispatcher's type resolution (about half a small
    call); only valid when every call passes arguments of those same types.
    Machine code read back from the disk cache is read without its linking
    bitcode (see :func:`_read_lazily`), from the function's record where it has one
    (:mod:`.function_records`: no numba index, no argument typing), else from numba's
    cache, which then gives the record its data.
    """
    from pyexecutorch.runtime import function_records  # noqa: PLC0415 - imports this module

    numba = numba_module()
    dispatcher = dispatcher_of(dispatcher)
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
    _read_lazily(dispatcher)
    cached = _from_disk_cache(dispatcher, signature, record)
    if cached is not None:
        return cached
    with compiling(f"{getattr(dispatcher, '__qualname__', dispatcher)}{signature}"):
        compiled_entry = dispatcher.compile(signature)
    if record is not None:
        function_records.write(record, dispatcher.overloads[signature], linkable=True)
    return compiled_entry


_refreshed: set[int] = set()  # the target contexts refreshed once in this process


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


def _from_disk_cache(dispatcher: Any, signature: tuple[Any, ...], record: Any = None) -> Any:
    """The entry point of ``dispatcher`` for ``signature`` read from numba's disk cache, as
    its ``compile`` would read it (see :func:`_read_cache`), or None. Its data is copied
    to ``record`` (a function record's path), if given."""
    context = getattr(dispatcher, "targetctx", None)
    if context is None or not hasattr(dispatcher, "_cache_hits"):
        return None
    read = _read_cache(getattr(dispatcher, "_cache", None), context, signature)
    if read is None:
        return None
    result, data = read
    if record is not None:
        from pyexecutorch.runtime import function_records  # noqa: PLC0415

        function_records.write_data(record, data)
    _install(dispatcher, result)
    return result.entry_point


def refresh_once(context: Any) -> None:
    """Refresh numba's typing and target registries of ``context`` once in this process,
    before the first compile result is read back (under numba's compiler lock)."""
    if id(context) not in _refreshed:
        context.refresh()
        _refreshed.add(id(context))


def _read_cache(cache: Any, context: Any, signature: tuple[Any, ...]) -> Any:
    """numba's compile result for ``signature`` from ``cache`` (a function's disk cache) and
    the data it was read from, or None (not cached, or a numba this does not know).

    Two differences from numba's reader: numba refreshes its typing and target
    registries before every read (about 1 ms, most of a small method's read), which a
    read needs once (a compilation refreshes them itself); and a generated module that
    a cached function's environments name is not imported for them (see _rebuild_env).
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
    imported and a dispatcher compiles the function, which is then recorded.
    """
    from pyexecutorch.runtime import function_records  # noqa: PLC0415 - imports this module

    numba = numba_module()
    types = function_records.types_key(arrays)
    if types is None:  # not every argument's type is read from its flags
        types = repr(tuple(numba.typeof(a) for a in arrays))
    key = (function.module_name, function.name, types)
    result = _plain_results.get(key)
    if result is None:
        record = function_records.path_of(function, types)
        result = function_records.read(record)
        if result is not None:
            plain_stats["cache_hits"] += 1
        else:
            result = _compile_plain(function, arrays, prepare)
            function_records.write(record, result)
            plain_stats["compilations"] += 1
        _plain_results[key] = result
    return result.entry_point


def _compile_plain(function: GeneratedFunction, arrays: tuple[Any, ...], prepare: Any) -> Any:
    """numba's compile result of ``function`` for these arguments' types (see
    :func:`plain_entry_point`)."""
    numba = numba_module()
    signature = tuple(numba.typeof(a) for a in arrays)
    if prepare is not None:
        prepare()
    logger.info(
        "compiling a method whole (%d arguments, one function): the first load takes "
        "seconds to a minute; later loads read it from %s",
        len(signature),
        cache_dir(),
    )
    # (where records cannot be read back, by a numba this module does not know, numba's own
    # cache keeps the function, and its compile reads it from there)
    cache = lazy_rebuilder() is None
    dispatcher = numba.njit(cache=cache, error_model="numpy")(function.load())
    with compiling(f"{function.module_name}.{function.name}"):
        dispatcher.compile(signature)
    return dispatcher.overloads[signature]


def lazy_rebuilder() -> Any:
    """The function making numba's compile result from its serialized form with its
    bitcode unparsed (see :func:`_make_lazy_cache_impl`), or None for a numba it does not
    know."""
    lazy = _lazy_cache_impl()
    return None if lazy is None else lazy.rebuild_payload


def entry_rebuilder() -> Any:
    """The function making a plain function's entry point from its light record (see
    :func:`_make_lazy_cache_impl`), or None for a numba it does not know."""
    lazy = _lazy_cache_impl()
    return None if lazy is None else lazy.rebuild_entry


class CacheDataReader(pickle.Unpickler):
    """numba's cache data, its environments rebuilt by :func:`_rebuild_env`."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "numba.core.environment" and name == "_rebuild_env":
            return _rebuild_env
        return super().find_class(module, name)


def _rebuild_env(modname: str | None, consts: Any, env_name: str) -> Any:
    """numba's environment rebuild, without importing a generated module it names.

    A whole-method function's data holds the environment of every loop it calls; numba
    imports each one's module to rebuild it. A generated module not imported yet gets an
    empty module of its name instead, which :func:`generated_module` runs its code into
    if the module is ever needed (compiled loops read no globals from it at run time).
    """
    from numba.core import environment  # noqa: PLC0415

    if modname and modname.startswith(GENERATED_PREFIX) and modname not in sys.modules:
        placeholder = ModuleType(modname)
        placeholder.__dict__[_PLACEHOLDER] = True
        sys.modules[modname] = placeholder
    return environment._rebuild_env(modname, consts, env_name)


# numba's cached machine code for one function comes with the LLVM bitcode of
# the function and every callee it inlined, kept so that a later compilation can
# link it into a caller. Reading it back parses all of that bitcode and walks every
# symbol in it (most of a warm load_method: ~35 ms of ~40 for a small method
# compiled whole), though only a function that some new compilation calls ever
# needs it. The reader below installs the machine code alone and parses the
# bitcode when numba first asks for it to link (the files on disk are numba's own).
_lazy_impl: Any = None


def _read_lazily(dispatcher: Any) -> None:
    """Make ``dispatcher``'s disk cache read machine code without parsing its bitcode.

    Leaves numba's own reader where this numba is not the one it was written
    for (the cache files stay numba's format either way).
    """
    _read_lazily_from(getattr(dispatcher, "_cache", None))


def _read_lazily_from(cache: Any) -> None:
    impl = getattr(cache, "_impl", None)
    lazy = _lazy_cache_impl()
    if lazy is not None and type(impl) is lazy.__base__:
        impl.__class__ = lazy


def _lazy_cache_impl() -> Any:
    """The subclass of numba's cache reader that links lazily, made once (None: unsupported)."""
    global _lazy_impl
    if _lazy_impl is None:
        with _lock:
            if _lazy_impl is None:
                _lazy_impl = _make_lazy_cache_impl() or False
    return _lazy_impl or None


def _make_lazy_cache_impl() -> Any:
    from numba import _dynfunc  # noqa: PLC0415 - compiled tier only
    from numba.core import caching, codegen, compiler, funcdesc  # noqa: PLC0415
    from numba.core.codegen import CodeLibrary, JITCodeLibrary  # noqa: PLC0415

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

    def rebuild_payload(target_context: Any, payload: Any) -> Any:
        """numba's compile result from its serialized form (``payload``, as numba's cache
        data holds it), its machine code installed and its bitcode left unparsed; None for
        a payload or a code generator this does not know. A payload without bitcode (see
        :mod:`pyexecutorch.runtime.function_records`) makes a function nothing can link."""
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
        library = LazilyLinkedLibrary(codegen_, name, object_code)
        library.__dict__["_linking_bitcode"] = linking_bitcode
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

    def rebuild_entry(target_context: Any, light: tuple) -> Any:
        """A plain function's entry point from its light record (see
        :func:`pyexecutorch.runtime.function_records.write`): its machine code installed
        and called through numba's wrapper as ``get_executable`` makes it, without numba's
        function descriptor or signature (their types unpickled cost a small method's
        load a few tenths of a millisecond). None for a code generator this does not know."""
        name, object_code, symbols, modname, qualname, env, envs, reload_init = light
        codegen_ = target_context.codegen()
        if codegen_._library_class is not JITCodeLibrary:
            return None
        for init in reload_init:
            init()
        library = LazilyLinkedLibrary(codegen_, name, object_code)
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
        return types.SimpleNamespace(entry_point=entry, library=library, environment=env)

    class LazyLinkingCacheImpl(caching.CompileResultCacheImpl):
        def rebuild(self, target_context: Any, payload: Any) -> Any:
            result = rebuild_payload(target_context, payload)
            return super().rebuild(target_context, payload) if result is None else result

    LazyLinkingCacheImpl.rebuild_payload = staticmethod(rebuild_payload)
    LazyLinkingCacheImpl.rebuild_entry = staticmethod(rebuild_entry)
    return LazyLinkingCacheImpl


# A parallel region costs tens of microseconds (far more on a busy machine):
# compiled kernels take their parallel variant only above this much work.
PARALLEL_WORK = 1 << 18


def serial_and_parallel(fn: Any, name: str) -> tuple[Any, Any]:
    """``fn`` compiled twice, as ``name`` and ``name_parallel`` (its ``prange`` threaded).

    Each copy gets its own name because numba names its cache files after the
    function: two compilations of one function would overwrite each other's.
    Neither uses fastmath, so NaN, infinity and -0.0 come out as numpy gives them.
    """
    import numba  # noqa: PLC0415 - only compiled-form modules, which need numba, call this

    def named(label: str) -> Any:
        copy = types.FunctionType(fn.__code__, fn.__globals__, label, fn.__defaults__)
        copy.__qualname__ = label
        return copy

    serial = numba.njit(cache=True, error_model="numpy")(named(name))
    parallel = numba.njit(cache=True, parallel=True, error_model="numpy")(named(f"{name}_parallel"))
    return serial, parallel


def pick(variants: tuple[Any, Any], work: int, arguments: tuple[Any, ...]) -> Any:
    """The compiled function of the serial or parallel variant (of :func:`serial_and_parallel`)
    for ``work`` elements, for exactly the types of ``arguments`` (see :func:`entry_point`).

    Callers pass C-contiguous arrays of those dtypes and ranks on every call.
    Inside :func:`deferred_entry_points` it may be a placeholder (see :func:`form_entry_point`).
    """
    return form_entry_point(choose(variants, work), arguments)


def form_entry_point(dispatcher: Any, arguments: tuple[Any, ...]) -> Any:
    """:func:`entry_point` for a kernel's compiled form built at load: inside
    :func:`deferred_entry_points` a function not yet in memory comes as a
    :class:`PendingEntryPoint` instead, loaded only if its call is kept."""
    pending = getattr(_deferral, "pending", None)
    if pending is None:
        return entry_point(dispatcher, arguments)
    held = dispatcher.loaded() if type(dispatcher) is GeneratedFunction else dispatcher
    if held is not None and held.overloads:  # (none read yet: no argument types to ask)
        numba = numba_module()
        loaded = held.overloads.get(tuple(numba.typeof(a) for a in arguments))
        if loaded is not None:
            return loaded.entry_point
    entry = PendingEntryPoint(dispatcher, arguments)
    pending.append(entry)
    return entry


class PendingEntryPoint:
    """A compiled form's function, read from the disk cache when first needed.

    A method that may compile whole builds its kernels' compiled forms before it
    knows whether any will be called on its own: inside a whole-method function
    none is, and reading each one's machine code back costs milliseconds. Calling
    one loads it (so a form called early stays correct); :func:`bind_entry_points`
    loads the kept ones at load time and puts them in place of their placeholders.
    """

    __slots__ = ("arguments", "build", "dispatcher", "function")

    def __init__(
        self, dispatcher: Any, arguments: tuple[Any, ...], build: Callable[[], Any] | None = None
    ) -> None:
        self.dispatcher = dispatcher
        self.arguments = arguments
        self.build = build  # (see deferred_function)
        self.function: Any = None

    def load(self) -> Any:
        if self.function is None:
            if self.build is not None:
                # made for a line: its own fast paths made now, none deferred again
                outer = getattr(_deferral, "pending", None)
                _deferral.pending = None
                try:
                    self.function = self.build()
                finally:
                    _deferral.pending = outer
            else:
                self.function = entry_point(self.dispatcher, self.arguments)
        return self.function

    def __call__(self, *args: Any) -> Any:
        return self.load()(*args)


class PendingFastPath(PendingEntryPoint):
    """A kernel's load-time fast path that writes the out array it is given and returns
    it (``fills_outputs``), made when first called or when its line is kept: in a method
    compiled whole the kernel's compiled step does the work, and the fast path (a
    convolution's packed weights and generated code) would never run."""

    __slots__ = ()
    fills_outputs = True


_deferral = threading.local()


def deferring() -> bool:
    """Whether this thread is inside :func:`deferred_entry_points` (a method that may
    compile whole is being built)."""
    return getattr(_deferral, "pending", None) is not None


def deferred_function(build: Callable[[], Any]) -> Any:
    """The function ``build()`` makes, made now; inside :func:`deferred_entry_points` a
    :class:`PendingEntryPoint` that makes it when first called or when the method keeps
    its lines (:func:`bind_entry_points`): a fast path that only a line calls (not a
    whole-method function) and that costs milliseconds to make (a convolution's, with
    its packed weights and generated code)."""
    pending = getattr(_deferral, "pending", None)
    if pending is None:
        return build()
    entry = PendingEntryPoint(None, (), build)
    pending.append(entry)
    return entry


@contextlib.contextmanager
def deferred_entry_points() -> Iterator[list[PendingEntryPoint]]:
    """Within it (on this thread), :func:`pick` defers loading; the list collects what it deferred."""
    outer = getattr(_deferral, "pending", None)
    pending: list[PendingEntryPoint] = []
    _deferral.pending = pending
    try:
        yield pending
    finally:
        _deferral.pending = outer


def bind_entry_points(functions: Iterable[Any], pending: list[PendingEntryPoint]) -> None:
    """Load every deferred entry point, and put each in the closure cells of ``functions``
    (and of the functions they close over) that hold its placeholder, so that calls go
    straight to the compiled function."""
    if not pending:
        return
    for entry in pending:
        entry.load()
    stack = [f for f in functions if isinstance(f, types.FunctionType)]
    seen: set[int] = set()
    while stack:
        function = stack.pop()
        if id(function) in seen:
            continue
        seen.add(id(function))
        for cell in function.__closure__ or ():
            try:
                held = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
            if type(held) is PendingEntryPoint:
                cell.cell_contents = held.function
            elif isinstance(held, types.FunctionType):
                stack.append(held)


def choose(variants: tuple[Any, Any], work: int) -> Any:
    """The dispatcher :func:`pick` compiles for ``work`` elements (the serial or parallel one)."""
    import numba  # noqa: PLC0415

    threads = numba.get_num_threads()
    return variants[1] if work >= PARALLEL_WORK and threads > 1 else variants[0]
