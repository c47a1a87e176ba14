"""Soak: many executions and many load/run/unload cycles, watching memory, fds and maps.

    python benchmarks/soak.py                       # 100,000 executions, 10,000 cycles
    python benchmarks/soak.py --executions 2000 --cycles 200

Part 1 runs one program with planned and dynamic-shape tensors (the corpus's
``dynamic_batch``, its batch size changing every call) ``--executions`` times.
Part 2 loads every corpus program (both exporters, XNNPACK and example-backend
delegates, external data), runs each method once and drops everything,
``--cycles`` times in all. Each part samples resident memory (RSS), open file
descriptors and memory maps from ``/proc/self`` and reports them after a warm-up
(the first fifth); the exit status is 1 when any grows past its allowance.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

RSS_ALLOWANCE = 16 << 20  # bytes of growth after warm-up
MAPS_ALLOWANCE = 8  # memory maps (the allocator may add an arena or two)


def sample() -> dict[str, int]:
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    return {"rss": rss, "fds": len(os.listdir("/proc/self/fd")), "maps": maps}


def summary(samples: list[dict[str, int]]) -> dict[str, object]:
    warm = samples[len(samples) // 5 :]
    out: dict[str, object] = {}
    for key in ("rss", "fds", "maps"):
        values = [s[key] for s in warm]
        out[key] = {
            "start": samples[0][key],
            "after_warmup": values[0],
            "end": values[-1],
            "max": max(values),
            "growth_after_warmup": max(values) - values[0],
        }
    out["ok"] = (
        out["rss"]["growth_after_warmup"] <= RSS_ALLOWANCE
        and out["fds"]["growth_after_warmup"] == 0
        and out["maps"]["growth_after_warmup"] <= MAPS_ALLOWANCE
    )
    return out


def executions(n: int, every: int) -> dict[str, object]:
    from pyexecutorch.runtime import Runtime
    from tests.reliability.harness import CORPUS

    program = Runtime.get().load_program(CORPUS / "official_dynamic_batch.pte")
    method = program.load_method("forward")
    plan = program.pte_file.program.execution_plan[0]
    sizes = list(plan.values[plan.inputs[0]].val.sizes)
    rng = np.random.default_rng(0)
    batches = [
        rng.standard_normal([b, *sizes[1:]]).astype(np.float32) for b in range(1, sizes[0] + 1)
    ]
    samples = [sample()]
    start = time.perf_counter()
    for i in range(n):
        method.execute([batches[i % len(batches)]])
        if (i + 1) % every == 0:
            samples.append(sample())
    seconds = time.perf_counter() - start
    return {"executions": n, "seconds": round(seconds, 1), **summary(samples)}


def cycles(n: int, every: int) -> dict[str, object]:
    from pyexecutorch import portable_lib as pl
    from pyexecutorch.runtime import Runtime
    from tests.reliability.harness import CORPUS, inputs_for, seeds

    corpus = seeds()
    rng = np.random.default_rng(0)
    samples = [sample()]
    start = time.perf_counter()
    for i in range(n):
        seed = corpus[i % len(corpus)]
        if i % 3 == 2:  # the pybindings' names, from the file on disk
            path = CORPUS / seed.name
            data = [str(CORPUS / f"{path.stem}.0.ptd")] if seed.data_files else None
            module = pl._load_for_executorch(str(path), data_path=data[0] if data else None)
            for name in module.method_names():
                plan = next(
                    p for p in module._program.pte_file.program.execution_plan if p.name == name
                )
                module.run_method(name, inputs_for(plan, rng))
            del module
        else:
            program = Runtime.get().load_program(seed.pte, data_files=list(seed.data_files))
            for plan in program.pte_file.program.execution_plan:
                program.load_method(plan.name).execute(inputs_for(plan, rng))
            del program
        if (i + 1) % every == 0:
            gc.collect()
            samples.append(sample())
    seconds = time.perf_counter() - start
    return {"cycles": n, "programs": len(corpus), "seconds": round(seconds, 1), **summary(samples)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--executions", type=int, default=100_000)
    p.add_argument("--cycles", type=int, default=10_000)
    args = p.parse_args()
    report = {
        "executions": executions(args.executions, max(args.executions // 50, 1)),
        "cycles": cycles(args.cycles, max(args.cycles // 50, 1)),
    }
    print(json.dumps(report, indent=1))
    sys.exit(0 if all(part["ok"] for part in report.values()) else 1)


if __name__ == "__main__":
    main()
