"""``pyexecutorch.data.evaluate``: rows/s at 1 and 2 workers, embedded and on Ray.

A ResNet-ish CNN (a stride-2 stem, four stages of two basic blocks, 32 to 256
channels, 10 classes; 0.43 G multiply-adds an image at 112x112) exported with a static batch
of 32, evaluated over a generated folder of JPEG images (decoded, resized and cropped
by the image-folder reader in the workers): top-1 against the folder labels.

Four runs: the embedded engine in one process (1 worker) and over a local process pool
(2 workers), and Ray Data on a local instance (started by ``pyexecutorch.data`` as it
starts one, on this machine's cores) with 1 and 2 actors. Every run does the same work
a row: the worker reads, decodes and preprocesses its images and runs the program, one
thread each (BLAS and compiled loops); rows go in each engine's default chunks (32 rows
a task embedded, 128 on Ray: what ``pyexecutorch eval`` does on a large dataset).

One run of each engine is not a measurement on a shared VM: the same code in-process
measured 70-99 rows/s back to back. So the runs are interleaved over rounds (default 3
rounds of embedded:1, ray:1, embedded:2, ray:2), each engine in a host process of its
own that does nothing else (the embedded engine's one worker is that process, as a Ray
actor is its own process; Ray's instance starts once, in its host, and stays up across
rounds). Before the first round each engine runs once over one chunk a worker (the
program compiled and loaded, a fork server or Data's helper actors started), and before
every run the conductor (this process, idle meanwhile) waits until the processes below
it are quiet: start-up is not what a row costs.

Steady state, measured the same way for every engine: the host records when each chunk
arrives and the CPU time spent so far by every process of its tree (itself, pool
workers, Ray's daemons and actors; less what taking that record costs); the first and
last ``2 * workers`` arrivals are left out (start-up and first chunks; Ray hands a chunk
over about one chunk after its actor finished it, and the pipeline drains at the end),
and rows/s (wall clock) and CPU a row are taken between the arrivals left. Every row
also reports the CPU its worker spent on it inside the evaluator (``cpu_ms``: reading,
preprocessing, the program): the same work on every engine, taken over the window's own
rows at 1 worker (its chunks arrive in order). Ray's CPU overhead at 1
worker is the CPU a row costs over every process, divided by that work, on Ray against
the same on the embedded engine (other jobs slow a row's work alike on both; the
quotient keeps only what the engine adds). The speed-up 2 workers would give on two idle
cores: twice the ratio of that work's CPU a row at 1 and at 2 workers.

It prints each run, then per engine the median and the range over the rounds, and the
two targets (2 workers over 1 on the embedded engine; Ray's overhead at 1 worker) in
wall and CPU terms, computed from the medians, with the range of the same ratio taken
round by round (each round's runs a minute apart, under the same conditions).

    python benchmarks/bench_eval.py [--images 1536] [--rounds 3] [--size 112] [--json out.json]
    python benchmarks/bench_eval.py --accuracy   # float vs static-int8, one eval command
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT  # noqa: E402

CACHE = ROOT / ".cache" / "eval_bench"
BATCH = 32
CLASSES = 10


def make_model():  # noqa: ANN201
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.skip = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x):  # noqa: ANN001, ANN201
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.skip(x))

    class ResNetish(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU()
            )
            layers, cin = [], 32
            for cout, stride in ((32, 1), (64, 2), (128, 2), (256, 2)):
                layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(256, CLASSES)

        def forward(self, x):  # noqa: ANN001, ANN201
            return self.fc(self.layers(self.stem(x)).mean((2, 3)))

    torch.manual_seed(0)
    return ResNetish().eval()


def program(size: int) -> Path:
    path = CACHE / f"resnetish_{size}_b{BATCH}.pte"
    if not path.exists():
        import torch

        from pyexecutorch.exir import to_edge

        model = make_model()
        with torch.no_grad():
            ep = torch.export.export(model, (torch.randn(BATCH, 3, size, size),))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(to_edge(ep).to_executorch().buffer)
    return path


def images(count: int, size: int) -> Path:
    """``count`` JPEGs of about ``size / 0.875`` pixels a side, in ``CLASSES`` folders."""
    import numpy as np
    from PIL import Image

    root = CACHE / f"images_{count}_{size}"
    if root.exists():
        return root
    rng = np.random.default_rng(0)
    side = int(size / 0.875)
    for i in range(count):
        folder = root / f"class_{i % CLASSES:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        h, w = side + int(rng.integers(0, 16)), side + int(rng.integers(0, 32))
        pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:05d}.jpg", quality=90)
    return root


def tree_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of this process and of every process below it (pool
    workers, Ray's daemons and actors: ``ray.init`` starts them from here), by pid.
    Walks the tree through ``/proc/<pid>/task/<tid>/children``: a few dozen files,
    whatever else runs on the machine."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu, todo = {}, [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo += [int(child) for child in f.read().split()]
        except OSError:  # it ended meanwhile
            continue
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
    return cpu


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the tree spent between two snapshots (per process: one that started
    meanwhile counts from zero, one that ended is left out)."""
    return sum(c - before.get(pid, 0.0) for pid, c in after.items())


