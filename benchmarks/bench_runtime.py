"""Runtime latency: our Method.execute against the official runtime, in one process.

For every model of the suite: torch eager, the official portable runtime and the
official XNNPACK delegate (where it lowers the model), and our runtime on the
official portable program (and on our own program where our exporter makes one).
Also the per-instruction overhead on a long chain of small elementwise ops.

    python benchmarks/bench_runtime.py [--models mlp,conv_bn] [--budget 0.4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import common  # noqa: F401 - sets up sys.path
import numpy as np
import torch
from common import fmt_us, measure, ratio

from pyexecutorch.jit import numba_env
from pyexecutorch.runtime import Runtime
from tests import models, official


def _numpy_inputs(inputs):
    return [x.numpy() if isinstance(x, torch.Tensor) else x for x in inputs]


def _our_method(pte: bytes, jit: bool = False):
    """Our runtime's forward method: the numpy tier, or with ``jit`` the compiled tier."""
    return Runtime.get().load_program(pte, jit=jit).load_method("forward")


def bench_case(case, budget: float) -> dict:
    row: dict = {"model": case.name}
    inputs = case.inputs()
    module = case.make()
    with torch.no_grad():
        row["eager"] = measure(lambda: module(*inputs), budget_s=budget)["median"]
    pte = official.official_export(case)
    runner = official.official_runner(pte)
    # The official runtime may reuse a borrowed input's memory for intermediates:
    # give it its own copies so the other runs read intact inputs.
    t_inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    row["official_portable"] = measure(lambda: runner.module.forward(t_inputs), budget_s=budget)[
        "median"
    ]
    xnn = None
    try:
        xnn = official.official_export_xnnpack(case)
    except Exception:  # noqa: BLE001 - a model XNNPACK cannot lower is reported as "-"
        xnn = None
    if xnn is not None:
        xrunner = official.official_runner(xnn)
        row["official_xnnpack"] = measure(
            lambda: xrunner.module.forward(t_inputs), budget_s=budget
        )["median"]
    method = _our_method(pte)
    np_inputs = _numpy_inputs(inputs)
    row["ours_on_official"] = measure(
        lambda: method.execute(np_inputs, clone_outputs=False), budget_s=budget
    )["median"]
    try:
        from pyexecutorch.exir import to_edge  # noqa: PLC0415

        ep = models.export(case)
        ours = to_edge(ep).to_executorch().buffer
        m2 = _our_method(ours)
        row["ours_on_ours"] = measure(
            lambda: m2.execute(np_inputs, clone_outputs=False), budget_s=budget
        )["median"]
    except Exception as e:  # noqa: BLE001 - our exporter may not handle every model yet
        row["ours_on_ours_error"] = f"{type(e).__name__}: {str(e)[:120]}"
    return row


class _Chain(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x):
        for i in range(self.n):
            x = x + 1.0 if i % 2 == 0 else x * 0.5
        return x


def bench_overhead(budget: float, n: int = 200) -> dict:
    """Per-instruction cost on a chain of ``n`` small elementwise ops (4x64 float32)."""
    case = models.ModelCase("chain", lambda: _Chain(n), lambda: (torch.randn(4, 64),))
    pte = official.official_export(case, use_cache=False)
    x = case.inputs()[0]
    runner = official.official_runner(pte)
    off = measure(lambda: runner.module.forward([x]), budget_s=budget)["median"]
    method = _our_method(pte)
    xn = x.numpy()
    ours = measure(lambda: method.execute([xn], clone_outputs=False), budget_s=budget)["median"]
    jit = None
    if numba_env.numba_module() is not None:
        fused = _our_method(pte, jit=True)
        jit = measure(lambda: fused.execute([xn], clone_outputs=False), budget_s=budget)["median"]
    a = np.zeros((4, 64), np.float32)
    numpy_call = measure(lambda: np.add(a, 1.0, out=a), budget_s=budget)["median"]
    n_instr = len(method._loaded.plan.chains[0].instructions)
    return {
        "instructions": n_instr,
        "ours_per_instruction": ours / n_instr,
        "ours_jit_per_instruction": jit / n_instr if jit else None,
        "official_per_instruction": off / n_instr,
        "numpy_add_call": numpy_call,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models", help="comma-separated case names (default: every official-exportable case)"
    )
    parser.add_argument(
        "--budget", type=float, default=0.4, help="seconds of timing per measurement"
    )
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--large", action="store_true", help="include the large models (MobileNet-like, GPT)"
    )
    args = parser.parse_args(argv)
    cases = models.cases(official_exportable=True)
    if args.large:
        from benchmarks import models_large  # noqa: PLC0415

        cases = cases + list(models_large.LARGE_CASES)
    if args.models:
        wanted = set(args.models.split(","))
        cases = [c for c in cases if c.name in wanted]
    rows = []
    header = f"{'model':<22}{'eager':>10}{'portable':>10}{'xnnpack':>10}{'ours':>10}{'ours/port':>10}{'ours/xnn':>10}{'ours(own)':>10}"
    print("latency in microseconds (median)")
    print(header)
    for case in cases:
        try:
            row = bench_case(case, args.budget)
        except Exception as e:  # noqa: BLE001 - report and continue with the other models
            print(f"{case.name:<22} failed: {type(e).__name__}: {str(e)[:150]}")
            rows.append({"model": case.name, "error": f"{type(e).__name__}: {e}"})
            continue
        rows.append(row)
        print(
            f"{case.name:<22}{fmt_us(row['eager']):>10}{fmt_us(row['official_portable']):>10}"
            f"{fmt_us(row.get('official_xnnpack')):>10}{fmt_us(row['ours_on_official']):>10}"
            f"{ratio(row['ours_on_official'], row['official_portable']):>10}"
            f"{ratio(row['ours_on_official'], row.get('official_xnnpack')):>10}"
            f"{fmt_us(row.get('ours_on_ours')):>10}",
            flush=True,
        )
    overhead = bench_overhead(args.budget)
    print(
        f"\nper-instruction overhead on {overhead['instructions']} small elementwise ops: "
        f"ours {overhead['ours_per_instruction'] * 1e6:.2f} us, official portable "
        f"{overhead['official_per_instruction'] * 1e6:.2f} us, bare np.add(out=) {overhead['numpy_add_call'] * 1e6:.2f} us"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"models": rows, "overhead": overhead}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
