"""Processes that start cold together compile a function once (``jit.compile_lock``).

Two processes with one empty cache directory ask for the same function's entry point
at the same moment: one compiles it, the other waits for the lock and reads what the
first wrote. A holder that dies releases the lock; a waiter gives up after its limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

from pyexecutorch.jit import compile_lock  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")

# A function with a disk cache (numba caches functions defined in files), slow enough
# to compile (~1 s) that two processes started together overlap.
KERNEL = """
import numba, numpy as np

@numba.njit(cache=True, error_model="numpy")
def spread(x, out):
    for i in range(x.shape[0]):
        acc = 0.0
        for j in range(x.shape[0]):
            d = x[i] - x[j]
            acc += np.exp(-d * d) * np.cos(d) + np.sin(d) / (1.0 + np.abs(d))
        out[i] = acc
    return out
"""

# Waits until both children are ready (numba imported), then asks for the entry point.
CHILD = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from pyexecutorch.jit import entry_points, numba_env
numba_env.numba_module()
import spreading
open(sys.argv[2] + "." + str(os.getpid()), "w").close()
while len([n for n in os.listdir(os.path.dirname(sys.argv[2])) if n.startswith("ready.")]) < 2:
    time.sleep(0.01)
x = np.linspace(-2, 2, 64)
fn = entry_points.entry_point(spreading.spread, (x, np.empty_like(x)))
out = np.empty_like(x)
fn(x, out)
print(json.dumps({"compiled": numba_env.compile_totals["functions"], "sum": float(out.sum())}))
"""


def test_two_cold_processes_compile_a_function_once(tmp_path: Path) -> None:
    (tmp_path / "mod").mkdir()
    (tmp_path / "mod" / "spreading.py").write_text(KERNEL)
    env = {
        **os.environ,
        "PYTHONPATH": SRC,
        "PYEXECUTORCH_CACHE_DIR": str(tmp_path / "cache"),
        "NUMBA_CACHE_DIR": str(tmp_path / "cache" / "numba"),
        "PYEXECUTORCH_JIT": "1",
    }
    args = [sys.executable, "-c", CHILD, str(tmp_path / "mod"), str(tmp_path / "ready")]
    children = [
        subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    results = [json.loads(c.communicate(timeout=300)[0]) for c in children]
    assert all(c.returncode == 0 for c in children)
    assert sorted(r["compiled"] for r in results) == [0, 1]
    assert results[0]["sum"] == results[1]["sum"]


def test_a_dead_holder_releases_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYEXECUTORCH_CACHE_DIR", str(tmp_path))
    os.makedirs(tmp_path / "locks")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(600)\n",
            compile_lock.lock_path("f(int64)"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    start = time.monotonic()
    with compile_lock.compiling_alone("f(int64)") as waited:
        assert not waited
    assert time.monotonic() - start < 5


def test_a_waiter_gives_up_after_its_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYEXECUTORCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compile_lock, "WAIT_SECONDS", 0.3)
    with compile_lock.compiling_alone("g(float32)") as first:
        assert not first
        start = time.monotonic()
        # (a second descriptor of the same file: flock treats it as another holder)
        with compile_lock.compiling_alone("g(float32)") as second:
            assert second
        assert 0.3 <= time.monotonic() - start < 3
