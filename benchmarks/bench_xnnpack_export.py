"""Our XNNPACK exporter against the official one: the same runtime on both programs.

For every model (the suite cases that the official XNNPACK exporter handles, the
architectures of tests/architectures.py, and with --large the large benchmark models),
both .pte files are made from the same nn.Module: ours by
``pyexecutorch.exir.to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])``,
the official one by ``executorch.exir`` with its XnnpackPartitioner (cached on disk).
Then, in one run:

- the official runtime's latency on our .pte and on the official .pte, measured in
  alternating rounds so that load changes on a shared machine hit both alike, and
  the ratio (goal: <= 1.05);
- the .pte sizes and their ratio (goal: within 1%);
- our runtime's latency on both;
- whether the official runtime on our .pte matches eager;
- the threads each side really uses: the official XNNPACK threadpool's size, numpy's
  BLAS threads (threadpoolctl), and the process CPU time over wall time while each
  side runs (about 1.0 for one busy thread).

    python benchmarks/bench_xnnpack_export.py                 # all models (~3 minutes)
    python benchmarks/bench_xnnpack_export.py --models resnet18,mobilenet_v2 --budget 1
    python benchmarks/bench_xnnpack_export.py --threads 2 --large --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
import warnings

import common  # noqa: F401 - sets up sys.path (tests/, benchmarks/)
import numpy as np
import torch
from common import fmt_us

from tests import architectures, models, official

# The official XNNPACK exporter fails on these models.
OFFICIAL_FAILS = {"cond"}
# A side whose median per-call time differs by more than this is reported.
RATIO_GOAL = 1.05
SIZE_GOAL = 0.01


def _numpy(inputs) -> list:
    return [x.numpy() if isinstance(x, torch.Tensor) else x for x in inputs]


def export_ours(case) -> bytes:
    from pyexecutorch.backends.xnnpack import XnnpackPartitioner  # noqa: PLC0415
    from pyexecutorch.exir import to_edge_transform_and_lower  # noqa: PLC0415

    edge = to_edge_transform_and_lower(
        models.export(case),
        partitioner=[XnnpackPartitioner()],
        constant_methods=case.constant_methods or None,
    )
    return edge.to_executorch().buffer


def _batch(fn, budget: float) -> int:
    """How many calls of ``fn`` take about ``budget`` seconds (at least 1)."""
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    return max(1, min(10_000, int(budget / once)))


def paired(fns: dict[str, object], budget: float, rounds: int = 10) -> dict[str, dict]:
    """Per-call latency of each function, measured in ``rounds`` alternating rounds of
    about ``budget / rounds`` seconds each. Per side: the median and the minimum over
    rounds of the mean wall time of a call, the median CPU time of a call (the process's,
    all threads), and CPU time over wall time."""
    for fn in fns.values():
        for _ in range(2):
            fn()  # warm-up
    per_round = budget / rounds
    counts = {k: _batch(fn, per_round) for k, fn in fns.items()}
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            n = counts[k]
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                fn()
            c1, w1 = time.process_time(), time.perf_counter()
            wall[k].append((w1 - w0) / n)
            cpu[k].append((c1 - c0) / n)
    return {
        k: {
            "median": statistics.median(wall[k]),
            "min": min(wall[k]),
            "cpu_median": statistics.median(cpu[k]),
            "cpu_per_wall": sum(cpu[k]) / sum(wall[k]) if sum(wall[k]) else None,
        }
        for k in fns
    }


def check_official_on_ours(case, runner, official_runner) -> str:
    """``"ok"`` when the official runtime on our program matches eager (first call);
    ``"ok (as official)"`` where it differs from eager exactly as on the official
    program (an official kernel that is not eager's: gelu tanh in XNNPACK, integer
    remainder)."""
    inputs = list(case.inputs())
    try:
        got = runner.run(inputs)
        try:
            official.assert_close(case, got, official.eager_outputs(case))
        except AssertionError:
            official.assert_close(case, got, official_runner.run(inputs))
            return "ok (as official)"
    except AssertionError as e:
        return "mismatch: " + str(e).strip().splitlines()[0][:80]
    except Exception as e:  # noqa: BLE001 - report and go on
        return f"error: {type(e).__name__}: {str(e)[:80]}"
    return "ok"


def bench_model(case, budget: float) -> dict:
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415

    row: dict = {"model": case.name}
    off = official.official_export_xnnpack(case)
    if off is None:
        row["error"] = "the official XNNPACK export fails"
        return row
    start = time.perf_counter()
    try:
        ours = export_ours(case)
    except Exception as e:  # noqa: BLE001 - report and go on with the other models
        row["error"] = f"our export: {type(e).__name__}: {str(e).strip().splitlines()[0][:100]}"
        return row
    row["export_ours_s"] = time.perf_counter() - start
    row["size_ours"], row["size_official"] = len(ours), len(off)
    r_ours, r_off = official.official_runner(ours), official.official_runner(off)
    row["check"] = check_official_on_ours(case, r_ours, r_off)
    # Separate input copies: the official runtime may write into borrowed inputs.
    t1 = [x.clone() if isinstance(x, torch.Tensor) else x for x in case.inputs()]
    t2 = [x.clone() if isinstance(x, torch.Tensor) else x for x in case.inputs()]
    lat = paired(
        {
            "official_on_ours": lambda: r_ours.module.forward(t1),
            "official_on_official": lambda: r_off.module.forward(t2),
        },
        budget,
    )
    row.update(lat)
    try:
        m_ours = Runtime.get().load_program(ours).load_method("forward")
        m_off = Runtime.get().load_program(off).load_method("forward")
        n1, n2 = _numpy(case.inputs()), _numpy(case.inputs())
        row.update(
            paired(
                {
                    "ours_on_ours": lambda: m_ours.execute(n1, clone_outputs=False),
                    "ours_on_official": lambda: m_off.execute(n2, clone_outputs=False),
                },
                budget / 2,
                rounds=4,
            )
        )
    except Exception as e:  # noqa: BLE001
        row["ours_error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:100]}"
    return row


def _stat(row: dict, key: str, stat: str = "min") -> float | None:
    v = row.get(key)
    return v[stat] if v else None


def _ratio(a, b) -> float | None:
    return a / b if a and b else None


def _side_ratio(row: dict, ours: str, theirs: str, stat: str = "min") -> float | None:
    return _ratio(_stat(row, ours, stat), _stat(row, theirs, stat))


def _fmt_ratio(r: float | None, goal: float | None = None) -> str:
    if r is None:
        return "-"
    mark = "" if goal is None or r <= goal else "!"
    return f"{r:.3f}{mark}"


HEADER = (
    f"{'model':<24}{'size ours':>11}{'size off':>11}{'ratio':>8}"
    f"{'off rt/ours':>13}{'off rt/off':>12}{'ratio':>8}{'cpu ratio':>10}{'cpu/wall':>10}"
    f"{'our rt/ours':>13}{'our rt/off':>12}{'ratio':>8}  check"
)


def table_row(row: dict) -> str:
    if "error" in row:
        return f"{row['model']:<24}{row['error']}"
    size = row["size_ours"] / row["size_official"]
    busy = [row[k]["cpu_per_wall"] or 0.0 for k in ("official_on_ours", "official_on_official")]
    return (
        f"{row['model']:<24}{row['size_ours']:>11,}{row['size_official']:>11,}"
        f"{_fmt_ratio(size, 1 + SIZE_GOAL):>8}"
        f"{fmt_us(_stat(row, 'official_on_ours')):>13}"
        f"{fmt_us(_stat(row, 'official_on_official')):>12}"
        f"{_fmt_ratio(_side_ratio(row, 'official_on_ours', 'official_on_official'), RATIO_GOAL):>8}"
        f"{_fmt_ratio(_side_ratio(row, 'official_on_ours', 'official_on_official', 'cpu_median'), RATIO_GOAL):>10}"
        f"{busy[0]:>5.2f}/{busy[1]:<4.2f}"
        f"{fmt_us(_stat(row, 'ours_on_ours')):>13}{fmt_us(_stat(row, 'ours_on_official')):>12}"
        f"{_fmt_ratio(_side_ratio(row, 'ours_on_ours', 'ours_on_official')):>8}"
        f"  {row.get('ours_error', row['check'])[:60]}"
    )


def threads(requested: int) -> dict:
    """Set and report the thread counts: torch eager, the official XNNPACK threadpool,
    numpy's BLAS."""
    torch.set_num_threads(requested)
    from executorch.extension.pybindings import portable_lib  # noqa: PLC0415

    before = portable_lib._threadpool_get_thread_count()
    portable_lib._unsafe_reset_threadpool(requested)
    out = {
        "requested": requested,
        "official_threadpool_default": before,
        "official_threadpool": portable_lib._threadpool_get_thread_count(),
        "torch": torch.get_num_threads(),
    }
    try:
        from threadpoolctl import threadpool_info, threadpool_limits  # noqa: PLC0415

        threadpool_limits(requested)
        out["numpy_blas"] = {
            f"{i['internal_api']} ({i.get('threading_layer', '?')})": i["num_threads"]
            for i in threadpool_info()
        }
    except ImportError:
        out["numpy_blas"] = "threadpoolctl not installed"
    return out