def settle(seconds: float = 20.0, busy: float = 0.05) -> None:
    """Wait (at most ``seconds``) until the processes below this one use less than
    ``busy`` of a core: Ray's daemons and Data's helper actors import for seconds after
    ``ray.init`` and the first dataset, a pool's workers exit after a run: neither is
    what a row costs."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        before = tree_cpu()
        time.sleep(0.5)
        if cpu_between(before, tree_cpu()) < busy * 0.5:
            return


def chunk(engine: str) -> int:
    """Rows a task: the engine's default (``pyexecutorch eval`` on a large dataset), 32 in
    this process or a pool, 128 on Ray (a Ray task costs more: at one actor, Ray's CPU
    outside the evaluator measured 0.46-0.57 ms a row at 128 against 0.6-1.1 at 64)."""
    from pyexecutorch.data.api import CHUNK_ROWS

    return CHUNK_ROWS[engine]


def subset(dataset: Any, rows: int) -> Any:
    from pyexecutorch import data

    columns = {name: col[:rows] for name, col in dataset.columns.items()}
    return data.Dataset(columns, dataset.features, dataset.labels)


def measure(pte: Path, folder: Path, engine: str, workers: int) -> dict[str, float]:
    """One run of ``engine`` over ``folder``, timed from the driver (this process).

    Steady state: chunks arrive at the driver one by one; the first ``2 * workers``
    arrivals (each worker's start-up and first chunk; Ray hands a chunk to the driver
    about one chunk after its actor finished it) and the last ``2 * workers`` (the
    pipeline draining, workers idle) are left out, and rows/s and CPU per row are taken
    between the arrivals left. Both are measured the same way for every engine; the CPU
    the driver spends taking these snapshots is left out too."""
    import numpy as np

    from pyexecutorch import data

    class Clock(data.Progress):
        """Records when each chunk's rows arrive, and the CPU time spent so far."""

        def __init__(self, total: int) -> None:
            super().__init__(total, enabled=False)
            self.arrivals: list[tuple[float, int, dict[int, float], float]] = []
            self.probing = 0.0  # CPU seconds spent in tree_cpu, this thread

        def update(self, rows: int, failed: int = 0) -> None:
            super().update(rows, failed)
            before = time.thread_time()
            snapshot = tree_cpu()
            self.probing += time.thread_time() - before
            self.arrivals.append((time.perf_counter(), self.done, snapshot, self.probing))

    dataset = data.image_folder(folder)
    kw = {"metrics": "top1", "engine": engine, "workers": workers, "threads": 1}
    clock = Clock(len(dataset))
    start = time.perf_counter()
    result = data.evaluate(pte, dataset, **kw, chunk_rows=chunk(engine), progress=clock)
    end = time.perf_counter()
    assert result.failed == 0, result.errors[:3]
    trim = 2 * workers
    (t0, rows0, cpu0, probe0), (t1, rows1, cpu1, probe1) = (
        clock.arrivals[trim],
        clock.arrivals[-1 - trim],
    )
    # The CPU a row costs inside the worker's evaluator (reading, preprocessing, the
    # program, metrics): the same work on every engine, whatever the engine adds around
    # it. One worker's chunks arrive in order: the window's own rows (a row's work varies
    # by a few % along a run, and other rows would skew the quotient below); two workers'
    # chunks end out of step: every row after each worker's first chunk.
    cpu_ms = result.per_row["cpu_ms"]
    work = cpu_ms[rows0:rows1] if workers == 1 else cpu_ms[chunk(engine) * workers :]
    return {
        "rows": len(dataset),
        "seconds": end - start,
        "steady_rows": rows1 - rows0,
        "steady_rows_per_s": (rows1 - rows0) / (t1 - t0),
        # Every process of the engine included: what a row costs whatever else the
        # machine runs (a loaded machine stretches wall time, far less CPU time).
        "steady_cpu_ms_per_row": 1e3
        * (cpu_between(cpu0, cpu1) - (probe1 - probe0))
        / (rows1 - rows0),
        "work_cpu_ms_per_row": float(np.mean(work)),
        "top1": result.metrics["top1"],
    }


