"""Calls by symbol (pyexecutorch.jit.symbol_calls): a caller's machine code calls its
callee's own, published under a name, instead of a linked copy optimised again.

A caller compiled in a first process (numba's cache, ``cache=True``) is read back by a
second one that compiles nothing: reading it publishes its callee's name from the
callee's record first. A callee record removed (or unreadable) is written again from
numba's cache, or without that compiled again, by the binding. Results are checked against numpy over several calls with changing inputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

SRC = str(Path(__file__).resolve().parents[2] / "src")

# A module of kernels: ``scaled_sum`` calls ``axpy`` by symbol; both cached in numba's
# disk cache.
KERNELS = """
import numpy as np
from numba import njit
from pyexecutorch.jit import symbol_calls


@njit(cache=True, error_model="numpy")
def axpy(a, x, y, out):
    for i in range(out.size):
        out[i] = a * x[i] + y[i]
    return out.size


AXPY = symbol_calls.by_symbol(symbol_calls.callee_of(axpy))


@njit(cache=True, error_model="numpy")
def scaled_sum(a, x, y, out):
    n = AXPY(a, x, y, out)
    total = 0.0
    for i in range(n):
        total += out[i]
    return total

"""

# Runs scaled_sum on three inputs of changing sizes and values; reports the results, the
# compilations numba made in the process, and the lines of the caller's LLVM module that
# declare and call a published symbol, when the caller compiled.
CHILD = """
import json, sys
import numpy as np
from pyexecutorch.jit import numba_env
numba_env.numba_module()
sys.path.insert(0, sys.argv[1])
from numba.core import event
compiled = []
class Count(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__name__)
    def on_end(self, ev):
        pass
event.register("numba:compile", Count())
import kernels
results = []
for n in (5, 17, 3):
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    out = np.zeros(n)
    results.append([kernels.scaled_sum(2.5, x, y, out), out.tolist(), x.tolist(), y.tolist()])
(overload,) = kernels.scaled_sum.overloads.values()
ir = overload.library.get_llvm_str() if "scaled_sum" in compiled else ""
print(json.dumps({
    "results": results,
    "compiled": compiled,
    "declared": [l for l in ir.splitlines() if l.startswith("declare") and "_pyexecutorch_symbol_" in l],
    "called": [l for l in ir.splitlines() if " call " in l and "_pyexecutorch_symbol_" in l],
}))
"""


def _run(folder: Path, cache: Path) -> dict:
    env = {**os.environ, "PYEXECUTORCH_CACHE_DIR": str(cache), "PYTHONPATH": SRC}
    env.pop("NUMBA_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check(report: dict) -> None:
    for total, out, x, y in report["results"]:
        expected = 2.5 * np.array(x) + np.array(y)
        np.testing.assert_allclose(out, expected, rtol=1e-15)
        assert total == pytest.approx(float(np.sum(expected)), rel=1e-12)


def test_a_caller_calls_its_callee_by_symbol_and_is_read_back_without_compiling(tmp_path):
    folder = tmp_path / "kernels_src"
    folder.mkdir()
    (folder / "kernels.py").write_text(KERNELS)
    cache = tmp_path / "cache"

    first = _run(folder, cache)
    _check(first)
    assert sorted(first["compiled"]) == ["axpy", "scaled_sum"]
    # the caller declares the callee's published name and calls it (a linked callee
    # would be defined in the caller's module instead)
    assert len(first["declared"]) == 1
    assert len(first["called"]) == 1
    records = sorted((cache / "functions").glob("*axpy*.symbol.nbr"))
    assert len(records) == 1

    second = _run(folder, cache)
    _check(second)
    assert second["compiled"] == []  # the caller from numba's cache, the callee's record

    # the callee's record gone, or unreadable: its binding reads numba's cache and writes
    # the record again; without numba's cache either, it compiles the callee
    record = records[0]
    numba_files = list((cache / "numba").glob("**/kernels.axpy-*"))
    assert numba_files
    for spoil in (Path.unlink, lambda path: path.write_bytes(b"not a record")):
        spoil(record)
        again = _run(folder, cache)
        _check(again)
        assert again["compiled"] == []
        assert record.exists() and record.read_bytes() != b"not a record"
        spoil(record)
        for path in numba_files:
            path.unlink()
        again = _run(folder, cache)
        _check(again)
        assert again["compiled"] == ["axpy"]
        assert record.exists() and record.read_bytes() != b"not a record"
    assert _run(folder, cache)["compiled"] == []
