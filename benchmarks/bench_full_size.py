"""Full-size float CNNs (224x224, 1000 classes): the official runtime against ours on the
same files, torch eager and ONNX Runtime on the same models, at 1 and 2 threads, in one run.

The models are torchvision's ResNet-18, MobileNetV2, MobileNetV3-Small, EfficientNet-B0
and SqueezeNet 1.1 (``benchmarks/models_full.py``, random weights). Each is exported once
by the official exporter to an XNNPACK program (its XnnpackPartitioner) and a portable
one, and by ``torch.onnx.export`` to an ONNX file, all cached under
``.cache/official/`` keyed by the models' source and the package versions. Sides:

- ``official``: the official runtime on the XNNPACK program;
- ``ours/xnn``, ``ours/port``: our runtime's compiled tier on the XNNPACK and on the
  portable program (loaded at the thread count being measured);
- ``eager``: torch eager (``no_grad``);
- ``onnxrt``: ONNX Runtime (``intra_op_num_threads``, one inter-op thread), where the
  ``bench`` extra is installed.

Each side is timed in turns (``ROUNDS`` of ``budget / ROUNDS`` seconds, every side in
each turn; at more than one thread after a pause, since a pool spins on after its last
call and would take the next side's cores). Per side: the median wall and CPU time of a
call (CPU: the process's, all threads) and the threads that really ran during its calls
(threads of ``/proc/self/task`` whose CPU time grew by 2 ticks or more). Ratios are
against the official runtime: of CPU time at one thread (the machine may be shared), of
wall time at more (the second core's gain is wall time). ``1->2`` is each side's wall time
at one thread over its wall time at two. The largest difference of our outputs from the
official runtime's on the same program is printed (``max|d|``).

    python benchmarks/run.py --full-size                   # every model, 1 and 2 threads
    python benchmarks/bench_full_size.py --models resnet18 --threads 2 --budget 2
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import io
import json
import logging
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import common  # noqa: F401 - sets up sys.path (tests/, benchmarks/)
import models_full
import numpy as np
import torch

from tests import official

HERE = Path(__file__).resolve().parent
ROUNDS = 4
# At more than one thread, the pause before each side's turn (see the module docstring).
POOL_QUIET_S = 0.3
# CPU ticks (1/100 s) a thread must gain during a side's calls to count as running.
BUSY_TICKS = 2
SIDES = ["official", "ours_xnn", "ours_port", "eager", "onnxrt"]
LABELS = {
    "official": "official",
    "ours_xnn": "ours/xnn",
    "ours_port": "ours/port",
    "eager": "eager",
    "onnxrt": "onnxrt",
}


@functools.cache
def _key(flavor: str) -> str:
    """The cache key of a model file: the models' source, this file's export code and the
    package versions."""
    sources = (HERE / "models_full.py").read_bytes() + (
        HERE.parent / "tests" / "architectures.py"
    ).read_bytes()
    return hashlib.sha256(sources + official.versions().encode() + flavor.encode()).hexdigest()[:16]


def pte(name: str, flavor: str) -> bytes:
    """The official exporter's ``flavor`` ("xnnpack" or "portable") program of ``name``."""
    path = official.cache_dir() / f"fullsize-{name}-{flavor}.{_key(flavor)}.pte"

    def build() -> bytes:
        program = torch.export.export(models_full.build(name), (models_full.image(),))
        partitioner = official._xnnpack_partitioner() if flavor == "xnnpack" else None
        return official.export_programs({"forward": program}, partitioner=partitioner)

    return official.cached_file(path, build)


def onnx_file(name: str) -> Path | None:
    """``name`` exported by ``torch.onnx.export`` (None without the ``bench`` extra)."""
    try:
        import onnxruntime  # noqa: F401, PLC0415 - optional: the bench extra
        import onnxscript  # noqa: F401, PLC0415 - torch.onnx.export's dependency
    except ImportError:
        return None
    path = official.cache_dir() / f"fullsize-{name}.{_key('onnx')}.onnx"

    def build() -> bytes:
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        # (the exporter prints its progress and logs the torchvision ops it skips)
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                models_full.build(name),
                (models_full.image(),),
                str(scratch),
                dynamo=True,
                verbose=False,
                external_data=False,
            )
        data = scratch.read_bytes()
        scratch.unlink()
        return data

    official.cached_file(path, build)
    return path