def serve(conn: Any, engine: str) -> None:
    """An engine's host process: runs what the conductor asks, until it sends ``None``.

    One for the embedded engine (which then runs in a process that does nothing else, as
    a Ray actor does) and one for Ray, whose local instance starts once, with the
    settings ``pyexecutorch.data`` gives an instance it starts, and stays up across
    rounds. Each measures its own process tree only."""
    if engine == "ray":
        from pyexecutorch.data.engines import ray_connect

        ray = ray_connect(None)
    while (request := conn.recv()) is not None:
        kind, pte, folder, workers = request
        try:
            if kind == "warm":  # the program compiled, a pool or Data's helper actors started
                from pyexecutorch import data

                dataset = subset(data.image_folder(folder), chunk(engine) * workers)
                kw = {"metrics": "top1", "engine": engine, "workers": workers, "threads": 1}
                data.evaluate(pte, dataset, **kw, chunk_rows=chunk(engine))
                conn.send(None)
            else:
                conn.send(measure(pte, folder, engine, workers))
        except Exception as e:  # noqa: BLE001 - the conductor raises it
            conn.send(RuntimeError(f"{engine} host: {type(e).__name__}: {e}"))
    if engine == "ray":
        ray.shutdown()


class Host:
    """The conductor's handle on an engine's host process."""

    def __init__(self, engine: str) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=serve, args=(child, engine), name=engine)
        self.process.start()
        child.close()  # so that a host that dies ends the conductor's wait with an EOFError

    def ask(self, *request: Any) -> Any:
        self.conn.send(request)
        answer = self.conn.recv()
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        if self.process.is_alive():
            self.conn.send(None)
        self.process.join(60)


