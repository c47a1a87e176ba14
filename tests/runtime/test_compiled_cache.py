"""The compiled tier's disk cache and thread setting.

A first process compiles a program's fused loop into ``$PYEXECUTORCH_CACHE_DIR``
(the generated source, named by its hash, and numba's machine code beside it);
a second process with the same directory loads that machine code instead of
compiling, and reads back neither the bitcode of that machine code (until a new
caller links it) nor, for a method compiled whole, its kernels' compiled forms;
a second load in one process reads nothing. ``threads=`` and
``_unsafe_reset_threadpool`` set numba's threads together with BLAS's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from pyexecutorch.exir import to_edge

numba = pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

SRC = str(Path(__file__).resolve().parents[2] / "src")

# Loads the program with the compiled tier and reports, for its fused loops, how
# many signatures numba compiled and how many it read from the cache.
CHILD = """
import json, sys
import numpy as np
from pyexecutorch.runtime import Runtime
from pyexecutorch.jit import entry_points, numba_env
if len(sys.argv) > 2:  # stands for another numpy build (its bundled BLAS among it)
    numba_env.numpy_build = lambda: sys.argv[2]
method = Runtime.get().load_program(sys.argv[1], jit=True).load_method("forward")
(out,) = method.execute([np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)])
stats = [  # each compiled function defined (not imported) by a generated module
    f.stats
    for name, m in list(sys.modules.items())
    if name.startswith("pyexecutorch_generated_")
    for f in vars(m).values()
    if getattr(getattr(f, "py_func", None), "__module__", None) == name
]
forms = [  # the kernels' compiled forms: serial and parallel variants of each loop
    d
    for name, m in list(sys.modules.items())
    if name.startswith("pyexecutorch.kernels.") and name.endswith(".compiled")
    for pair in vars(m).values()
    if isinstance(pair, tuple)
    for d in pair
    if hasattr(d, "stats")
]
print(json.dumps({
    "modules": sorted(  # generated modules whose code ran (not an environment's placeholder)
        name.split("_")[2] for name, m in list(sys.modules.items())
        if name.startswith("pyexecutorch_generated_") and hasattr(m, "__spec__")
        and m.__spec__ is not None
    ),
    "form_loads": sum(sum(d.stats.cache_hits.values()) + sum(d.stats.cache_misses.values())
                      for d in forms),
    "fused": len(method.plan.fused_runs),
    "whole": method.plan.whole_source is not None,
    # (a whole-method function has no dispatcher: entry_points.plain_stats counts it)
    "hits": sum(sum(s.cache_hits.values()) for s in stats) + entry_points.plain_stats["cache_hits"],
    "misses": sum(sum(s.cache_misses.values()) for s in stats)
    + entry_points.plain_stats["compilations"],
    "out": np.asarray(out).tolist(),
}))
"""


class Activations(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.hardswish(x * 0.75 - 0.25)


def _child_env(cache: Path) -> dict[str, str]:
    """The environment of a child process on the compiled tier with its cache at ``cache``."""
    return {
        # NUMBA_CACHE_DIR as this process may have set it would point the child elsewhere.
        **{k: v for k, v in __import__("os").environ.items() if k != "NUMBA_CACHE_DIR"},
        "PYTHONPATH": SRC,
        "PYEXECUTORCH_CACHE_DIR": str(cache),
        "PYEXECUTORCH_JIT": "1",
    }


def _child(pte: Path, cache: Path, numpy_build: str | None = None) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(pte), *([numpy_build] if numpy_build else [])],
        capture_output=True,
        text=True,
        env=_child_env(cache),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_second_process_reads_the_compiled_loop_from_the_cache(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = torch.randn(4, 6)
        pte = tmp_path / "act.pte"
        pte.write_bytes(to_edge(torch.export.export(Activations(), (x,))).to_executorch().buffer)
    cache = tmp_path / "cache"
    cold = _child(pte, cache)
    assert cold["fused"] == 1 and cold["misses"] >= 1 and cold["hits"] == 0
    sources = list((cache / "generated").glob("fused_*.py"))
    assert len(sources) == 1
    assert list((cache / "numba").rglob(f"{sources[0].stem}*.nbi"))
    warm = _child(pte, cache)
    assert warm["misses"] == 0 and warm["hits"] >= 1
    assert warm["out"] == cold["out"]
    want = Activations()(torch.linspace(-3, 3, 24).reshape(4, 6))
    torch.testing.assert_close(torch.tensor(warm["out"]), want, rtol=1e-6, atol=1e-6)


class WholeMethod(torch.nn.Module):
    """Two fused loops around a reshape copy: compiled as one whole-method function."""

    def forward(self, x):
        h = torch.nn.functional.hardswish(x * 0.75 - 0.25)
        return torch.relu(h.reshape(6, 4)) * 2.0


def _whole_method_pte(folder: Path) -> Path:
    """WholeMethod exported by our exporter, written to ``folder``/whole.pte."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = to_edge(torch.export.export(WholeMethod(), (torch.randn(4, 6),)))
    pte = folder / "whole.pte"
    pte.write_bytes(program.to_executorch().buffer)
    return pte


