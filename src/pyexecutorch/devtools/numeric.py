"""Numeric debugging: where does a ``.pte`` start to differ from PyTorch? (needs torch)

:func:`compare` runs the program in our runtime with ETDump and a debug
buffer (every instruction's output, and every op's inside delegates that
record them), runs the edge program that the ``.pte`` was compiled from in
torch, capturing each node's output, and matches the two through debug
handles: an instruction's handles come from the ETRecord's
``debug_handle_map``, an event inside a delegate is looked up in the
delegate's own debug-handle map (``delegate_map``). The report lists, in
program order, each operator's largest absolute and relative error and its
source line, and flags the first one beyond the tolerance.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pyexecutorch.devtools.etrecord import ETRecord, edge_program_of, nodes_by_debug_handle
from pyexecutorch.devtools.inspector import Event, event_blocks_of
from pyexecutorch.schema.program import DelegateCall, KernelCall


@dataclass
class Row:
    """One compared output: an instruction's, or one op's inside a delegate."""

    instruction: int
    operator: str  # the program's operator, or "<backend>:<op>" inside a delegate
    debug_handles: tuple[int, ...]
    graph_nodes: list[str]  # the edge graph nodes (aten ops) behind it
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    within_tolerance: bool | None = None  # None: nothing to compare against
    source: str = ""  # "file.py:12: code" of the last node
    note: str = ""


@dataclass
class Comparison:
    rows: list[Row]
    rtol: float
    atol: float
    notes: list[str] = field(default_factory=list)

    @property
    def first_divergence(self) -> Row | None:
        """The first row, in program order, beyond the tolerance."""
        return next((r for r in self.rows if r.within_tolerance is False), None)

    def to_dataframe(self) -> Any:
        from pyexecutorch.devtools.inspector import rows_table  # noqa: PLC0415

        return rows_table([r.__dict__ for r in self.rows])

    def __str__(self) -> str:
        first = self.first_divergence
        head = ("", "instr", "operator", "handles", "max abs err", "max rel err", "source")
        body = []
        for r in self.rows:
            mark = ">>" if r is first else ("!" if r.within_tolerance is False else "")
            body.append(
                (
                    mark,
                    str(r.instruction),
                    r.operator,
                    ",".join(map(str, r.debug_handles)),
                    "" if r.max_abs_error is None else f"{r.max_abs_error:.3g}",
                    "" if r.max_rel_error is None else f"{r.max_rel_error:.3g}",
                    r.source or r.note,
                )
            )
        widths = [
            max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)
        ]
        lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)).rstrip()]
        lines += [
            "  ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)).rstrip() for b in body
        ]
        if first is None:
            lines.append(f"every output is within rtol {self.rtol:g}, atol {self.atol:g}")
        else:
            lines.append(
                f"first divergence: instruction {first.instruction}, {first.operator} "
                f"({', '.join(first.graph_nodes)}), max abs error {first.max_abs_error:.3g} "
                f"beyond rtol {self.rtol:g}, atol {self.atol:g}"
                + (f", at {first.source}" if first.source else "")
            )
        lines += self.notes
        return "\n".join(lines)


# ------------------------------------------------------------------ eager side


def eager_by_handle(program: Any, inputs: Sequence[Any]) -> tuple[dict[int, Any], list[Any]]:
    """Each debug handle's output when ``program`` (an edge ExportedProgram) runs on ``inputs``
    in torch (the last node of a handle gives it), and the program's outputs."""
    found: dict[int, Any] = {}

    class Capture(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            handle = n.meta.get("debug_handle")
            if n.op == "call_function" and isinstance(handle, int):
                found[handle] = out
            return out

    module = program.module()
    with torch.no_grad():
        result = Capture(module).run(*[_as_torch(x) for x in inputs])
    flat = list(result) if isinstance(result, (list, tuple)) else [result]
    return found, flat


def _as_torch(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x).copy())
    return x


def _as_numpy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return x


