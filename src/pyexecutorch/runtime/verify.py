"""Internal-consistency verification of a decoded program, before anything runs.

Every index, size, offset and dtype is checked so that loading and executing
can trust the program. Each problem raises :class:`InvalidProgramError`
naming the method and the value, instruction or delegate at fault.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import TYPE_CHECKING, Any

from numpy.lib.array_utils import byte_bounds

from pyexecutorch.kernels.registry import facts_of
from pyexecutorch.runtime.dataflow import _with_items, accesses
from pyexecutorch.runtime.errors import InvalidProgramError
from pyexecutorch.schema.program import (
    Bool,
    BoolList,
    DataLocation,
    DelegateCall,
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
    Tensor,
    TensorList,
)
from pyexecutorch.schema.pte import PteFile
from pyexecutorch.schema.scalar_type import SCALAR_TYPE_ITEMSIZE, ScalarType

if TYPE_CHECKING:
    from pyexecutorch.runtime.method_facts import MethodFacts

_MAX_RANK = 16


def verify_program(pte: PteFile) -> None:
    """Check every method of the program (``Verification.InternalConsistency``)."""
    names = set()
    for plan in pte.program.execution_plan:
        if plan.name in names:
            raise InvalidProgramError(f"two methods are named '{plan.name}'")
        names.add(plan.name)
        verify_plan(pte, plan)


def verify_plan(pte: PteFile, plan: ExecutionPlan) -> None:
    method = plan.name
    values = plan.values
    n = len(values)

    def fail(msg: str) -> None:
        raise InvalidProgramError(f"method '{method}': {msg}")

    def check_index(i: int, what: str) -> None:
        if not 0 <= i < n:
            fail(f"{what} refers to value {i}, but the method has {n} values")

    arenas = plan.non_const_buffer_sizes
    for i, size in enumerate(arenas):
        if size < 0:
            fail(f"non_const_buffer_sizes[{i}] is negative ({size})")
    constants = pte.program.constant_buffer

    for i, ev in enumerate(values):
        val = ev.val
        if isinstance(val, Tensor):
            _verify_tensor(fail, i, val, arenas, constants, pte)
        elif isinstance(val, IntList):
            for j in val.items:
                check_index(j, f"value {i} (IntList) item")
                if not isinstance(values[j].val, Int):
                    fail(
                        f"value {i} (IntList) item {j} is {type(values[j].val).__name__}, expected Int"
                    )
        elif isinstance(val, TensorList):
            for j in val.items:
                check_index(j, f"value {i} (TensorList) item")
                if not isinstance(values[j].val, Tensor):
                    fail(
                        f"value {i} (TensorList) item {j} is {type(values[j].val).__name__}, expected Tensor"
                    )
        elif isinstance(val, OptionalTensorList):
            for j in val.items:
                if j == -1:
                    continue
                check_index(j, f"value {i} (OptionalTensorList) item")
                if not isinstance(values[j].val, (Tensor, Null)):
                    fail(
                        f"value {i} (OptionalTensorList) item {j} is {type(values[j].val).__name__}"
                    )
        elif isinstance(val, (DoubleList, BoolList)) or val is None:
            pass

    for what, indices in (("inputs", plan.inputs), ("outputs", plan.outputs)):
        for k, i in enumerate(indices):
            check_index(i, f"{what}[{k}]")

    n_ops = len(plan.operators)
    n_delegates = len(plan.delegates)
    _verify_delegates(fail, pte, plan)

    for c, chain in enumerate(plan.chains):
        n_instr = len(chain.instructions)
        for k, i in enumerate(chain.inputs):
            check_index(i, f"chain {c} inputs[{k}]")
        for k, i in enumerate(chain.outputs):
            check_index(i, f"chain {c} outputs[{k}]")
        for pc, instr in enumerate(chain.instructions):
            where = f"chain {c} instruction {pc}"
            args = instr.instr_args
            if isinstance(args, KernelCall):
                if not 0 <= args.op_index < n_ops:
                    fail(
                        f"{where}: operator index {args.op_index} out of range ({n_ops} operators)"
                    )
                for i in args.args:
                    check_index(i, f"{where} ({plan.operators[args.op_index].name}) argument")
            elif isinstance(args, DelegateCall):
                if not 0 <= args.delegate_index < n_delegates:
                    fail(
                        f"{where}: delegate index {args.delegate_index} out of range ({n_delegates} delegates)"
                    )
                for i in args.args:
                    check_index(i, f"{where} (delegate {args.delegate_index}) argument")
            elif isinstance(args, MoveCall):
                check_index(args.move_from, f"{where} (MoveCall) source")
                check_index(args.move_to, f"{where} (MoveCall) destination")
            elif isinstance(args, JumpFalseCall):
                check_index(args.cond_value_index, f"{where} (JumpFalseCall) condition")
                cond = values[args.cond_value_index].val
                # The official runtime branches on a Bool or a Bool tensor, nothing else:
                # an Int condition that is never false would loop forever.
                if not isinstance(cond, Bool) and not (
                    isinstance(cond, Tensor) and cond.scalar_type == ScalarType.BOOL
                ):
                    kind = (
                        f"a {ScalarType(cond.scalar_type).name} tensor"
                        if isinstance(cond, Tensor)
                        else type(cond).__name__
                    )
                    fail(
                        f"{where} (JumpFalseCall): condition value {args.cond_value_index} is "
                        f"{kind}, expected a Bool or a Bool tensor"
                    )
                if not 0 <= args.destination_instruction <= n_instr:
                    fail(
                        f"{where}: jump destination {args.destination_instruction} out of range ({n_instr} instructions)"
                    )
            elif isinstance(args, FreeCall):
                check_index(args.value_index, f"{where} (FreeCall)")
            else:
                fail(
                    f"{where}: unknown instruction {type(args).__name__ if args is not None else 'NONE'}"
                )


def _verify_delegates(fail, pte: PteFile, plan: ExecutionPlan) -> None:  # noqa: ANN001
    """Each delegate's processed data exists (inline or a segment)."""
    for d, delegate in enumerate(plan.delegates):
        ref = delegate.processed
        if ref is None:
            fail(f"delegate {d} ({delegate.id!r}) has no processed data")
        if ref.location == DataLocation.INLINE and ref.index >= len(
            pte.program.backend_delegate_data
        ):
            fail(
                f"delegate {d} ({delegate.id!r}) refers to inline data {ref.index}, but the program has {len(pte.program.backend_delegate_data)}"
            )
        if ref.location == DataLocation.SEGMENT and ref.index >= len(pte.delegate_segments):
            fail(
                f"delegate {d} ({delegate.id!r}) refers to segment {ref.index}, which does not exist"
            )