def summary(rows: list[dict]) -> list[str]:
    ok = [r for r in rows if "error" not in r]
    out = [f"{len(ok)} of {len(rows)} models compared"]
    for stat, what in (("min", "best round, wall"), ("cpu_median", "median CPU time")):
        pairs = [
            (r["model"], x)
            for r in ok
            if (x := _side_ratio(r, "official_on_ours", "official_on_official", stat))
        ]
        if pairs:
            worst = max(pairs, key=lambda p: p[1])
            ratios = [x for _, x in pairs]
            out.append(
                f"official runtime, ours / official ({what}): geomean "
                f"{np.exp(np.mean(np.log(ratios))):.3f}, max {worst[1]:.3f} ({worst[0]}), "
                f"{sum(x <= RATIO_GOAL for x in ratios)} of {len(ratios)} within {RATIO_GOAL}"
            )
    sizes = [r["size_ours"] / r["size_official"] for r in ok]
    if sizes:
        out.append(
            f".pte size, ours / official: min {min(sizes):.3f}, max {max(sizes):.3f}, "
            f"{sum(x <= 1 + SIZE_GOAL for x in sizes)} of {len(sizes)} at most 1% larger, "
            f"{sum(abs(x - 1) <= SIZE_GOAL for x in sizes)} within 1%"
        )
    busy = {}
    for key in ("official_on_ours", "official_on_official", "ours_on_ours", "ours_on_official"):
        vals = [r[key]["cpu_per_wall"] for r in ok if r.get(key) and r[key]["cpu_per_wall"]]
        if vals:
            busy[key] = statistics.mean(vals)
    if busy:
        out.append(
            "CPU time / wall time while timed (threads kept busy; below 1 on a shared machine): "
            + ", ".join(f"{k} {v:.2f}" for k, v in busy.items())
        )
    wrong = [r["model"] for r in ok if not r["check"].startswith("ok")]
    out.append(f"official runtime on our .pte matches eager: {len(ok) - len(wrong)} of {len(ok)}")
    if wrong:
        out.append(f"  not matching: {', '.join(wrong)}")
    return out


