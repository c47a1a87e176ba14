"""``pyexecutorch profile``: per-operator timings of a method, from an ETDump trace."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from pyexecutorch.cli import common

HELP = "per-operator timings of a method (ETDump), inside delegates too"
DESCRIPTION = """\
Load a .pte with ETDump tracing on, run one method several times and print the
time spent per operator: the calls per run, the total per run, the mean, median
and 90th percentile per call, and the share of the run (totals and shares are
medians over the runs, so that a few slow runs do not skew them). Events inside delegates
(XNNPACK: one per node, or per group of nodes that one compiled kernel runs, named
by their types joined by '+') are rows of their own, named <backend>:<node>; the
time a delegate call spends outside its nodes is its '(call)' row. What is timed is
what the tier runs (PYEXECUTORCH_JIT=0 for the numpy tier). Times include the tracing
itself (well under a microsecond per event)."""
EXAMPLES = """\
examples:
  pyexecutorch profile model.pte
  pyexecutorch profile model.pte -n 50 --top 10 --plot profile.png
  pyexecutorch profile model.pte --inputs x.npy --etdump model.etdp
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the .pte file")
    p.add_argument("--method", help="the method to profile (default: forward, or the only method)")
    p.add_argument(
        "--inputs",
        nargs="+",
        metavar="FILE",
        help="one .npy per input, or one .npz (default: random)",
    )
    p.add_argument("-n", "--runs", type=int, default=10, help="traced runs (default 10)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    p.add_argument("--top", type=int, default=20, metavar="N", help="rows to print (default 20)")
    p.add_argument(
        "--plot", metavar="PNG", help="save a bar chart of the top operators (matplotlib)"
    )
    p.add_argument("--etdump", metavar="ETDP", help="also write the ETDump trace to this file")
    common.add_seed_and_data_options(p)


@dataclass
class OpRow:
    operator: str
    calls: int = 0  # per run
    samples: list[float] = field(default_factory=list)  # microseconds, every call of every run
    per_run: list[float] = field(default_factory=list)  # microseconds of all its calls, per run

    def total(self, runs: int) -> float:
        """Time per run: the median over the runs (robust to a few slow ones)."""
        return _percentile(self.per_run, 50) if self.per_run else 0.0


def _percentile(samples: list[float], q: float) -> float:
    import numpy as np  # noqa: PLC0415

    return float(np.percentile(samples, q))


def operator_rows(inspector: Any, plan: Any) -> tuple[list[OpRow], list[float], int]:
    """(rows by total time, Method::execute times in us, runs) of the ``Execute`` block."""
    from pyexecutorch.schema.program import DelegateCall, KernelCall  # noqa: PLC0415

    block = next((b for b in inspector.event_blocks if b.name == "Execute"), None)
    if block is None:
        raise common.CLIError("the trace has no Execute block (the method did not run)")
    instructions = plan.chains[0].instructions if plan.chains else []
    rows: dict[str, OpRow] = {}
    execute: list[float] = []
    inside: dict[int, list[float]] = {}  # per delegate instruction: its nodes' time per run
    calls: dict[int, list[float]] = {}

    def add(name: str, raw: list[float]) -> None:
        row = rows.setdefault(name, OpRow(name))
        row.calls += 1
        row.samples.extend(raw)
        if len(row.per_run) < len(raw):
            row.per_run.extend([0.0] * (len(raw) - len(row.per_run)))
        for r, t in enumerate(raw):
            row.per_run[r] += t

    for event in block.events:
        raw = [t * 1000.0 for t in event.perf_data.raw] if event.perf_data else []
        i = event.instruction_id
        args = instructions[i].instr_args if i is not None and 0 <= i < len(instructions) else None
        if event.name == "Method::execute":
            execute = raw
        elif event.is_delegated_op and isinstance(args, DelegateCall):
            backend = plan.delegates[args.delegate_index].id
            meta = event.delegate_debug_metadatas[0] if event.delegate_debug_metadatas else b""
            node = (
                meta.decode("utf-8", "replace") if isinstance(meta, bytes) and meta else event.name
            )
            add(f"{backend}:{node}", raw)
            acc = inside.setdefault(i, [0.0] * len(raw))
            inside[i] = [a + t for a, t in zip(acc, raw, strict=False)]
        elif event.name == "OPERATOR_CALL" and isinstance(args, KernelCall):
            add(plan.operators[args.op_index].qualified_name, raw)
        elif event.name == "DELEGATE_CALL" and isinstance(args, DelegateCall):
            calls[i] = raw
    for i, raw in calls.items():
        backend = plan.delegates[instructions[i].instr_args.delegate_index].id
        nodes = inside.get(i, [0.0] * len(raw))
        add(f"{backend} (call)", [max(t - n, 0.0) for t, n in zip(raw, nodes, strict=False)])
    runs = max(len(execute), 1)
    ordered = sorted(rows.values(), key=lambda r: -r.total(runs))
    return ordered, execute, runs


def format_table(rows: list[OpRow], execute: list[float], runs: int, top: int) -> str:
    per_run = _percentile(execute, 50) if execute else sum(r.total(runs) for r in rows)
    head = ("operator", "calls", "total us", "mean us", "p50 us", "p90 us", "share")
    body = []
    for r in rows[:top]:
        total = r.total(runs)
        body.append(
            (
                r.operator,
                str(r.calls),
                f"{total:.1f}",
                f"{sum(r.samples) / len(r.samples):.2f}" if r.samples else "",
                f"{_percentile(r.samples, 50):.2f}" if r.samples else "",
                f"{_percentile(r.samples, 90):.2f}" if r.samples else "",
                f"{100 * total / per_run:.1f}%" if per_run else "",
            )
        )
    widths = [
        max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)
    ]

    def line(cells: tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        return "  ".join([first] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)])

    out = [line(head)] + [line(b) for b in body]
    if len(rows) > top:
        rest = sum(r.total(runs) for r in rows[top:])
        out.append(f"... {len(rows) - top} more operators, {rest:.1f} us per run")
    return "\n".join(out)


