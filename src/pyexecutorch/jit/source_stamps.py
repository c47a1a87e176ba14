"""numba's disk cache keyed by the helper files a kernel inlines, not only by its own file.

numba stamps a cached function with its own source file only. A compiled kernel also
inlines code from other modules (the SIMD intrinsics of :mod:`.simd`, the window
arithmetic of ``kernels/conv/geometry.py``, a family's shared ``compiled_*.py``
pieces), so editing one of those left every kernel that inlines it reading stale
machine code from the cache. Here a cached function of a file under a registered
folder gets a stamp that also covers the *inlined sources* its module imports
(directly, or through other inlined sources): each such file's content hash. The
inlined sources are declared with :func:`inlined_sources` (this package's compiled
helpers below, the kernels' compiled forms and helpers by :mod:`pyexecutorch.kernels`);
the imports are read from the source text the first time a module's function is cached.

The stamp changes nothing else: a function with no inlined dependency keeps numba's own
stamp, and functions outside the registered folders are left alone. :func:`watch`
installs it before numba's cache machinery first serves a function (imported or not).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import os
import re
import sys
from pathlib import Path
from typing import Any

# (folder, glob pattern) of the inlined sources (see inlined_sources).
_inlined: set[tuple[Path, str]] = set()
# Set on numba's caching module once its locators stamp dependencies.
_INSTALLED = "_pyexecutorch_dependency_stamps"

_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w.]+)", re.M)


def inlined_sources(root: Path, pattern: str) -> None:
    """Declare the files under ``root`` matching ``pattern`` as code that compiled
    functions inline: a cached function whose module imports one is stamped with it."""
    _inlined.add((Path(root).resolve(), pattern))
    _inlined_files.cache_clear()
    _first_seen.cache_clear()
    _dependencies.cache_clear()
    dependency_stamp.cache_clear()
    _imports.cache_clear()


@functools.cache
def _inlined_files() -> frozenset[str]:
    return frozenset(str(p) for root, pattern in _inlined for p in root.glob(pattern))


def _under_a_root(path: str) -> bool:
    return any(path.startswith(f"{root}{os.sep}") for root, _ in _inlined)


def _module_file(base: str, parts: list[str]) -> str | None:
    """The file of module ``parts`` under folder ``base`` (a module or a package), or None."""
    target = os.path.join(base, *parts)
    for candidate in (target + ".py", os.path.join(target, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


@functools.cache
def _package_folder(top: str) -> str | None:
    """The folder holding the imported package ``top`` (resolved once), or None."""
    origin = getattr(sys.modules.get(top), "__file__", None)
    if origin is None or not origin.endswith("__init__.py"):
        return None
    return str(Path(origin).resolve().parent.parent)


def _package_base(module: str, path: str) -> tuple[str, list[str]] | None:
    """The folder an import of ``module`` (absolute, or relative to ``path``) starts from
    and its remaining parts; None for a module outside the imported packages."""
    dots = len(module) - len(module.lstrip("."))
    parts = [p for p in module[dots:].split(".") if p]
    if dots:
        base = os.path.dirname(path)
        for _ in range(dots - 1):
            base = os.path.dirname(base)
        return base, parts
    base = _package_folder(parts[0]) if parts else None
    return None if base is None else (base, parts)


@functools.cache
def _imports(path: str) -> frozenset[str]:
    """The files (of imported packages) that module ``path`` imports, read from its source
    text (at the top or inside functions)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return frozenset()
    found = set()
    for module, names in _FROM_IMPORT.findall(text):
        located = _package_base(module, path)
        if located is None:
            continue
        base, parts = located
        names = re.sub(r"#[^\n]*", "", names).strip().strip("()")
        for name in re.findall(r"\b(\w+)\b(?:\s+as\s+\w+)?", names):
            # ``from package import module`` names a submodule; otherwise the module itself
            sub = _module_file(base, [*parts, name])
            file = sub if sub is not None else _module_file(base, parts)
            if file is not None:
                found.add(file)
    for module in _IMPORT.findall(text):
        located = _package_base(module, path)
        if located is not None and (file := _module_file(*located)) is not None:
            found.add(file)
    return frozenset(found)


@functools.cache
def _dependencies(path: str) -> tuple[str, ...]:
    """The inlined sources module ``path`` imports, directly or through inlined sources."""
    inlined = _inlined_files()
    seen: set[str] = set()
    todo = [path]
    while todo:
        for file in _imports(todo.pop()):
            if file in inlined and file not in seen and file != path:
                seen.add(file)
                todo.append(file)
    return tuple(sorted(seen))


@functools.lru_cache(maxsize=1024)
def _content_hash(path: str, mtime_ns: int, size: int) -> str:
    # (keyed by the stamp as well: a file edited while the process runs is hashed again)
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@functools.lru_cache(maxsize=1024)
def dependency_stamp(py_file: str) -> str | None:
    """What the cached functions of module ``py_file`` depend on besides their own file: a
    hash of the inlined sources it imports (see the module docstring), or None where it
    imports none or lies outside the registered folders. Read once per process and file
    (numba asks for every function of the module)."""
    path = os.path.realpath(py_file)
    if not _under_a_root(path):
        return None
    deps = _dependencies(path)
    if not deps:
        return None
    digest = hashlib.sha256()
    for dep in deps:
        st = os.stat(dep)
        name = os.path.basename(dep)
        digest.update(f"{name}:{_content_hash(dep, st.st_mtime_ns, st.st_size)}\n".encode())
    return digest.hexdigest()[:20]