def test_second_process_reads_the_whole_method_function_from_the_cache(tmp_path):
    pte = _whole_method_pte(tmp_path)
    cache = tmp_path / "cache"
    cold = _child(pte, cache)
    assert cold["whole"] and cold["misses"] >= 1
    assert len(list((cache / "generated").glob("whole_*.py"))) == 1
    assert cold["modules"].count("fused") == 2 and "whole" in cold["modules"]
    # the whole function's machine code is kept in a record of its own, not numba's index
    assert len(list((cache / "functions").glob("whole_*.nbr"))) == 1
    assert not list((cache / "numba").rglob("whole_*"))
    warm = _child(pte, cache)
    # only the function calling the loops and the copy is read back (its machine code holds
    # theirs), from its record: no generated module is imported for a method compiled whole,
    # not even its own
    assert warm["whole"] and warm["misses"] == 0 and warm["hits"] == 1
    assert warm["modules"] == []
    assert warm["out"] == cold["out"]
    want = WholeMethod()(torch.linspace(-3, 3, 24).reshape(4, 6))
    torch.testing.assert_close(torch.tensor(warm["out"]), want, rtol=1e-6, atol=1e-6)
    # Under another numpy build (another BLAS) nothing of this cache is read: it compiles.
    other = _child(pte, cache, numpy_build="another-numpy")
    assert other["whole"] and other["hits"] == 0 and other["misses"] >= 1
    assert other["out"] == cold["out"]
    assert len(list((cache / "generated").glob("whole_*.py"))) == 2
    assert len(list((cache / "numba").glob("numpy-*"))) == 2


def test_the_build_key_follows_the_compiled_kernels_sources(tmp_path):
    import os  # noqa: PLC0415

    from pyexecutorch.jit import generated  # noqa: PLC0415

    kernels = tmp_path / "kernels"
    (kernels / "conv").mkdir(parents=True)
    form = kernels / "conv" / "compiled.py"
    form.write_text("X = 1\n")
    (kernels / "compiled_math.py").write_text("Y = 2\n")
    (kernels / "conv" / "fast.py").write_text("Z = 3\n")
    first = generated.sources_key(kernels)
    assert generated.sources_key(kernels) == first
    (kernels / "conv" / "fast.py").write_text("Z = 4\n")  # not compiled code: no change
    assert generated.sources_key(kernels) == first
    form.write_text("X = 2\n")  # same size, a later modification time
    stamp = form.stat()
    os.utime(form, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 10**9))
    assert generated.sources_key(kernels) != first
    # and the real key reads the kernels' compiled forms and the jit helpers they inline
    import pyexecutorch.jit as jit  # noqa: PLC0415
    import pyexecutorch.kernels as kernel_package  # noqa: PLC0415

    stamped = generated.stamped_sources()
    assert (Path(kernel_package.__path__[0]), "**/compiled*.py") in stamped
    assert (Path(jit.__path__[0]), "*.py") in stamped
    helpers = generated.sources_key(Path(jit.__path__[0]), "*.py")
    assert all(f"{name}.py:" in helpers for name in ("simd", "blas", "math_functions", "half"))
    assert generated.build_key() == generated.build_key()


def _generated_stats() -> tuple[int, int, int]:
    """(generated modules imported, numba cache hits, compilations) over this process's
    generated functions."""
    functions = [
        f
        for name, m in list(sys.modules.items())
        if name.startswith("pyexecutorch_generated_")
        for f in vars(m).values()
        if getattr(getattr(f, "py_func", None), "__module__", None) == name
    ]
    from pyexecutorch.jit.entry_points import plain_stats  # noqa: PLC0415 - whole functions

    hits = sum(sum(f.stats.cache_hits.values()) for f in functions) + plain_stats["cache_hits"]
    misses = sum(sum(f.stats.cache_misses.values()) for f in functions)
    return len(functions), hits, misses + plain_stats["compilations"]


