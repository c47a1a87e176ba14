"""Helper threads for one-row float32 linears: column chunks handed over through shared
words of one process-wide mailbox, without a parallel region.

A decoded token runs some twenty linears of ~50 us each. As numba parallel loops, each
started and joined a team of OpenMP threads: on this 2-core VM ~40 us of CPU a loop (a
sleeping worker woken through the kernel, spin-waits at two barriers), so a second
thread bought nothing. Here helper threads, started once per process, poll the mailbox
(the protocol is :func:`~.compiled_one_row.serve`'s and
:func:`~.compiled_one_row.one_row_linear`'s):

* ``WORD`` holds ``generation << GEN_SHIFT | next chunk``. The calling thread writes a job
  (the arrays' addresses, sizes, clamp), zeroes ``DONE``, publishes a new generation (a
  release store), then takes chunks itself by adding to the word. Helpers take chunks
  only by compare-and-swap on a word of the generation they read the job for, so a late
  helper never takes a chunk of a newer job.
* Each chunk a helper finishes adds 1 to ``DONE``; the caller waits for the helpers'
  chunks only. It never waits for a helper that took nothing: one asleep or descheduled
  leaves its chunks to the caller (a busy machine costs no stall beyond a chunk).
* A helper with no new job spins (``pause``) for :data:`SPIN_US`, then gives the CPU
  away between polls (``sched_yield``) up to :data:`YIELD_US` (a decoded token's gaps:
  sampling, the next call), then naps: 50 us polls up to :data:`NAP_US`, 1 ms polls up
  to :data:`DOZE_US`, 10 ms polls after (an idle process's helper wakes 100 times a
  second; the first product after a long pause runs mostly on the caller).
* ``LOCK``: one caller at a time (a second thread running a method meanwhile runs its
  linears serially). ``WORKERS``: the threads in force at the caller (``set_threads``),
  helpers past them stay out.

A forked child inherits the mailbox but not the helpers: its callers take every chunk.
"""

from __future__ import annotations

import atexit
import threading
import time
from typing import Any

import numpy as np

# Mailbox slots (int64); words written by different threads a cache line apart.
WORD, DONE, LOCK, HELPERS, QUIT = 0, 8, 16, 24, 32
X, W, BIAS, OUT, K, N, PER, COUNT, WORKERS, BOUNDS = range(40, 50)  # the job
SLOTS = 56
GEN_SHIFT = 20
CHUNK_MASK = (1 << GEN_SHIFT) - 1
# An idle helper's polling, by microseconds since its last job (see the module's doc).
SPIN_US, YIELD_US, NAP_US, DOZE_US = 30, 2_000, 20_000, 1_000_000

_lock = threading.Lock()
_mailbox: np.ndarray | None = None
_threads: list[threading.Thread] = []


def ticks_per_us(cycles: Any) -> int:
    """Ticks of the compiled cycle counter ``cycles()`` a microsecond, measured once."""
    cycles()  # compiled or read from the disk cache first, outside the measured time
    t0, c0 = time.perf_counter(), cycles()
    while time.perf_counter() - t0 < 0.002:
        pass
    return max(1, round((cycles() - c0) / ((time.perf_counter() - t0) * 1e6)))


def mailbox(serve: Any, cycles: Any, helpers: int) -> np.ndarray:
    """The process's mailbox, its ``helpers`` threads running ``serve(mailbox, index,
    ticks_per_us)`` started at the first call."""
    global _mailbox
    with _lock:
        if _mailbox is None:
            box = np.zeros(SLOTS, np.int64)
            rate = ticks_per_us(cycles)
            for index in range(helpers):
                thread = threading.Thread(
                    target=serve, args=(box, index, rate), name=f"one-row-{index}", daemon=True
                )
                thread.start()
                _threads.append(thread)
            _mailbox = box
            atexit.register(_stop)
        return _mailbox


def _stop() -> None:
    """Let the helpers return (they poll ``QUIT``) before the interpreter goes."""
    if _mailbox is not None:
        _mailbox[QUIT] = 1
        for thread in _threads:
            thread.join(timeout=0.5)
