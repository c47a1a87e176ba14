"""A readable listing of a program (and of a ``.ptd``), for people and ``inspect``.

``format_program(pte_file_or_program)`` summarizes each method: its inputs
and outputs (value index, dtype, shape, dim order, where the data lives), the
operators it calls, its delegates, its planned arenas, then the file's data
(constants, mutable data, delegate segments, named data, the extended
header). ``verbose=True`` adds every value and every instruction with its
arguments. The listing reads the decoded tables only; it never fails on odd
but decodable contents (out-of-range indices are shown as such).
"""

from __future__ import annotations

from typing import Any

from pyexecutorch.schema.flat_tensor import PtdFile
from pyexecutorch.schema.program import (
    Bool,
    BoolList,
    DataLocation,
    DelegateCall,
    Double,
    DoubleList,
    ExecutionPlan,
    FreeCall,
    Int,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    Null,
    OptionalTensorList,
    Program,
    String,
    Tensor,
    TensorDataLocation,
    TensorList,
    TensorShapeDynamism,
)
from pyexecutorch.schema.pte import PteFile
from pyexecutorch.schema.scalar_type import SCALAR_TYPE_TO_DTYPE, ScalarType

__all__ = ["dtype_name", "format_program", "format_ptd"]

# How many items of a list (or characters of a string) to show before "...".
_MAX_ITEMS = 16
_MAX_CHARS = 60


def dtype_name(scalar_type: Any) -> str:
    """``float32``, ``int64``, ``bfloat16``, ... for a ScalarType (or its code)."""
    try:
        st = ScalarType(scalar_type)
    except ValueError:
        return f"scalar_type({int(scalar_type)})"
    dtype = SCALAR_TYPE_TO_DTYPE.get(st)
    if dtype is not None and st is not ScalarType.BITS16:
        return "bool" if dtype.kind == "b" else dtype.name
    return st.name.lower()


def _nbytes(data: Any) -> int:
    return memoryview(data).nbytes


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _short_list(items: list[Any]) -> str:
    shown = ", ".join(str(x) for x in items[:_MAX_ITEMS])
    more = f", ... ({len(items)} items)" if len(items) > _MAX_ITEMS else ""
    return f"[{shown}{more}]"


def _short_str(s: str) -> str:
    return repr(s if len(s) <= _MAX_CHARS else s[:_MAX_CHARS] + "...")