def test_a_second_load_in_process_reuses_the_compiled_code(tmp_path, monkeypatch):
    import numpy as np  # noqa: PLC0415

    from pyexecutorch.runtime import Runtime  # noqa: PLC0415

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = to_edge(torch.export.export(WholeMethod(), (torch.randn(4, 6),)))
        buf = program.to_executorch().buffer
    monkeypatch.setenv("PYEXECUTORCH_CACHE_DIR", str(tmp_path))
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    first = Runtime.get().load_program(buf, jit=True).load_method("forward")
    assert first.plan.whole_source is not None
    before = _generated_stats()
    second = Runtime.get().load_program(buf, jit=True).load_method("forward")
    # no module imported again, nothing read from the disk cache or compiled
    assert _generated_stats() == before
    assert second.plan.whole_source == first.plan.whole_source
    (a,) = first.execute([x])
    (b,) = second.execute([x])
    want = WholeMethod()(torch.from_numpy(x))
    torch.testing.assert_close(torch.from_numpy(np.asarray(b)), want, rtol=1e-6, atol=1e-6)
    assert np.array_equal(np.asarray(a), np.asarray(b))


class SmallProduct(torch.nn.Module):
    """A product small enough for the compiled mm form, then elementwise work (or not)."""

    def __init__(self, reduce: bool = False) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(-1, 1, 24).reshape(6, 4))
        self.reduce = reduce

    def forward(self, x):
        y = torch.relu(x @ self.w) * 2.0
        # atan has no compiled step: the method keeps one line per instruction
        return torch.atan(y) if self.reduce else y


def _closure_cells(functions) -> list:
    """Everything held in the closure cells of ``functions`` and the functions they hold."""
    import types  # noqa: PLC0415

    held, stack, seen = [], [f for f in functions if isinstance(f, types.FunctionType)], set()
    while stack:
        f = stack.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        for cell in f.__closure__ or ():
            held.append(cell.cell_contents)
            if isinstance(cell.cell_contents, types.FunctionType):
                stack.append(cell.cell_contents)
    return held