def _verify_tensor(
    fail, i: int, t: Tensor, arenas: list[int], constants: list, pte: PteFile
) -> None:  # noqa: ANN001
    itemsize = SCALAR_TYPE_ITEMSIZE.get(t.scalar_type)
    if itemsize is None:
        fail(f"value {i}: unknown scalar type {int(t.scalar_type)}")
    if len(t.sizes) > _MAX_RANK:
        fail(f"value {i}: rank {len(t.sizes)} exceeds {_MAX_RANK}")
    if any(s < 0 for s in t.sizes):
        fail(f"value {i}: negative size in {t.sizes}")
    if math.prod(s for s in t.sizes if s) * itemsize >= 1 << 63:
        # numpy refuses such a shape even with a zero dimension among its sizes.
        fail(f"value {i}: sizes {t.sizes} overflow a 64-bit byte count")
    if t.dim_order and sorted(t.dim_order) != list(range(len(t.sizes))):
        fail(
            f"value {i}: dim_order {t.dim_order} is not a permutation of {len(t.sizes)} dimensions"
        )
    nbytes = math.prod(t.sizes) * itemsize
    alloc = t.allocation_info
    if alloc is not None:
        if not 0 < alloc.memory_id < len(arenas):
            fail(
                f"value {i}: memory id {alloc.memory_id} out of range ({len(arenas)} buffers; id 0 is reserved)"
            )
        end = alloc.memory_offset + nbytes
        if end > arenas[alloc.memory_id]:
            fail(
                f"value {i}: tensor of {nbytes} bytes at offset {alloc.memory_offset} extends past the end "
                f"of buffer {alloc.memory_id} ({end} > {arenas[alloc.memory_id]})"
            )
    extra = t.extra_tensor_info
    external = extra is not None and int(extra.location) == 1
    if t.data_buffer_idx and not external:
        if alloc is not None:
            # A planned tensor with data: a mutable buffer's initial value,
            # indexed into the mutable data segment.
            mutable = pte.mutable_data or []
            if t.data_buffer_idx >= len(mutable):
                fail(
                    f"value {i}: mutable data {t.data_buffer_idx} out of range ({len(mutable)} buffers)"
                )
            have = len(memoryview(mutable[t.data_buffer_idx].storage).cast("B"))
            if nbytes > have:
                fail(
                    f"value {i}: mutable tensor needs {nbytes} bytes but mutable data {t.data_buffer_idx} has {have}"
                )
            return
        if t.data_buffer_idx >= len(constants):
            fail(
                f"value {i}: constant buffer {t.data_buffer_idx} out of range ({len(constants)} buffers)"
            )
        have = len(memoryview(constants[t.data_buffer_idx].storage).cast("B"))
        if nbytes > have:
            fail(
                f"value {i}: constant tensor needs {nbytes} bytes but buffer {t.data_buffer_idx} has {have}"
            )


