"""Generated code: modules written once under the cache directory, named by a hash of
their source and of the build key, and imported once.

Generated code (fused loops, whole-method functions) is compiled with numba's
``cache=True``, so a second process finds both the source and the machine code under
the cache directory: the key is the generated source, numba's own index adds the
argument types (dtypes, ranks, layouts). The build key adds what the source depends on
but does not contain: numba's version, numpy's build, and the stamps of the compiled
code it calls or inlines, in the folders registered with :func:`stamp_sources` (the
kernels' compiled forms, registered by :mod:`pyexecutorch.kernels`, and this package).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import py_compile
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from pyexecutorch.jit import numba_env, source_stamps

GENERATED_PREFIX = "pyexecutorch_generated_"
# Marks an empty module made for a cached function's environment before its generated
# module ran (see disk_cache.rebuild_env); generated_module runs its code into it.
PLACEHOLDER = "__pyexecutorch_placeholder__"

_modules: dict[str, ModuleType] = {}
# (folder, glob pattern) of the sources whose stamps enter the build key.
_stamped: set[tuple[Path, str]] = set()


def stamp_sources(root: Path, pattern: str) -> None:
    """Put the stamps of the files under ``root`` matching ``pattern`` in the build key:
    code that generated functions call or inline (numba keys a cached function by its own
    file only). Called at import by the packages holding such code."""
    _stamped.add((Path(root), pattern))
    build_key.cache_clear()
    _source_key.cache_clear()


def stamped_sources() -> list[tuple[Path, str]]:
    """The folders and patterns :func:`stamp_sources` registered, in key order."""
    return sorted(_stamped, key=lambda s: (s[0].as_posix(), s[1]))


@functools.cache
def build_key() -> str:
    """What generated code depends on besides its own text: numba's version, numpy's
    build (:func:`~.numba_env.numpy_build`) and the stamps of the registered sources
    (:func:`stamp_sources`: each file's size and modification time, as numba stamps a
    source). A whole-method function holds the machine code of every function it calls,
    which their files' stamps do not reach."""
    numba = numba_env.numba_module()
    parts = [numba.__version__, numba_env.numpy_build()]
    for root, pattern in stamped_sources():
        parts += [f"{root.name}/{pattern}", sources_key(root, pattern)]
    parts.append(source_stamps.stamp_key())  # (helpers such as the window arithmetic)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def sources_key(root: Path, pattern: str = "**/compiled*.py") -> str:
    """The stamps (path, size, modification time) of the files under ``root`` matching
    ``pattern`` (by default the compiled forms, ``compiled*.py``), as one string."""
    stamps = []
    for path in sorted(root.glob(pattern)):
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
    with numba_env.lock:
        module = _modules.get(key)
        if module is not None:
            return module
        folder = numba_env.cache_dir() / "generated"
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
        if module is not None and module.__dict__.pop(PLACEHOLDER, False):
            # named by a cached function read before it (see disk_cache.rebuild_env): run into it
            module.__spec__, module.__loader__, module.__file__ = spec, spec.loader, str(path)
        else:
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # numba's cache finds a function's globals by name
        spec.loader.exec_module(module)
        _modules[key] = module
        return module


def forget() -> None:
    """Forget the generated modules this process imported (see entry_points.forget_modules)."""
    with numba_env.lock:
        _modules.clear()


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


# This package's helpers (SIMD, BLAS, math, half) are inlined into generated code.
stamp_sources(Path(__file__).parent, "*.py")