def stamp_key() -> str:
    """The inlined sources' stamps (name, size, modification time) as one string, for the
    key of generated code, which inlines or links them too."""
    stamps = []
    for path in sorted(_inlined_files()):
        st = os.stat(path)
        name = "/".join(Path(path).parts[-2:])
        stamps.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(stamps)


@functools.cache
def _first_seen() -> tuple[tuple[str, int, int], ...]:
    """The inlined sources' stamps when a stamp of this process was first asked for (since
    the last registration of inlined sources)."""
    return _file_stamps(sorted(_inlined_files()))


def _file_stamps(paths: Any) -> tuple[tuple[str, int, int], ...]:
    stamps = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamps.append((path, -1, -1))
        else:
            stamps.append((path, st.st_size, st.st_mtime_ns))
    return tuple(stamps)


class DeferredStamp:
    """A cached function's stamp: numba's own (``own``) with :func:`dependency_stamp` of
    its module's file added, which is worked out (reading and hashing the helper files) only
    when numba compares or writes the stamp: numba makes a stamp for every cached function
    as it is decorated, and a warm start that reads its functions from their records never
    uses one (11 ms of CPU of a MobileNetV2 start). Should an inlined source have changed
    since the process first asked for a stamp, the stamp matches nothing (the function
    compiles again) rather than describing files the function may not have been made from.
    Compared and written (pickled) as the plain value numba's locator would give."""

    __slots__ = ("_value", "own", "py_file", "seen")

    def __init__(self, own: Any, py_file: str) -> None:
        self.own, self.py_file, self.seen = own, py_file, _first_seen()
        self._value: Any = None

    def value(self) -> Any:
        if self._value is None:
            if _file_stamps(path for path, _, _ in self.seen) != self.seen:
                self._value = (self.own, f"inlined sources changed in process {os.getpid()}")
            else:
                deps = dependency_stamp(self.py_file)
                self._value = self.own if deps is None else (self.own, deps)
        return self._value

    def __eq__(self, other: object) -> bool:
        return self.value() == (other.value() if isinstance(other, DeferredStamp) else other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.value())

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        value = self.value()  # (bytes or a tuple: written as that value itself)
        return type(value), (value,)


def _stamped(locator: type) -> type:
    """numba's source-file locator ``locator`` whose stamp adds :func:`dependency_stamp`."""

    class DependencyStamped(locator):  # type: ignore[misc, valid-type]
        def get_source_stamp(self) -> Any:
            own = super().get_source_stamp()
            path = os.path.realpath(str(self._py_file))
            if not _under_a_root(path):
                return own
            return DeferredStamp(own, path)

    DependencyStamped.__name__ = DependencyStamped.__qualname__ = f"Stamped{locator.__name__}"
    return DependencyStamped


def install(caching: Any) -> None:
    """Make numba's cache locators (``caching``: ``numba.core.caching``) stamp dependencies;
    once. Its user-chosen locators (``NUMBA_CACHE_LOCATOR_CLASSES``) are left as they are."""
    if getattr(caching, _INSTALLED, False):
        return
    mixin = getattr(caching, "_SourceFileBackedLocatorMixin", None)
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    if mixin is None or not isinstance(getattr(impl, "_locator_classes", None), list):
        return  # a numba this was not written for: its own stamps
    impl._locator_classes = [
        _stamped(c) if isinstance(c, type) and issubclass(c, mixin) else c
        for c in impl._locator_classes
    ]
    setattr(caching, _INSTALLED, True)


class _InstallOnImport:
    """A meta path finder that installs the stamps right after ``numba.core.caching``
    imports, then leaves: whoever imports numba first (a kernel module's ``from numba
    import njit``), no function is cached before its locators stamp dependencies."""

    name = "numba.core.caching"

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_install(module: Any) -> None:
            exec_module(module)
            install(module)

        loader.exec_module = exec_then_install
        return spec


def watch() -> None:
    """Install the stamps now if numba's caching module is imported, else when it is."""
    if os.environ.get("NUMBA_CACHE_LOCATOR_CLASSES"):
        return  # the user chose numba's locators
    caching = sys.modules.get(_InstallOnImport.name)
    if caching is not None:
        install(caching)
    elif not any(isinstance(f, _InstallOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _InstallOnImport())


# This package's helpers that compiled code inlines (SIMD, BLAS, math and XNNPACK's math
# with its coefficients, half, array predicates, coefficients, atomics) and the
# serial/parallel variants and link-only helpers whose options compile it.
INLINED_HELPERS = (
    "simd",
    "blas",
    "math_functions",
    "xnnpack_math",
    "xnnpack_coefficients",
    "half",
    "arrays",
    "coefficients",
    "spin",
    "variants",
    "link_only",
)
for _helper in INLINED_HELPERS:
    inlined_sources(Path(__file__).parent, f"{_helper}.py")