def set_threads(n: int) -> dict[str, int | None]:
    """Every runtime at ``n`` threads (the official one before any program loads: its
    delegates keep the pool they were made with); the counts each then reports."""
    from executorch.extension.pybindings import portable_lib as official_lib  # noqa: PLC0415

    from pyexecutorch.runtime.threads import set_threads as ours  # noqa: PLC0415
    from pyexecutorch.runtime.threads import thread_counts  # noqa: PLC0415

    ours(n)
    official_lib._unsafe_reset_threadpool(n)
    torch.set_num_threads(n)
    return {
        **thread_counts(),
        "torch": torch.get_num_threads(),
        "official": official_lib._threadpool_get_thread_count(),
    }


def _task_ticks() -> dict[str, int]:
    """CPU ticks (user + system) of each thread of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a thread that ended meanwhile
        out[tid] = int(fields[11]) + int(fields[12])
    return out


def _busy(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(after[t] - before.get(t, 0) >= BUSY_TICKS for t in after)


def time_sides(fns: dict[str, Callable[[], object]], budget: float, threads: int) -> dict:
    """Per side: median wall and CPU seconds of a call, CPU over wall, and the threads
    that ran (see the module docstring)."""
    for fn in fns.values():
        fn(), fn()
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    ticks: dict[str, list[dict[str, int]]] = {k: [] for k in fns}
    for _ in range(ROUNDS):
        for k, fn in fns.items():
            if threads > 1:
                time.sleep(POOL_QUIET_S)
            fn()  # the other sides ran meanwhile: caches are cold
            before = _task_ticks()
            end = time.perf_counter() + budget / ROUNDS
            while time.perf_counter() < end or len(wall[k]) < 2:
                c0, w0 = time.process_time(), time.perf_counter()
                fn()
                cpu[k].append(time.process_time() - c0)
                wall[k].append(time.perf_counter() - w0)
            ticks[k].append(_busy(before, _task_ticks()))
    return {
        k: {
            "wall": statistics.median(wall[k]),
            "cpu": statistics.median(cpu[k]),
            "cpu_per_wall": sum(cpu[k]) / sum(wall[k]),
            "threads_ran": max(ticks[k]),
            "calls": len(wall[k]),
        }
        for k in fns
    }


def _ort_session(path: Path, threads: int):
    import onnxruntime as ort  # noqa: PLC0415

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def bench_model(name: str, threads: int, budget: float) -> dict:
    """One row: each side's timing at ``threads`` threads, load times and differences."""
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415

    row: dict = {"model": name, "threads": threads, "errors": {}}
    files = {flavor: pte(name, flavor) for flavor in ("xnnpack", "portable")}
    onnx_path = onnx_file(name)
    model = models_full.build(name)
    x = models_full.image()
    args = [x.numpy()]
    runner = official.official_runner(files["xnnpack"])
    expected = runner.run([x])[0]
    fns: dict[str, Callable[[], object]] = {
        "official": lambda: runner.run([x]),
    }
    for side, flavor in (("ours_xnn", "xnnpack"), ("ours_port", "portable")):
        start = time.perf_counter()
        try:
            method = Runtime.get().load_program(files[flavor], jit=True).load_method("forward")
            got = np.asarray(method.execute(args)[0])
        except Exception as e:  # noqa: BLE001 - report the side and go on
            row["errors"][side] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            continue
        row[f"{side}_load_s"] = time.perf_counter() - start
        row[f"{side}_max_diff"] = float(np.max(np.abs(got.astype(np.float64) - expected)))
        fns[side] = lambda method=method: method.execute(args)
    fns["eager"] = lambda: model(x)
    if onnx_path is not None:
        session = _ort_session(onnx_path, threads)
        feed = {session.get_inputs()[0].name: args[0]}
        got = session.run(None, feed)[0]
        row["onnxrt_max_diff"] = float(np.max(np.abs(got.astype(np.float64) - expected)))
        fns["onnxrt"] = lambda: session.run(None, feed)
    with torch.no_grad():
        row["sides"] = time_sides(fns, budget, threads)
    return row


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def row_lines(row: dict) -> list[str]:
    """A model's line at one thread count: each side's ms (CPU at one thread, wall at
    more), its threads that ran, and ours over the official runtime."""
    sides, n = row["sides"], row["threads"]
    key = "cpu" if n == 1 else "wall"
    cells = []
    for side in SIDES:
        s = sides.get(side)
        cells.append(f"{_ms(s and s[key]):>8} {s['threads_ran'] if s else '-':>2}")
    off = sides["official"][key]
    ratios = [_ratio(sides.get(s, {}).get(key), off) for s in ("ours_xnn", "ours_port", "onnxrt")]
    diffs = [row.get(f"{s}_max_diff") for s in ("ours_xnn", "ours_port")]
    line = (
        f"{row['model']:<19} {n:>2} {key:>4} "
        + " ".join(cells)
        + " "
        + " ".join(f"{r:>8}" for r in ratios)
        + " "
        + " ".join("-" if d is None else f"{d:7.1e}" for d in diffs)
    )
    out = [line]
    out += [f"    {side}: {error}" for side, error in row["errors"].items()]
    return out