def errors(got: Any, want: Any) -> tuple[float, float, bool] | None:
    """(max abs error, max rel error, shapes comparable) of two tensors, or None when not tensors."""
    a, b = _as_numpy(got), _as_numpy(want)
    if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
        return None
    if a.shape != b.shape:
        if a.size != b.size:
            return None
        a = a.reshape(b.shape)
    if a.size == 0:
        return 0.0, 0.0, True
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.where(np.isnan(x) & np.isnan(y), 0.0, np.abs(x - y))
        # Relative to the reference where it is not zero (a zero reference has only abs error).
        rel = np.where(y != 0, diff / np.abs(y), 0.0)
    return float(np.max(diff)), float(np.max(rel)), True


def _pick(value: Any, like: Any) -> Any:
    """The tensor of an eager value (one tensor, or a tuple of them) that matches ``like``."""
    if isinstance(value, (list, tuple)):
        shape = getattr(like, "shape", None)
        for v in value:
            if isinstance(v, torch.Tensor) and tuple(v.shape) == tuple(shape or ()):
                return v
        return value[0] if value else None
    return value


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)')


def source_line(stack_trace: str | None) -> str:
    """``file.py:12: code`` of the innermost frame of a node's stack trace."""
    if not stack_trace:
        return ""
    frames = _FRAME.findall(stack_trace)
    if not frames:
        return ""
    path, line, code = frames[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line}: {code.strip()}"


# ---------------------------------------------------------------- runtime side


def runtime_events(pte: bytes, inputs: Sequence[Any], method: str = "forward") -> list[Event]:
    """The ``Execute`` events of one traced run of ``method``, with their logged outputs."""
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415

    data = [
        np.ascontiguousarray(_as_numpy(x)) if isinstance(x, torch.Tensor) else x for x in inputs
    ]
    size = 1 << 20
    while True:
        program = Runtime.get().load_program(
            pte, enable_etdump=True, debug_buffer_size=size, log_delegate_outputs=True
        )
        try:
            program.load_method(method).execute(data)
            break
        except Exception as e:  # noqa: BLE001 - a full debug buffer: grow it, else re-raise
            from pyexecutorch.runtime.etdump import DebugBufferFullError  # noqa: PLC0415

            if not isinstance(e.__cause__, DebugBufferFullError) or size > 1 << 34:
                raise
            size *= 4
    tracer = program.event_tracer
    blocks = event_blocks_of(tracer.to_etdump(), 1e-6, memoryview(tracer.debug_buffer))
    return next(b for b in blocks if b.name == "Execute").events


# -------------------------------------------------------------------- matching


