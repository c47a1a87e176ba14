"""One compilation of a function at a time across processes sharing a cache directory.

Processes that start cold together (a pool of workers, Ray actors, test workers) ask
for the same kernels' machine code at once. Without a lock each compiles it (the
largest convolution forms take 15-20 s of CPU each); with one, the first compiles and
writes the disk cache, and the others wait, then read what it wrote.

The lock is an advisory file lock (``flock``) on a file named by a hash of the
function and its argument types under ``locks/`` in the cache directory: the
operating system releases it when its holder exits, so a killed process never leaves
it held. A waiter gives up waiting after :data:`WAIT_SECONDS` and compiles itself
(a stopped holder costs time, never a hang). Where ``fcntl`` is missing (Windows)
processes compile side by side, as without the lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator

from pyexecutorch.jit import numba_env

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

# Longer than the slowest single compilation measured on a loaded 2-core machine (~2 min).
WAIT_SECONDS = 600.0
_POLL_SECONDS = 0.05


def lock_path(what: str) -> str:
    """The lock file of ``what`` (a function's qualified name and its argument types)."""
    digest = hashlib.sha256(what.encode()).hexdigest()[:24]
    return os.fspath(numba_env.cache_dir() / "locks" / f"{digest}.lock")


@contextlib.contextmanager
def compiling_alone(what: str) -> Iterator[bool]:
    """Hold the cross-process lock of ``what`` while the block compiles it.

    Yields whether this process waited for another holder: if so, the function may now
    be in the disk cache, and the caller reads it there before compiling.
    """
    if fcntl is None:
        yield False
        return
    path = lock_path(what)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # a read-only cache directory: nothing to share anyway
        yield False
        return
    try:
        waited = _acquire(fd)
        yield waited
    finally:
        os.close(fd)  # (closing the descriptor releases its lock)


def _acquire(fd: int) -> bool:
    """Take the lock on ``fd``, polling up to :data:`WAIT_SECONDS`; whether it waited."""
    deadline = None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return deadline is not None
        except BlockingIOError:
            now = time.monotonic()
            if deadline is None:
                deadline = now + WAIT_SECONDS
                numba_env.logger.debug("waiting for another process compiling the same function")
            elif now >= deadline:
                return True
            time.sleep(_POLL_SECONDS)
