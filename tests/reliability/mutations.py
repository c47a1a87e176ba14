"""Mutations of program, bundled program and ETDump files: raw bytes, every flatbuffer
field, and program structure.

Three families, each a plain function of (file bytes, choices) so that hypothesis,
a seeded random campaign and atheris can all drive them:

- ``raw``: bit flips, byte runs overwritten, truncations, spliced or duplicated
  chunks, 32-bit words overwritten with boundary values;
- ``field``: the position and type of every scalar in the flatbuffer (each table's
  vtable offset, every field, every vector's count and element, every offset to a
  child, the extended header's sizes) come from a walk of the seed, and one is set
  to a boundary value; two offsets may be swapped;
- ``structure``: the decoded program is edited and encoded again: arguments dropped
  or added, cyclic and negative jumps, tensors given other dtypes and sizes than
  their arenas, values replaced by values of another kind, indices pushed out of range.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from pyexecutorch.schema import FormatError, decode_pte, encode_pte
from pyexecutorch.schema.bundled_program import BundledProgram
from pyexecutorch.schema.etdump import ETDump
from pyexecutorch.schema.flatbuffer import SCALARS, Reader, fields_of
from pyexecutorch.schema.program import (
    Bool,
    Double,
    EValue,
    Instruction,
    Int,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    Null,
    Program,
    ScalarType,
    Tensor,
    TensorShapeDynamism,
)

# ---------------------------------------------------------------------------------------
# Field positions


@dataclass(frozen=True)
class Field:
    offset: int
    fmt: str  # struct format, little endian
    path: str
    is_offset: bool = False  # a uoffset to a child table, vector or string


def _walk(reader: Reader, cls: type, table: int, path: str, out: list[Field], seen: set) -> None:
    if (table, cls) in seen:
        return
    seen.add((table, cls))
    out.append(Field(table, "<i", f"{path}.vtable"))
    vt, vt_size, _ = reader.vtable(table, path)
    for spec in fields_of(cls):
        at = reader.field_offset(vt, vt_size, table, spec.slot)
        kind = spec.kind
        what = f"{path}.{spec.name}"
        if not at:
            continue
        if isinstance(kind, str) and kind in SCALARS:
            out.append(Field(at, SCALARS[kind][0], what))
        elif kind in ("string", "bytes"):
            out.append(Field(at, "<I", what, True))
            out.append(Field(reader.uoffset(at, what), "<I", f"{what}.count"))
        elif kind[0] == "enum":
            out.append(Field(at, SCALARS[kind[2]][0], what))
        elif kind[0] == "vector":
            out.append(Field(at, "<I", what, True))
            start, count = reader.vector(at, struct.calcsize(SCALARS[kind[1]][0]), what)
            out.append(Field(start - 4, "<I", f"{what}.count"))
            size = SCALARS[kind[1]][1]
            for i in range(count):
                out.append(Field(start + i * size, SCALARS[kind[1]][0], f"{what}[{i}]"))
        elif kind[0] == "table":
            out.append(Field(at, "<I", what, True))
            _walk(reader, kind[1], reader.uoffset(at, what), what, out, seen)
        elif kind[0] == "tables":
            out.append(Field(at, "<I", what, True))
            start, count = reader.vector(at, 4, what, charge=False)
            out.append(Field(start - 4, "<I", f"{what}.count"))
            for i in range(count):
                out.append(Field(start + 4 * i, "<I", f"{what}[{i}]", True))
                _walk(
                    reader, kind[1], reader.uoffset(start + 4 * i, what), f"{what}[{i}]", out, seen
                )
        elif kind[0] == "union":
            out.append(Field(at, "<B", f"{what}.type"))
            value_at = reader.field_offset(vt, vt_size, table, spec.slot + 1)
            member = kind[1].member(reader.scalar("<B", 1, at, what))
            if value_at and member is not None:
                out.append(Field(value_at, "<I", what, True))
                _walk(reader, member, reader.uoffset(value_at, what), what, out, seen)


def _shifted(found: list[Field], base: int, prefix: str) -> list[Field]:
    return [Field(f.offset + base, f.fmt, prefix + f.path, f.is_offset) for f in found]


def _table_fields(data: bytes, root: type, base: int = 0) -> list[Field]:
    """Every scalar of the flatbuffer at ``data[base:]`` whose root table is a ``root``."""
    reader = Reader(memoryview(data)[base:])
    reader.budget = 1 << 62
    out = [Field(0, "<I", "root", True)]
    try:
        _walk(reader, root, reader.uoffset(0, "root"), root.__name__, out, set())
    except (FormatError, struct.error, ValueError):
        pass  # an already corrupt file: the fields found so far
    return _shifted(out, base, "")


@cache
def fields(pte: bytes) -> tuple[Field, ...]:
    """Every scalar of the program flatbuffer of ``pte`` (and its extended header)."""
    out = []
    if pte[8:12] == b"eh00":
        out += [Field(12, "<I", "header.length"), Field(16, "<Q", "header.program_size")]
        out += [Field(24, "<Q", "header.segment_base_offset")]
        out += [Field(32, "<Q", "header.segment_data_size")]
    root, *walked = _table_fields(pte, Program)
    return (root, *out, *walked)


@cache
def etdump_fields(etdump: bytes) -> tuple[Field, ...]:
    """Every scalar of an ETDump (size-prefixed, as runtimes write it), and its size prefix."""
    return (Field(0, "<I", "size_prefix"), *_table_fields(etdump, ETDump, base=4))


@cache
def bundled_fields(bpte: bytes) -> tuple[Field, ...]:
    """Every scalar of a bundled program's tables and of the program embedded in it."""
    out = _table_fields(bpte, BundledProgram)
    count = next((f for f in out if f.path == "BundledProgram.program.count"), None)
    if count is not None:
        (size,) = struct.unpack_from("<I", bpte, count.offset)
        start = count.offset + 4
        out += _shifted(list(fields(bpte[start : start + size])), start, "program:")
    return tuple(out)