def select(args) -> list:
    every = [c for c in models.cases(official_exportable=True) if c.name not in OFFICIAL_FAILS]
    every += architectures.ARCH_CASES
    if args.large:
        from benchmarks import models_large  # noqa: PLC0415

        every += list(models_large.LARGE_CASES)
    if not args.models:
        return every
    by_name = {c.name: c for c in every}
    names = args.models.split(",")
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown models: {', '.join(unknown)}")
    return [by_name[n] for n in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--large", action="store_true", help="add the large benchmark models")
    parser.add_argument(
        "--budget", type=float, default=0.4, help="seconds of timing per runtime and model"
    )
    parser.add_argument("--threads", type=int, default=1, help="threads of every side (default 1)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    official.silence_noise()
    warnings.filterwarnings("ignore")
    # (the partitioner's one-line notes on programs it cannot delegate from)
    logging.getLogger("pyexecutorch.backends.xnnpack").setLevel(logging.ERROR)
    cases = select(args)
    info = threads(args.threads)
    print(
        f"threads: official XNNPACK threadpool {info['official_threadpool']} "
        f"(default {info['official_threadpool_default']}), numpy BLAS {info['numpy_blas']}, "
        f"torch {info['torch']}"
    )
    print(
        "latency: microseconds per call, the best of alternating rounds (wall time); off rt: the\n"
        "official runtime, our rt: our runtime, on our .pte / on the official .pte; cpu ratio: the\n"
        "same ratio on the median CPU time per call; cpu/wall: CPU time over wall time of the\n"
        f"official runtime on ours/official; '!' marks a ratio over {RATIO_GOAL} (latency) or 1.01 (size)"
    )
    print(HEADER, flush=True)
    rows = []
    for case in cases:
        try:
            row = bench_model(case, args.budget)
        except Exception as e:  # noqa: BLE001 - report and go on with the other models
            row = {"model": case.name, "error": f"{type(e).__name__}: {str(e)[:100]}"}
        rows.append(row)
        print(table_row(row), flush=True)
    print()
    print("\n".join(summary(rows)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": info, "models": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
