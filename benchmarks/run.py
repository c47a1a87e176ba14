"""The benchmark suite: latency and export time of pyexecutorch against the official
ExecuTorch and torch eager, in one process.

For every model (the compiler suite of tests/models.py, the large models of
benchmarks/models_large.py: a MobileNet-like CNN at 224x224, a 6-layer GPT at width
256, the same GPT decoding with a KV cache; and the real architectures of
tests/architectures.py: ResNet-18, MobileNetV2/V3, EfficientNet, SqueezeNet,
ShuffleNetV2, ConvNeXt, ViT, GPT-2, Llama, BERT), at each thread count asked for:

- export time, from the nn.Module to .pte bytes (torch.export included), of our
  exporter (pyexecutorch.exir) and of the official one (portable kernels, fresh),
- latency (median of repeated calls) of torch eager, the official runtime on the
  official portable .pte and on the official XNNPACK .pte (where it lowers), our
  runtime on our .pte, on the official portable .pte and on the official XNNPACK
  .pte (where our runtime has that backend); a model's columns are timed in turns,
  so that a busy stretch of a shared machine does not fall on one of them,
- whether our runtime on our .pte computes what eager does,
- our runtime's compiled tier (numba: fused elementwise loops, compiled kernels) on
  our .pte: its latency, and its load_method time with a cold disk cache (compiling)
  and a warm one (loading compiled code), against the numpy tier's load_method (the
  warm and numpy-tier loads as a fresh process sees them: min of 3, each in a child
  forked from a warmed-up helper process, benchmarks/load_timer.py).

Ratios are against the official portable and XNNPACK numbers of the same run and thread
count. Every runtime is set to the same thread count (torch, numpy's BLAS, numba, the
official XNNPACK thread pool), and the counts each really uses are read back and recorded.
Writes benchmarks/results.json (one run per thread count, both tiers) and
benchmarks/results.png and prints a table per thread count.

    python benchmarks/run.py            # the whole suite (< 15 minutes on 2 cores)
    python benchmarks/run.py --quick    # a few representative models (~2 minutes)
    python benchmarks/run.py --models mlp,gpt6_kv --budget 1.0
    python benchmarks/run.py --tags conv --threads 1,2   # conv models at 1 and 2 threads
    python benchmarks/run.py --from-json benchmarks/results.json --markdown  # README table
    python benchmarks/run.py --full-size    # torchvision's CNNs at 224x224, 1 and 2 threads
                                            # (benchmarks/bench_full_size.py; its options follow)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path

import common  # noqa: F401 - sets up sys.path (tests/, benchmarks/)
import numpy as np
import torch
from bench_runtime import _numpy_inputs, _our_method, bench_overhead
from common import fmt_us, ratio, samples, statistics_of

from pyexecutorch.jit import entry_points, numba_env
from pyexecutorch.runtime.threads import set_threads, thread_counts
from tests import models, official

HERE = Path(__file__).resolve().parent
# The most one check or one measurement of one runtime may take (a step past it is
# reported as an error, so that a program that never finishes cannot stop the run).
STEP_LIMIT_S = 30
MEASURE_LIMIT_S = 60
# A cold load compiles the whole method (a minute for a whole transformer on this VM); the
# limit only guards against a load that never ends.
COMPILE_LIMIT_S = 600
# A call slower than this is measured over 1 + 3 calls instead of the time budget.
SLOW_CALL_S = 0.5
# Latency columns are timed in this many turns each (see Columns).
ROUNDS = 4
# With more than one thread, a pause before each column's turn: a runtime's thread pool
# spins on after its last call (OpenBLAS's after the numpy tier, about 0.1 s; torch's
# OpenMP; XNNPACK's), and on two cores the spinning threads take them from the next
# column's threads (mobilenet_like's compiled tier measured 2x slower right after the
# numpy tier's turn than alone).
POOL_QUIET_S = 0.3
QUICK = [
    "mlp",
    "small_cnn",
    "gpt_block_sdpa",
    "kv_cache",
    "transformer_encoder",
    "mobilenet_like",
    "gpt6_kv",
]

# Latency columns: key, table header, chart label.
LATENCY = [
    ("eager", "eager", "torch eager"),
    ("official_portable", "portable", "official portable"),
    ("official_xnnpack", "xnnpack", "official XNNPACK"),
    ("ours_on_ours", "ours", "ours on our .pte"),
    ("ours_jit", "jit", "ours, compiled tier, on our .pte"),
    ("ours_on_official", "ours/off", "ours on official .pte"),
    ("ours_on_official_xnnpack", "ours/xnn", "ours on official XNNPACK .pte"),
    ("ours_jit_on_official_xnnpack", "jit/xnn", "ours, compiled tier, on official XNNPACK .pte"),
]


class Timeout(Exception):
    """A step ran past its time limit (a program that loops forever must not stop the run)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`Timeout` in the main thread after ``seconds`` (SIGALRM; Unix)."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        raise Timeout(f"took more than {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Columns:
    """The latency columns of one row: each is checked and warmed up when added, then all
    are timed together in ``ROUNDS`` turns of ``budget / ROUNDS`` seconds each, so that a
    busy stretch of a shared machine falls on every column instead of on the one being
    timed. A call slower than ``SLOW_CALL_S`` (the official portable runtime on the large
    models takes seconds) is timed over three calls instead of the budget."""

    def __init__(self, row: dict, budget: float, threaded: bool = False) -> None:
        self._row, self._budget, self._threaded = row, budget, threaded
        self._pending: dict[str, object] = {}

    def add(self, key: str, fn) -> None:
        try:
            with time_limit(MEASURE_LIMIT_S):
                _, first = _timed(fn)
                if first > SLOW_CALL_S:
                    self._record(key, samples(fn, budget_s=0.0, min_runs=3))
                    return
                fn(), fn()
        except Exception as e:  # noqa: BLE001 - one failing column does not stop the row
            self._row["errors"][key] = _error(e)
            return
        self._pending[key] = fn

    def time(self) -> None:
        times: dict[str, list[float]] = {key: [] for key in self._pending}
        for _ in range(ROUNDS):
            for key, fn in list(self._pending.items()):
                if self._threaded:
                    time.sleep(POOL_QUIET_S)
                try:
                    with time_limit(MEASURE_LIMIT_S):
                        fn()  # the other columns ran meanwhile: caches are cold
                        times[key] += samples(fn, budget_s=self._budget / ROUNDS, min_runs=2)
                except Exception as e:  # noqa: BLE001
                    self._row["errors"][key] = _error(e)
                    del self._pending[key], times[key]
        for key, seconds in times.items():
            self._record(key, seconds)
        self._pending.clear()

    def _record(self, key: str, seconds: list[float]) -> None:
        stats = statistics_of(seconds)
        self._row[key] = stats["median"]
        self._row["stats"][key] = stats


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"


def export_ours(case) -> bytes:
    from pyexecutorch.exir import to_edge  # noqa: PLC0415

    return (
        to_edge(models.export(case), constant_methods=case.constant_methods or None)
        .to_executorch()
        .buffer
    )


def export_official(case) -> bytes:
    return official.export_programs(models.export(case), case.constant_methods)


def warm_up() -> None:
    """Export one small model with both exporters first, so that one-time costs
    (imports, first compilations) are not counted in the first model's export time."""
    case = models.get_case("mlp")
    for fn in (export_ours, export_official):
        try:
            fn(case)
        except Exception:  # noqa: BLE001 - the timed run reports failures
            pass
    if numba_env.numba_module() is not None:
        # numba's one-time start-up (its typing and code-generation tables)
        _our_method(export_ours(case), jit=True)


def check_ours(case, pte: bytes, jit: bool = False, or_official: bool = False) -> str:
    """``"ok"`` when our runtime on ``pte`` matches eager over the case's calls. With
    ``or_official``, ``"ok, as official"`` where it matches the official runtime on the same
    ``pte`` instead: an official program computes what the official lowering made of the
    model (its XNNPACK partitioner lowers a tanh-approximated GELU as XNNPACK's exact one)."""
    calls = case.call_sequence()

    def compare(expected: list) -> str:
        method = _our_method(pte, jit=jit)
        for k, (inputs, exp) in enumerate(zip(calls, expected, strict=True)):
            got = method.execute(_numpy_inputs(inputs))
            try:
                official.assert_close(case, got, exp, what=f"call {k}")
            except AssertionError as e:
                return "mismatch: " + str(e).strip().splitlines()[0][:200]
        return "ok"

    verdict = compare(official.eager_call_outputs(case))
    if verdict != "ok" and or_official:
        runner = official.official_runner(pte)
        if compare([runner.run(inputs) for inputs in calls]) == "ok":
            return "ok, as official"
    return verdict


class _WarmUp(torch.nn.Module):
    """What the load timer loads before timing any model (no suite model: the loads it
    times must not find one's generated loops already imported)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 5)

    def forward(self, x):
        return torch.sigmoid(self.linear(x) * 3.0 + 1.0).sum(-1)


class LoadTimer:
    """Times load_method in fresh-process state: the helper benchmarks/load_timer.py, one
    process a run, forks a child for each sample (see that file). min of ``SAMPLES``."""

    SAMPLES = 3

    def __init__(self, threads: int) -> None:
        import subprocess  # noqa: PLC0415
        import tempfile  # noqa: PLC0415

        import pyexecutorch  # noqa: PLC0415

        self._folder = tempfile.TemporaryDirectory()
        warm = Path(self._folder.name) / "warm_up.pte"
        program = torch.export.export(_WarmUp(), (torch.randn(2, 6),))
        from pyexecutorch.exir import to_edge  # noqa: PLC0415

        warm.write_bytes(to_edge(program).to_executorch().buffer)
        src = str(Path(pyexecutorch.__file__).resolve().parents[1])
        path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
        self._process = subprocess.Popen(
            [sys.executable, str(HERE / "load_timer.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": path},
        )
        self._ask({"warm_up": str(warm), "threads": threads})

    def _ask(self, request: dict) -> dict:
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("the load timer process ended")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"load timer: {answer['error']}")
        return answer

    def best(self, pte: bytes, jit: bool, cache: str | None = None) -> float:
        path = Path(self._folder.name) / "model.pte"
        path.write_bytes(pte)
        request = {"pte": str(path), "jit": jit, "samples": self.SAMPLES, "cache": cache}
        return min(self._ask(request)["seconds"])

    def close(self) -> None:
        self._process.stdin.close()
        self._process.wait(timeout=30)
        self._folder.cleanup()


def _load_times(pte: bytes, timer: LoadTimer) -> dict[str, float]:
    """load_method seconds: numpy tier, compiled tier with a cold cache, then warm from disk.

    The cold load, in this process, uses an empty cache directory of its own (this
    model's generated loops compile); the numpy-tier and warm loads are timed by
    ``timer`` as a fresh process would see them, the warm one reading that directory's
    generated modules and machine code back (numba's one-time start-up is not counted).
    """
    import tempfile  # noqa: PLC0415

    out = {"load_numpy_s": timer.best(pte, jit=False)}
    previous = os.environ.get(numba_env.CACHE_ENV)
    with tempfile.TemporaryDirectory() as cache:
        os.environ[numba_env.CACHE_ENV] = cache
        try:
            entry_points.forget_modules()
            start = time.perf_counter()
            _our_method(pte, jit=True)
            out["load_jit_cold_s"] = time.perf_counter() - start
        finally:
            if previous is None:
                os.environ.pop(numba_env.CACHE_ENV, None)
            else:
                os.environ[numba_env.CACHE_ENV] = previous
        out["load_jit_warm_s"] = timer.best(pte, jit=True, cache=cache)
    return out


_EXPORTS: dict[str, tuple] = {}
_CACHED_OFFICIAL = False  # --latency-only: the official portable .pte from the test cache


def _export_both(case) -> tuple:
    """(our .pte or None, the official portable .pte, their sizes, times and errors)."""
    info: dict = {}
    ours = None
    try:
        with time_limit(STEP_LIMIT_S * 4):
            ours, info["export_ours_s"] = _timed(lambda: export_ours(case))
        info["pte_ours_bytes"] = len(ours)
    except Exception as e:  # noqa: BLE001 - our exporter may not handle every model yet
        info["export_errors"] = {"export_ours": _error(e)}
    if _CACHED_OFFICIAL:
        off = official.official_export(case)  # from the test cache: not timed
    else:
        off, info["export_official_s"] = _timed(lambda: export_official(case))
    info["pte_official_bytes"] = len(off)
    return ours, off, info


def bench_model(case, budget: float, timer: LoadTimer | None = None, threads: int = 1) -> dict:
    """One row: export times, latencies (median seconds) and the correctness check."""
    row: dict = {"model": case.name, "errors": {}, "stats": {}}
    errors = row["errors"]

    columns = Columns(row, budget, threaded=threads > 1)
    timeit = columns.add

    inputs = case.inputs()
    np_inputs = _numpy_inputs(inputs)
    t_inputs = list(inputs)
    # Exports (fresh, timed), once per process: a later thread count reuses them.
    export = _EXPORTS.get(case.name)
    if export is None:
        export = _EXPORTS[case.name] = _export_both(case)
    ours, off, export_row = export
    row.update({k: v for k, v in export_row.items() if k != "export_errors"})
    errors.update(export_row.get("export_errors", {}))
    xnn = official.official_export_xnnpack(case)  # cached on disk: not timed
    # Latencies.
    module = case.make()
    with torch.no_grad():
        timeit("eager", lambda: module(*inputs))
    runner = official.official_runner(off)
    timeit("official_portable", lambda: runner.module.forward(t_inputs))
    if xnn is not None:
        xrunner = official.official_runner(xnn)
        timeit("official_xnnpack", lambda: xrunner.module.forward(t_inputs))
    else:
        errors["official_xnnpack"] = "the official XNNPACK export fails"
    if ours is not None:
        try:
            with time_limit(STEP_LIMIT_S):
                row["ours_correct"] = check_ours(case, ours)
        except Exception as e:  # noqa: BLE001
            row["ours_correct"] = "error: " + _error(e)
        if not row["ours_correct"].startswith("error"):
            m = _our_method(ours)
            timeit("ours_on_ours", lambda: m.execute(np_inputs, clone_outputs=False))
        else:
            errors["ours_on_ours"] = row["ours_correct"]
        if numba_env.numba_module() is not None and timer is not None:
            try:
                with time_limit(COMPILE_LIMIT_S):
                    row.update(_load_times(ours, timer))
                    row["jit_correct"] = check_ours(case, ours, jit=True)
                    mj = _our_method(ours, jit=True)
                    row["jit_fused_instructions"] = sum(len(r) for r in mj.plan.fused_runs)
                timeit("ours_jit", lambda: mj.execute(np_inputs, clone_outputs=False))
            except Exception as e:  # noqa: BLE001
                errors["ours_jit"] = _error(e)
    try:
        m_off = _our_method(off)
        timeit("ours_on_official", lambda: m_off.execute(np_inputs, clone_outputs=False))
    except Exception as e:  # noqa: BLE001
        errors["ours_on_official"] = _error(e)
    if xnn is not None:
        from pyexecutorch.runtime import Runtime  # noqa: PLC0415

        if Runtime.get().backend_registry.is_available("XnnpackBackend"):
            try:
                m_xnn = _our_method(xnn)
                timeit(
                    "ours_on_official_xnnpack",
                    lambda: m_xnn.execute(np_inputs, clone_outputs=False),
                )
            except Exception as e:  # noqa: BLE001
                errors["ours_on_official_xnnpack"] = _error(e)
            if numba_env.numba_module() is not None and timer is not None:
                try:  # the delegates compiled (see backends/xnnpack/compiled.py)
                    with time_limit(COMPILE_LIMIT_S):
                        mj_xnn = _our_method(xnn, jit=True)
                        row["jit_xnn_correct"] = check_ours(case, xnn, jit=True, or_official=True)
                    timeit(
                        "ours_jit_on_official_xnnpack",
                        lambda: mj_xnn.execute(np_inputs, clone_outputs=False),
                    )
                except Exception as e:  # noqa: BLE001
                    errors["ours_jit_on_official_xnnpack"] = _error(e)
        else:
            errors["ours_on_official_xnnpack"] = "our runtime has no XnnpackBackend yet"
    with torch.no_grad():  # eager's column, timed with the others
        columns.time()
    for key, base in (
        ("ours_on_ours", "official_portable"),
        ("ours_on_ours", "official_xnnpack"),
        ("ours_on_ours", "eager"),
        ("ours_jit", "official_portable"),
        ("ours_jit", "official_xnnpack"),
        ("ours_jit", "ours_on_ours"),
        ("ours_jit", "eager"),
        ("ours_jit_on_official_xnnpack", "official_xnnpack"),
    ):
        if row.get(key) and row.get(base):
            row[f"{key}_vs_{base}"] = row[key] / row[base]
    if row.get("ours_on_official") and row.get("official_portable"):
        row["ours_on_official_vs_official_portable"] = (
            row["ours_on_official"] / row["official_portable"]
        )
    return row


# --------------------------------------------------------------------------------------
# Report


W = 10  # width of a latency column


HEADER = (
    f"{'model':<24}{'eager':>{W}}{'portable':>{W}}{'xnnpack':>{W}}{'ours':>{W}}{'jit':>{W}}"
    f"{'ours/off':>{W}}{'ours/xnn':>{W}}{'jit/xnn':>{W}}{'÷port':>7}{'÷xnn':>7}{'jit÷port':>9}{'jit÷xnn':>8}"
    f"{'load np':>8}{'cold':>8}{'warm':>7}{'exp ours':>9}{'exp off':>8}  check"
)


def _us(seconds: float | None) -> str:
    return fmt_us(seconds) if seconds is None or seconds < 1e-4 else f"{seconds * 1e6:,.0f}"


def table_row(row: dict) -> str:
    if "fatal" in row:
        return f"{row['model']:<24}failed: {row['fatal'][:100]}"
    check = row.get("ours_correct", row["errors"].get("export_ours", "-"))

    def exp(key: str) -> str:
        return f"{row[key]:.1f}s" if key in row else "-"

    lat = "".join(
        f"{_us(row.get(k)):>{W}}"
        for k in (
            "eager",
            "official_portable",
            "official_xnnpack",
            "ours_on_ours",
            "ours_jit",
            "ours_on_official",
            "ours_on_official_xnnpack",
            "ours_jit_on_official_xnnpack",
        )
    )

    def ms(key: str) -> str:  # a cold load may compile for a minute: seconds from 10 s
        if key not in row:
            return "-"
        seconds = row[key]
        return f"{seconds:.1f}s" if seconds >= 10 else f"{seconds * 1e3:.0f}ms"

    if row.get("jit_correct", "ok") != "ok":
        check = f"{check}; jit {row['jit_correct']}"
    if row.get("jit_xnn_correct", "ok") != "ok":
        check = f"{check}; jit/xnn {row['jit_xnn_correct']}"
    return (
        f"{row['model']:<24}{lat}"
        f"{ratio(row.get('ours_on_ours'), row.get('official_portable')):>7}"
        f"{ratio(row.get('ours_on_ours'), row.get('official_xnnpack')):>7}"
        f"{ratio(row.get('ours_jit'), row.get('official_portable')):>9}"
        f"{ratio(row.get('ours_jit'), row.get('official_xnnpack')):>8}"
        f"{ms('load_numpy_s'):>8}{ms('load_jit_cold_s'):>8}{ms('load_jit_warm_s'):>7}"
        f"{exp('export_ours_s'):>9}{exp('export_official_s'):>8}  {check[:70]}"
    )


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def summarize(rows: list[dict]) -> dict:
    ok = [r for r in rows if "fatal" not in r]
    out = {
        "models": len(rows),
        "ours_exported": sum(1 for r in ok if "pte_ours_bytes" in r),
        "ours_correct": sum(1 for r in ok if r.get("ours_correct") == "ok"),
    }
    for key, base in (
        ("ours_on_ours", "official_portable"),
        ("ours_on_ours", "official_xnnpack"),
        ("ours_on_official", "official_portable"),
        ("ours_on_official_xnnpack", "official_xnnpack"),
        ("ours_jit_on_official_xnnpack", "official_xnnpack"),
        ("ours_on_ours", "eager"),
        ("ours_jit", "official_portable"),
        ("ours_jit", "official_xnnpack"),
        ("ours_jit", "ours_on_ours"),
        ("ours_jit", "eager"),
        ("load_jit_warm_s", "load_numpy_s"),
        ("export_ours_s", "export_official_s"),
    ):
        pairs = [r[key] / r[base] for r in ok if r.get(key) and r.get(base)]
        out[f"geomean_{key}_vs_{base}"] = _geomean(pairs)
        out[f"n_{key}_vs_{base}"] = len(pairs)
    return out


def machine() -> dict:
    from importlib.metadata import version  # noqa: PLC0415

    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "executorch": version("executorch"),
        "pyexecutorch": version("pyexecutorch"),
    }


def chart(result: dict, path: Path) -> None:
    """Latency of every runtime per model (one marker each, log scale), one panel per
    thread count, and the export times of both exporters."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    meta = result["machine"]
    runs = [[r for r in run["models"] if "fatal" not in r] for run in result["runs"]]
    names = list(dict.fromkeys(r["model"] for rows in runs for r in rows))
    y = {name: k for k, name in enumerate(names)}
    fig, axes = plt.subplots(
        1,
        len(runs) + 1,
        figsize=(6.5 * len(runs) + 4, 0.27 * len(names) + 1.8),
        gridspec_kw={"width_ratios": [3] * len(runs) + [1.4]},
        sharey=True,
        squeeze=False,
    )
    markers = {
        "eager": ("o", "tab:gray"),
        "official_portable": ("s", "tab:blue"),
        "official_xnnpack": ("D", "tab:orange"),
        "ours_on_ours": ("*", "tab:green"),
        "ours_jit": ("P", "tab:olive"),
        "ours_on_official": ("x", "tab:red"),
        "ours_on_official_xnnpack": ("+", "tab:purple"),
        "ours_jit_on_official_xnnpack": ("1", "tab:brown"),
    }
    for ax, rows, run in zip(axes[0], runs, result["runs"], strict=False):
        ys = [y[r["model"]] for r in rows]
        for key, _, label in LATENCY:
            vals = np.array([r.get(key) or np.nan for r in rows], dtype=float) * 1e6
            if np.isnan(vals).all():
                continue
            marker, color = markers[key]
            size = 90 if marker == "*" else 36
            ax.scatter(vals, ys, marker=marker, color=color, s=size, label=label, zorder=3)
        ax.set_xscale("log")
        ax.set_title(f"{run['threads']} thread(s)", fontsize=10)
        ax.set_xlabel("latency per call, microseconds (log scale; lower is faster)")
        ax.grid(axis="x", which="both", alpha=0.25)
        ax.grid(axis="y", alpha=0.15)
        ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    ax0, ax2 = axes[0][0], axes[0][-1]
    ax0.set_yticks(range(len(names)), names)
    ax0.set_ylim(len(names) - 0.5, -0.5)
    exporters = (
        ("export_ours_s", "pyexecutorch.exir", "tab:green"),
        ("export_official_s", "official exir", "tab:blue"),
    )
    first = {r["model"]: r for r in runs[0]} if runs else {}
    for k, (key, label, color) in enumerate(exporters):
        vals = [first.get(name, {}).get(key, np.nan) for name in names]
        ax2.barh(
            np.arange(len(names)) + (k - 0.5) * 0.4, vals, height=0.4, label=label, color=color
        )
    ax2.set_xlabel("export time, nn.Module to .pte (s)")
    ax2.legend(loc="lower right", fontsize=8)
    ax2.grid(axis="x", alpha=0.25)
    fig.suptitle(
        f"pyexecutorch benchmarks: {meta['processor']}, {meta['cpus']} CPUs, "
        f"torch {meta['torch']}, executorch {meta['executorch']}, {meta['date'][:10]}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def select_cases(args) -> list:
    from benchmarks import models_large  # noqa: PLC0415
    from tests import architectures  # noqa: PLC0415

    suite = models.cases(official_exportable=True)
    large = [] if args.no_large else [*models_large.LARGE_CASES, *architectures.ARCH_CASES]
    every = {c.name: c for c in [*suite, *models_large.LARGE_CASES, *architectures.ARCH_CASES]}
    if args.models:
        names = args.models.split(",")
    elif args.quick:
        names = QUICK
    elif args.tags:
        tags = set(args.tags.split(","))
        return [c for c in [*large, *suite] if tags & c.tags]
    else:
        return large + suite  # large first: the time limit never drops them
    unknown = [n for n in names if n not in every]
    if unknown:
        raise SystemExit(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(every)}")
    return [every[n] for n in names]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--full-size" in argv:  # another benchmark, with options of its own
        import bench_full_size  # noqa: PLC0415

        return bench_full_size.main([a for a in argv if a != "--full-size"])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--models", help="comma-separated model names")
    parser.add_argument("--no-large", action="store_true", help="leave out the large models")
    parser.add_argument(
        "--budget",
        type=float,
        help="seconds of timing per measurement (default 0.3; 0.15 with --quick)",
    )
    parser.add_argument(
        "--tags", help="comma-separated tags (conv, transformer, ...): the models with any of them"
    )
    parser.add_argument(
        "--threads",
        type=_thread_list,
        default=[1],
        help="threads of torch eager, numpy's BLAS, the compiled tier's loops and the official "
        "runtime's thread pool, or a comma-separated list to run each (default 1)",
    )
    parser.add_argument(
        "--latency-only",
        action="store_true",
        help="do not time the official export (its .pte comes from the test cache): "
        "latency runs of the large models in a few minutes",
    )
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=13.5,
        help="per thread count: skip the remaining models after this long",
    )
    parser.add_argument(
        "--json",
        default=str(HERE / "results.json"),
        help="results file (default benchmarks/results.json)",
    )
    parser.add_argument(
        "--png",
        default=str(HERE / "results.png"),
        help="chart file (default benchmarks/results.png)",
    )
    parser.add_argument(
        "--from-json",
        metavar="JSON",
        help="measure nothing: print the table of an earlier results file and redraw its chart",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="with --from-json: print the README's table"
    )
    args = parser.parse_args(argv)
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
        if args.markdown:
            print(markdown(result))
            return 0
        report(result)
        chart(result, Path(args.png))
        print(f"wrote {args.png}")
        return 0
    budget = args.budget if args.budget is not None else (0.15 if args.quick else 0.3)
    global _CACHED_OFFICIAL
    _CACHED_OFFICIAL = args.latency_only
    official.silence_noise()
    warnings.filterwarnings("ignore")
    cases = select_cases(args)
    meta = machine()
    meta["threads"] = args.threads
    start = time.perf_counter()
    runs = []
    for n_threads in args.threads:
        counts = use_threads(n_threads)
        print(preamble(meta, len(cases), n_threads, counts))
        if not runs:
            warm_up()
        timer = LoadTimer(n_threads) if numba_env.numba_module() is not None else None
        print(HEADER, flush=True)
        rows, skipped = [], []
        run_start = time.perf_counter()
        for case in cases:
            if time.perf_counter() - run_start > args.max_minutes * 60:
                skipped.append(case.name)
                continue
            try:
                row = bench_model(case, budget, timer, n_threads)
            except Exception as e:  # noqa: BLE001 - report and go on with the other models
                row = {
                    "model": case.name,
                    "fatal": _error(e),
                    "errors": {},
                    "traceback": traceback.format_exc(),
                }
            row["threads"] = n_threads
            rows.append(row)
            print(table_row(row), flush=True)
        if timer is not None:
            timer.close()
        overhead = bench_overhead(budget) if not (args.models or args.tags) else None
        run = {
            "threads": n_threads,
            "thread_counts": counts,
            "skipped": skipped,
            "summary": summarize(rows),
            "overhead": overhead,
            "models": rows,
        }
        print(footer(run))
        runs.append(run)
    result = {
        "machine": meta,
        "budget_s": budget,
        "elapsed_s": time.perf_counter() - start,
        "runs": runs,
        # every row of every run, each with its "threads"
        "models": [row for run in runs for row in run["models"]],
    }
    print(f"total {result['elapsed_s'] / 60:.1f} minutes")
    Path(args.json).write_text(json.dumps(result, indent=1))
    chart(result, Path(args.png))
    print(f"wrote {args.json} and {args.png}")
    return 0


def _thread_list(text: str) -> list[int]:
    try:
        counts = [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of thread counts: {text!r}") from None
    if any(n < 1 for n in counts):
        raise argparse.ArgumentTypeError(f"thread counts must be at least 1: {text!r}")
    return counts


def use_threads(n: int) -> dict[str, int | None]:
    """Set every runtime of the benchmark to ``n`` threads; the counts each then reports."""
    set_threads(n)  # numpy's BLAS and the compiled tier's parallel loops, for our runtime
    official.silence_noise()
    from executorch.extension.pybindings import portable_lib as official_lib  # noqa: PLC0415

    official_lib._unsafe_reset_threadpool(n)  # the official XNNPACK delegate's thread pool
    # Last: starting numba's OpenMP thread pool (its first set_num_threads) sets torch's
    # OpenMP threads back to every core.
    torch.set_num_threads(n)
    counts = {
        **thread_counts(),
        "torch": torch.get_num_threads(),
        "official": official_lib._threadpool_get_thread_count(),
    }
    wrong = {k: v for k, v in counts.items() if v is not None and v != n}
    if wrong:
        # numba's pool cannot grow past the cores it started with, nor BLAS past its build
        print(f"warning: asked for {n} threads, got {wrong}", file=sys.stderr)
    return counts


def preamble(meta: dict, n_models: int, threads: int, counts: dict) -> str:
    used = ", ".join(f"{k} {v}" for k, v in counts.items() if v is not None)
    return (
        f"{n_models} models; {meta['processor']}, {meta['cpus']} CPUs, {threads} thread(s) "
        f"(threads in use: {used}), torch {meta['torch']}, executorch {meta['executorch']}\n"
        "latency: median in microseconds; ours/off, ours/xnn: our runtime on the official portable /\n"
        "XNNPACK .pte; jit/xnn: its compiled tier on the official XNNPACK .pte (delegates compiled);\n"
        "÷port, ÷xnn: ours on our .pte over the official portable / XNNPACK runtime\n"
        "jit: our compiled tier on our .pte (jit÷port, jit÷xnn its ratios); load np / cold / warm:\n"
        "load_method of the numpy tier, of the compiled tier compiling, and reading its disk cache\n"
        "export: seconds from nn.Module to .pte bytes (torch.export included)\n"
    )


def footer(result: dict) -> str:
    out = []
    overhead, summary = result.get("overhead"), result["summary"]
    if overhead:
        out.append(
            f"\nper-instruction overhead on {overhead['instructions']} small elementwise ops: ours "
            f"{overhead['ours_per_instruction'] * 1e6:.2f} us, official portable "
            f"{overhead['official_per_instruction'] * 1e6:.2f} us, bare np.add(out=) "
            f"{overhead['numpy_add_call'] * 1e6:.2f} us"
        )
        if overhead.get("ours_jit_per_instruction"):
            out.append(
                f"  compiled tier (the chain fused): "
                f"{overhead['ours_jit_per_instruction'] * 1e6:.3f} us per instruction"
            )
    out.append(
        f"\n{summary['ours_exported']}/{summary['models']} models exported by pyexecutorch, "
        f"{summary['ours_correct']} match eager"
    )
    for key, label in (
        ("geomean_ours_on_ours_vs_official_portable", "ours / official portable"),
        ("geomean_ours_on_ours_vs_official_xnnpack", "ours / official XNNPACK"),
        (
            "geomean_ours_on_official_vs_official_portable",
            "ours on official .pte / official portable",
        ),
        (
            "geomean_ours_on_official_xnnpack_vs_official_xnnpack",
            "ours on official XNNPACK .pte / official XNNPACK",
        ),
        (
            "geomean_ours_jit_on_official_xnnpack_vs_official_xnnpack",
            "compiled tier on official XNNPACK .pte / official XNNPACK",
        ),
        ("geomean_ours_on_ours_vs_eager", "ours / torch eager"),
        ("geomean_ours_jit_vs_official_portable", "compiled tier / official portable"),
        ("geomean_ours_jit_vs_official_xnnpack", "compiled tier / official XNNPACK"),
        ("geomean_ours_jit_vs_ours_on_ours", "compiled tier / numpy tier"),
        ("geomean_ours_jit_vs_eager", "compiled tier / torch eager"),
        (
            "geomean_load_jit_warm_s_vs_load_numpy_s",
            "warm compiled load_method / numpy load_method",
        ),
        ("geomean_export_ours_s_vs_export_official_s", "our export time / official export time"),
    ):
        if summary.get(key):
            n = summary[key.replace("geomean_", "n_")]
            out.append(f"geomean {label}: {summary[key]:.2f}x ({n} models)")
    if result["skipped"]:
        out.append(f"skipped (time limit): {', '.join(result['skipped'])}")
    return "\n".join(out)


def report(result: dict) -> None:
    """The tables of a results file, as the run printed them."""
    for run in result["runs"]:
        counts = run.get("thread_counts", {})
        print(preamble(result["machine"], len(run["models"]), run["threads"], counts))
        print(HEADER)
        for row in run["models"]:
            print(table_row(row))
        print(footer(run))


# The README's table: per model and thread count, the latencies of eager, the official
# XNNPACK delegate and both tiers of ours, then our tiers' ratios.
MARKDOWN_COLUMNS = [
    ("eager", "eager"),
    ("official_xnnpack", "official XNNPACK"),
    ("ours_on_ours", "ours, numpy tier"),
    ("ours_jit", "ours, compiled tier"),
]
MARKDOWN_RATIOS = [
    ("ours_on_ours", "official_xnnpack", "numpy ÷ XNNPACK"),
    ("ours_jit", "official_xnnpack", "compiled ÷ XNNPACK"),
    ("ours_on_ours", "eager", "numpy ÷ eager"),
    ("ours_jit", "eager", "compiled ÷ eager"),
]


def markdown(result: dict) -> str:
    """The README's benchmark table (latencies in microseconds) of a results file."""
    head = ["model", "threads", *(h for _, h in MARKDOWN_COLUMNS)]
    head += [h for *_, h in MARKDOWN_RATIOS]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for row in sorted(result["models"], key=lambda r: (r["model"], r.get("threads", 1))):
        if "fatal" in row:
            continue
        cells = [row["model"], str(row.get("threads", 1))]
        cells += [_us(row.get(k)) for k, _ in MARKDOWN_COLUMNS]
        cells += [ratio(row.get(a), row.get(b)) for a, b, _ in MARKDOWN_RATIOS]
        lines.append("| " + " | ".join(cells) + " |")
    for run in result["runs"]:
        summary = run["summary"]
        parts = [
            f"{label} {summary[key]:.2f}x"
            for key, label in (
                ("geomean_ours_jit_vs_official_xnnpack", "compiled ÷ XNNPACK"),
                ("geomean_ours_on_ours_vs_official_xnnpack", "numpy ÷ XNNPACK"),
                ("geomean_ours_jit_vs_eager", "compiled ÷ eager"),
                ("geomean_ours_jit_vs_official_portable", "compiled ÷ portable"),
            )
            if summary.get(key)
        ]
        lines.append(f"\nGeomeans at {run['threads']} thread(s): " + ", ".join(parts))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