class _Method:
    """Formats the values and instructions of one execution plan."""

    def __init__(self, plan: ExecutionPlan, program: Program, pte: PteFile | None) -> None:
        self.plan = plan
        self.program = program
        self.pte = pte

    def value(self, index: int) -> Any:
        values = self.plan.values
        return values[index].val if 0 <= index < len(values) else _OutOfRange

    # -- tensors -------------------------------------------------------------

    def tensor_type(self, t: Tensor) -> str:
        return f"{dtype_name(t.scalar_type)}[{', '.join(str(s) for s in t.sizes)}]"

    def tensor_place(self, t: Tensor) -> str:
        """Where a tensor's data lives: an arena slot, a constant, external data."""
        info = t.extra_tensor_info
        if info is not None and info.location == TensorDataLocation.EXTERNAL:
            return f"external {info.fully_qualified_name!r}"
        if t.allocation_info is not None:
            a = t.allocation_info
            place = f"arena {a.memory_id} +{a.memory_offset}"
            if t.data_buffer_idx:
                place += f", initial value mutable #{t.data_buffer_idx}"
            return place
        if t.data_buffer_idx:
            buffers = self.program.constant_buffer
            idx = t.data_buffer_idx
            if idx < len(buffers):
                return f"constant #{idx} ({_nbytes(buffers[idx].storage)} bytes)"
            return f"constant #{idx} (out of range)"
        return "unplanned"

    def tensor_extras(self, t: Tensor, *, dim_order: bool) -> str:
        parts = []
        if dim_order or list(t.dim_order) != list(range(len(t.sizes))):
            parts.append(f"dim_order {tuple(t.dim_order)}")
        if t.shape_dynamism != TensorShapeDynamism.STATIC:
            parts.append(t.shape_dynamism.name.lower())
        if t.storage_offset:
            parts.append(f"storage_offset {t.storage_offset}")
        info = t.extra_tensor_info
        if (
            info is not None
            and info.fully_qualified_name
            and info.location != TensorDataLocation.EXTERNAL
        ):
            parts.append(f"name {info.fully_qualified_name!r}")
        return ", ".join(parts)

    def describe(self, index: int, *, dim_order: bool = False) -> str:
        """A full one-line description of value ``index``."""
        v = self.value(index)
        if isinstance(v, Tensor):
            extras = self.tensor_extras(v, dim_order=dim_order)
            text = f"Tensor {self.tensor_type(v)} {self.tensor_place(v)}"
            return f"{text}, {extras}" if extras else text
        return f"{type(v).__name__} {self.scalar(v)}" if v is not _OutOfRange else "out of range"

    # -- other values --------------------------------------------------------

    def scalar(self, v: Any) -> str:
        if isinstance(v, Int):
            return str(v.int_val)
        if isinstance(v, Double):
            return repr(v.double_val)
        if isinstance(v, Bool):
            return str(v.bool_val)
        if isinstance(v, String):
            return _short_str(v.string_val)
        if isinstance(v, Null) or v is None:
            return "None"
        if isinstance(v, IntList):
            # Items are indices of Int values (so symbolic sizes stay live).
            return _short_list([self.int_item(i) for i in v.items])
        if isinstance(v, DoubleList | BoolList):
            return _short_list(list(v.items))
        if isinstance(v, TensorList):
            return _short_list([f"%{i}" for i in v.items])
        if isinstance(v, OptionalTensorList):
            return _short_list(["None" if i < 0 else f"%{i}" for i in v.items])
        if isinstance(v, Tensor):
            return self.tensor_type(v)
        return "?"

    def int_item(self, index: int) -> str:
        v = self.value(index)
        return str(v.int_val) if isinstance(v, Int) else f"%{index}?"

    def arg(self, index: int) -> str:
        """An instruction argument: tensors summarized, scalars and lists inline."""
        v = self.value(index)
        if v is _OutOfRange:
            return f"%{index}(out of range)"
        if isinstance(v, Tensor):
            return f"%{index}:{self.tensor_type(v)}"
        return self.scalar(v)

    # -- instructions --------------------------------------------------------

    def instruction(self, instr: Any) -> str:
        a = instr.instr_args
        plan = self.plan
        if isinstance(a, KernelCall):
            ops = plan.operators
            name = (
                ops[a.op_index].qualified_name
                if 0 <= a.op_index < len(ops)
                else f"operator #{a.op_index}?"
            )
            return f"{name}({', '.join(self.arg(i) for i in a.args)})"
        if isinstance(a, DelegateCall):
            ds = plan.delegates
            backend = ds[a.delegate_index].id if 0 <= a.delegate_index < len(ds) else "?"
            return (
                f"delegate {a.delegate_index} ({backend})({', '.join(self.arg(i) for i in a.args)})"
            )
        if isinstance(a, MoveCall):
            return f"move %{a.move_from} -> %{a.move_to}"
        if isinstance(a, JumpFalseCall):
            return f"jump_false {self.arg(a.cond_value_index)} -> instruction {a.destination_instruction}"
        if isinstance(a, FreeCall):
            return f"free %{a.value_index}"
        return "(empty instruction)"

    def delegate_data(self, ref: Any) -> str:
        if ref is None:
            return "no data"
        if ref.location == DataLocation.SEGMENT:
            segs = self.pte.delegate_segments if self.pte is not None else []
            size = f", {_nbytes(segs[ref.index])} bytes" if ref.index < len(segs) else ""
            return f"segment {ref.index}{size}"
        inline = self.program.backend_delegate_data
        size = f", {_nbytes(inline[ref.index].data)} bytes" if ref.index < len(inline) else ""
        return f"inline {ref.index}{size}"

    def weights(self) -> str:
        """Constant tensors (count, bytes) and external ones (names) of the method."""
        constants: dict[int, int] = {}
        external: list[str] = []
        buffers = self.program.constant_buffer
        for value in self.plan.values:
            t = value.val
            if not isinstance(t, Tensor):
                continue
            info = t.extra_tensor_info
            if info is not None and info.location == TensorDataLocation.EXTERNAL:
                external.append(repr(info.fully_qualified_name))
            elif t.allocation_info is None and 0 < t.data_buffer_idx < len(buffers):
                constants[t.data_buffer_idx] = _nbytes(buffers[t.data_buffer_idx].storage)
        parts = []
        if constants:
            n = len(constants)
            parts.append(
                f"{n} constant tensor{'s' if n != 1 else ''} ({sum(constants.values())} bytes)"
            )
        if external:
            shown = ", ".join(external[:_MAX_ITEMS]) + (
                ", ..." if len(external) > _MAX_ITEMS else ""
            )
            parts.append(f"{len(external)} external ({shown})")
        return "; ".join(parts)

    # -- the listing ---------------------------------------------------------

    def lines(self, verbose: bool) -> list[str]:
        plan = self.plan
        instructions = [ins for chain in plan.chains for ins in chain.instructions]
        out = [
            f"method {plan.name!r}: {_plural(len(plan.values), 'value')}, "
            f"{_plural(len(instructions), 'instruction')}, {_plural(len(plan.operators), 'operator')}, "
            f"{_plural(len(plan.delegates), 'delegate')}"
        ]
        sizes = list(plan.non_const_buffer_sizes)
        planned = sum(sizes[1:])
        out.append(f"  arenas (non_const_buffer_sizes): {sizes}  ({planned} bytes planned)")
        weights = self.weights()
        if weights:
            out.append(f"  weights: {weights}")
        for title, indices in (("inputs", plan.inputs), ("outputs", plan.outputs)):
            out.append(f"  {title}:" if indices else f"  {title}: none")
            for i in indices:
                out.append(f"    %{i}: {self.describe(i, dim_order=True)}")
        if plan.operators:
            uses = [0] * len(plan.operators)
            for ins in instructions:
                a = ins.instr_args
                if isinstance(a, KernelCall) and 0 <= a.op_index < len(uses):
                    uses[a.op_index] += 1
            out.append("  operators:")
            for k, op in enumerate(plan.operators):
                out.append(f"    {k}: {op.qualified_name}  ({_plural(uses[k], 'call')})")
        if plan.delegates:
            out.append("  delegates:")
            for k, d in enumerate(plan.delegates):
                keys = ", ".join(cs.key for cs in d.compile_specs) or "none"
                out.append(
                    f"    {k}: {d.id}  ({self.delegate_data(d.processed)}; compile specs: {keys})"
                )
        if not verbose:
            return out
        out.append("  values:")
        for i in range(len(plan.values)):
            out.append(f"    %{i}: {self.describe(i)}")
        for c, chain in enumerate(plan.chains):
            out.append(f"  chain {c} (inputs {list(chain.inputs)}, outputs {list(chain.outputs)}):")
            for k, ins in enumerate(chain.instructions):
                out.append(f"    {k}: {self.instruction(ins)}")
        return out


