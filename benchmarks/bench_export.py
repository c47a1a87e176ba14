"""Export time: pyexecutorch vs the official exporter on the same ExportedProgram.

For each model of the suite (tests/models.py): ``to_edge`` + ``to_executorch``
+ serialization (``.buffer``), best of ``--repeat`` runs after one warm-up, for
``pyexecutorch.exir`` and for ``executorch.exir`` (1.5.1), and the ratio
ours/official (goal: at most 0.5).

    .venv/bin/python benchmarks/bench_export.py [--repeat N] [names...]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _quiet() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)


def ours(programs, constant_methods):
    from pyexecutorch.exir import to_edge

    return to_edge(programs, constant_methods=constant_methods or None).to_executorch().buffer


def theirs(programs, constant_methods):
    import executorch.exir as exir

    return exir.to_edge(programs, constant_methods=constant_methods or None).to_executorch().buffer


def best_time(fn, programs, constant_methods, repeat: int) -> float:
    fn(programs, constant_methods)  # warm-up (caches, lazy imports)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(programs, constant_methods)
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", help="suite cases (default: all the official exporter handles)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    _quiet()
    from tests import models, official

    official.silence_noise()
    import executorch.exir  # noqa: F401 - import once, outside the timings

    _quiet()
    cases = (
        [models.get_case(n) for n in args.names]
        if args.names
        else models.cases(official_exportable=True)
    )
    print(f"{'model':26s} {'ours (ms)':>10s} {'official (ms)':>14s} {'ratio':>7s}")
    ratios = []
    tot_ours = tot_theirs = 0.0
    for case in cases:
        programs = models.export(case)
        t_ours = best_time(ours, programs, case.constant_methods, args.repeat)
        try:
            t_theirs = best_time(theirs, programs, case.constant_methods, args.repeat)
        except Exception as e:  # the official exporter refuses some programs
            print(f"{case.name:26s} {t_ours * 1e3:10.1f} {'fails: ' + type(e).__name__:>14s}")
            continue
        ratio = t_ours / t_theirs
        ratios.append(ratio)
        tot_ours += t_ours
        tot_theirs += t_theirs
        print(f"{case.name:26s} {t_ours * 1e3:10.1f} {t_theirs * 1e3:14.1f} {ratio:7.2f}")
    if ratios:
        print(
            f"{'total':26s} {tot_ours * 1e3:10.1f} {tot_theirs * 1e3:14.1f} {tot_ours / tot_theirs:7.2f}"
            f"   (geometric mean of ratios {statistics.geometric_mean(ratios):.2f}, worst {max(ratios):.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