def plot(rows: list[OpRow], runs: int, top: int, path: str, title: str) -> None:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as e:
        raise common.CLIError("--plot needs matplotlib (pip install matplotlib)") from e
    shown = rows[:top][::-1]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(shown) + 1.2))
    ax.barh([r.operator for r in shown], [r.total(runs) for r in shown], color="#4C72B0")
    ax.set_xlabel("time per run (us)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    from pyexecutorch.devtools.inspector import Inspector  # noqa: PLC0415

    if args.runs < 1:
        raise common.CLIError(f"-n/--runs must be at least 1, got {args.runs}")
    if args.top < 1:
        raise common.CLIError(f"--top must be at least 1, got {args.top}")
    program = common.load_program(args.model, args.data, enable_etdump=True)
    method_name = common.resolve_method(program, args.method, args.model)
    inputs, origin = common.method_inputs(args, program, method_name)
    method = common.load_method(program, method_name)
    tracer = program.event_tracer
    for _ in range(max(args.warmup, 0)):
        common.execute(method, inputs)
    tracer.discard_runs()
    for _ in range(args.runs):
        common.execute(method, inputs)
    data = tracer.etdump_bytes()
    if args.etdump:
        with open(args.etdump, "wb") as f:
            f.write(data)
    inspector = Inspector(etdump_data=data)
    plan = next(p for p in program.pte_file.program.execution_plan if p.name == method_name)
    rows, execute, runs = operator_rows(inspector, plan)
    median = _percentile(execute, 50) if execute else 0.0
    print(
        f"method {method_name!r} of {args.model}: {runs} traced run(s), inputs {origin}; "
        f"{median:.1f} us per run (median)"
    )
    print(format_table(rows, execute, runs, args.top))
    if args.plot:
        plot(rows, runs, args.top, args.plot, f"{method_name} of {args.model}: time per run")
        print(f"chart saved to {args.plot}")
    if args.etdump:
        print(f"ETDump saved to {args.etdump} ({len(data)} bytes)")
    return 0
