"""``pyexecutorch.data.evaluate``: rows/s at 1 and 2 workers, embedded and on Ray.

A ResNet-ish CNN (a stride-2 stem, four stages of two basic blocks, 32 to 256
channels, 10 classes; 0.43 G multiply-adds an image at 112x112) exported with a static batch
of 32, evaluated over a generated folder of JPEG images (decoded, resized and cropped
by the image-folder reader in the workers): top-1 against the folder labels.

Four runs: the embedded engine in this process (1 worker) and over a local process pool
(2 workers), and Ray Data on a local instance (``ray.init(num_cpus=2)``) with 1 and 2
actors. Each worker runs one thread (BLAS and compiled loops), so 2 workers use both
cores. Reported per run: the whole run's rows/s (worker start-up included), and the
steady rows/s: the rows that arrived after every worker had returned its first chunk,
over the time since (start-up and first-batch compilation excluded), in wall clock;
and the CPU time a steady row costs, summed over every process of the engine (this one,
pool workers, Ray's daemons and actors), which a loaded machine does not distort: from
it, Ray's CPU overhead at 1 worker, and the speed-up 2 workers would give on two idle
cores (twice the ratio of CPU per row at 1 and at 2 workers).

    python benchmarks/bench_eval.py [--images 512] [--size 112] [--json out.json]
    python benchmarks/bench_eval.py --accuracy   # float vs static-int8, one eval command
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

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


def tree_cpu() -> float:
    """CPU seconds (user + system, reaped children included) of this process and every
    process below it: pool workers, and Ray's daemons and actors (``ray.init`` starts
    them from here)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(v) for v in fields[11:15]) / tick
    mine, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        p = frontier.pop()
        for child, par in parent.items():
            if par == p and child not in mine:
                mine.add(child)
                frontier.append(child)
    return sum(cpu.get(p, 0.0) for p in mine)


def measure(pte: Path, folder: Path, engine: str, workers: int) -> dict[str, float]:
    from pyexecutorch import data

    class Clock(data.Progress):
        """Records when each chunk's rows arrive, and the CPU time spent so far."""

        def __init__(self, total: int) -> None:
            super().__init__(total, enabled=False)
            self.arrivals: list[tuple[float, int, float]] = []

        def update(self, rows: int, failed: int = 0) -> None:
            super().update(rows, failed)
            self.arrivals.append((time.perf_counter(), rows, tree_cpu()))

    dataset = data.image_folder(folder)
    clock = Clock(len(dataset))
    start = time.perf_counter()
    result = data.evaluate(
        pte, dataset, metrics="top1", engine=engine, workers=workers, threads=1, progress=clock
    )
    end = time.perf_counter()
    assert result.failed == 0, result.errors[:3]
    # Steady: from the arrival that completes every worker's first chunk, on.
    first, _, first_cpu = clock.arrivals[workers - 1]
    steady_rows = sum(rows for _, rows, _ in clock.arrivals[workers:])
    last, _, last_cpu = clock.arrivals[-1]
    return {
        "rows": len(dataset),
        "seconds": end - start,
        "rows_per_s": len(dataset) / (end - start),
        "steady_rows_per_s": steady_rows / (last - first) if last > first else float("nan"),
        # CPU seconds per row in the steady part, every process of the engine included:
        # what the run costs whatever else the machine is doing.
        "steady_cpu_ms_per_row": 1e3 * (last_cpu - first_cpu) / steady_rows,
        "top1": result.metrics["top1"],
    }


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
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--size", type=int, default=112)
    parser.add_argument("--runs", default="embedded:1,embedded:2,ray:1,ray:2")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--accuracy", action="store_true", help="the float vs static-int8 comparison instead"
    )
    args = parser.parse_args()
    if args.accuracy:
        return accuracy()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    pte, folder = program(args.size), images(args.images, args.size)
    results = {}
    for spec in args.runs.split(","):
        engine, workers = spec.split(":")
        if engine == "ray":
            import ray

            if not ray.is_initialized():
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        results[spec] = measure(pte, folder, engine, int(workers))
        r = results[spec]
        print(
            f"{spec:<12} {r['rows']} rows  {r['seconds']:6.2f} s  {r['rows_per_s']:7.1f} rows/s"
            f"  steady {r['steady_rows_per_s']:7.1f} rows/s"
            f"  {r['steady_cpu_ms_per_row']:6.2f} CPU ms/row  top1 {r['top1']:.3f}",
            flush=True,
        )

    def ratio(a: str, b: str, key: str) -> float | None:
        if a in results and b in results:
            return results[a][key] / results[b][key]
        return None

    def less_one(value: float | None) -> float | None:
        return None if value is None else value - 1

    cpu = "steady_cpu_ms_per_row"
    summary = {
        "embedded_2_over_1": ratio("embedded:2", "embedded:1", "steady_rows_per_s"),
        "ray_2_over_1": ratio("ray:2", "ray:1", "steady_rows_per_s"),
        "ray_overhead_1_worker": less_one(ratio("embedded:1", "ray:1", "steady_rows_per_s")),
        # From CPU time (robust on a loaded machine): the extra CPU a row costs on Ray, and
        # the 2-worker speed-up two idle cores would give at the measured CPU per row.
        "ray_cpu_overhead_1_worker": less_one(ratio("ray:1", "embedded:1", cpu)),
        "embedded_2_over_1_from_cpu": None
        if ratio("embedded:1", "embedded:2", cpu) is None
        else 2 * ratio("embedded:1", "embedded:2", cpu),
        "ray_2_over_1_from_cpu": None
        if ratio("ray:1", "ray:2", cpu) is None
        else 2 * ratio("ray:1", "ray:2", cpu),
    }
    for key, value in summary.items():
        if value is not None:
            print(f"{key:<24} {value:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
