"""numba, imported once: its cache directory, its threads, and the log of what it compiles.

numba's machine code, of generated loops and of the kernels' compiled forms alike,
goes to ``numba/`` under the cache directory (``$PYEXECUTORCH_CACHE_DIR``) unless
``NUMBA_CACHE_DIR`` (or numba's own config) says otherwise, also when the caller imported
numba first; nothing here imports numba before :func:`numba_module` is called.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import glob
import hashlib
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

CACHE_ENV = "PYEXECUTORCH_CACHE_DIR"

# One lock for the tier's process-wide state (numba's import, generated modules, the
# lazy cache reader, the compiled forms' import). Reentrant: importing the compiled
# forms under it may ask for numba_module() again.
lock = threading.RLock()
_numba: ModuleType | None = None
_numba_checked = False

# Compilations go to this logger: DEBUG a line each, INFO before a method compiles whole
# (up to a minute) and once a load has compiled anything (see Program.load_method).
logger = logging.getLogger("pyexecutorch.compiled")
# What this process compiled: functions and seconds (a load, and the LLM runner's
# rates, take the difference). Seconds count the outermost compilations only: a
# function compiled while its caller compiles is inside the caller's time.
compile_totals: collections.Counter[str] = collections.Counter()
_nesting = threading.local()


@contextlib.contextmanager
def compiling(what: str, announce: str | None = None) -> Iterator[None]:
    """Count and time one numba compilation (of ``what``, named in the log). With
    ``announce`` (a kernel's short name) it is also said at INFO, which the CLI shows: a
    kernel's first compile takes seconds, a cold load of a CNN a minute or more."""
    logger.debug("compiling %s", what)
    compile_totals["started"] += 1  # (a callee starts before its caller ends: count starts)
    if announce is not None:
        logger.info(
            "compiling %s (%d so far in this process; later loads read it from %s)",
            announce,
            compile_totals["started"],
            cache_dir(),
        )
    depth = getattr(_nesting, "depth", 0)
    _nesting.depth = depth + 1
    start = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - start
        _nesting.depth = depth
        compile_totals["functions"] += 1
        if depth == 0:
            compile_totals["seconds"] += seconds
        logger.debug("compiled %s in %.2f s", what, seconds)


def numba_module() -> ModuleType | None:
    """numba, imported once, or None when it is not installed."""
    global _numba, _numba_checked
    if not _numba_checked:
        with lock:
            if not _numba_checked:
                # Every machine code numba caches for us (kernel forms included, wherever the
                # package is installed) goes under our cache directory, unless the user chose
                # numba's own; numba reads this setting when it first imports.
                # Kept apart per numpy build: compiled products call numpy's own BLAS by
                # symbol, which another build may not have.
                folder = str(cache_dir() / "numba" / f"numpy-{numpy_build()}")
                imported_first = "numba" in sys.modules
                if not imported_first:
                    os.environ.setdefault("NUMBA_CACHE_DIR", folder)
                try:
                    import numba  # noqa: PLC0415 - optional, imported only for the compiled tier
                except ImportError:
                    numba = None
                else:
                    if imported_first:
                        _follow_cache_dir(numba, folder)
                    _quiet_ssa_scope_check(numba)
                    _start_threading_layer(numba)
                _numba = numba
                _numba_checked = True
    return _numba


def _quiet_ssa_scope_check(numba: ModuleType) -> None:
    """Hide numba's pedantic SSA check "variable '...' is not in scope".

    numba's SSA pass warns it when a kernel inlines a closure (softmax's exp, for one)
    into a generated whole-method function; the code it compiles is right, the warning
    asks for a numba bug report, and users saw a screenful of them on a cold load. Only
    that message of that category is filtered, so other numba warnings still show."""
    warnings.filterwarnings(
        "ignore",
        message=r"variable '.*' is not in scope",
        category=numba.core.errors.NumbaIRAssumptionWarning,
    )


def _follow_cache_dir(numba: ModuleType, folder: str) -> None:
    """Our cache folder for a numba the caller imported first, unless a cache folder was
    chosen (in the environment or in numba's config): numba picks a function's cache place
    from ``config.CACHE_DIR`` when the function is decorated (our kernels are decorated
    later), and its compiler reloads the config when a ``NUMBA_`` variable changes, so
    both are set. Without this, the kernels' machine code went to ``__pycache__`` beside
    the installed sources and ``$PYEXECUTORCH_CACHE_DIR`` was silently not used."""
    if os.environ.get("NUMBA_CACHE_DIR") or numba.config.CACHE_DIR:
        return
    os.environ["NUMBA_CACHE_DIR"] = folder
    numba.config.CACHE_DIR = folder


# How long numba's OpenMP threads spin after a parallel region before they sleep
# (GNU libgomp's GOMP_SPINCOUNT; its default, 300000, spins ~4 ms here). A delegate's
# layers are one parallel region each, back to back: a worker that sleeps between two is
# woken through the kernel at the next (tens of microseconds), so the spin must outlast
# the gaps of one call, and not much more (the official XNNPACK threadpool spins ~0.3 ms
# after a call). 30000 rounds are ~0.5 ms on an Intel Sapphire Rapids; on it, quiet, at
# two threads, ms a call against 1000 rounds: MobileNetV2 7.30 -> 4.42 (official 3.7-4.6),
# MobileNetV3-Small 1.79 -> 1.68, its portable program 4.51 -> 1.96; one thread to two
# 1.17x -> 2.0x on MobileNetV2. A busy machine is the other way round: at load 15 int8
# MobileNetV2 at two threads took 19.7 ms CPU a call with 10000, 6.5-7.5 with 1000 (a
# spinning worker holds a core another process wants); set GOMP_SPINCOUNT=1000 there (the
# test suite does: its three workers share the two cores).
OPENMP_SPIN_COUNT = "30000"


def _start_threading_layer(numba: ModuleType) -> None:
    """Start numba's threading layer with :data:`OPENMP_SPIN_COUNT`, unless the user set an
    OpenMP wait setting. libgomp reads its environment once, when it loads, so the setting
    is in the environment only meanwhile: a libgomp loaded later (torch's) keeps its own.

    Where a libgomp is already loaded (a caller imported torch first), numba's OpenMP layer
    runs on it (the dynamic linker hands back the loaded ``libgomp.so.1``), spinning as it
    was set up at its load: 300000 rounds a wait unless ``GOMP_SPINCOUNT`` was in the
    environment then. At two threads on a loaded machine int8 ResNet-18 took 160 ms CPU a
    call so, 15.6 with ``GOMP_SPINCOUNT=1000`` set before torch's import (14.2 at one
    thread). numba's work queue layer does not spin, but hands every parallel loop to a
    worker even at one thread (small kernels took twice the CPU time), so it is not chosen
    here; the benchmarks set the variable before they import torch."""
    user_set = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & set(os.environ)
    if user_set:
        numba.get_num_threads()
        return
    loaded = loaded_openmp_runtime() if logger.isEnabledFor(logging.DEBUG) else None
    if loaded is not None:
        logger.debug(
            "OpenMP runtime %s loaded before numba's threads: its spin setting applies (set"
            " GOMP_SPINCOUNT=%s before importing torch to shorten it)",
            loaded,
            OPENMP_SPIN_COUNT,
        )
    os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN_COUNT
    try:
        numba.get_num_threads()  # loads the threading layer (and its libgomp)
    finally:
        del os.environ["GOMP_SPINCOUNT"]


def loaded_openmp_runtime(maps: str = "/proc/self/maps") -> str | None:
    """The path of a GNU OpenMP runtime (``libgomp*``) this process has loaded, or None
    (also where the process's mappings cannot be read: not Linux)."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[5:]
                if path and os.path.basename(path[0]).startswith("libgomp"):
                    return path[0]
    except OSError:
        return None
    return None


# numba's thread count belongs to the calling thread, while ``set_threads`` promises a
# process-wide setting: a Ray actor or a server loads a program on one thread and runs it on
# others, which would otherwise run at numba's default (every core). The setting is kept
# here with a generation number, and each thread that runs a method applies it once per
# change (:func:`follow_threads`).
_wanted_threads: int | None = None
_generation = 0
_applied = threading.local()


def set_threads(n: int) -> None:
    """Threads of the compiled loops (``prange``), capped at what numba started with: for
    this thread now, and for any other thread when it next runs a method."""
    global _wanted_threads, _generation
    numba = numba_module()
    if numba is not None:
        _wanted_threads = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
        _generation += 1
        _apply_threads(numba)


def follow_threads() -> None:
    """Apply the last :func:`set_threads` to this thread if it has not yet (cheap when it has)."""
    if _wanted_threads is not None and getattr(_applied, "generation", 0) != _generation:
        _apply_threads(numba_module())


def _apply_threads(numba: ModuleType) -> None:
    _applied.generation = _generation
    # Starting numba's OpenMP pool resets the OpenMP thread count torch shares, so a torch
    # already imported by the caller gets its own setting back (torch is never imported here).
    torch = sys.modules.get("torch")
    torch_threads = torch.get_num_threads() if torch is not None else None
    numba.set_num_threads(_wanted_threads)
    if torch is not None and torch.get_num_threads() != torch_threads:
        torch.set_num_threads(torch_threads)


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
