"""Where the bytes of a ``.pte`` go (``pyexecutorch inspect --sizes``), and how two files
differ category by category (``--against``).

Every byte of the file is attributed to exactly one category, so each column sums to its
file size:

- the program flatbuffer, walked table by table with the schema: EValues by type,
  instructions by type, operators, delegate entries, segment and named-data tables, vtables
  included (a vtable two tables share counts once, for the first); the bytes no table,
  vector or string covers are its alignment padding;
- padding up to the first segment and between segments;
- the constant segment (the portable program's weights) and the mutable-data segment;
- each XNNPACK delegate segment: its ``XH00`` header, its ``XNNGraph`` flatbuffer (nodes by
  node type, values by datatype, role and quantization), its paddings and the constants
  inside the payload; other backends' segments whole;
- named data (the XNNPACK weights and scales), whole.

A segment several delegates share is stored, and counted, once. Named data and constant
tensors are also matched between the two files by content, so the comparison says which
blobs only one of them holds. Torch-free: it reads the file with the schema decoders.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyexecutorch.backends.xnnpack import schema as xnn
from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.flatbuffer import NUMPY_OF, Reader, fields_of
from pyexecutorch.schema.program import DataLocation, Program
from pyexecutorch.schema.pte import HEADER_LENGTH, ExtendedHeader, decode_pte

Path_ = tuple[Any, ...]  # field names, list indices and "field<Member>" union steps
_MAX_DEPTH = 64


# ------------------------------------------------------------------ flatbuffer walking


def _spans(reader: Reader, cls: type, table: int, path: Path_, out: list, depth: int = 0) -> None:
    """Append (start, end, path) for the table at ``table`` and everything it owns."""
    if depth > _MAX_DEPTH:
        raise FormatError(f"{'.'.join(map(str, path))}: tables nested too deeply")
    what = ".".join(map(str, path)) or cls.__name__
    vt, vt_size, _ = reader.vtable(table, what)
    inline = reader.scalar("<H", 2, vt + 2, f"{what} vtable")
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
                start, count = reader.vector(at, 1, f"{what}.{spec.name}", charge=False)
                out.append((start - 4, start + count + (kind == "string"), sub))
            continue
        tag = kind[0]
        if tag == "vector":
            size = NUMPY_OF[kind[1]].itemsize
            start, count = reader.vector(at, size, f"{what}.{spec.name}", charge=False)
            out.append((start - 4, start + count * size, sub))
        elif tag == "table":
            child = reader.uoffset(at, f"{what}.{spec.name}")
            _spans(reader, kind[1], child, sub, out, depth + 1)
        elif tag == "tables":
            start, count = reader.vector(at, 4, f"{what}.{spec.name}", charge=False)
            out.append((start - 4, start + 4 * count, sub))
            for i in range(count):
                child = reader.uoffset(start + 4 * i, f"{what}.{spec.name}[{i}]")
                _spans(reader, kind[1], child, (*sub, i), out, depth + 1)
        elif tag == "union":
            value_at = reader.field_offset(vt, vt_size, table, spec.slot + 1)
            member = kind[1].member(reader.scalar("<B", 1, at, f"{what}.{spec.name}"))
            if member is not None and value_at:
                step = f"{spec.name}<{member.__name__}>"
                child = reader.uoffset(value_at, f"{what}.{spec.name}")
                _spans(reader, member, child, (*path, step), out, depth + 1)


def _attribute(data: Any, cls: type, categorize: Any, prefix: str) -> Counter:
    """Bytes of the flatbuffer ``data`` per category; the first owner of a shared byte
    (a vtable two tables share) keeps it, and uncovered bytes are padding."""
    reader = Reader(data)
    spans: list = []
    _spans(reader, cls, reader.uoffset(0, "root table offset"), (), spans)
    labels = ["padding (alignment)", "root offset and identifier"]
    code_of = {label: k for k, label in enumerate(labels)}
    owner = np.zeros(reader.size, dtype=np.int32)
    owner[:8] = 1
    for start, end, path in spans:
        label = categorize(path)
        code = code_of.setdefault(label, len(code_of))
        span = owner[start:end]  # a view: unowned bytes of it take the label
        span[span == 0] = code
    names = sorted(code_of, key=code_of.get)
    counts = np.bincount(owner, minlength=len(names))
    return Counter({f"{prefix}{names[k]}": int(n) for k, n in enumerate(counts) if n})


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
    out.counts.update(f"XNNPACK nodes: {t}" for t in nodes.values())
    out.counts.update(f"XNNPACK values: {k}" for k in values.values())
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
    seen_payloads: set[str] = set()
    for start, size in spans:
        out.bytes["padding between segments"] += start - cursor
        cursor = start + size
        index = spans_by_start[(start, size)]
        blob = view[start : start + size]
        role = roles.get(index)
        if role in ("xnnpack", "delegate segment (other backend)"):
            out.counts["delegate segments stored"] += 1
            digest = _digest(blob)
            if digest in seen_payloads:
                out.counts["delegate segments repeating an earlier one (bytes)"] += size
            seen_payloads.add(digest)
        if role == "xnnpack":
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
    out.bytes = +out.bytes  # drop the empty rows
    return out


# ------------------------------------------------------------------ printing


def _section(name: str) -> tuple[int, str]:
    """Rows in file order: the program, then segments, then the XNNPACK payloads."""
    order = 0 if name.startswith("program") else 2 if name.startswith("xnn") else 1
    return order, name


def sizes_lines(b: Breakdown) -> list[str]:
    """The breakdown of one file: bytes per category with its share, then the counts."""
    rows = sorted((k for k, v in b.bytes.items() if v), key=_section)
    width = max((len(r) for r in rows), default=5)
    lines = [f"{'bytes':<{width}} {'':>10} {'share':>6}"]
    lines += [f"{r:<{width}} {b.bytes[r]:>10} {100 * b.bytes[r] / b.size:5.1f}%" for r in rows]
    lines.append(f"{'file':<{width}} {b.size:>10} 100.0%")
    lines.append("")
    lines += [f"{c}: {n}" for c, n in sorted(b.counts.items())]
    return lines


def _only_in(mine: Breakdown, theirs: Breakdown, who: str) -> list[str]:
    other = {d for d, _ in theirs.named.values()}
    only = [(k, s) for k, (d, s) in mine.named.items() if d not in other]
    lines = [f"named data only in {who}: {len(only)} blob(s), {sum(s for _, s in only)} bytes"]
    lines += [f"  {k}: {s}" for k, s in only]
    left = Counter(d for d, _ in theirs.constants)
    extra = []
    for d, s in mine.constants:
        if left[d]:
            left[d] -= 1
        else:
            extra.append(s)
    sizes = f" (sizes {sorted(extra, reverse=True)})" if extra else ""
    lines.append(f"constant tensors only in {who}: {len(extra)}, {sum(extra)} bytes{sizes}")
    return lines


def compare_lines(a: Breakdown, b: Breakdown, names: tuple[str, str]) -> list[str]:
    """Two breakdowns side by side, then the counts and the blobs only one file holds."""
    rows = sorted(
        (k for k in set(a.bytes) | set(b.bytes) if a.bytes[k] or b.bytes[k]), key=_section
    )
    width = max((len(r) for r in rows), default=5)
    lines = [f"{'bytes':<{width}} {names[0]:>10} {names[1]:>10} {'diff':>8}"]
    for r in rows:
        x, y = a.bytes[r], b.bytes[r]
        lines.append(f"{r:<{width}} {x:>10} {y:>10} {x - y:>+8}")
    lines.append(f"{'file':<{width}} {a.size:>10} {b.size:>10} {a.size - b.size:>+8}")
    lines.append("")
    counts = sorted(set(a.counts) | set(b.counts))
    cw = max((len(c) for c in counts), default=5)
    lines.append(f"{'counts':<{cw}} {names[0]:>10} {names[1]:>10}")
    for c in counts:
        x, y = a.counts[c], b.counts[c]
        lines.append(f"{c:<{cw}} {x:>10} {y:>10}{'' if x == y else '  *'}")
    lines.append("")
    return lines + _only_in(a, b, names[0]) + _only_in(b, a, names[1])
