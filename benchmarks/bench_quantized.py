"""Quantized programs: our exporter against the official one, and our runtime on them.

For each quantized architecture (tests/backends/_quantized_models.py: static int8
CNNs from our XNNPACKQuantizer, a dynamically quantized transformer, a Llama-shaped
decoder with 4-bit groupwise linears and int8 embeddings from torchao ``quantize_``),
the same quantized graph is lowered to XNNPACK by our exporter and by the official
one (cached). In one run:

- the official runtime's latency on our .pte and on the official .pte (alternating
  rounds), and the ratio ours / official (goal <= 1.05);
- both .pte sizes and their ratio (goal: within 1%);
- our runtime's latency on our quantized XNNPACK .pte, on our portable (undelegated)
  quantized .pte, and on our XNNPACK .pte of the float model.

    python benchmarks/bench_quantized.py                       # ~3 minutes
    python benchmarks/bench_quantized.py --models mobilenet_v2-static --budget 1
"""

from __future__ import annotations

import argparse
import sys

import common  # noqa: F401 - sets up sys.path (tests/, benchmarks/)
import torch
from bench_xnnpack_export import paired
from common import fmt_us

import official

CASES = ["mobilenet_v2-static", "resnet18-static", "gpt2-dynamic", "llama-llm4"]
RATIO_GOAL, SIZE_GOAL = 1.05, 0.01


def _ours(program, partitioned: bool, fuse: bool = False) -> bytes:
    from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from pyexecutorch.exir import to_edge, to_edge_transform_and_lower

    if partitioned:
        edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(program)
    from pyexecutorch.exir import ExecutorchBackendConfig

    return edge.to_executorch(ExecutorchBackendConfig(do_quant_fusion_and_const_prop=fuse)).buffer


def _our_runner(pte: bytes, inputs):
    from pyexecutorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    args = [x.numpy() for x in inputs]
    return lambda: method.execute(args)


def bench(name: str, budget: float) -> dict:
    from backends._quantized_models import official_pte, quantized_case

    arch, recipe = name.rsplit("-", 1)
    q = quantized_case(arch, recipe)
    ours = _ours(q.program(), True, q.fuse)
    portable = _ours(q.program(), False)
    float_pte = _ours(torch.export.export(q.float_model, q.inputs), True)
    theirs = official_pte(q, "xnnpack")
    off_ours, off_theirs = official.official_runner(ours), official.official_runner(theirs)
    t = torch_inputs = tuple(q.inputs)
    official_times = paired(
        {"ours": lambda: off_ours.run(t), "official": lambda: off_theirs.run(torch_inputs)},
        budget,
    )
    our_times = paired(
        {
            "quantized_xnnpack": _our_runner(ours, q.inputs),
            "quantized_portable": _our_runner(portable, q.inputs),
            "float_xnnpack": _our_runner(float_pte, q.inputs),
        },
        budget,
    )
    return {
        "name": name,
        "official_rt": official_times,
        "size": (len(ours), len(theirs)),
        "our_rt": our_times,
    }


def row(r: dict) -> str:
    off = r["official_rt"]
    ratio = off["ours"]["min"] / off["official"]["min"]
    size_ratio = r["size"][0] / r["size"][1]
    o = r["our_rt"]
    flags = ("" if ratio <= RATIO_GOAL else " time>goal") + (
        "" if abs(size_ratio - 1) <= SIZE_GOAL else " size>1%"
    )
    return (
        f"{r['name']:<20} {fmt_us(off['ours']['min']):>10} {fmt_us(off['official']['min']):>10}"
        f" {ratio:6.3f}  {r['size'][0]:>8} {r['size'][1]:>8} {size_ratio:6.3f}"
        f"  {fmt_us(o['quantized_xnnpack']['min']):>10} {fmt_us(o['quantized_portable']['min']):>10}"
        f" {fmt_us(o['float_xnnpack']['min']):>10}{flags}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per side and model")
    args = parser.parse_args(argv)
    official.silence_noise()
    import executorch.exir  # noqa: F401 - before ours define the same operators
    import executorch.kernels.quantized  # noqa: F401 - before ours define the out variants
    from executorch.extension.pybindings import portable_lib

    portable_lib._unsafe_reset_threadpool(1)
    torch.set_num_threads(1)
    print(
        "latency: microseconds per call, best of alternating rounds; one thread.\n"
        "off rt: the official runtime on our .pte / on the official .pte; sizes in bytes;\n"
        "our rt: our runtime on our quantized XNNPACK .pte, on our portable quantized .pte,\n"
        "and on our XNNPACK .pte of the float model.\n"
    )
    print(
        f"{'model':<20} {'off rt ours':>10} {'official':>10} {'ratio':>6}  {'size ours':>8}"
        f" {'official':>8} {'ratio':>6}  {'our q-xnn':>10} {'q-portable':>10} {'float-xnn':>10}"
    )
    for name in args.models.split(","):
        print(row(bench(name, args.budget)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