def header() -> str:
    sides = " ".join(f"{LABELS[s]:>8} th" for s in SIDES)
    return (
        f"{'model':<19} th time {sides} {'xnn/off':>8} {'port/off':>8} {'ort/off':>8}"
        f" {'max|d|x':>7} {'max|d|p':>7}"
    )


def _speedup_cells(rows: list[dict]) -> list[tuple[str, list[str]]]:
    """Per model measured at one and two threads: each side's wall time at one thread over
    its wall time at two."""
    by = {(r["model"], r["threads"]): r for r in rows}
    table = []
    for name in dict.fromkeys(r["model"] for r in rows):
        one, two = by.get((name, 1)), by.get((name, 2))
        if one is None or two is None:
            continue
        pairs = [(one["sides"].get(s), two["sides"].get(s)) for s in SIDES]
        table.append((name, [_ratio(a and a["wall"], b and b["wall"]) for a, b in pairs]))
    return table


def speedups(rows: list[dict]) -> list[str]:
    """Each side's wall time at one thread over its wall time at two, per model."""
    lines = [f"{'1->2 threads (wall)':<19} " + " ".join(f"{LABELS[s]:>9}" for s in SIDES)]
    for name, cells in _speedup_cells(rows):
        lines.append(f"{name:<19} " + " ".join(f"{c:>9}" for c in cells))
    return lines


def markdown(result: dict) -> str:
    """The README's table of a results file: per model and thread count, each side's ms (CPU
    at one thread, wall at more), ours over the official runtime, and each side's speed-up
    from one thread to two (wall)."""
    rows = result["rows"]
    head = ["model", "threads", *(LABELS[s] for s in SIDES), "ours/xnn ÷ official"]
    head += ["ours/port ÷ official", "onnxrt ÷ official"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in sorted(rows, key=lambda r: (models_full.MODELS.index(r["model"]), r["threads"])):
        key = "cpu" if r["threads"] == 1 else "wall"
        sides = r["sides"]
        cells = [r["model"], f"{r['threads']} ({key})"]
        cells += [_ms(sides[s][key]) if s in sides else "-" for s in SIDES]
        off = sides["official"][key]
        cells += [
            _ratio(sides.get(s, {}).get(key), off) for s in ("ours_xnn", "ours_port", "onnxrt")
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| 1 -> 2 threads (wall) | " + " | ".join(LABELS[s] for s in SIDES) + " |"]
    lines.append("|---|" + "---:|" * len(SIDES))
    for name, cells in _speedup_cells(rows):
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="", help="comma-separated model names (default all)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timing a side")
    parser.add_argument("--json", default=str(HERE / "results_full_size.json"), help="results file")
    parser.add_argument(
        "--markdown",
        metavar="JSON",
        help="measure nothing: print the README table of a results file",
    )
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return 0
    names = [m for m in args.models.split(",") if m] or models_full.MODELS
    for name in names:
        if name not in models_full.MODELS:
            parser.error(f"unknown model {name!r}; known: {', '.join(models_full.MODELS)}")
    official.silence_noise()
    import executorch.exir  # noqa: F401, PLC0415 - before ours define the same operators

    start = time.perf_counter()
    for name in names:  # exports first (cached), so that no export falls inside a timing
        pte(name, "xnnpack"), pte(name, "portable"), onnx_file(name)
    rows, counts = [], {}
    for n in (int(t) for t in args.threads.split(",")):
        counts[n] = set_threads(n)
        used = ", ".join(f"{k} {v}" for k, v in counts[n].items() if v is not None)
        print(f"\n{n} thread(s) (threads set: {used}); ms a call, th: threads that ran")
        print(header())
        for name in names:
            row = bench_model(name, n, args.budget)
            rows.append(row)
            print("\n".join(row_lines(row)), flush=True)
    print()
    print("\n".join(speedups(rows)))
    elapsed = time.perf_counter() - start
    print(f"total {elapsed / 60:.1f} minutes")
    result = {
        "machine": {"processor": platform.machine(), "cpus": os.cpu_count()},
        "versions": official.versions(),
        "budget_s": args.budget,
        "thread_counts": counts,
        "elapsed_s": elapsed,
        "rows": rows,
    }
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