def boundary_values(fmt: str, original: int | float) -> list[int | float]:
    """Values at and around the edges of a field's type, and near its original value."""
    if fmt in ("<f", "<d"):
        return [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e308, -1.0]
    size = struct.calcsize(fmt)
    signed = fmt[1].islower() and fmt != "<?"
    bits = 8 * size
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    near = [original + d for d in (-1, 1, 2, 1 << 8, 1 << 16, 1 << 20)] + [original * 2]
    big = [1 << 30, 1 << 31, 1020 << 30, 1 << 40, 1 << 62]
    values = [0, 1, -1, 2, 7, lo, hi, hi - 1, lo + 1, *near, *big]
    if fmt == "<?":
        values = [0, 1, 2, 255]
        lo, hi = 0, 255
        fmt = "<B"
    return sorted({v for v in values if lo <= v <= hi}, key=values.index)


def set_field(pte: bytes, field: Field, value: int | float) -> bytes:
    fmt = "<B" if field.fmt == "<?" else field.fmt
    out = bytearray(pte)
    struct.pack_into(fmt, out, field.offset, value)
    return bytes(out)


def field_mutation(
    pte: bytes, index: int, choice: int, walk: Callable[[bytes], tuple[Field, ...]] = fields
) -> bytes:
    """The ``index``-th field (mod the count) of ``walk(pte)`` set to its ``choice``-th
    boundary value."""
    fs = walk(pte)
    field = fs[index % len(fs)]
    fmt = "<B" if field.fmt == "<?" else field.fmt
    (original,) = struct.unpack_from(fmt, pte, field.offset)
    values = boundary_values(field.fmt, original)
    return set_field(pte, field, values[choice % len(values)])


def swap_offsets(
    pte: bytes, a: int, b: int, walk: Callable[[bytes], tuple[Field, ...]] = fields
) -> bytes:
    """Two child offsets exchanged (each re-aimed so it points where the other did)."""
    offsets = [f for f in walk(pte) if f.is_offset]
    fa, fb = offsets[a % len(offsets)], offsets[b % len(offsets)]
    (va,) = struct.unpack_from("<I", pte, fa.offset)
    (vb,) = struct.unpack_from("<I", pte, fb.offset)
    target_a, target_b = fa.offset + va, fb.offset + vb
    out = bytearray(pte)
    struct.pack_into("<I", out, fa.offset, (target_b - fa.offset) % (1 << 32))
    struct.pack_into("<I", out, fb.offset, (target_a - fb.offset) % (1 << 32))
    return bytes(out)


# ---------------------------------------------------------------------------------------
# Raw bytes


