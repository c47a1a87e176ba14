"""Where the bytes of a ``.pte`` go, and how two ``.pte`` files differ, category by category.

Every byte of the file is attributed to exactly one category, so each side's column sums
to its file size:

- the program flatbuffer, walked table by table with the schema (EValues by type,
  instructions by type, operators, delegate entries, segment and named-data tables,
  vtables included; bytes no table, vector or string covers are its alignment padding);
- padding up to the first segment and between segments;
- the constant segment (portable-remainder weights) and the mutable-data segment;
- each XNNPACK delegate segment, split into its ``XH00`` header, its ``XNNGraph``
  flatbuffer (nodes by node type, values by tensor and quantization kind, constant-data
  entries, ...), paddings and the constants inside the payload; other delegates whole;
- named data (the XNNPACK weights and scales), whole.

Identical delegate segments that a file shares between delegates are counted once, as
stored. Named data and constant buffers are also matched between the two files by content,
so the report says which blobs only one file holds.

    python benchmarks/pte_sizes.py ours.pte official.pte
    python benchmarks/pte_sizes.py model.pte            # one file
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyexecutorch.backends.xnnpack import schema as xnn
from pyexecutorch.schema.flatbuffer import NUMPY_OF, Reader, fields_of
from pyexecutorch.schema.program import DataLocation, Program
from pyexecutorch.schema.pte import HEADER_LENGTH, ExtendedHeader, decode_pte

Path_ = tuple[Any, ...]  # field names, list indices and "field<Member>" union steps


# ------------------------------------------------------------------ flatbuffer walking


def _spans(reader: Reader, cls: type, table: int, path: Path_, out: list) -> None:
    """Append (start, end, path) for the table at ``table`` and everything it owns."""
    vt, vt_size, _ = reader.vtable(table, str(path))
    inline = reader.scalar("<H", 2, vt + 2, "vtable")
    out.append((vt, vt + vt_size, path))
    out.append((table, table + inline, path))
    for spec in fields_of(cls):
        at = reader.field_offset(vt, vt_size, table, spec.slot)
        kind = spec.kind
        if not at:
            continue
        sub = (*path, spec.name)
        if isinstance(kind, str):
            if kind in ("string", "bytes"):
                start, count = reader.vector(at, 1, spec.name, charge=False)
                out.append((start - 4, start + count + (kind == "string"), sub))
            continue
        tag = kind[0]
        if tag == "vector":
            size = NUMPY_OF[kind[1]].itemsize
            start, count = reader.vector(at, size, spec.name, charge=False)
            out.append((start - 4, start + count * size, sub))
        elif tag == "table":
            _spans(reader, kind[1], reader.uoffset(at, spec.name), sub, out)
        elif tag == "tables":
            start, count = reader.vector(at, 4, spec.name, charge=False)
            out.append((start - 4, start + 4 * count, sub))
            for i in range(count):
                _spans(reader, kind[1], reader.uoffset(start + 4 * i, spec.name), (*sub, i), out)
        elif tag == "union":
            value_at = reader.field_offset(vt, vt_size, table, spec.slot + 1)
            member = kind[1].member(reader.scalar("<B", 1, at, spec.name))
            if member is not None and value_at:
                step = f"{spec.name}<{member.__name__}>"
                _spans(reader, member, reader.uoffset(value_at, spec.name), (*path, step), out)


def _attribute(data: Any, cls: type, categorize, prefix: str) -> Counter:
    """Bytes of the flatbuffer ``data`` per category; the first owner of a shared byte
    (a vtable two tables share) keeps it, uncovered bytes are padding."""
    reader = Reader(data)
    spans: list = []
    _spans(reader, cls, reader.uoffset(0, "root"), (), spans)
    owner = [None] * reader.size
    for start, end, path in spans:
        label = categorize(path)
        for i in range(start, end):
            if owner[i] is None:
                owner[i] = label
    owner[0:8] = ["root offset and identifier"] * 8
    counts = Counter("padding (alignment)" if o is None else o for o in owner)
    return Counter({f"{prefix}{k}": v for k, v in counts.items()})


def _union_step(path: Path_, at: int) -> str | None:
    if len(path) > at and isinstance(path[at], str) and "<" in path[at]:
        return path[at].split("<", 1)[1].rstrip(">")
    return None


def _program_category(path: Path_) -> str:
    if not path:
        return "Program table"
    if path[0] != "execution_plan":
        return str(path[0])
    if len(path) < 3:
        return "ExecutionPlan tables"
    part = path[2]
    if part == "values":
        member = _union_step(path, 4)
        return f"values: {member}" if member else "values: EValue tables"
    if part == "chains":
        if len(path) > 4 and path[4] == "instructions":
            member = _union_step(path, 6)
            return f"instructions: {member}" if member else "instructions: tables"
        if len(path) > 4 and path[4] == "stacktrace":
            return "stack traces"
        return "chains"
    return f"plan {part}"


def _xnn_category(graph_nodes: dict[int, str], graph_values: dict[int, str]):
    def categorize(path: Path_) -> str:
        if not path:
            return "XNNGraph table"
        if path[0] == "xnodes" and len(path) > 1:
            return f"nodes: {graph_nodes.get(path[1], '?')}"
        if path[0] == "xvalues" and len(path) > 1:
            return f"values: {graph_values.get(path[1], '?')}"
        return str(path[0])

    return categorize


def _value_kind(value: xnn.XValue) -> str:
    u = value.xvalue_union
    tensor = value.tensor
    role = (
        "constant"
        if tensor.constant_buffer_idx
        else "external"
        if tensor.flags & (xnn.VALUE_FLAG_EXTERNAL_INPUT | xnn.VALUE_FLAG_EXTERNAL_OUTPUT)
        else "intermediate"
    )
    if isinstance(u, xnn.XNNQuantizedTensorValue):
        quant = type(u.quant_params).__name__ if u.quant_params is not None else "no params"
        return f"{tensor.datatype.name} {role} ({quant})"
    return f"{tensor.datatype.name} {role}"


# ------------------------------------------------------------------ whole files


@dataclass
class Breakdown:
    """Bytes per category (summing to the file size), and facts to compare by content."""

    size: int
    bytes: Counter = field(default_factory=Counter)
    counts: Counter = field(default_factory=Counter)  # nodes, values, instructions, ...
    named: dict[str, tuple[str, int]] = field(default_factory=dict)  # key -> (digest, size)
    constants: list[tuple[str, int]] = field(default_factory=list)  # (digest, size)


def _digest(blob: Any) -> str:
    return hashlib.sha256(memoryview(blob).cast("B")).hexdigest()[:16]


def _xnnpack_payload(blob: memoryview, out: Breakdown) -> None:
    payload = xnn.decode_payload(blob)
    graph = payload.graph
    nodes = {i: type(n.xnode_union).__name__ for i, n in enumerate(graph.xnodes)}
    values = {i: _value_kind(v) for i, v in enumerate(graph.xvalues)}
    out.counts.update(f"xnn nodes: {t}" for t in nodes.values())
    out.counts.update(f"xnn values: {k}" for k in values.values())
    prefix = "xnn "
    if payload.constant_data is None:
        out.bytes += _attribute(blob, xnn.XNNGraph, _xnn_category(nodes, values), prefix)
        return
    _, _, length, fb_off, fb_size, cd_off, cd_size = xnn.XNNHeader.LAYOUT.unpack_from(blob, 0)
    out.bytes[f"{prefix}XH00 header"] += length
    flat = blob[fb_off : fb_off + fb_size]
    out.bytes += _attribute(flat, xnn.XNNGraph, _xnn_category(nodes, values), prefix)
    out.bytes[f"{prefix}constant data in payload"] += cd_size
    out.bytes[f"{prefix}payload padding"] += len(blob) - length - fb_size - cd_size


def breakdown(data: bytes) -> Breakdown:
    """Attribute every byte of the ``.pte`` ``data`` to a category."""
    view = memoryview(data)
    out = Breakdown(len(data))
    header = ExtendedHeader.read(view)
    pte = decode_pte(data)
    program_size = header.program_size if header else len(data)
    out.bytes += _attribute(view[:program_size], Program, _program_category, "program: ")
    if header is not None:
        # The extended header is spliced in after the identifier: no table owns it.
        out.bytes["program: extended header"] += HEADER_LENGTH
        out.bytes["program: padding (alignment)"] -= HEADER_LENGTH
    plan_counts = Counter()
    for plan in pte.program.execution_plan:
        plan_counts.update(f"evalues: {type(v.val).__name__}" for v in plan.values)
        for chain in plan.chains:
            plan_counts.update(
                f"instructions: {type(i.instr_args).__name__}" for i in chain.instructions
            )
        plan_counts["delegates"] += len(plan.delegates)
    out.counts += plan_counts
    if header is None:
        return out
    spans = sorted(pte.segment_map.spans) if pte.segment_map else []
    roles: dict[int, str] = {}
    where = pte.segment_map
    if where.constants is not None:
        roles[where.constants] = "constant segment (portable weights)"
    if where.mutable is not None:
        roles[where.mutable] = "mutable data segment"
    xnn_segments = {
        d.processed.index
        for plan in pte.program.execution_plan
        for d in plan.delegates
        if d.id == "XnnpackBackend" and d.processed.location == DataLocation.SEGMENT
    }
    for k, seg in enumerate(where.delegates):
        roles[seg] = "xnnpack" if k in xnn_segments else "delegate segment (other backend)"
    named_segments = {seg: key for key, seg in where.named.items()}
    spans_by_start = {s: i for i, s in enumerate(where.spans)}
    cursor = program_size
    for start, size in spans:
        out.bytes["padding between segments"] += start - cursor
        cursor = start + size
        index = spans_by_start[(start, size)]
        blob = view[start : start + size]
        role = roles.get(index)
        if role == "xnnpack":
            out.counts["delegate segments stored"] += 1
            _xnnpack_payload(blob, out)
        elif index in named_segments:
            out.bytes["named data (delegate weights)"] += size
        elif role is not None:
            out.bytes[role] += size
        else:
            out.bytes["unreferenced segment"] += size
    out.bytes["padding between segments"] += len(data) - cursor
    for key, blob in pte.named_data.items():
        out.named[key] = (_digest(blob.data), len(blob.data))
    out.constants = [(_digest(b.storage), len(b.storage)) for b in pte.program.constant_buffer[1:]]
    out.counts["constant tensors"] = len(out.constants)
    if sum(out.bytes.values()) != len(data):  # every byte has exactly one category
        raise RuntimeError(f"attributed {sum(out.bytes.values())} of {len(data)} bytes")
    return out


# ------------------------------------------------------------------ printing


def _section(name: str) -> int:
    return 0 if name.startswith("program") else 1 if name.startswith("xnn") else 2


def compare_lines(a: Breakdown, b: Breakdown, names: tuple[str, str]) -> list[str]:
    """The side-by-side table of two breakdowns, then the content differences."""
    rows = sorted(set(a.bytes) | set(b.bytes), key=lambda k: (_section(k), k))
    width = max(len(r) for r in rows)
    lines = [f"{'bytes':<{width}} {names[0]:>10} {names[1]:>10} {'diff':>8}"]
    for r in rows:
        x, y = a.bytes.get(r, 0), b.bytes.get(r, 0)
        if x or y:
            lines.append(f"{r:<{width}} {x:>10} {y:>10} {x - y:>+8}")
    lines.append(f"{'file':<{width}} {a.size:>10} {b.size:>10} {a.size - b.size:>+8}")
    lines.append("")
    counts = sorted(set(a.counts) | set(b.counts))
    cw = max((len(c) for c in counts), default=5)
    lines.append(f"{'counts':<{cw}} {names[0]:>10} {names[1]:>10}")
    for c in counts:
        x, y = a.counts.get(c, 0), b.counts.get(c, 0)
        mark = "" if x == y else "  *"
        lines.append(f"{c:<{cw}} {x:>10} {y:>10}{mark}")
    lines.append("")
    for mine, theirs in ((a, b), (b, a)):
        other = {d for d, _ in theirs.named.values()}
        only = [(k, s) for k, (d, s) in mine.named.items() if d not in other]
        who = names[0] if mine is a else names[1]
        lines.append(
            f"named data only in {who}: {len(only)} blob(s), {sum(s for _, s in only)} bytes"
            + "".join(f"\n  {k}: {s}" for k, s in only[:20])
        )
        other_c = Counter(d for d, _ in theirs.constants)
        extra = []
        for d, s in mine.constants:
            if other_c[d]:
                other_c[d] -= 1
            else:
                extra.append(s)
        lines.append(
            f"constant tensors only in {who}: {len(extra)}, {sum(extra)} bytes"
            + (f" (sizes {sorted(extra, reverse=True)})" if extra else "")
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="one .pte, or two to compare")
    parser.add_argument("--names", default="ours,official", help="the two columns' titles")
    args = parser.parse_args(argv)
    parts = [breakdown(Path(f).read_bytes()) for f in args.files[:2]]
    if len(parts) == 1:
        parts.append(Breakdown(0))
    names = (*args.names.split(","), "")[:2]
    print("\n".join(compare_lines(parts[0], parts[1], (names[0], names[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