def test_kept_compiled_forms_call_their_compiled_function_directly(tmp_path):
    import numpy as np  # noqa: PLC0415

    from pyexecutorch.jit.deferral import PendingEntryPoint  # noqa: PLC0415
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415

    model = SmallProduct(reduce=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        buf = to_edge(torch.export.export(model, (torch.randn(4, 6),))).to_executorch().buffer
    method = Runtime.get().load_program(buf, jit=True).load_method("forward")
    assert method.plan.whole_source is None
    bound = method._loaded.chains[0].run.__globals__.values()
    held = _closure_cells(bound)
    # the mm form's function was loaded at load time and put in place of its placeholder
    assert not any(isinstance(h, PendingEntryPoint) for h in held)
    from pyexecutorch.kernels.linalg.compiled import MATMUL  # noqa: PLC0415

    loaded = {id(o.entry_point) for variant in MATMUL for o in variant.overloads.values()}
    assert any(id(h) in loaded for h in held)
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    (out,) = method.execute([x])
    want = model(torch.from_numpy(x)).detach()
    torch.testing.assert_close(torch.from_numpy(np.asarray(out)), want, rtol=1e-6, atol=1e-6)


def test_a_method_compiled_whole_reads_no_compiled_form_back(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pte = tmp_path / "product.pte"
        program = to_edge(torch.export.export(SmallProduct(), (torch.randn(4, 6),)))
        pte.write_bytes(program.to_executorch().buffer)
    cache = tmp_path / "cache"
    cold = _child(pte, cache)
    assert cold["whole"] and cold["form_loads"] >= 1  # the product's loop, compiled into it
    warm = _child(pte, cache)
    # the whole function's machine code holds the product's loop: the form's own is not read
    assert warm["whole"] and warm["misses"] == 0 and warm["hits"] == 1
    assert warm["form_loads"] == 0
    assert warm["out"] == cold["out"]
    want = SmallProduct()(torch.linspace(-3, 3, 24).reshape(4, 6)).detach()
    torch.testing.assert_close(torch.tensor(warm["out"]), want, rtol=1e-6, atol=1e-6)


# Reads a generated loop back from the cache (its machine code alone, see
# disk_cache.read_lazily), then compiles a new function calling it: numba then
# links the loop's bitcode into the caller, which the lazy reader parses on demand.
LINKING_CHILD = """
import json, sys
import numpy as np
from pyexecutorch.jit import entry_points, generated
from pyexecutorch.runtime import tiers
tiers.enabled(True)
loop = generated.generated_module('''
from numba import njit


@njit(cache=True)
def scale(x, out):
    for i in range(x.size):
        out[i] = x[i] * 3.0 - 1.0
''', "test_loop")
x, out = np.linspace(-2, 2, 9), np.empty(9)
entry_points.entry_point(loop.scale, (x, out))(x, out)
caller = generated.generated_module(f'''
from numba import njit
from {loop.__name__} import scale


@njit(cache=True)
def twice(x, out):
    scale(x, out)
    scale(out, out)
    return out[0] + {sys.argv[1]}
''', "test_caller")
first = float(caller.twice(x, out))
print(json.dumps({
    "loop_hits": sum(loop.scale.stats.cache_hits.values()),
    "caller_misses": sum(caller.twice.stats.cache_misses.values()),
    "first": first,
    "out": out.tolist(),
}))
"""


def _linking_child(cache: Path, constant: str) -> dict:
    env = {k: v for k, v in __import__("os").environ.items() if k != "NUMBA_CACHE_DIR"}
    proc = subprocess.run(
        [sys.executable, "-c", LINKING_CHILD, constant],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": SRC, "PYEXECUTORCH_CACHE_DIR": str(cache)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_loop_read_from_the_cache_links_into_a_new_caller(tmp_path):
    cold = _linking_child(tmp_path, "0.5")
    assert cold["loop_hits"] == 0
    # a caller source of its own (another constant): it compiles, linking the cached loop
    warm = _linking_child(tmp_path, "0.25")
    assert warm["loop_hits"] == 1 and warm["caller_misses"] == 1
    x = [-2 + 0.5 * i for i in range(9)]
    want = [(v * 3.0 - 1.0) * 3.0 - 1.0 for v in x]
    assert warm["out"] == cold["out"] == want
    assert warm["first"] == want[0] + 0.25 and cold["first"] == want[0] + 0.5


def test_threads_option_and_reset_set_numba_threads():
    from pyexecutorch import portable_lib  # noqa: PLC0415
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415

    buf = to_edge(torch.export.export(Activations(), (torch.randn(2, 3),))).to_executorch().buffer
    before = numba.get_num_threads()
    try:
        Runtime.get().load_program(buf, jit=True, threads=1)
        assert numba.get_num_threads() == 1
        assert portable_lib._threadpool_get_thread_count() == 1
        portable_lib._unsafe_reset_threadpool(numba.config.NUMBA_NUM_THREADS)
        assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS
        with pytest.raises(ValueError, match="num_threads must be at least 1, got 0"):
            Runtime.get().load_program(buf, threads=0)
    finally:
        portable_lib._unsafe_reset_threadpool(before)


def _cli_run(pte: Path, cache: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "pyexecutorch", "run", str(pte)],
        capture_output=True,
        text=True,
        env=_child_env(cache),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_the_cli_announces_compilation_and_a_warm_load_is_silent(tmp_path):
    pte = _whole_method_pte(tmp_path)
    cache = tmp_path / "cache"
    cold = _cli_run(pte, cache).stderr.splitlines()
    # announced before the long step, then summed up once the load is done
    whole = [
        i for i, ln in enumerate(cold) if ln.startswith("pyexecutorch: compiling a method whole")
    ]
    done = [
        i for i, ln in enumerate(cold) if ln.startswith("pyexecutorch: method 'forward': compiled")
    ]
    assert len(whole) == 1 and len(done) == 1 and whole[0] < done[0], cold
    assert f"later loads read it from {cache}" in cold[whole[0]]
    assert f"cached in {cache}" in cold[done[0]]
    warm = _cli_run(pte, cache)
    assert "compil" not in warm.stderr, warm.stderr
    assert "output 0: float32" in warm.stdout


def test_a_load_that_compiles_logs_what_it_compiled(tmp_path, monkeypatch, caplog):
    from pyexecutorch.jit import numba_env  # noqa: PLC0415
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415

    monkeypatch.setenv(numba_env.CACHE_ENV, str(tmp_path / "cache"))

    class Fresh(torch.nn.Module):  # a constant no other test uses: its loop is new here
        def forward(self, x):
            return torch.sigmoid(x * 0.123456 + 0.654321)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pte = to_edge(torch.export.export(Fresh(), (torch.randn(3, 5),))).to_executorch().buffer
    with caplog.at_level("DEBUG", logger="pyexecutorch.compiled"):
        Runtime.get().load_program(pte, jit=True).load_method("forward")
    compiled_lines = [r.getMessage() for r in caplog.records if r.levelname == "DEBUG"]
    assert any(m.startswith("compiled ") and " in " in m for m in compiled_lines), compiled_lines
    (summary,) = [
        r.getMessage()
        for r in caplog.records
        if r.levelname == "INFO" and "function(s)" in r.getMessage()
    ]
    assert summary.startswith("method 'forward': compiled ")
    caplog.clear()
    with caplog.at_level("DEBUG", logger="pyexecutorch.compiled"):  # in memory now: silent
        Runtime.get().load_program(pte, jit=True).load_method("forward")
    assert not caplog.records