def raw_mutation(pte: bytes, kind: int, position: int, value: int, other: bytes = b"") -> bytes:
    """One byte-level edit; ``position`` and ``value`` are taken modulo what fits."""
    n = len(pte)
    pos = position % n
    out = bytearray(pte)
    kind %= 6
    if kind == 0:  # bit flip
        out[pos] ^= 1 << (value % 8)
    elif kind == 1:  # a run of bytes overwritten
        run = 1 + value % 16
        out[pos : pos + run] = bytes((value >> 4) & 0xFF for _ in range(len(out[pos : pos + run])))
    elif kind == 2:  # truncation
        return bytes(out[:pos])
    elif kind == 3:  # a chunk of this file or another spliced in
        source = other or pte
        start = value % len(source)
        chunk = source[start : start + 1 + (value >> 8) % 256]
        out[pos:pos] = chunk
    elif kind == 4:  # a 32-bit aligned word set to a boundary value
        pos &= ~3
        if pos + 4 <= n:
            words = [0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, n, n + 4, value & 0xFFFFFFFF]
            struct.pack_into("<I", out, pos, words[value % len(words)])
    else:  # a chunk duplicated or deleted
        run = 1 + value % 64
        if value & 1:
            out[pos:pos] = out[pos : pos + run]
        else:
            del out[pos : pos + run]
    return bytes(out)


# ---------------------------------------------------------------------------------------
# Program structure


def _kernel_calls(plan: Any) -> list[tuple[int, int, KernelCall]]:
    return [
        (c, pc, instr.instr_args)
        for c, chain in enumerate(plan.chains)
        for pc, instr in enumerate(chain.instructions)
        if isinstance(instr.instr_args, KernelCall)
    ]


def _tensors(plan: Any) -> list[tuple[int, Tensor]]:
    return [(i, ev.val) for i, ev in enumerate(plan.values) if isinstance(ev.val, Tensor)]


def _drop_argument(plan: Any, a: int, b: int) -> None:
    calls = _kernel_calls(plan)
    if calls:
        call = calls[a % len(calls)][2]
        if call.args:
            keep = b % (len(call.args) + 1)  # 0: all gone
            call.args = call.args[:keep] if b & 1 else call.args[len(call.args) - keep :]


def _add_argument(plan: Any, a: int, b: int) -> None:
    calls = _kernel_calls(plan)
    if calls:
        call = calls[a % len(calls)][2]
        call.args = [*call.args, *([b % len(plan.values)] * (1 + b % 3))]


def _jump(plan: Any, a: int, b: int) -> None:
    """A JumpFalseCall on a false condition back to itself or earlier (a loop that never
    ends), to a negative or far destination, or on a non-bool value."""
    chain = plan.chains[a % len(plan.chains)]
    plan.values.append(EValue(Bool(False)))
    cond = len(plan.values) - 1
    pc = b % (len(chain.instructions) + 1)
    dest = [pc, 0, max(pc - 1, 0), -1, -(1 << 31), len(chain.instructions) + 5][b % 6]
    if b % 7 == 6:
        cond = a % len(plan.values)  # whatever value that is
    chain.instructions.insert(pc, Instruction(JumpFalseCall(cond, dest)))


def _retype_tensor(plan: Any, a: int, b: int) -> None:
    tensors = _tensors(plan)
    if tensors:
        t = tensors[a % len(tensors)][1]
        kinds = list(ScalarType)
        t.scalar_type = kinds[b % len(kinds)]


def _resize_tensor(plan: Any, a: int, b: int) -> None:
    tensors = _tensors(plan)
    if tensors:
        t = tensors[a % len(tensors)][1]
        choice = b % 6
        if choice == 0:
            t.sizes = [s * 2 + 1 for s in t.sizes] or [3]
        elif choice == 1:
            t.sizes = t.sizes[:-1]
        elif choice == 2:
            t.sizes = [*t.sizes, 2]
        elif choice == 3:
            t.sizes = [(1 << 31) - 1] * max(len(t.sizes), 1)
        elif choice == 4:
            t.sizes = [0] * len(t.sizes)
        else:
            t.sizes = [1 << 16, 1 << 16, 1 << 16]
        if choice != 1 and t.dim_order:
            t.dim_order = list(range(len(t.sizes)))


def _replace_value(plan: Any, a: int, b: int) -> None:
    i = a % len(plan.values)
    replacements = [Null(), Int(b), Bool(True), Tensor(ScalarType.FLOAT, sizes=[2])]
    plan.values[i] = EValue(replacements[b % len(replacements)])