def _handles(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(int(h) for h in value)
    return (int(value),)


def _map_of(record: Any, name: str, method: str) -> dict[str, Any]:
    maps = getattr(record, name, None) or {}
    table = maps.get(method) or {}
    return {str(k): v for k, v in table.items()}


def match(
    record: Any,
    pte: bytes,
    inputs: Sequence[Any],
    rtol: float,
    atol: float,
    method: str = "forward",
) -> Comparison:
    """Compare the traced run of ``pte`` with the eager run of ``record``'s edge program."""
    from pyexecutorch.schema.pte import decode_pte  # noqa: PLC0415

    plan = next(p for p in decode_pte(pte).program.execution_plan if p.name == method)
    instructions = [i.instr_args for i in plan.chains[0].instructions] if plan.chains else []
    handle_map = _map_of(record, "_debug_handle_map", method)
    delegate_map = _map_of(record, "_delegate_map", method)
    num_outs = _map_of(record, "_instruction_id_to_num_outs_map", method)
    program = edge_program_of(record, method)
    nodes = nodes_by_debug_handle(program)
    eager, eager_outputs = eager_by_handle(program, inputs)
    comparison = Comparison([], rtol, atol)
    events = runtime_events(pte, inputs, method)
    inside: dict[int, int] = {}
    by_own_handle: set[int] = set()
    node_ids: dict[int, set[int]] = {}  # per delegate call: the integer ids of its events
    for e in events:
        if e.is_delegated_op:
            inside[e.instruction_id] = inside.get(e.instruction_id, 0) + 1
            if isinstance(e.delegate_debug_identifier, int):
                node_ids.setdefault(e.instruction_id, set()).add(e.delegate_debug_identifier)

    def row(
        instruction: int,
        operator: str,
        handles: tuple[int, ...],
        got: Any,
        want: Any,
        note: str = "",
    ) -> None:
        names = [n.target_name for h in handles for n in nodes.get(h, [])]
        last = [n for h in handles for n in nodes.get(h, [])]
        r = Row(instruction, operator, handles, names, note=note)
        r.source = source_line(last[-1].stack_trace) if last else ""
        measured = errors(got, want) if want is not None else None
        if measured is not None:
            r.max_abs_error, r.max_rel_error, _ = measured
            a, b = _as_numpy(got), _as_numpy(want)
            r.within_tolerance = bool(
                np.allclose(
                    a.reshape(b.shape).astype(np.float64),
                    b.astype(np.float64),
                    rtol=rtol,
                    atol=atol,
                    equal_nan=True,
                )
            )
        elif not r.note:
            r.note = "no eager value to compare with"
        comparison.rows.append(r)

    for e in events:
        i = e.instruction_id
        args = instructions[i] if i is not None and 0 <= i < len(instructions) else None
        got = e.debug_data[-1] if e.debug_data else None
        if e.is_delegated_op and isinstance(args, DelegateCall):
            backend = plan.delegates[args.delegate_index].id
            inner = (delegate_map.get(str(i)) or {}).get("delegate_map") or {}
            did = e.delegate_debug_identifier
            found = inner.get(str(did), inner.get(did))
            handles, note = _handles(found), ""
            if found is None:
                own = sorted(set(_handles(handle_map.get(str(i)))))
                if isinstance(did, int) and did in own:
                    # No map entry, but the node carries a graph debug handle of this
                    # delegate (the official XNNPACK exporter writes them): match by it.
                    # Handles up to the next node's were fused into this node (a trailing
                    # activation), so its output is the last of them.
                    later = [h for h in node_ids.get(i, ()) if h > did]
                    stop = min(later) if later else math.inf
                    handles = tuple(h for h in own if did <= h < stop)
                    note = "matched by the node's own debug handle"
                    by_own_handle.add(i)
                else:
                    note = "not in the delegate's debug-handle map"
            meta = e.delegate_debug_metadatas[0] if e.delegate_debug_metadatas else b""
            op = meta.decode("utf-8", "replace") if isinstance(meta, bytes) and meta else str(did)
            want = _pick(eager.get(handles[-1]), got) if handles else None
            row(i, f"{backend}:{op}", handles, got, want, note)
        elif e.name == "OPERATOR_CALL" and isinstance(args, KernelCall):
            handles = _handles(handle_map.get(str(i)))
            want = _pick(eager.get(handles[-1]), got) if handles else None
            row(i, plan.operators[args.op_index].qualified_name, handles, got, want)
        elif e.name == "DELEGATE_CALL" and isinstance(args, DelegateCall):
            backend = plan.delegates[args.delegate_index].id
            inner = (delegate_map.get(str(i)) or {}).get("delegate_map") or {}
            if inner and inside.get(i):
                continue  # its ops are rows of their own
            if i in by_own_handle:
                comparison.notes.append(
                    f"{backend} delegate at instruction {i} has an empty debug-handle map: its ops "
                    "are matched by the graph debug handles written in its nodes"
                )
                continue
            counted = num_outs.get(str(i))
            n_out = int(counted) if counted is not None else _delegate_outputs(plan, args)
            outs = e.debug_data[-n_out:] if n_out > 0 else []
            note = (
                f"{backend} delegate at instruction {i} has an empty debug-handle map: the "
                f"{inside.get(i, 0)} ops it ran cannot be matched to graph nodes; its outputs are "
                "compared with the program's outputs"
            )
            comparison.notes.append(note)
            for k, out in enumerate(outs):
                want = _pick(eager_outputs, out) if len(eager_outputs) != 1 else eager_outputs[0]
                row(i, f"{backend} output {k}", _handles(handle_map.get(str(i))), out, want, note)
    return comparison


def _delegate_outputs(plan: Any, call: DelegateCall) -> int:
    """How many of a delegate call's arguments (its inputs, then its outputs) are outputs:
    those no earlier instruction wrote and that are not method inputs."""
    written = set(plan.inputs)
    for instr in plan.chains[0].instructions:
        a = instr.instr_args
        if a is call:
            break
        if isinstance(a, (KernelCall, DelegateCall)):
            written.update(a.args)
    n = 0
    while n < len(call.args) and call.args[len(call.args) - 1 - n] not in written:
        n += 1
    return n


# ------------------------------------------------------------------ the entry


def _export(module_or_program: Any, inputs: Sequence[Any]) -> torch.export.ExportedProgram:
    if isinstance(module_or_program, torch.export.ExportedProgram):
        return module_or_program
    if not isinstance(module_or_program, torch.nn.Module):
        raise TypeError(
            f"expected a torch.nn.Module or an ExportedProgram, got {type(module_or_program).__name__}"
        )
    return torch.export.export(module_or_program.eval(), tuple(_as_torch(x) for x in inputs))


def _regenerated(
    module_or_program: Any, inputs: Sequence[Any], pte: bytes, partitioner: Any
) -> ETRecord:
    """The ETRecord of compiling the module again with pyexecutorch, checked against ``pte``."""
    from pyexecutorch.exir import to_edge_transform_and_lower  # noqa: PLC0415
    from pyexecutorch.schema.pte import decode_pte  # noqa: PLC0415

    ep = _export(module_or_program, inputs)
    manager = to_edge_transform_and_lower(
        ep, partitioner=partitioner, generate_etrecord=True
    ).to_executorch()
    ours = manager.executorch_program.execution_plan[0]
    theirs = decode_pte(pte).program.execution_plan[0]

    def ops(plan: Any) -> list[str]:
        return [
            plan.operators[a.op_index].qualified_name
            if isinstance(a := i.instr_args, KernelCall)
            else type(a).__name__
            for i in plan.chains[0].instructions
        ]

    mine, given = ops(ours), ops(theirs)
    if mine != given:
        k = next(
            (k for k, (a, b) in enumerate(zip(mine, given, strict=False)) if a != b),
            min(len(mine), len(given)),
        )
        raise ValueError(
            "the .pte was not compiled from this module the way pyexecutorch compiles it "
            f"(instruction {k}: {given[k] if k < len(given) else 'none'} in the .pte, "
            f"{mine[k] if k < len(mine) else 'none'} here), so its debug handles are unknown: "
            "pass etrecord= (export with generate_etrecord=True), or the partitioner it was lowered with"
        )
    return manager.get_etrecord()


def compare(
    module_or_exported_program: Any,
    pte: Any,
    inputs: Sequence[Any],
    rtol: float = 1e-5,
    atol: float = 1e-6,
    *,
    etrecord: Any = None,
    partitioner: Any = None,
    method: str = "forward",
) -> Comparison:
    """Run ``pte`` (bytes or a path) in our runtime and the module in torch; compare per operator.

    The debug handles of the ``.pte`` come from ``etrecord`` (an ETRecord, the
    official one too, or its path); without one the module is compiled again
    with pyexecutorch (lowered with ``partitioner`` when given) and must give
    the same instructions.
    """
    if not isinstance(pte, (bytes, bytearray, memoryview)):
        with open(pte, "rb") as f:
            pte = f.read()
    pte = bytes(pte)
    if isinstance(etrecord, (str, bytes)) or hasattr(etrecord, "__fspath__"):
        from pyexecutorch.devtools.etrecord import parse_etrecord  # noqa: PLC0415

        etrecord = parse_etrecord(etrecord)
    record = etrecord or _regenerated(module_or_exported_program, inputs, pte, partitioner)
    return match(record, pte, inputs, rtol, atol, method)