_OutOfRange = object()


def _data_lines(program: Program, pte: PteFile | None, verbose: bool) -> list[str]:
    out = []
    buffers = program.constant_buffer
    total = sum(_nbytes(b.storage) for b in buffers)
    out.append(f"constant buffers: {len(buffers)} ({total} bytes; #0 is reserved)")
    if verbose:
        for k, b in enumerate(buffers[1:], 1):
            out.append(f"  #{k}: {_nbytes(b.storage)} bytes")
    if program.backend_delegate_data:
        sizes = [_nbytes(d.data) for d in program.backend_delegate_data]
        out.append(f"inline delegate data: {len(sizes)} ({sum(sizes)} bytes)")
    if pte is None:
        if program.segments:
            out.append(f"segments: {len(program.segments)}")
            for k, s in enumerate(program.segments):
                out.append(f"  {k}: offset {s.offset}, {s.size} bytes")
        return out
    if pte.mutable_data:
        sizes = [_nbytes(getattr(b, "storage", b)) for b in pte.mutable_data]
        out.append(f"mutable data: {len(sizes)} buffers ({sum(sizes)} bytes)")
    if pte.delegate_segments:
        sizes = [_nbytes(s) for s in pte.delegate_segments]
        out.append(f"delegate segments: {len(sizes)} ({sum(sizes)} bytes)")
        if verbose:
            for k, n in enumerate(sizes):
                out.append(f"  {k}: {n} bytes")
    if pte.named_data:
        sizes = {key: _nbytes(blob.data) for key, blob in pte.named_data.items()}
        out.append(f"named data: {len(sizes)} ({sum(sizes.values())} bytes)")
        if verbose:
            for key, n in sizes.items():
                out.append(f"  {key!r}: {n} bytes")
    h = pte.header
    if h is not None:
        out.append(
            f"extended header: program {h.program_size} bytes, segments at offset "
            f"{h.segment_base_offset} ({h.segment_data_size} bytes)"
        )
    else:
        out.append("extended header: none (no segment data)")
    return out


def format_program(pte_file_or_program: PteFile | Program, *, verbose: bool = False) -> str:
    """A readable listing of a program; ``verbose`` adds every value and instruction."""
    if isinstance(pte_file_or_program, PteFile):
        pte: PteFile | None = pte_file_or_program
        program = pte_file_or_program.program
    elif isinstance(pte_file_or_program, Program):
        pte, program = None, pte_file_or_program
    else:
        raise TypeError(
            f"expected a PteFile or a Program, got {type(pte_file_or_program).__name__}"
        )
    plans = program.execution_plan
    names = ", ".join(repr(p.name) for p in plans)
    out = [f"program (version {program.version}): {_plural(len(plans), 'method')}: {names}"]
    for plan in plans:
        out.append("")
        out.extend(_Method(plan, program, pte).lines(verbose))
    out.append("")
    out.extend(_data_lines(program, pte, verbose))
    return "\n".join(out) + "\n"


def format_ptd(ptd_file: PtdFile, *, verbose: bool = False) -> str:
    """A readable listing of a ``.ptd``: each key with its layout and size."""
    entries = ptd_file.entries
    total = sum(_nbytes(e.data) for e in entries.values())
    out = [
        f"flat tensor data (version {ptd_file.version}): {len(entries)} {'entry' if len(entries) == 1 else 'entries'}, {total} bytes"
    ]
    for key, (layout, data) in entries.items():
        if layout is None:
            desc = "opaque"
        else:
            desc = f"{dtype_name(layout.scalar_type)}[{', '.join(str(s) for s in layout.sizes)}]"
            if verbose or list(layout.dim_order) != list(range(len(layout.sizes))):
                desc += f", dim_order {tuple(layout.dim_order)}"
        out.append(f"  {key!r}: {desc}  ({_nbytes(data)} bytes)")
    h = ptd_file.header
    if h is not None and verbose:
        out.append(
            f"header: flatbuffer {h.flatbuffer_size} bytes at {h.flatbuffer_offset}, "
            f"segments at offset {h.segment_base_offset} ({h.segment_data_size} bytes)"
        )
    return "\n".join(out) + "\n"