# ----------------------------------------------------------------------------- data flow


def check_data_flow(method: MethodFacts) -> None:
    """Refuse a method (its MethodFacts, the kernels resolved) in which an instruction reads
    a value that is not an input, a constant or state, and that no instruction writes
    before it on every path through the chains' jumps.

    Such a read sees whatever an earlier call (or nothing) left in planned memory, so the
    tiers, which keep different intermediates, disagree. Defined from the start: inputs,
    scalars and lists, constants, tensors with initial data, shared state (memory ids 2
    and up) and state a method updates in place (an in-place kernel's first argument, or
    a value no instruction writes whose bytes the output of an instruction reading it
    shares, or whose bytes nothing written shares). Any other value no instruction
    writes is a static view: defined where a value sharing its bytes is.
    """
    plan = method.plan
    evalues = plan.values
    steps = [[instr.instr_args for instr in chain.instructions] for chain in plan.chains]
    layout = [[_accesses(method, a) for a in chain] for chain in steps]
    start = set(plan.inputs)
    written: set[int] = set()
    for chain in layout:
        for _, writes, _ in chain:
            written.update(writes)
    for chain, instructions in zip(layout, steps, strict=True):
        for (_, writes, aliased), a in zip(chain, instructions, strict=True):
            if isinstance(a, KernelCall) and method.kernels[a.op_index].n_outs == 0:
                start.update(writes)  # mutated in place: the value is state
            # A value no instruction writes, read by one whose output shares its bytes:
            # state updated in place through an aliasing output (a KV cache).
            start.update(j for j in aliased if j not in written)
    for i, ev in enumerate(evalues):
        t = ev.val
        if not isinstance(t, Tensor):
            start.add(i)  # scalars, strings, lists (their items are checked) and nulls
        elif t.data_buffer_idx or (
            t.extra_tensor_info is not None and int(t.extra_tensor_info.location) == 1
        ):
            start.add(i)  # a constant, or a mutable buffer's initial state
        elif t.allocation_info is not None and t.allocation_info.memory_id >= 2:
            start.add(i)  # state shared between methods
    # A delegate's arguments all count as written (the program does not say which are its
    # inputs), but one that only delegates "write" may be a static view another call
    # defines first (a reshape of an earlier delegate's output passed on to a later one):
    # it keeps its view bases.
    by_kernels = {
        j
        for chain, instructions in zip(layout, steps, strict=True)
        for (_, writes, _), a in zip(chain, instructions, strict=True)
        if not isinstance(a, DelegateCall)
        for j in writes
    }
    bases = _view_bases(method, written | start, by_kernels | start)
    # A value no instruction writes and whose bytes nothing written shares: state kept
    # from call to call (a zero-initialized KV cache that a kernel updates in place).
    start.update(j for j, found in bases.items() if not found)
    # A kernel's outputs overwrite the other written values on their bytes: the planner
    # reuses a value's bytes once it is dead, so a read after that reads another value.
    # Moves (which rebind), delegates (whose arguments may only be read), views and
    # in-place updates (whose other views are meant to see the new data) overwrite
    # nothing, and a value a move rebinds is never overwritten.
    moved = {a.move_to for chain in steps for a in chain if isinstance(a, MoveCall)}
    overlap = _overlaps({j: s for j in written - moved if (s := _span(method, j)) is not None})
    layout = [
        [
            (reads, writes, _overwritten(writes, overlap) if _overwrites(method, a) else [])
            for (reads, writes, _), a in zip(chain, instructions, strict=True)
        ]
        for chain, instructions in zip(layout, steps, strict=True)
    ]

    def constant(j: int) -> bool | None:
        val = evalues[j].val
        return val.bool_val if isinstance(val, Bool) and j not in written else None

    defined = set(start)
    for c, chain in enumerate(layout):
        defined = _chain_flow(plan, c, steps[c], chain, defined, bases, constant)


