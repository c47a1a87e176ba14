"""``pyexecutorch bench``: latency of one method in the pyexecutorch runtime."""

from __future__ import annotations

import argparse
import time

from pyexecutorch.cli import common

HELP = "measure a method's latency (min, median, p90)"
DESCRIPTION = """\
Run a method of a .pte repeatedly in the pyexecutorch runtime (numpy only, no torch)
and print its latency: min, median and 90th percentile over -n timed runs after
--warmup untimed ones. Inputs are random (from the method's metadata) unless given.
A stateful method (one that updates mutable buffers) keeps its state across runs."""
EXAMPLES = """\
examples:
  pyexecutorch bench model.pte
  pyexecutorch bench model.pte -n 1000 --warmup 20
  pyexecutorch bench model.pte --method decode --inputs tokens.npy pos.npy
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the .pte file")
    p.add_argument("--method", help="the method to time (default: forward, or the only method)")
    p.add_argument("-n", "--runs", type=int, default=100, help="timed runs (default 100)")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    p.add_argument(
        "--inputs",
        nargs="+",
        metavar="FILE",
        help="one .npy per input, or one .npz (default: random)",
    )
    common.add_seed_and_data_options(p)


def latency_stats(times: list[float]) -> dict[str, float]:
    """min, median and p90 (nearest rank) of ``times`` in seconds."""
    ordered = sorted(times)
    n = len(ordered)
    mid = n // 2
    median = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {
        "min": ordered[0],
        "median": median,
        "p90": ordered[min(n - 1, int(0.9 * n))],
        "runs": n,
    }


def run(args: argparse.Namespace) -> int:
    if args.runs < 1:
        raise common.UsageError(f"-n must be at least 1, got {args.runs}")
    if args.warmup < 0:
        raise common.UsageError(f"--warmup must be at least 0, got {args.warmup}")
    program = common.load_program(args.model, args.data)
    method_name = common.resolve_method(program, args.method, args.model)
    inputs, origin = common.method_inputs(args, program, method_name)
    start = time.perf_counter()
    method = common.load_method(program, method_name)
    load_s = time.perf_counter() - start
    if args.warmup:
        common.execute(method, inputs, clone_outputs=False)  # the first warm-up: errors as one line
    execute = method.execute
    for _ in range(args.warmup - 1):
        execute(inputs, clone_outputs=False)
    times = []
    if not args.warmup:
        common.execute(method, inputs, clone_outputs=False)  # check the inputs, untimed
    for _ in range(args.runs):
        t0 = time.perf_counter()
        execute(inputs, clone_outputs=False)
        times.append(time.perf_counter() - t0)
    s = latency_stats(times)
    hs = common.human_seconds
    print(f"{args.model} method {method_name!r}, inputs {origin}; load {hs(load_s)}")
    print(
        f"latency over {s['runs']} runs ({args.warmup} warm-up): "
        f"min {hs(s['min'])}  median {hs(s['median'])}  p90 {hs(s['p90'])}"
    )
    return 0
