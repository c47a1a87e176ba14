"""One thread setting for both tiers: numpy's BLAS (through threadpoolctl) and numba's loops."""

from __future__ import annotations

import importlib.util
from typing import Any

from pyexecutorch.jit import numba_env

_blas_limit: Any = None  # the limiter of the last setting (threadpoolctl's handle on it)


def set_threads(num_threads: int) -> None:
    """Run BLAS calls and compiled parallel loops on ``num_threads`` threads."""
    global _blas_limit
    if isinstance(num_threads, bool) or not isinstance(num_threads, int):
        raise TypeError(f"num_threads must be an int, got {type(num_threads).__name__}")
    if num_threads < 1:
        raise ValueError(f"num_threads must be at least 1, got {num_threads}")
    try:
        from threadpoolctl import threadpool_limits  # noqa: PLC0415 - optional
    except ImportError:
        raise RuntimeError(
            "setting the thread count needs threadpoolctl (pip install threadpoolctl)"
        ) from None
    _load_compiled_blas()
    _blas_limit = threadpool_limits(limits=num_threads, user_api="blas")
    numba_env.set_threads(num_threads)


def follow_threads() -> None:
    """Apply the last :func:`set_threads` to the calling thread's compiled loops (numba's
    count is per thread; BLAS's, through threadpoolctl, is already process-wide)."""
    numba_env.follow_threads()


def _load_compiled_blas() -> None:
    """Load the BLAS that compiled code calls (numba's np.dot goes through scipy's own
    OpenBLAS, not numpy's), so that the limit reaches it: a library loaded later keeps
    the thread count it starts with (OPENBLAS_NUM_THREADS)."""
    if numba_env.numba_module() is None or importlib.util.find_spec("scipy") is None:
        return
    import scipy.linalg.cython_blas  # noqa: F401, PLC0415 - loaded for threadpoolctl to see


def thread_counts() -> dict[str, int | None]:
    """The threads each side really uses now: ``blas`` (the fewest of the BLAS libraries
    loaded, numpy's and the compiled code's, read back through threadpoolctl) and ``numba`` (the compiled tier's
    parallel loops); None for a side that is not installed."""
    counts: dict[str, int | None] = {"blas": None, "numba": None}
    try:
        from threadpoolctl import threadpool_info  # noqa: PLC0415 - optional
    except ImportError:
        pass
    else:
        blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        counts["blas"] = min(blas) if blas else None
    numba = numba_env.numba_module()
    if numba is not None:
        counts["numba"] = numba.get_num_threads()
    return counts
