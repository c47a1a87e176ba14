"""Who reads and writes which value, and where values live, for load-time rewrites.

Only single-chain methods without jumps are analysed: there instruction order
is execution order, so "between instruction p and q" means what it says.
Static views are no instruction at all: the memory planner gives a view its
base's bytes. So the values that read what an instruction writes are the value
it writes and any other value on those bytes read before they are written
again (:meth:`Flow.aliases_reading`). Delegate arguments count as both read
and written, since a program does not say which are inputs; where the backend
says which it writes whole (``written_arguments``: XNNPACK's outputs), the
alias analysis takes those as written there, not read.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.array_utils import byte_bounds

from pyexecutorch.schema.program import (
    DelegateCall,
    FreeCall,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    OptionalTensorList,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)

if TYPE_CHECKING:
    from pyexecutorch.runtime.method_facts import MethodFacts


def _with_items(evalues: Any, ids: Any) -> list[int]:
    """Value indices, each list followed by its items."""
    out = []
    for j in ids:
        out.append(j)
        val = evalues[j].val if 0 <= j < len(evalues) else None
        if isinstance(val, (TensorList, OptionalTensorList, IntList)):
            out.extend(i for i in val.items if i >= 0)
    return out


def accesses(method: MethodFacts, a: Any) -> tuple[list[int], list[int]]:
    """(values read, values written) by one instruction of ``method`` (its MethodFacts).

    Lists come with their items. An in-place kernel reads and writes its first
    argument; a delegate's arguments count as both, since a program does not
    say which are inputs; a free rebinds its value to the planned storage.
    """
    evalues = method.plan.values
    if isinstance(a, KernelCall):
        k = method.kernels[a.op_index]
        args, outs = method.kernel_layout(k, a)
        reads = _with_items(evalues, args[: len(args) - len(outs)])
        return reads, _with_items(evalues, outs) if k.n_outs else args[:1]
    if isinstance(a, DelegateCall):
        ids = _with_items(evalues, a.args)
        return ids, ids
    if isinstance(a, MoveCall):
        return [a.move_from], [a.move_to]
    if isinstance(a, FreeCall):
        return [], [a.value_index]
    if isinstance(a, JumpFalseCall):
        return [a.cond_value_index], []
    return [], []


def fills_in_place(method: MethodFacts, a: DelegateCall, j: int) -> bool:
    """Whether delegate call ``a`` leaves value ``j`` its planned array: a static tensor
    of a backend that fills such outputs in place (``fills_static_outputs``)."""
    delegates = method.delegates
    if not delegates or not 0 <= a.delegate_index < len(delegates):
        return False
    backend = delegates[a.delegate_index][0]
    val = method.plan.values[j].val
    return (
        getattr(backend, "fills_static_outputs", False)
        and isinstance(val, Tensor)
        and val.shape_dynamism == TensorShapeDynamism.STATIC
    )


def _delegate_fills(method: MethodFacts, a: DelegateCall) -> frozenset[int]:
    """The values delegate call ``a`` writes whole in place without reading them: the
    arguments its backend names as written (``written_arguments``), static tensors of a
    backend that fills those in place, and not passed to it twice."""
    delegates = method.delegates
    if not delegates or not 0 <= a.delegate_index < len(delegates):
        return frozenset()
    backend, handle = delegates[a.delegate_index]
    written = backend.written_arguments(handle)
    if not written:
        return frozenset()
    args = list(a.args)
    return frozenset(
        j
        for n, j in enumerate(args)
        if n in written and args.count(j) == 1 and fills_in_place(method, a, j)
    )


@dataclass
class Flow:
    """Reads, writes and memory of one method's values (see the module docstring)."""

    instructions: list[Any]
    reads: list[list[int]]  # per instruction
    writes: list[list[int]]  # per instruction (an in-place op writes its first argument)
    write_count: Counter  # writes per value; method inputs count as one
    first_read: dict[int, int]  # the method's outputs are read after the last instruction
    last_read: dict[int, int]
    delegate_reads: set[int]
    rebound: set[int]  # values a delegate or a move sets to an array of its choosing
    bounds: dict[int, tuple[int, int]]  # bytes of each tensor in an arena
    read_at: dict[int, list[int]] = field(default_factory=dict)  # value -> reading instructions
    # delegate call -> the values it writes whole in place without reading them (outputs)
    delegate_fills: dict[int, frozenset[int]] = field(default_factory=dict)
    _written_ranges: list[list[tuple[int, int]]] | None = None  # see _covering_writes
    _aliases: _AliasIndex | None = None  # see aliases_reading

    @staticmethod
    def of(method: MethodFacts) -> Flow | None:
        """The flow of ``method`` (its MethodFacts), or None when it has chains or jumps."""
        plan = method.plan
        if len(plan.chains) != 1:
            return None
        instructions = [i.instr_args for i in plan.chains[0].instructions]
        if any(isinstance(a, (JumpFalseCall, FreeCall)) for a in instructions):
            return None
        reads, writes, delegate_reads, rebound = [], [], set(), set()
        fills: dict[int, frozenset[int]] = {}
        for a in instructions:
            r, w = accesses(method, a)
            if isinstance(a, DelegateCall):
                delegate_reads.update(r)
                w_rebound = [j for j in w if not fills_in_place(method, a, j)]
                rebound.update(w_rebound)
                filled = _delegate_fills(method, a)
                if filled:
                    fills[len(reads)] = filled
            if isinstance(a, MoveCall):
                rebound.update(w)
            reads.append(r)
            writes.append(w)
        write_count = Counter(plan.inputs)
        first_read: dict[int, int] = {}
        last_read: dict[int, int] = {}
        for pc, (r, w) in enumerate(zip(reads, writes, strict=True)):
            write_count.update(w)
            for j in r:
                first_read.setdefault(j, pc)
                last_read[j] = pc
        end = len(instructions)
        for j in plan.outputs:
            first_read.setdefault(j, end)
            last_read[j] = end
        bounds = {
            i: byte_bounds(cap)
            for i, cap in method.capacity.items()
            if i not in method.constant_values and cap.size
        }
        flow = Flow(
            instructions,
            reads,
            writes,
            write_count,
            first_read,
            last_read,
            delegate_reads,
            rebound,
            bounds,
            delegate_fills=fills,
        )
        for pc, r in enumerate(reads):
            for j in r:
                flow.read_at.setdefault(j, []).append(pc)
        for j in plan.outputs:
            flow.read_at.setdefault(j, []).append(end)
        return flow

    def aliases_reading(self, pc: int, j: int) -> list[int]:
        """Values other than ``j`` that read the bytes ``j`` gets at instruction ``pc``.

        Such a value shares ``j``'s memory (a static view, or anything the
        planner put there) and is read after ``pc`` before an instruction
        overwrites all of its bytes.
        """
        region = self.bounds.get(j)
        if region is None:
            return []
        lo, hi = region
        index = self._alias_index()
        found = []
        read_at = self.read_at
        fills = self.delegate_fills
        for i in index.overlapping(lo, hi):
            if i == j:
                continue
            reads = read_at.get(i)
            if reads and fills:  # (a delegate's output is written there, not read)
                reads = [r for r in reads if i not in fills.get(r, ())]
            if not reads:
                continue
            at = bisect_right(reads, pc)  # reads are in instruction order
            if at == len(reads):
                continue
            covers = index.covering(i, self.bounds[i])
            k = bisect_right(covers, pc)
            if k == len(covers) or covers[k] >= reads[at]:
                found.append(i)  # no instruction overwrites all of it before that read
        return found

    def _alias_index(self) -> _AliasIndex:
        if self._aliases is None:
            self._aliases = _AliasIndex(self.bounds, self._covering_writes())
        return self._aliases

    def _covering_writes(self) -> list[list[tuple[int, int]]]:
        """Per instruction, the byte ranges it writes whole; built once, on first use. A
        delegate writes its outputs whole when its backend says which they are (any other
        argument may be only read); a kernel writes its outputs whole unless a delegate or
        a move gave them an array of its own (their planned bytes are then not written)."""
        if self._written_ranges is None:
            bounds, fills = self.bounds, self.delegate_fills
            self._written_ranges = [
                [bounds[j] for j in fills.get(pc, ()) if j in bounds]
                if isinstance(self.instructions[pc], DelegateCall)
                else [bounds[j] for j in w if j in bounds and j not in self.rebound]
                for pc, w in enumerate(self.writes)
            ]
        return self._written_ranges

    def writes_to(self, pc: int, region: tuple[int, int]) -> bool:
        """Whether instruction ``pc`` writes any byte of ``region``."""
        lo, hi = region
        bounds = self.bounds
        return any(j in bounds and bounds[j][0] < hi and lo < bounds[j][1] for j in self.writes[pc])


