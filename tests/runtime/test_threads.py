"""One thread setting for BLAS and the compiled tier, read back from each library."""

from __future__ import annotations

import os

import pytest

from pyexecutorch.jit import numba_env
from pyexecutorch.runtime.threads import set_threads, thread_counts

pytest.importorskip("threadpoolctl", reason="setting threads needs threadpoolctl")


def test_set_threads_reaches_blas_and_numba():
    before = thread_counts()
    try:
        set_threads(1)
        counts = thread_counts()
        assert counts["blas"] == 1
        numba = numba_env.numba_module()
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
from pyexecutorch.runtime import tiers
if not tiers.enabled(None):
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
import numpy as np
from threadpoolctl import threadpool_info
from pyexecutorch.runtime import tiers
from pyexecutorch.runtime.threads import set_threads, thread_counts
tiers.enabled(True)
set_threads(2)
from pyexecutorch.kernels.linalg.compiled import blas_matmul
print([i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"])
print(thread_counts()["blas"])
a = np.ones((1, 64, 64), np.float32)
blas_matmul(a, a, np.zeros((1, 1), np.float32), np.empty_like(a), False)
assert (a[0] @ a[0] == 64).all()
# a compiled product leaves numpy's OpenBLAS at one thread (numba's pool splits products)
print([i["num_threads"] for i in threadpool_info() if "openblas64_" in i["filepath"]])
"""


def test_the_blas_of_compiled_code_gets_the_thread_count_too():
    # numba's np.dot calls scipy's OpenBLAS, a library apart from numpy's that starts
    # with OPENBLAS_NUM_THREADS: a fresh process, where it is not loaded yet
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("numba")
    pytest.importorskip("scipy")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two cores")
    src = str(Path(__file__).resolve().parents[2] / "src")
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILED_BLAS_FOLLOWS],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": src, "OPENBLAS_NUM_THREADS": "1"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    libraries, least, after = proc.stdout.split("\n")[-4:-1]
    assert libraries == "[2, 2]" and least == "2" and after == "[1]", proc.stdout


_SPIN_SETTING = """
import os
from pyexecutorch.jit import numba_env
numba = numba_env.numba_module()
print(numba is not None, os.environ.get("GOMP_SPINCOUNT"))
"""


@pytest.mark.parametrize(("preset", "after"), [(None, "None"), ("77", "77")])
def test_openmp_spin_setting_is_scoped_to_numbas_start(preset, after):
    # numba's libgomp reads GOMP_SPINCOUNT as it loads; the process environment (what a
    # libgomp loaded later, or a child process, reads) is left as it was, a user's setting kept
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("numba")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    if preset is not None:
        env["GOMP_SPINCOUNT"] = preset
    proc = subprocess.run(
        [sys.executable, "-c", _SPIN_SETTING],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": src},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", after]


_TORCH_FIRST = """
import logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
if sys.argv[1] == "torch":
    import torch  # loads torch's libgomp before numba's threading layer starts
    torch.ones(64, 64) @ torch.ones(64, 64)
import numpy as np
from pyexecutorch.jit import numba_env
numba = numba_env.numba_module()
numba_env.set_threads(2)
from numba.np.ufunc.parallel import _get_thread_id

@numba.njit(parallel=True)
def owners(out):
    for i in numba.prange(out.size):
        out[i] = _get_thread_id()

out = np.full(2, -1, np.int64)
owners(out)
print(numba.threading_layer(), sorted(set(out.tolist())))
"""


@pytest.mark.parametrize(("first", "said"), [("nothing", False), ("torch", True)])
def test_numbas_threads_on_a_libgomp_loaded_before_them(first, said):
    # numba's OpenMP layer runs on a libgomp already loaded (torch's), whose spin setting
    # was read at torch's import: both threads still run, and the debug log says so
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("numba")
    if first == "torch":
        pytest.importorskip("torch")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two cores")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    proc = subprocess.run(
        [sys.executable, "-c", _TORCH_FIRST, first],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": src},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] == "omp [0, 1]", proc.stdout
    assert ("loaded before numba's threads" in proc.stderr) == said, proc.stderr[-2000:]


def test_loaded_openmp_runtime_reads_the_process_mappings(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 12 /usr/lib/x86_64-linux-gnu/libm.so.6\n"
        "7f02-7f03 rw-p 00000000 00:00 0 \n"
        "7f04-7f05 r-xp 00000000 08:01 13 /opt/my libs/torch/lib/libgomp-a34b3233.so.1\n"
    )
    found = numba_env.loaded_openmp_runtime(str(maps))
    assert found == "/opt/my libs/torch/lib/libgomp-a34b3233.so.1"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 12 /usr/lib/libm.so.6\n")
    assert numba_env.loaded_openmp_runtime(str(maps)) is None
    assert numba_env.loaded_openmp_runtime(str(tmp_path / "absent")) is None
