"""``pyexecutorch inspect``: what a ``.pte`` (or ``.ptd``) holds."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from pyexecutorch.cli import common

HELP = "show the methods, operators, delegates, arenas and data of a .pte"
DESCRIPTION = """\
Print what a program holds: each method with its inputs and outputs, the operators
it calls, its delegates (backend and size) and planned arenas; the constant bytes
and segments of the file; an operator histogram over all methods; and whether the
program passes the runtime's verification. Each XNNPACK delegate is decoded: its nodes
(type, inputs, outputs, parameters, fused activation) and constant bytes. --verbose adds
every value and every instruction (and every value of each XNNPACK graph: datatype,
shape, external or constant). A .ptd (external data) file is listed key by key.
--sizes prints instead where every byte of the file goes (program tables, segments,
XNNPACK nodes and values, padding); --against OTHER.pte puts a second file's bytes
beside them, category by category. --plan loads each method and prints instead what
loading decided (Method.plan): the tier, whether it compiled to one function, its
fused loops, convolution epilogues, channels-last values, views, folded and refused
instructions, and what each instruction became (--verbose adds the generated code)."""
EXAMPLES = """\
examples:
  pyexecutorch inspect model.pte
  pyexecutorch inspect model.pte --verbose | less
  pyexecutorch inspect model.ptd
  pyexecutorch inspect model.pte --sizes
  pyexecutorch inspect ours.pte --sizes --against official.pte
  pyexecutorch inspect model.pte --plan
  pyexecutorch inspect model.pte --plan --tier numpy --method forward
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the .pte (or .ptd) file")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print every value and instruction (the whole plan)",
    )
    p.add_argument(
        "--sizes",
        action="store_true",
        help="print where the file's bytes go, category by category",
    )
    p.add_argument(
        "--against",
        metavar="OTHER",
        help="with --sizes: a second .pte to put beside the first, category by category",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="load each method and print what loading decided (Method.plan)",
    )
    p.add_argument(
        "--tier",
        choices=sorted(_TIERS),
        help="with --plan: the tier to load on (default: the compiled tier where numba "
        "imports and PYEXECUTORCH_JIT is not 0, as load_program decides)",
    )
    p.add_argument(
        "--method",
        metavar="NAME",
        help="with --plan: only this method",
    )


def _read(path: str) -> bytes:
    p = Path(path)
    if not p.exists():
        raise common.CLIError(f"program file not found: {path}")
    if p.is_dir():
        raise common.CLIError(f"{path} is a directory, not a program file")
    data = p.read_bytes()
    if not data:
        raise common.CLIError(f"{path} is not a valid program: the file is empty")
    return data


def _is_ptd(data: bytes) -> bool:
    return len(data) >= 8 and data[4:6] == b"FT"


def operator_histogram(program) -> tuple[Counter, int]:  # noqa: ANN001
    """Kernel calls per operator over every method, and the number of delegate calls."""
    from pyexecutorch.schema.program import DelegateCall, KernelCall  # noqa: PLC0415

    counts: Counter = Counter()
    delegate_calls = 0
    for plan in program.execution_plan:
        ops = plan.operators
        for chain in plan.chains:
            for ins in chain.instructions:
                a = ins.instr_args
                if isinstance(a, KernelCall):
                    name = (
                        ops[a.op_index].qualified_name
                        if 0 <= a.op_index < len(ops)
                        else f"<operator {a.op_index}>"
                    )
                    counts[name] += 1
                elif isinstance(a, DelegateCall):
                    delegate_calls += 1
    return counts, delegate_calls


def _histogram_lines(counts: Counter, delegate_calls: int) -> list[str]:
    total = sum(counts.values())
    out = [
        f"operator histogram (all methods): {total} kernel call(s) of {len(counts)} operator(s), "
        f"{delegate_calls} delegate call(s)"
    ]
    if not counts:
        return out
    width = max(len(k) for k in counts)
    top = max(counts.values())
    for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        bar = "#" * max(1, round(30 * n / top))
        out.append(f"  {name:<{width}}  {n:>5}  {bar}")
    return out


def _fallback_listing(pte) -> str:  # noqa: ANN001 - used only where the printer is missing
    lines = []
    for plan in pte.program.execution_plan:
        lines.append(
            f"method {plan.name!r}: {len(plan.inputs)} inputs, {len(plan.outputs)} outputs, "
            f"{len(plan.operators)} operators, {len(plan.delegates)} delegates, "
            f"arenas {list(plan.non_const_buffer_sizes)}"
        )
        for d in plan.delegates:
            lines.append(f"  delegate {d.id}")
    consts = sum(memoryview(b.storage).nbytes for b in pte.program.constant_buffer)
    lines.append(f"constant bytes: {consts}; segments: {len(pte.program.segments)}")
    return "\n".join(lines) + "\n"


def _delegate_bytes(pte, ref):  # noqa: ANN001, ANN202 - decoded tables
    """The processed bytes a delegate refers to (a segment or inline data), or None."""
    from pyexecutorch.schema.program import DataLocation  # noqa: PLC0415

    if ref is None:
        return None
    if ref.location == DataLocation.SEGMENT:
        segments = pte.delegate_segments
        return segments[ref.index] if 0 <= ref.index < len(segments) else None
    inline = pte.program.backend_delegate_data
    return inline[ref.index].data if 0 <= ref.index < len(inline) else None


