"""Quantized programs: our exporter against the official one, and our runtime on them.

Every quantized case of the export tests (tests/backends/_quantized_models.py): static
int8 CNNs (our XNNPACKQuantizer, per-channel weights), dynamically quantized
transformers, and a Llama-shaped decoder with 4-bit groupwise linears and int8
embeddings (torchao ``quantize_``). The same quantized graph is lowered to XNNPACK by our
exporter and by the official one (cached). In one run, per case:

- the official runtime on our .pte and on the official .pte (alternating rounds), the
  ratio ours / official (goal <= 1.05), and the largest output difference between the two;
- both .pte sizes and their ratio (goal: within 1%); ``--sizes`` adds, per case, every
  category of bytes (``pyexecutorch inspect --sizes``) where the two files differ;
- our runtime on our quantized XNNPACK .pte next to our XNNPACK .pte of the float model
  (``--portable`` adds our portable, undelegated quantized .pte).

Everything runs at one thread: the official threadpool and our BLAS and compiled loops are
set to 1, and the table prints each side's measured CPU time over wall time.

    python benchmarks/bench_quantized.py      # ~10 minutes on the shared 2-core machine,
                                              # most of it torch.export's decompositions
    python benchmarks/bench_quantized.py --cases mobilenet_v2-static,llama-llm4 --sizes
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

import common  # noqa: F401 - sets up sys.path (tests/, benchmarks/)
import numpy as np
import torch
from bench_xnnpack_export import paired
from common import fmt_us

from pyexecutorch.cli.sizes import breakdown
from tests import official

STATIC = ("resnet18", "mobilenet_v2", "mobilenet_v3", "efficientnet", "squeezenet")
STATIC += ("shufflenet_v2", "convnext")
DYNAMIC = ("bert", "vit", "llama", "gpt2")
CASES = [f"{a}-static" for a in STATIC] + [f"{a}-dynamic" for a in DYNAMIC] + ["llama-llm4"]
RATIO_GOAL, SIZE_GOAL = 1.05, 0.01


def _ours(program, partitioned: bool, fuse: bool = False) -> bytes:
    from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from pyexecutorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower

    if partitioned:
        edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(program)
    return edge.to_executorch(ExecutorchBackendConfig(do_quant_fusion_and_const_prop=fuse)).buffer


def _our_runner(pte: bytes, inputs):
    from pyexecutorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    args = [x.numpy() for x in inputs]
    return lambda: method.execute(args)


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x.astype(np.float64) - y))) for x, y in zip(a, b, strict=True))


def _first_line(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"


def _time_ours(q, ours: bytes, budget: float, portable: bool) -> dict:
    """Our runtime on our quantized XNNPACK .pte, on the float model's (and the portable)."""
    float_pte = _ours(torch.export.export(q.float_model, q.inputs), True)
    fns = {"quantized": _our_runner(ours, q.inputs), "float": _our_runner(float_pte, q.inputs)}
    if portable:
        fns["portable"] = _our_runner(_ours(q.program(), False), q.inputs)
    return paired(fns, budget)


def _time_official(ours: bytes, theirs: bytes, inputs: tuple, budget: float) -> dict:
    """The official runtime on both files: the largest output difference, and timings."""
    runners = {}
    for side, pte in (("ours", ours), ("official", theirs)):
        try:
            runners[side] = official.official_runner(pte)
            runners[side].run(inputs)
        except Exception as e:
            raise RuntimeError(f"the official runtime fails on the {side} .pte: {e}") from e
    diff = _max_diff(runners["ours"].run(inputs), runners["official"].run(inputs))
    fns = {side: (lambda r=r: r.run(inputs)) for side, r in runners.items()}
    return {"diff": diff, "official_rt": paired(fns, budget, rounds=20)}


def bench(name: str, budget: float, portable: bool, keep: Path | None) -> dict:
    """One case. Our runtime's columns are left out, with the error, where it fails."""
    from tests.backends._quantized_models import official_pte, quantized_case

    t0 = time.perf_counter()
    arch, recipe = name.rsplit("-", 1)
    q = quantized_case(arch, recipe)
    ours = _ours(q.program(), True, q.fuse)
    theirs = official_pte(q, "xnnpack")
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{name}.ours.pte").write_bytes(ours)
        (keep / f"{name}.official.pte").write_bytes(theirs)
    result = {"name": name, "size": (len(ours), len(theirs))}
    result["sizes"] = (breakdown(ours), breakdown(theirs))
    try:
        result.update(_time_official(ours, theirs, tuple(q.inputs), budget))
    except Exception as e:  # noqa: BLE001 - the sizes still stand
        return {**result, "official_error": _first_line(e), "seconds": time.perf_counter() - t0}
    try:
        our_times, our_error = _time_ours(q, ours, budget, portable), None
    except Exception as e:  # noqa: BLE001 - the official columns still stand
        our_times, our_error = {}, _first_line(e)
    return {
        **result,
        "our_rt": our_times,
        "our_error": our_error,
        "seconds": time.perf_counter() - t0,
    }


HEADER = (
    f"{'case':<20} {'off rt ours':>11} {'official':>9} {'ratio':>6} {'wall':>6} {'max|d|':>8}"
    f"  {'size ours':>9} {'official':>9} {'ratio':>6}  {'ours q':>9} {'ours fp':>9}"
    f" {'q/fp':>5}  {'cpu/wall':>9} {'s':>4}"
)


def _ratio(r: dict) -> float:
    """The official runtime's CPU time per call on our .pte over on the official .pte."""
    off = r["official_rt"]
    return off["ours"]["cpu_median"] / off["official"]["cpu_median"]


