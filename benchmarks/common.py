"""Shared benchmark helpers: the test suite's models and a robust timer."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pyexecutorch.jit import numba_env

ROOT = Path(__file__).resolve().parents[1]
# The repository root, so that the suite's helpers import as ``tests.models``,
# ``tests.official`` and ``benchmarks.models_large``: never ``tests/`` itself, whose
# folders (kernels, backends, ...) would shadow installed packages of those names.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# torch's libgomp reads its spin setting when torch is imported, and numba's OpenMP
# threads run on it when torch came first (as in every benchmark here): without this its
# default (300000 rounds a wait) held, and at two threads on a loaded machine int8
# ResNet-18 took 160 ms CPU a call against 15.6 with it (14.2 at one thread).
os.environ.setdefault("GOMP_SPINCOUNT", numba_env.OPENMP_SPIN_COUNT)


def samples(fn: Callable[[], object], *, budget_s: float, min_runs: int) -> list[float]:
    """Seconds of repeated calls of ``fn``: at least ``min_runs``, until ``budget_s`` is spent."""
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < min_runs or time.perf_counter() < deadline:
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        if len(times) >= 10_000:
            break
    return times


def statistics_of(times: list[float]) -> dict[str, float]:
    """min, median and p90 of call times (seconds), and how many there were."""
    times = sorted(times)
    return {
        "min": times[0],
        "median": statistics.median(times),
        "p90": times[int(0.9 * (len(times) - 1))],
        "runs": len(times),
    }


def measure(
    fn: Callable[[], object], *, budget_s: float = 0.4, min_runs: int = 5, warmup: int = 3
) -> dict[str, float]:
    """Latency statistics of ``fn`` in seconds: min, median, p90 over repeated calls."""
    for _ in range(warmup):
        fn()
    return statistics_of(samples(fn, budget_s=budget_s, min_runs=min_runs))


def fmt_us(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    us = seconds * 1e6
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"