def median_spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def summarize(results: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Per engine: the median and the range over rounds of each measure. The targets from
    the medians (and, as their spread, the range of the same ratio round by round, each
    round's runs taken a minute apart under the same conditions)."""
    rate, work = "steady_rows_per_s", "work_cpu_ms_per_row"
    for runs in results.values():
        for r in runs:
            r["cpu_over_work"] = r["steady_cpu_ms_per_row"] / r[work]
    keys = (rate, "steady_cpu_ms_per_row", work, "cpu_over_work")
    engines = {
        spec: {key: median_spread([r[key] for r in runs]) for key in keys}
        for spec, runs in results.items()
    }

    # Each target: f(a, b) on the medians, and on each round's pair of runs.
    def target(a: str, b: str, f: Callable[[dict, dict], float]) -> dict[str, float] | None:
        if a not in results or b not in results:
            return None
        medians = [{k: v[0] for k, v in engines[s].items()} for s in (a, b)]
        rounds = [f(x, y) for x, y in zip(results[a], results[b], strict=False)]
        return {"median": f(*medians), "min": min(rounds), "max": max(rounds)}

    # Wall: steady rows/s. CPU: the 2-worker speed-up two idle cores would give at the
    # evaluator's CPU a row, a worker alone and beside another; and the CPU a row costs on
    # Ray, every process counted, over what it costs in the evaluator, against the same on
    # the embedded engine (each run its own yardstick: other jobs slow a row's work,
    # whichever engine runs it).
    targets = {
        "embedded_2_over_1": (
            target("embedded:2", "embedded:1", lambda a, b: a[rate] / b[rate]),
            target("embedded:1", "embedded:2", lambda a, b: 2 * a[work] / b[work]),
        ),
        "ray_overhead_1_worker": (
            target("embedded:1", "ray:1", lambda a, b: a[rate] / b[rate] - 1),
            target("ray:1", "embedded:1", lambda a, b: a["cpu_over_work"] / b["cpu_over_work"] - 1),
        ),
        "ray_2_over_1": (target("ray:2", "ray:1", lambda a, b: a[rate] / b[rate]), None),
    }
    return {"engines": engines, "targets": targets}


def report(summary: dict[str, Any], rounds: int) -> None:
    def cell(values: Any, fmt: str) -> str:
        return f"{fmt.format(values[0])} ({fmt.format(values[1])} to {fmt.format(values[2])})"

    print(f"\nsteady state, median (min to max) over {rounds} round(s):")
    print(f"{'engine':<11} {'rows/s':>24} {'CPU ms a row':>24} {'in the evaluator':>24}")
    for spec, m in summary["engines"].items():
        cells = [
            cell(m[k], "{:.1f}" if k == "steady_rows_per_s" else "{:.2f}")
            for k in ("steady_rows_per_s", "steady_cpu_ms_per_row", "work_cpu_ms_per_row")
        ]
        print(f"{spec:<11} {cells[0]:>24} {cells[1]:>24} {cells[2]:>24}")
    rows = (
        ("embedded, 2 workers / 1 (target >= 1.70x)", "embedded_2_over_1", "{:.2f}x"),
        ("Ray's overhead at 1 worker (target <= 10%)", "ray_overhead_1_worker", "{:+.1%}"),
        ("Ray, 2 workers / 1", "ray_2_over_1", "{:.2f}x"),
    )
    print(f"\n{'targets: the medians (rounds min to max)':<43} {'wall':>26} {'CPU':>26}")
    for label, key, fmt in rows:
        wall, by_cpu = summary["targets"][key]
        if wall is not None:
            cpu_cell = "" if by_cpu is None else cell(tuple(by_cpu.values()), fmt)
            print(f"{label:<43} {cell(tuple(wall.values()), fmt):>26} {cpu_cell:>26}")


def run_rounds(args: argparse.Namespace) -> dict[str, Any]:
    pte, folder = program(args.size), images(args.images, args.size)
    specs = [(spec, *spec.split(":")) for spec in args.runs.split(",")]
    hosts = {engine: Host(engine) for engine in dict.fromkeys(e for _, e, _ in specs)}
    results: dict[str, list[dict[str, float]]] = {spec: [] for spec, _, _ in specs}
    try:
        for _, engine, workers in specs:
            hosts[engine].ask("warm", pte, folder, int(workers))
        for index in range(args.rounds):
            for spec, engine, workers in specs:
                settle()
                r = hosts[engine].ask("measure", pte, folder, int(workers))
                results[spec].append(r)
                print(
                    f"round {index + 1} {spec:<11} {r['seconds']:6.2f} s  steady:"
                    f" {r['steady_rows']} rows {r['steady_rows_per_s']:6.1f} rows/s"
                    f" {r['steady_cpu_ms_per_row']:6.2f} CPU ms/row"
                    f" ({r['work_cpu_ms_per_row']:.2f} in the evaluator)  top1 {r['top1']:.3f}"
                    f"  load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    finally:
        for host in hosts.values():
            host.close()
    return results


# ----------------------------------------------------------------------------------------
# --accuracy: a float and a static-int8 program of the same trained model, one command


def accuracy_files(out: Path) -> tuple[Path, Path, Path]:
    """Train a small CNN to tell 10 tinted, striped image classes apart; write its float
    and static-int8 (XNNPACK) programs and a held-out image folder under ``out``."""
    import numpy as np
    import torch
    from PIL import Image
    from torch import nn
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from pyexecutorch.backends.xnnpack import XnnpackPartitioner
    from pyexecutorch.backends.xnnpack.quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from pyexecutorch.data.readers import IMAGENET_MEAN, IMAGENET_STD
    from pyexecutorch.exir import to_edge, to_edge_transform_and_lower

    size, rng = 32, np.random.default_rng(0)
    tints = rng.uniform(0.4, 0.6, (CLASSES, 3))  # close: the task is not trivial

    def picture(label: int) -> np.ndarray:
        stripes = (np.arange(size) // (2 + label % 5) % 2)[:, None] * (label // 5 * 2 - 1)
        jitter = rng.uniform(-0.08, 0.08, 3)  # per image: neighbouring tints overlap
        noise = rng.normal(0, 0.3, (size, size, 3))
        base = tints[label] + jitter + 0.05 * stripes[..., None] + noise
        return (np.clip(base, 0, 1) * 255).astype(np.uint8)

    def tensor(pixels: np.ndarray) -> np.ndarray:
        x = (pixels / np.float32(255) - np.float32(IMAGENET_MEAN)) / np.float32(IMAGENET_STD)
        return np.ascontiguousarray(x.transpose(2, 0, 1), dtype=np.float32)

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, CLASSES),
    )  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    for _ in range(60):
        labels = rng.integers(0, CLASSES, 64)
        x = torch.from_numpy(np.stack([tensor(picture(int(k))) for k in labels]))
        loss = nn.functional.cross_entropy(model(x), torch.from_numpy(labels))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    calib = torch.from_numpy(
        np.stack([tensor(picture(int(k))) for k in rng.integers(0, CLASSES, BATCH)])
    )
    out.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        float_pte = out / "float.pte"
        ep = torch.export.export(model, (calib,))
        float_pte.write_bytes(to_edge(ep).to_executorch().buffer)
        quantizer = XNNPACKQuantizer().set_global(
            get_symmetric_quantization_config(is_per_channel=True)
        )
        prepared = prepare_pt2e(torch.export.export(model, (calib,)).module(), quantizer)
        prepared(calib)
        quantized = convert_pt2e(prepared)
        lowered = to_edge_transform_and_lower(
            torch.export.export(quantized, (calib,)), partitioner=[XnnpackPartitioner()]
        )
        int8_pte = out / "int8.pte"
        int8_pte.write_bytes(lowered.to_executorch().buffer)
    folder = out / "images"
    for i in range(512):
        (folder / f"class_{i % CLASSES}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(picture(i % CLASSES)).save(folder / f"class_{i % CLASSES}" / f"{i}.png")
    return float_pte, int8_pte, folder


def accuracy() -> int:
    import subprocess

    float_pte, int8_pte, folder = accuracy_files(CACHE / "accuracy")
    command = [
        sys.executable, "-m", "pyexecutorch", "eval", str(int8_pte), "--data", str(folder),
        "--resize", "32", "--reference", str(float_pte), "--metric", "top1,agreement,snr",
        "--workers", "2", "--no-progress",
    ]  # fmt: skip
    print("$ pyexecutorch eval int8.pte --data images/ --resize 32 --reference float.pte "
          "--metric top1,agreement,snr --workers 2")  # fmt: skip
    return subprocess.run(command, check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1536)
    parser.add_argument("--size", type=int, default=112)
    parser.add_argument("--runs", default="embedded:1,ray:1,embedded:2,ray:2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--accuracy", action="store_true", help="the float vs static-int8 comparison instead"
    )
    args = parser.parse_args()
    if args.accuracy:
        return accuracy()
    # A steady window of two chunks at least, after 2 * workers at each end.
    least = max(
        chunk(e) * (4 * int(w) + 2) for e, w in (s.split(":") for s in args.runs.split(","))
    )
    if args.images < least:
        parser.error(f"--images: at least {least} for these runs")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the hosts inherit it
    started = time.perf_counter()
    print(f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    results = run_rounds(args)
    summary = summarize(results)
    report(summary, args.rounds)
    print(
        f"\n{time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f} at the end"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