def row(r: dict, portable: bool) -> str:
    size_ratio = r["size"][0] / r["size"][1]
    if "official_error" in r:
        return (
            f"{r['name']:<20} {'':>49}  {r['size'][0]:>9} {r['size'][1]:>9} {size_ratio:6.3f}"
            f"  {r['official_error']}"
        )
    off, o = r["official_rt"], r["our_rt"]
    ratio = _ratio(r)
    wall = off["ours"]["min"] / off["official"]["min"]
    cpu = max(t["cpu_per_wall"] or 0 for t in (*off.values(), *o.values()))
    flags = ("" if ratio <= RATIO_GOAL else " time>goal") + (
        "" if abs(size_ratio - 1) <= SIZE_GOAL else " size>1%"
    )
    official_part = (
        f"{r['name']:<20} {fmt_us(off['ours']['cpu_median']):>11}"
        f" {fmt_us(off['official']['cpu_median']):>9} {ratio:6.3f} {wall:6.3f} {r['diff']:8.1e}"
        f"  {r['size'][0]:>9} {r['size'][1]:>9} {size_ratio:6.3f}"
    )
    if r["our_error"]:
        return f"{official_part}  our runtime failed: {r['our_error']}{flags}"
    q_fp = o["quantized"]["cpu_median"] / o["float"]["cpu_median"]
    extra = f"  portable {fmt_us(o['portable']['cpu_median'])}" if portable else ""
    return (
        f"{official_part}  {fmt_us(o['quantized']['cpu_median']):>9}"
        f" {fmt_us(o['float']['cpu_median']):>9} {q_fp:5.2f}"
        f"  {cpu:9.2f} {r['seconds']:4.0f}{extra}{flags}"
    )


def size_lines(r: dict) -> list[str]:
    """The categories of bytes where our file and the official one differ, largest first."""
    a, b = r["sizes"]
    keys = set(a.bytes) | set(b.bytes)
    diffs = sorted(
        ((a.bytes.get(k, 0) - b.bytes.get(k, 0), k) for k in keys), key=lambda d: -abs(d[0])
    )
    lines = [f"  {r['name']}: {a.size - b.size:+d} bytes (ours - official)"]
    lines += [f"    {d:+7d}  {k}" for d, k in diffs if d]
    counts = sorted(set(a.counts) | set(b.counts))
    lines += [
        f"    count {k}: {a.counts.get(k, 0)} vs {b.counts.get(k, 0)}"
        for k in counts
        if a.counts.get(k, 0) != b.counts.get(k, 0)
    ]
    return lines


def _select(spec: str) -> list[str]:
    wanted = [s for s in spec.split(",") if s]
    unknown = [s for s in wanted if not any(s in c for c in CASES)]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; cases: {', '.join(CASES)}")
    return [c for c in CASES if any(s in c for s in wanted)]


def _set_one_thread() -> str:
    from executorch.extension.pybindings import portable_lib as official_lib

    from pyexecutorch.portable_lib import api as ours

    official_lib._unsafe_reset_threadpool(1)
    ours._unsafe_reset_threadpool(1)
    torch.set_num_threads(1)
    return (
        f"threads: official threadpool {official_lib._threadpool_get_thread_count()},"
        f" our BLAS {ours._threadpool_get_thread_count()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases", default="", help="comma-separated cases or parts of names (default: all)"
    )
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per side and case")
    parser.add_argument("--sizes", action="store_true", help="print where the bytes differ")
    parser.add_argument("--portable", action="store_true", help="also time our portable .pte")
    parser.add_argument("--keep", type=Path, help="write both .pte files of each case here")
    args = parser.parse_args(argv)
    cases = _select(args.cases) if args.cases else CASES
    official.silence_noise()
    import executorch.exir  # noqa: F401 - before ours define the same operators
    import executorch.kernels.quantized  # noqa: F401 - before ours define the out variants

    print(_set_one_thread())
    print(
        "latency: CPU microseconds per call (the process's CPU time: both sides run one\n"
        "thread, and CPU time does not count the waits of a shared machine), median of\n"
        "alternating rounds; ratio: of those; wall: of the best rounds' wall times.\n"
        "off rt: the official runtime on our .pte / on the official .pte, and the largest\n"
        "output difference between the two; sizes in bytes; ours q / ours fp: our runtime on\n"
        "our quantized XNNPACK .pte and on our XNNPACK .pte of the float model; cpu/wall:\n"
        "the largest CPU time over wall time of any timed side (1.00: one thread); s: seconds\n"
        "the case took.\n"
    )
    print(HEADER)
    results = []
    for name in cases:
        try:
            r = bench(name, args.budget, args.portable, args.keep)
        except Exception as e:  # noqa: BLE001 - report the case and go on with the others
            print(f"{name:<20} failed: {_first_line(e)}")
            traceback.print_exc(limit=3, file=sys.stderr)
            continue
        results.append(r)
        print(row(r, args.portable), flush=True)
    if results:
        ratios = [_ratio(r) for r in results if "official_rt" in r] or [float("nan")]
        sizes = [r["size"][0] / r["size"][1] for r in results]
        print(
            f"\ngeomean: latency ratio {float(np.exp(np.mean(np.log(ratios)))):.3f},"
            f" size ratio {float(np.exp(np.mean(np.log(sizes)))):.3f}"
        )
    if args.sizes:
        print(
            "\nwhere the bytes differ (pyexecutorch inspect --sizes --against;"
            " counts over stored segments):"
        )
        for r in results:
            print("\n".join(size_lines(r)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
