"""One thread setting for BLAS and the compiled tier, read back from each library."""

from __future__ import annotations

import os

import pytest

from pyexecutorch.runtime import compiled
from pyexecutorch.runtime.threads import set_threads, thread_counts

pytest.importorskip("threadpoolctl", reason="setting threads needs threadpoolctl")


def test_set_threads_reaches_blas_and_numba():
    before = thread_counts()
    try:
        set_threads(1)
        counts = thread_counts()
        assert counts["blas"] == 1
        numba = compiled.numba_module()
        if numba is not None:
            assert counts["numba"] == 1
            set_threads(2)
            assert thread_counts()["numba"] == min(2, numba.config.NUMBA_NUM_THREADS)
            if (os.cpu_count() or 1) >= 2:
                assert thread_counts()["blas"] == 2
    finally:
        set_threads(before["blas"] or 1)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "num_threads must be at least 1, got 0"),
        (True, TypeError, "num_threads must be an int, got bool"),
        (1.5, TypeError, "num_threads must be an int, got float"),
    ],
)
def test_bad_thread_counts(value, error, message):
    with pytest.raises(error, match=message):
        set_threads(value)