class _AliasIndex:
    """The values' byte ranges and the instructions' whole-range writes as arrays, for
    :meth:`Flow.aliases_reading`: asked for each fused or viewed value, a scan of every
    value's range per question cost a transformer's load milliseconds."""

    def __init__(self, bounds: dict[int, tuple[int, int]], written: list[list[tuple[int, int]]]):
        self.ids = np.fromiter(bounds, np.int64, len(bounds))
        self.lo = np.fromiter((r[0] for r in bounds.values()), np.int64, len(bounds))
        self.hi = np.fromiter((r[1] for r in bounds.values()), np.int64, len(bounds))
        n = sum(map(len, written))
        self.pcs = np.fromiter((pc for pc, w in enumerate(written) for _ in w), np.int64, n)
        self.starts = np.fromiter((r[0] for w in written for r in w), np.int64, n)
        self.ends = np.fromiter((r[1] for w in written for r in w), np.int64, n)
        self._covers: dict[int, list[int]] = {}

    def overlapping(self, lo: int, hi: int) -> list[int]:
        """The values whose bytes meet [lo, hi), in ``bounds`` order."""
        return self.ids[(self.hi > lo) & (self.lo < hi)].tolist()

    def covering(self, i: int, region: tuple[int, int]) -> list[int]:
        """The instructions, in order, that write all of value ``i``'s bytes (``region``)."""
        covers = self._covers.get(i)
        if covers is None:
            a, b = region
            covers = self._covers[i] = self.pcs[(self.starts <= a) & (self.ends >= b)].tolist()
        return covers
