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


_TORCH_KEEPS_ITS_THREADS = """
import torch
torch.set_num_threads(1)
from pyexecutorch.runtime.threads import set_threads
from pyexecutorch.runtime import compiled
if not compiled.enabled(None):
    print("numba")
else:
    assert torch.get_num_threads() == 1  # torch's OpenMP state is set up before numba's pool
    set_threads(1)
    import numba
    import numpy as np
    # A parallel loop starts numba's OpenMP pool, which used to reset the count torch shares.
    numba.njit(parallel=True)(lambda a: a.sum())(np.ones(10))
    print(torch.get_num_threads())
"""


def test_setting_threads_leaves_torch_its_own_count():
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[2] / "src")
    proc = subprocess.run(
        [sys.executable, "-c", _TORCH_KEEPS_ITS_THREADS],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": src, "PYEXECUTORCH_JIT": "1"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] in ("1", "numba")


_COMPILED_BLAS_FOLLOWS = """
import importlib.util
from pyexecutorch.runtime import compiled
if not compiled.enabled(None) or importlib.util.find_spec("scipy") is None:
    print("skip")
else:
    from pyexecutorch.runtime.threads import set_threads
    set_threads(1)  # before anything loaded scipy's BLAS, which numba's np.dot calls
    import numpy as np
    from threadpoolctl import threadpool_info
    from pyexecutorch.kernels.conv.compiled import pointwise_conv
    a = np.ones((1, 1, 4, 4), np.float32)
    pointwise_conv(a, np.ones((1, 4, 4), np.float32), np.zeros(4, np.float32), a.copy(), False)
    print(sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}))
"""


def test_the_thread_setting_reaches_the_blas_compiled_code_calls():
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILED_BLAS_FOLLOWS],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": src, "PYEXECUTORCH_JIT": "1"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] in ("[1]", "skip")
