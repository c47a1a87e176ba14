"""Quantized programs at full size: the official runtime against ours on the same .pte.

Cases (random weights; every .pte is the official exporter's, lowered with the official
XnnpackPartitioner):

- ``resnet18-int8`` / ``mobilenet_v2-int8``: the suite's architectures at full width
  (ResNet-18 widths 64..512, MobileNetV2 width 1.0, 1000 classes) at 224x224, static
  int8 (the official XNNPACKQuantizer: per-channel weights, calibrated on 2 inputs);
- ``linears-8da4w-K-gG``: a stack of 4 linears K -> K at LLM decode shapes (one row),
  torchao's int8 dynamic activations with 4-bit weights in groups of G;
- ``linears-int8-K``: the same stack, dynamic int8 per-channel weights (the official
  XNNPACKQuantizer's dynamic configuration);
- ``vit_s4-int8dyn``: a dynamic int8 transformer: the suite's ViT at ViT-S/16 widths
  (224x224, patches of 16, width 384, 6 heads, MLP 1536) and 4 blocks, its linears
  dynamically quantized as ``linears-int8-K``'s.

Columns: the official runtime, our runtime (the compiled tier), our numpy tier (what
ran the quantized nodes on both tiers before they had compiled kernels), torch eager on
the float model (a yardstick, not the same arithmetic), our compiled tier on the float
model's official XNNPACK .pte (``ours float``: what quantizing the model buys in our
runtime, ``q/float`` the quantized program's time over it); CPU microseconds per call (the process's,
all threads; median of alternating rounds) and each side's CPU time over wall time (the
threads it really ran). ``ours/off`` is the ratio of CPU times at one thread; at two
threads, of wall times (the second core's gain is wall time); at two threads each side
is timed on its own after a pause (spinning pools would take the next side's cores). The largest output
difference between the two runtimes is printed too.

    python benchmarks/bench_quantized_full.py               # 1 thread
    python benchmarks/bench_quantized_full.py --threads 1,2 --cases 8da4w
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import sys
import time
from pathlib import Path

import common  # noqa: F401 - sets up sys.path (tests/, benchmarks/)
import numpy as np
import torch
from bench_xnnpack_export import paired
from common import fmt_us

from tests import official
from tests.architectures import MobileNetV2, ResNet18, ViT


class Linears(torch.nn.Module):
    def __init__(self, k: int, layers: int = 4) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(k, k) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _static(model: torch.nn.Module, inputs: tuple) -> torch.nn.Module:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = get_symmetric_quantization_config(is_per_channel=True)
    captured = torch.export.export(copy.deepcopy(model), inputs).module()
    prepared = prepare_pt2e(captured, XNNPACKQuantizer().set_global(config))
    for seed in range(2):
        prepared(
            *(torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)) for x in inputs)
        )
    return convert_pt2e(prepared)


def _dynamic(model: torch.nn.Module, inputs: tuple) -> torch.nn.Module:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    captured = torch.export.export(copy.deepcopy(model), inputs).module()
    prepared = prepare_pt2e(captured, XNNPACKQuantizer().set_global(config))
    prepared(*inputs)
    return convert_pt2e(prepared)


def _8da4w(model: torch.nn.Module, group: int) -> torch.nn.Module:
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    q = copy.deepcopy(model)
    quantize_(
        q,
        Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4, weight_granularity=PerGroup(group)
        ),
    )
    return q


def _case(name: str) -> tuple[torch.nn.Module, torch.nn.Module, tuple]:
    """(float model, quantized graph, inputs) of a case name."""
    torch.manual_seed(0)
    if name.endswith("-int8") and name.split("-")[0] in ("resnet18", "mobilenet_v2"):
        arch = name.split("-")[0]
        model = (
            ResNet18((64, 128, 256, 512), 1000) if arch == "resnet18" else MobileNetV2(1.0, 1000)
        )
        model.eval()
        inputs = (torch.randn(1, 3, 224, 224),)
        return model, _static(model, inputs), inputs
    if name == "vit_s4-int8dyn":
        model = ViT(224, 16, 384, 4, 6, 1000).eval()
        inputs = (torch.randn(1, 3, 224, 224),)
        return model, _dynamic(model, inputs), inputs
    parts = name.split("-")  # linears-8da4w-K-gG / linears-int8-K
    k = int(parts[2])
    model = Linears(k).eval()
    inputs = (torch.randn(1, k),)
    if parts[1] == "8da4w":
        return model, _8da4w(model, int(parts[3][1:])), inputs
    return model, _dynamic(model, inputs), inputs


CASES = [
    "resnet18-int8",
    "mobilenet_v2-int8",
    *(f"linears-8da4w-{k}-g{g}" for k in (512, 1024, 2048) for g in (32, 128)),
    *(f"linears-int8-{k}" for k in (512, 2048)),
    "vit_s4-int8dyn",
]


def _export(name: str) -> tuple[torch.nn.Module, bytes, bytes, tuple]:
    """(float model, the official .pte of the quantized graph and of the float model,
    inputs), each .pte cached by name and this file."""
    model, graph, inputs = _case(name)
    key = hashlib.sha256(Path(__file__).read_bytes() + official.versions().encode()).hexdigest()

    def built(module: torch.nn.Module, suffix: str) -> bytes:
        def build() -> bytes:
            program = torch.export.export(module, inputs)
            partitioner = official._xnnpack_partitioner()
            return official.export_programs({"forward": program}, partitioner=partitioner)

        path = official.cache_dir() / f"quantfull-{name}{suffix}.{key[:16]}.pte"
        return official.cached_file(path, build)

    return model, built(graph, ""), built(model, "-float"), inputs


def _set_threads(n: int) -> None:
    from executorch.extension.pybindings import portable_lib as official_lib

    from pyexecutorch.portable_lib import api as ours

    official_lib._unsafe_reset_threadpool(n)
    ours._unsafe_reset_threadpool(n)
    torch.set_num_threads(n)


def _apart(fns: dict, budget: float) -> dict[str, dict]:
    """Each side timed on its own after a pause: at two threads the pools of the side
    before (OpenMP's, XNNPACK's) spin on after its calls and would take the cores of the
    next one in alternating rounds. Per side as :func:`paired` reports it."""
    out = {}
    for k, fn in fns.items():
        for _ in range(2):
            fn()
        time.sleep(0.5)
        walls, cpus = [], []
        end = time.perf_counter() + budget
        while time.perf_counter() < end or len(walls) < 3:
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            cpus.append(time.process_time() - c0)
            walls.append(time.perf_counter() - w0)
        out[k] = {
            "median": float(np.median(walls)),
            "min": min(walls),
            "cpu_median": float(np.median(cpus)),
            "cpu_per_wall": sum(cpus) / sum(walls),
        }
    return out


def bench(name: str, threads: list[int], budget: float) -> list[str]:
    from pyexecutorch.runtime import Runtime

    t0 = time.perf_counter()
    model, pte, float_pte, inputs = _export(name)
    args = [x.numpy() for x in inputs]
    lines = []
    for n in threads:
        # (the official runtime must load after its threadpool is reset: a delegate made
        # before keeps the old pool and crashes)
        _set_threads(n)
        runner = official.official_runner(pte)
        method = Runtime.get().load_program(pte, jit=True).load_method("forward")
        numpy_method = Runtime.get().load_program(pte, jit=False).load_method("forward")
        float_method = Runtime.get().load_program(float_pte, jit=True).load_method("forward")
        theirs = runner.run(list(inputs))[0]
        ours = np.asarray(method.execute(args)[0])
        diff = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
        fns = {
            "official": lambda runner=runner: runner.run(list(inputs)),
            "ours": lambda method=method: method.execute(args),
            "eager": lambda: model(*inputs),
            "numpy": lambda numpy_method=numpy_method: numpy_method.execute(args),
            "float": lambda float_method=float_method: float_method.execute(args),
        }
        with torch.no_grad():
            r = paired(fns, budget) if n == 1 else _apart(fns, budget)
        key = "cpu_median" if n == 1 else "median"
        ratio = r["ours"][key] / r["official"][key]
        over_float = r["ours"][key] / r["float"][key]
        lines.append(
            f"{name:<24} {n:>2} {fmt_us(r['official']['cpu_median']):>10}"
            f" {fmt_us(r['ours']['cpu_median']):>10} {fmt_us(r['numpy']['cpu_median']):>10}"
            f" {fmt_us(r['eager']['cpu_median']):>10} {fmt_us(r['float']['cpu_median']):>10}"
            f" {fmt_us(r['official']['median']):>10} {fmt_us(r['ours']['median']):>10}"
            f" {ratio:7.2f} {over_float:7.2f}  {r['official']['cpu_per_wall']:4.2f} {r['ours']['cpu_per_wall']:4.2f}"
            f" {r['eager']['cpu_per_wall']:4.2f}  {diff:8.1e} {time.perf_counter() - t0:4.0f}"
        )
    return lines


HEADER = (
    f"{'case':<24} {'th':>2} {'off cpu':>10} {'ours cpu':>10} {'numpy cpu':>10} {'eager cpu':>10}"
    f" {'float cpu':>10} {'off wall':>10} {'ours wall':>10} {'ours/off':>7} {'q/float':>7}"
    f"  {'cpu/wall off ours eager':<23}"
    f" {'max|d|':>8} {'s':>4}"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated parts of case names")
    parser.add_argument("--threads", default="1", help="comma-separated thread counts")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per side and case")
    args = parser.parse_args(argv)
    wanted = [s for s in args.cases.split(",") if s]
    cases = [c for c in CASES if not wanted or any(w in c for w in wanted)]
    official.silence_noise()
    import executorch.exir  # noqa: F401 - before ours define the same operators
    import executorch.kernels.quantized  # noqa: F401 - the official quantized kernels

    threads = [int(t) for t in args.threads.split(",")]
    print(HEADER)
    for name in cases:
        try:
            for line in bench(name, threads, args.budget):
                print(line, flush=True)
        except Exception as e:  # noqa: BLE001 - report the case and go on
            print(f"{name:<24} failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
