"""Many threads on one module and on separate ones; objects outliving each other in every order.

Expected results are the same program's results run on one thread, call by call
(the programs' numbers against torch are checked elsewhere).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from pyexecutorch import portable_lib as pl
from pyexecutorch.runtime import Runtime

from .harness import CORPUS, inputs_for

THREADS = 8
CALLS = 1000
STATELESS = ["official_mlp.pte", "official_xnnpack_mlp.pte", "ours_multi_method.pte"]
MIXED = [*STATELESS, "ours_mutable_buffer.pte", "official_dynamic_batch.pte"]


def _data(name: str) -> bytes:
    return (CORPUS / name).read_bytes()


def _inputs(name: str, method: str, k: int) -> list:
    """Thread ``k``'s inputs: the declared ones, scaled so that threads differ."""
    program = Runtime.get().load_program(_data(name))
    plan = next(p for p in program.pte_file.program.execution_plan if p.name == method)
    xs = inputs_for(plan, np.random.default_rng(k))
    return [x * (k + 1) if isinstance(x, np.ndarray) and x.dtype.kind == "f" else x for x in xs]


def _methods(name: str) -> list[str]:
    return sorted(Runtime.get().load_program(_data(name)).method_names)


def _run_threads(worker) -> list[str]:  # noqa: ANN001
    errors: list[str] = []
    start = threading.Barrier(THREADS)

    def body(k: int) -> None:
        start.wait()
        try:
            worker(k, errors)
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(f"thread {k}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "deadlock: threads still running after 120 s"
    return errors


def _same(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(got, want, strict=True)
    )


@pytest.mark.parametrize("name", STATELESS)
def test_one_module_many_threads(name):
    methods = _methods(name)
    module = pl._load_for_executorch_from_buffer(_data(name))
    work = {
        k: (methods[k % len(methods)], _inputs(name, methods[k % len(methods)], k))
        for k in range(THREADS)
    }
    want = {
        k: [np.asarray(o).copy() for o in module.run_method(m, xs)] for k, (m, xs) in work.items()
    }

    def worker(k: int, errors: list[str]) -> None:
        method, xs = work[k]
        for n in range(CALLS):
            if not _same(module.run_method(method, xs), want[k]):
                errors.append(f"thread {k} call {n}: wrong result")
                return

    assert _run_threads(worker) == []


def test_separate_modules_many_threads_mixed_programs():
    # Thread k runs its own module of program k mod 5 (portable, XNNPACK, several methods,
    # mutable state, dynamic shapes): its outputs, call by call, are a lone module's.
    names = [MIXED[k % len(MIXED)] for k in range(THREADS)]
    work = {}
    for k, name in enumerate(names):
        method = _methods(name)[k % len(_methods(name))]
        xs = _inputs(name, method, k)
        lone = Runtime.get().load_program(_data(name)).load_method(method)
        work[k] = (name, method, xs, [lone.execute(xs) for _ in range(CALLS)])

    def worker(k: int, errors: list[str]) -> None:
        name, method, xs, want = work[k]
        module = pl._load_for_executorch_from_buffer(_data(name))
        for n in range(CALLS):
            if not _same(module.run_method(method, xs), want[n]):
                errors.append(f"thread {k} ({name}) call {n}: wrong result")
                return

    assert _run_threads(worker) == []


def test_method_outlives_its_program():
    data = _data("official_xnnpack_mlp.pte")
    (x,) = _inputs("official_xnnpack_mlp.pte", "forward", 0)
    want = Runtime.get().load_program(data).load_method("forward").execute([x])
    method = Runtime.get().load_program(data).load_method("forward")
    pl_method = pl._load_program_from_buffer(bytearray(data)).load_method("forward")
    gc.collect()
    assert _same(method.execute([x]), want)
    assert _same(pl_method([x]), want)


def test_output_views_outlive_their_module():
    for name in ("official_mlp.pte", "official_xnnpack_mlp.pte"):
        (x,) = _inputs(name, "forward", 0)
        module = pl._load_for_executorch_from_buffer(_data(name))
        want = np.asarray(module.forward([x])[0]).copy()
        view = module.forward([x], clone_outputs=False)[0]
        method = Runtime.get().load_program(_data(name)).load_method("forward")
        raw = method.execute([x], clone_outputs=False)[0]
        del module, method
        gc.collect()
        np.testing.assert_array_equal(np.asarray(view), want)
        np.testing.assert_array_equal(raw, want)


_AFTER_FILE_CHANGES = """
import os, sys
import numpy as np
from pyexecutorch.runtime import Runtime
from pyexecutorch import portable_lib as pl
pte, ptd, change = sys.argv[1], sys.argv[2], sys.argv[3]
x = np.arange(12, dtype=np.float32).reshape(2, 6)
program = Runtime.get().load_program(pte, data_files=[ptd])
module = pl._load_for_executorch(pte, data_path=ptd)
before = program.load_method("forward").execute([x])[0].copy()
for path in (pte, ptd):
    if change == "truncate":
        os.truncate(path, 0)
    elif change == "delete":
        os.unlink(path)
    else:
        with open(path, "r+b") as f:
            f.write(b"\\xff" * os.path.getsize(path))
after = program.load_method("forward").execute([x])[0]
late = np.asarray(module.forward([x])[0])
print("same" if np.array_equal(before, after) and np.array_equal(before, late) else "differ")
"""


@pytest.mark.parametrize("change", ["truncate", "delete", "overwrite"])
def test_program_outlives_changes_to_its_files(tmp_path, change):
    # In a subprocess: a program reading a truncated memory-mapped file dies of SIGBUS.
    pte, ptd = tmp_path / "p.pte", tmp_path / "p.ptd"
    pte.write_bytes(_data("official_external.pte"))
    ptd.write_bytes((CORPUS / "official_external.0.ptd").read_bytes())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_AFTER_FILE_CHANGES), str(pte), str(ptd), change],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "same"