def _accesses(method: MethodFacts, a: Any) -> tuple[list[int], list[int], list[int]]:
    """(values read, values written, values read that share bytes with one written) of
    one instruction; see check_data_flow."""
    if isinstance(a, DelegateCall):
        # A program does not say which delegate arguments are inputs: none is checked.
        return [], list(_with_items(method.plan.values, a.args)), []
    if isinstance(a, FreeCall):
        return [], [], []
    reads, writes = accesses(method, a)
    aliased = []
    if writes:
        spans = [s for s in (_span(method, j) for j in writes) if s is not None]
        for j in reads:
            span = _span(method, j)
            if span is not None and any(span[0] < hi and lo < span[1] for lo, hi in spans):
                aliased.append(j)
    return reads, writes, aliased


def _span(method: MethodFacts, j: int) -> tuple[int, int] | None:
    cap = method.capacity.get(j)
    if cap is None or not cap.size:
        return None
    return byte_bounds(cap)


def _view_bases(
    method: MethodFacts, candidates: set[int], written: set[int]
) -> dict[int, list[int]]:
    """For each planned tensor no instruction writes, the written or initially defined
    tensors sharing its bytes (the base of a static view)."""
    spans = {j: s for j in candidates if (s := _span(method, j)) is not None}
    order = sorted(spans.items(), key=lambda item: item[1])
    starts = [s[0] for _, s in order]
    bases: dict[int, list[int]] = {}
    for j, ev in enumerate(method.plan.values):
        if j in written or not isinstance(ev.val, Tensor):
            continue
        span = _span(method, j)
        if span is not None:
            lo, hi = span
            end = bisect_right(starts, hi - 1)
            bases[j] = [other for other, (_, ohi) in order[:end] if ohi > lo and other != j]
    return bases


def _overlaps(spans: dict[int, tuple[int, int]]) -> dict[int, list[int]]:
    """For each value of ``spans``, the others whose bytes overlap its own."""
    order = sorted(spans.items(), key=lambda item: item[1])
    out: dict[int, list[int]] = {}
    for k, (j, (_, hi)) in enumerate(order):
        for other, (olo, _) in order[k + 1 :]:
            if olo >= hi:
                break
            out.setdefault(j, []).append(other)
            out.setdefault(other, []).append(j)
    return out