def _out_of_range(plan: Any, a: int, b: int) -> None:
    n = len(plan.values)
    targets = [n, n + 1, -1, -(1 << 31), (1 << 31) - 1][b % 5]
    calls = _kernel_calls(plan)
    choice = a % 4
    if choice == 0 and calls:
        call = calls[b % len(calls)][2]
        if call.args:
            call.args[a % len(call.args)] = targets
    elif choice == 1 and calls:
        calls[b % len(calls)][2].op_index = [len(plan.operators), -1][b & 1]
    elif choice == 2 and plan.outputs:
        plan.outputs[a % len(plan.outputs)] = targets
    else:
        chain = plan.chains[a % len(plan.chains)]
        chain.instructions.insert(0, Instruction(MoveCall(targets, 0)))


def _swap_arguments(plan: Any, a: int, b: int) -> None:
    calls = _kernel_calls(plan)
    if calls:
        call = calls[a % len(calls)][2]
        if len(call.args) >= 2:
            i, j = a % len(call.args), b % len(call.args)
            call.args[i], call.args[j] = call.args[j], call.args[i]


def _huge_arena(plan: Any, a: int, b: int) -> None:
    sizes = plan.non_const_buffer_sizes
    if sizes:
        sizes[a % len(sizes)] = [1020 << 30, (1 << 63) - 1, 1 << 40, -1, 0][b % 5]


def _reorder(plan: Any, a: int, b: int) -> None:
    """Two instructions of a chain exchanged (a read may come before its write)."""
    chain = plan.chains[a % len(plan.chains)]
    n = len(chain.instructions)
    if n >= 2:
        i, j = a % n, b % n
        ins = chain.instructions
        ins[i], ins[j] = ins[j], ins[i]


def _delete(plan: Any, a: int, b: int) -> None:
    """One instruction deleted, or one duplicated."""
    chain = plan.chains[a % len(plan.chains)]
    if chain.instructions:
        pc = b % len(chain.instructions)
        if a & 1:
            del chain.instructions[pc]
        else:
            chain.instructions.insert(pc, chain.instructions[pc])


def _hostile_scalar(plan: Any, a: int, b: int) -> None:
    """An Int (a size, a dim, a repeat count, a range end...) or Double argument set to
    a hostile value."""
    scalars = [ev.val for ev in plan.values if isinstance(ev.val, (Int, Double))]
    if scalars:
        v = scalars[a % len(scalars)]
        if isinstance(v, Int):
            v.int_val = [0, -1, 1 << 40, -(1 << 40), (1 << 63) - 1, -(1 << 63), 1 << 20][b % 7]
        else:
            v.double_val = [float("nan"), float("inf"), -float("inf"), 1e300, -0.0][b % 5]


def _dynamic_bound(plan: Any, a: int, b: int) -> None:
    """A tensor's dynamism changed (static <-> bound <-> unbound), its planned memory
    dropped, or both."""
    tensors = _tensors(plan)
    if tensors:
        t = tensors[a % len(tensors)][1]
        choice = b % 4
        if choice < 3:
            t.shape_dynamism = TensorShapeDynamism(choice)
        else:
            t.allocation_info = None
            t.shape_dynamism = TensorShapeDynamism.DYNAMIC_UNBOUND


STRUCTURAL = (
    _drop_argument,
    _add_argument,
    _jump,
    _retype_tensor,
    _resize_tensor,
    _replace_value,
    _out_of_range,
    _swap_arguments,
    _huge_arena,
    _reorder,
    _delete,
    _hostile_scalar,
    _dynamic_bound,
)


def structural_mutation(pte: bytes, kind: int, a: int, b: int) -> bytes | None:
    """One structural edit of one method, encoded again; None when the encoder refuses."""
    f = decode_pte(pte)  # fresh each time: the edit happens in place
    plans = f.program.execution_plan
    if not plans:
        return None
    plan = plans[a % len(plans)]
    if not plan.values or not plan.chains:
        return None
    STRUCTURAL[kind % len(STRUCTURAL)](plan, a // max(len(plans), 1), b)
    try:
        return encode_pte(f)
    except (ValueError, TypeError, OverflowError, struct.error):
        return None  # out of the field's range: the field mutations cover those bytes