def xnnpack_lines(pte, verbose: bool) -> tuple[list[str], bool]:  # noqa: ANN001
    """The listing of every XNNPACK delegate of ``pte``, and whether all decoded."""
    from pyexecutorch.backends.xnnpack.describe import describe_payload  # noqa: PLC0415
    from pyexecutorch.schema.errors import FormatError  # noqa: PLC0415

    out: list[str] = []
    ok = True
    for plan in pte.program.execution_plan:
        for k, d in enumerate(plan.delegates):
            if d.id != "XnnpackBackend":
                continue
            out.append(f"XNNPACK delegate {k} of method {plan.name!r}:")
            data = _delegate_bytes(pte, d.processed)
            if data is None:
                out.append("  its data is missing from the file")
                ok = False
                continue
            try:
                lines = describe_payload(data, pte.named_data, verbose=verbose)
            except FormatError as e:
                out.append(f"  cannot be decoded: {common.first_line(e)}")
                ok = False
                continue
            out += [f"  {line}" for line in lines]
    return out, ok


def _sizes(args: argparse.Namespace) -> int:
    from pyexecutorch.cli.sizes import breakdown, compare_lines, sizes_lines  # noqa: PLC0415
    from pyexecutorch.schema.errors import FormatError  # noqa: PLC0415

    parts = []
    for path in (args.model, args.against) if args.against else (args.model,):
        data = _read(path)
        if _is_ptd(data):
            raise common.CLIError(f"--sizes reads programs; {path} is a .ptd data file")
        try:
            parts.append(breakdown(data))
        except FormatError as e:
            raise common.CLIError(f"{path} is not a valid program: {e}") from e
    if len(parts) == 1:
        print(f"{args.model}: {parts[0].size} bytes")
        print("\n".join(sizes_lines(parts[0])))
        return 0
    print(f"A: {args.model} ({parts[0].size} bytes); B: {args.against} ({parts[1].size} bytes)")
    print("\n".join(compare_lines(parts[0], parts[1], ("A", "B"))))
    return 0


# --tier -> load_program's jit
_TIERS = {"numpy": False, "compiled": True}


def _plan(args: argparse.Namespace) -> int:
    """``--plan``: each method loaded, and its plan printed."""
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415

    data = _read(args.model)
    try:
        program = Runtime.get().load_program(data, jit=_TIERS.get(args.tier))
    except Exception as e:  # noqa: BLE001 - the CLI reports any load failure in one line
        raise common.CLIError(f"{args.model} could not be loaded: {common.first_line(e)}") from e
    names = sorted(program.method_names)
    if args.method is not None:
        if args.method not in names:
            raise common.CLIError(f"{args.model} has no method {args.method!r} (methods: {names})")
        names = [args.method]
    for name in names:
        try:
            method = program.load_method(name)
        except Exception as e:  # noqa: BLE001 - reported in one line, naming the method
            raise common.CLIError(f"method {name!r} failed to load: {common.first_line(e)}") from e
        print(method.plan.describe(verbose=args.verbose))
    return 0


def run(args: argparse.Namespace) -> int:
    from pyexecutorch.schema.errors import FormatError  # noqa: PLC0415

    if args.against and not args.sizes:
        raise common.CLIError("--against compares sizes: use it with --sizes")
    if (args.tier or args.method) and not args.plan:
        raise common.CLIError("--tier and --method choose what --plan loads: use them with --plan")
    if args.plan and args.sizes:
        raise common.CLIError("--plan and --sizes print different things: choose one")
    if args.sizes:
        return _sizes(args)
    if args.plan:
        return _plan(args)
    data = _read(args.model)
    if _is_ptd(data):
        from pyexecutorch.schema.flat_tensor import decode_ptd  # noqa: PLC0415
        from pyexecutorch.schema.printer import format_ptd  # noqa: PLC0415

        try:
            ptd = decode_ptd(data)
        except FormatError as e:
            raise common.CLIError(f"{args.model} is not a valid data file: {e}") from e
        print(f"{args.model}: {common.human_bytes(len(data))}")
        print(format_ptd(ptd, verbose=args.verbose), end="")
        return 0
    from pyexecutorch.schema.pte import decode_pte  # noqa: PLC0415

    try:
        pte = decode_pte(data)
    except FormatError as e:
        raise common.CLIError(f"{args.model} is not a valid program: {e}") from e
    print(f"{args.model}: {common.human_bytes(len(data))} ({len(data)} bytes)")
    try:
        from pyexecutorch.schema.printer import format_program  # noqa: PLC0415
    except ImportError:
        listing = _fallback_listing(pte)
    else:
        listing = format_program(pte, verbose=args.verbose)
    print(listing, end="")
    xnnpack, xnnpack_ok = xnnpack_lines(pte, args.verbose)
    if xnnpack:
        print()
        print("\n".join(xnnpack))
    print()
    counts, delegate_calls = operator_histogram(pte.program)
    print("\n".join(_histogram_lines(counts, delegate_calls)))
    from pyexecutorch.runtime.verify import verify_program  # noqa: PLC0415

    try:
        verify_program(pte)
    except Exception as e:  # noqa: BLE001 - a listing is still useful for a file that fails verification
        print(f"\nverification: FAILED: {common.first_line(e)}")
        return 1
    print("\nverification: ok")
    return 0 if xnnpack_ok else 1