def _overwrites(method: MethodFacts, a: Any) -> bool:
    """Whether instruction ``a`` changes the data of values sharing its outputs' bytes."""
    if not isinstance(a, KernelCall):
        return False
    k = method.kernels[a.op_index]
    facts = facts_of(k.name)
    # a run-time view changes no data; a byte copy onto its source's bytes changes nothing
    if k.n_outs == 0 or facts.run_time_view is not None:
        return False
    if facts.byte_copy and a.args:
        source, out = _span(method, a.args[0]), _span(method, a.args[-1])
        return source is None or source != out
    return True


def _overwritten(writes: list[int], overlap: dict[int, list[int]]) -> list[int]:
    return [v for w in writes for v in overlap.get(w, ()) if v not in writes]


def _successors(
    instructions: list[Any], starts: list[int], ends: list[int], constant: Any
) -> list[list[int]]:
    """Each basic block's successor blocks (``len(starts)``: the chain's end)."""
    n = len(instructions)
    block = {s: b for b, s in enumerate(starts)}
    out = []
    for lo, hi in zip(starts, ends, strict=True):
        last = instructions[hi - 1] if hi > lo else None
        nxt = [hi]
        if isinstance(last, JumpFalseCall):
            known = constant(last.cond_value_index)  # a Bool no instruction writes
            dest = last.destination_instruction
            nxt = [hi] if known is True else [dest] if known is False else [hi, dest]
        out.append(sorted({block.get(s, len(starts)) if s < n else len(starts) for s in nxt}))
    return out


def _chain_flow(
    plan: ExecutionPlan,
    c: int,
    instructions: list[Any],
    chain: list[tuple[list[int], list[int], list[int]]],  # reads, writes, overwritten
    defined: set[int],
    bases: dict[int, list[int]],
    constant: Any,
) -> set[int]:
    """Check one chain's reads given the values ``defined`` on entry; the values defined on
    every path to its end."""
    n = len(instructions)
    starts = {0}
    for pc, a in enumerate(instructions):
        if isinstance(a, JumpFalseCall):
            starts.update((a.destination_instruction, pc + 1))
    starts = sorted(s for s in starts if s < n) or [0]
    ends = [*starts[1:], n]
    succ = _successors(instructions, starts, ends, constant)
    exit_block = len(starts)
    ins: list[set[int] | None] = [None] * (exit_block + 1)  # None: not reached (yet)
    ins[0] = set(defined)
    work = [0]
    while work:
        b = work.pop()
        out = set(ins[b])
        for pc in range(starts[b], ends[b]):
            out.difference_update(chain[pc][2])
            out.update(chain[pc][1])
        for s in succ[b]:
            merged = out if ins[s] is None else ins[s] & out
            if ins[s] is None or merged != ins[s]:
                ins[s] = set(merged)
                if s != exit_block:
                    work.append(s)
    for b in range(exit_block):
        if ins[b] is None:
            continue  # unreachable
        have = set(ins[b])
        for pc in range(starts[b], ends[b]):
            reads, writes, overwritten = chain[pc]
            for j in reads:
                if j in have or any(base in have for base in bases.get(j, ())):
                    continue
                a = instructions[pc]
                what = (
                    plan.operators[a.op_index].qualified_name
                    if isinstance(a, KernelCall)
                    else type(a).__name__
                )
                raise InvalidProgramError(
                    f"method '{plan.name}': chain {c} instruction {pc} ({what}) reads value {j} "
                    "before it is written on every path through the chain (or after a value "
                    "sharing its bytes overwrote it); it is not an input, a constant or state"
                )
            have.difference_update(overwritten)
            have.update(writes)
    return ins[exit_block] if ins[exit_block] is not None else set(defined)
