"""Start-up: process start to first output, ours against the official runtime (issue 28).

Each measurement is a fresh Python process that imports the runtime, loads a full-size
program (``benchmarks/models_full.py`` at 224x224: the official exporter's XNNPACK and
portable programs, as ``bench_full_size.py`` makes and caches them), runs ``forward``
once on one image and reports, at that first output, the wall time since the parent
started it and the CPU time of the process (all its threads, interpreter start
included). Sides:

- ``numpy``: our runtime on its numpy tier (``PYEXECUTORCH_JIT=0``);
- ``compiled cold``: our compiled tier with an empty ``PYEXECUTORCH_CACHE_DIR`` (every
  compiled form this program needs compiles: what a first run on a new machine pays);
- ``compiled warm``: the same again, the machine code read from that cache;
- ``official``: the official runtime's pybindings
  (``executorch.extension.pybindings.portable_lib``; it takes torch tensors, so its
  process imports torch).

Python's own bytecode cache is warm in every case (a first priming run writes it under
the benchmark's temporary folder): ``cold`` means numba's cache only. Warm numbers are
the median of ``--repeats`` processes; cold ones one process each. Numba's threads are
the environment's (``--threads`` sets them, and the official runtime's, for both).

    python benchmarks/bench_startup.py                      # both models, both programs
    python benchmarks/bench_startup.py --models mobilenet_v2 --flavors xnnpack --no-cold
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import common  # noqa: F401 - sets up sys.path (tests/, benchmarks/)

HERE = Path(__file__).resolve().parent
MODELS = ("mobilenet_v2", "resnet18")
FLAVORS = ("xnnpack", "portable")

# The child: everything it does before printing counts. argv: side, program, parent's start.
_CHILD = textwrap.dedent(
    """
    import json, sys, time
    side, path, started = sys.argv[1], sys.argv[2], float(sys.argv[3])
    import numpy as np
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    if side == "official":
        import torch
        from executorch.extension.pybindings.portable_lib import _load_for_executorch
        out = _load_for_executorch(path).forward((torch.from_numpy(x),))[0]
        first = float(out.reshape(-1)[0])
    else:
        from pyexecutorch.portable_lib import _load_for_executorch
        out = _load_for_executorch(path).forward((x,))[0]
        first = float(np.asarray(out).reshape(-1)[0])
    wall, cpu = time.time() - started, time.process_time()
    print(json.dumps({"wall": wall, "cpu": cpu, "first": first}))
    """
)


def _child(side: str, pte: Path, env: dict[str, str]) -> dict[str, float]:
    """One process of ``side`` on ``pte``: its wall and CPU seconds to the first output."""
    started = time.time()
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, side, str(pte), repr(started)],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{side} on {pte.name} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _environment(scratch: Path, threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # (users' installs have bytecode)
    env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
    if threads is not None:
        for name in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[name] = str(threads)
    return env


def _programs(models: list[str], flavors: list[str], scratch: Path) -> dict[tuple[str, str], Path]:
    """The official exporter's programs, written where the children read them."""
    import bench_full_size  # noqa: PLC0415 - imports torch and the official exporter

    paths = {}
    for model in models:
        for flavor in flavors:
            path = scratch / f"{model}-{flavor}.pte"
            path.write_bytes(bench_full_size.pte(model, flavor))
            paths[model, flavor] = path
    return paths


def bench(
    models: list[str], flavors: list[str], repeats: int, cold: bool, threads: int | None
) -> list[dict]:
    """One row per (model, program, side): wall and CPU seconds to the first output."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as folder:
        scratch = Path(folder)
        env = _environment(scratch, threads)
        programs = _programs(models, flavors, scratch)
        numpy_env = {**env, "PYEXECUTORCH_JIT": "0"}
        first = next(iter(programs.values()))
        _child("numpy", first, numpy_env)  # (each side once: writes its bytecode)
        _child("official", first, env)
        for (model, flavor), pte in programs.items():
            cache = scratch / f"cache-{model}-{flavor}"
            jit_env = {**env, "PYEXECUTORCH_JIT": "1", "PYEXECUTORCH_CACHE_DIR": str(cache)}
            if cold:
                rows.append(_row(model, flavor, "compiled cold", [_child("ours", pte, jit_env)]))
            else:
                _child("ours", pte, jit_env)  # (fills the cache, unreported)
            sides = {
                "numpy": ("ours", numpy_env),
                "compiled warm": ("ours", jit_env),
                "official": ("official", env),
            }
            for label, (side, side_env) in sides.items():
                runs = [_child(side, pte, side_env) for _ in range(repeats)]
                rows.append(_row(model, flavor, label, runs))
    return rows


def _row(model: str, flavor: str, side: str, runs: list[dict]) -> dict:
    row = {
        "model": model,
        "program": flavor,
        "side": side,
        "wall_s": statistics.median(r["wall"] for r in runs),
        "cpu_s": statistics.median(r["cpu"] for r in runs),
        "first": runs[0]["first"],
        "runs": len(runs),
    }
    print(
        f"{model:13s} {flavor:9s} {side:14s} wall {row['wall_s']:7.2f} s  "
        f"cpu {row['cpu_s']:7.2f} s  (first output {row['first']:+.5f}, {len(runs)} runs)",
        flush=True,
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--flavors", default=",".join(FLAVORS))
    parser.add_argument("--repeats", type=int, default=3, help="processes per warm side")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold compiled runs")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args(argv)
    rows = bench(
        args.models.split(","),
        args.flavors.split(","),
        args.repeats,
        not args.no_cold,
        args.threads,
    )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
