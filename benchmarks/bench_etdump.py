"""ETDump cost: the time tracing adds per instruction, ours and the official runtime's.

A chain of ``--ops`` small float32 elementwise operators (``x = x * 1.0001 + 0.5`` and a
relu, on a 4x64 tensor, exported by the official exporter) runs ``--runs`` times in
each runtime with ETDump off, on, and on with a debug buffer (every intermediate
output copied). The extra time per instruction is (on - off) / instructions, median
over ``--repeat`` rounds; goal for ours: at most 1 us without the debug buffer.

    .venv/bin/python benchmarks/bench_etdump.py [--ops 150] [--runs 200] [--repeat 5]
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
DEBUG_BUFFER = 16 << 20


def chain_program(ops: int) -> tuple[bytes, object]:
    import torch

    class Chain(torch.nn.Module):
        def forward(self, x):
            for _ in range(ops // 3):
                x = torch.relu(x * 1.0001 + 0.5)
            return x

    import executorch.exir as exir

    x = torch.randn(4, 64)
    return exir.to_edge(torch.export.export(Chain(), (x,))).to_executorch().buffer, x


def per_run(run, runs: int) -> float:
    run()  # warm-up
    t0 = time.perf_counter()
    for _ in range(runs):
        run()
    return (time.perf_counter() - t0) / runs


def ours(pte: bytes, x, runs: int, **load) -> float:
    from pyexecutorch.runtime import Runtime

    method = Runtime.get().load_program(pte, **load).load_method("forward")
    inputs = [x.numpy()]
    return per_run(lambda: method.execute(inputs), runs)


def theirs(pte: bytes, x, runs: int, **load) -> float:
    from executorch.extension.pybindings import portable_lib

    module = portable_lib._load_for_executorch_from_buffer(pte, **load)
    inputs = [x]
    return per_run(lambda: module.forward(inputs), runs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=150)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from pyexecutorch.schema import decode_pte

    pte, x = chain_program(args.ops)
    n = len(decode_pte(pte).program.execution_plan[0].chains[0].instructions)
    # Few runs with a debug buffer: every run appends its outputs to the one buffer.
    debug_runs = max(1, min(args.runs, DEBUG_BUFFER // (n * 1024 * 2)))
    modes = {
        "off": ({}, args.runs),
        "on": ({"enable_etdump": True}, args.runs),
        "on+debug": ({"enable_etdump": True, "debug_buffer_size": DEBUG_BUFFER}, debug_runs),
    }
    rows = {}
    for name, runner in (("pyexecutorch", ours), ("official", theirs)):
        samples = {m: [] for m in modes}
        for _ in range(args.repeat):
            for mode, (load, runs) in modes.items():
                samples[mode].append(runner(pte, x, runs, **load))
        rows[name] = {m: statistics.median(v) for m, v in samples.items()}
    print(f"{n} instructions per run (4x64 float32 elementwise chain), median of {args.repeat}")
    print(
        f"{'runtime':<14}{'off us/run':>12}{'on us/run':>12}{'+us/instr':>11}{'debug +us/instr':>17}"
    )
    for name, r in rows.items():
        extra = (r["on"] - r["off"]) / n * 1e6
        debug = (r["on+debug"] - r["off"]) / n * 1e6
        print(
            f"{name:<14}{r['off'] * 1e6:>12.1f}{r['on'] * 1e6:>12.1f}{extra:>11.2f}{debug:>17.2f}"
        )
    ours_extra = (rows["pyexecutorch"]["on"] - rows["pyexecutorch"]["off"]) / n * 1e6
    theirs_extra = (rows["official"]["on"] - rows["official"]["off"]) / n * 1e6
    print(
        f"tracing cost per instruction: ours {ours_extra:.2f} us (goal <= 1 us), "
        f"official {theirs_extra:.2f} us, ratio {ours_extra / theirs_extra:.1f}x"
        if theirs_extra > 0
        else f"tracing cost per instruction: ours {ours_extra:.2f} us (goal <= 1 us)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
