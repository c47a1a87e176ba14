"""The lowering of a method to generated code: what each instruction becomes, then lines.

The last step of loading a method, after its values (:mod:`pyexecutorch.runtime.memory`)
and operators (:mod:`pyexecutorch.runtime.resolution`). :class:`Lowering` decides, per
kernel call, what it becomes (a view of its input, an inline numpy call, a plain copy,
its kernel's fast path or compiled form), folds constants, fuses elementwise runs and
convolution epilogues (the compiled tier), and then writes each chain's lines
(:class:`ChainWriter`), recording the instructions that are compiled steps so that a
single straight-line chain made only of them compiles whole. The decisions come back as
a :class:`~pyexecutorch.runtime.method_plan.MethodPlan`.

A CNN's activations go channels-last (:mod:`pyexecutorch.runtime.layout`) when the
method then compiles whole; otherwise it is lowered again in the program's own layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyexecutorch.jit import deferral
from pyexecutorch.kernels.registry import Inline, Kernel, fast_path_of
from pyexecutorch.runtime.argument_checks import refused_instructions
from pyexecutorch.runtime.codegen import CompiledChain, compile_chain
from pyexecutorch.runtime.dataflow import Flow, fills_in_place
from pyexecutorch.runtime.epilogue import fuse_epilogues
from pyexecutorch.runtime.etdump import EventTracer
from pyexecutorch.runtime.fast_paths import FastPaths
from pyexecutorch.runtime.fold import fold_constants
from pyexecutorch.runtime.fusion import fuse
from pyexecutorch.runtime.layout import channels_last_values, store_channels_last
from pyexecutorch.runtime.limits import InstructionBudgetError, LoadLimits
from pyexecutorch.runtime.method_facts import MethodFacts
from pyexecutorch.runtime.method_plan import InstructionPlan, MethodPlan
from pyexecutorch.runtime.traced import SlotTimes, traced_lines
from pyexecutorch.runtime.views import ViewElider
from pyexecutorch.runtime.whole_method import copy_source_position
from pyexecutorch.runtime.writer import ChainWriter
from pyexecutorch.schema.program import (
    DelegateCall,
    FreeCall,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)

# What a kernel call becomes: (kind, what runs), by (chain, pc); see method_plan's kinds.
Decisions = dict[tuple[int, int], tuple[str, Any]]


@dataclass
class Analysis:
    """What one lowering attempt knows of the method before it writes a line."""

    written: set[int]  # values instructions or inputs may change: read live
    read: set[int]  # values something reads
    flow: Flow | None
    folded: set[int]  # chain 0's instructions computed at load
    decisions: Decisions
    fixed: set[int]  # tensors that are their planned array at every run
    refused: dict[tuple[int, int], str]
    # (as fusion left them, before epilogues took some runs over)
    fused_runs: list[tuple[int, ...]] = field(default_factory=list)
    view_instructions: list[int] = field(default_factory=list)
    conv_epilogues: list[int] = field(default_factory=list)


@dataclass
class Lowered:
    """One method's chains and the decisions that made them."""

    chains: list[CompiledChain]
    plan: MethodPlan
    whole_arrays: Any = None  # the arrays the whole-method function holds
    slot_times: SlotTimes = field(default_factory=list)  # see runtime.traced


class Lowering:
    """The lowering of one method (see the module docstring)."""

    def __init__(
        self,
        facts: MethodFacts,
        *,
        jit: bool,
        tracer: EventTracer | None,
        limits: LoadLimits,
    ) -> None:
        self.facts = facts
        self.jit = jit
        self.tracer = tracer
        self.limits = limits
        self.fast_paths = FastPaths(facts, jit=jit, traced=tracer is not None)

    def lower(self) -> Lowered:
        """The method's chains, channels-last when that compiles it whole."""
        facts = self.facts
        if not (self.jit and self.tracer is None and len(facts.plan.chains) == 1):
            return self._attempt([])
        chosen = channels_last_values(facts, Flow.of(facts), facts.read_values())
        if chosen:
            restore = store_channels_last(facts, chosen)
            with deferral.deferred_entry_points() as pending:
                lowered = self._attempt(pending, whole_only=True, channels_last=chosen)
            if lowered is not None:
                return lowered
            restore()
        # It may compile whole: its compiled forms' functions load only if their calls stay.
        with deferral.deferred_entry_points() as pending:
            return self._attempt(pending)

    def _attempt(
        self, pending: list[Any], whole_only: bool = False, channels_last: set[int] = frozenset()
    ) -> Lowered | None:
        """The chains' generated code; ``pending`` lists compiled forms' deferred functions
        (see deferral.deferred_entry_points), loaded when the chain does not compile whole.
        ``whole_only``: None instead when the chain does not compile whole."""
        facts = self.facts
        analysis = self.analyse()
        writer = ChainWriter(facts, analysis, self.fast_paths, traced=self.tracer is not None)
        whole_candidate = self.jit and self.tracer is None and len(facts.plan.chains) == 1
        compiled, slot_times = [], []
        for c, chain in enumerate(facts.plan.chains):
            lines, jumps = writer.chain_lines(c, whole_candidate)
            if self.tracer is not None:
                lines = traced_lines(facts, self.tracer, c, lines, jumps, writer, slot_times)
            elif self.jit and len(facts.plan.chains) == 1 and not jumps:
                lines, writer.whole = writer.recorder.whole_lines(lines, writer.ns)
            if whole_only and writer.whole is None:
                return None
            if writer.whole is None:
                writer.bind_pending(pending)
            budget = self.limits.max_instructions
            over = (
                (budget, InstructionBudgetError.raiser(facts.name, c, budget)) if budget else None
            )
            compiled.append(
                compile_chain(facts.name, c, lines, jumps, len(chain.instructions), writer.ns, over)
            )
        whole = writer.whole
        plan = self._record(analysis, writer, compiled, channels_last)
        return Lowered(compiled, plan, whole.arrays if whole else None, slot_times)

    def analyse(self) -> Analysis:
        """What each kernel call becomes, with constants folded and runs fused, before any
        line is written (so that values every writer of which fills them in place are
        known: see _fixed_values)."""
        facts = self.facts
        written = facts.written_values()
        flow = Flow.of(facts)
        # Traced, every instruction runs (and is recorded) as in the official runtime.
        folded = set() if self.tracer else fold_constants(facts, written, flow)
        elider = ViewElider(facts, flow)
        read = facts.read_values()
        # Instructions whose arguments their kernel refuses: no faster form (argument_checks).
        refused = refused_instructions(facts, written)
        decisions = self._decide(flow, folded, elider, written, read, refused)
        if self.jit:
            fuse(facts, flow, decisions, written, elider.region)
        analysis = Analysis(written, read, flow, folded, decisions, set(), refused)
        analysis.fused_runs = [tuple(f.pcs) for kind, f in decisions.values() if kind == "fused"]
        analysis.view_instructions = sorted(
            pc for (_, pc), (kind, _) in decisions.items() if kind == "view"
        )
        if self.jit and self.tracer is None:
            # Convolutions that apply the fused run after them in place.
            specialize = self.fast_paths.specialized
            analysis.conv_epilogues = fuse_epilogues(
                facts, flow, decisions, written, read, specialize
            )
        analysis.fixed = self._fixed_values(flow, decisions)
        return analysis

    def _decide(
        self,
        flow: Flow | None,
        folded: set[int],
        elider: ViewElider,
        written: set[int],
        read: set[int],
        refused: dict[tuple[int, int], str],
    ) -> Decisions:
        """What each kernel call becomes: a view, an inline numpy call, a plain copy, a
        refused call or a call of its kernel's form."""
        facts = self.facts
        evalues = facts.plan.values
        decisions: Decisions = {}
        for c, chain in enumerate(facts.plan.chains):
            for pc, instr in enumerate(chain.instructions):
                a = instr.instr_args
                if not isinstance(a, KernelCall) or (c == 0 and pc in folded):
                    continue
                k = facts.kernels[a.op_index]
                args, outs = facts.kernel_layout(k, a)
                low = facts.widened_kernel(k, args, outs)
                if low is not None:  # bfloat16 / float8: the reference kernel in float32
                    decisions[c, pc] = ("call", low)
                    continue
                if (c, pc) in refused:  # its kernel raises the error when it runs
                    decisions[c, pc] = ("refused", k.fn)
                    continue
                fast = self.fast_paths.specialized(k, args, written, read)
                if c == 0 and (view := elider.view_for(pc, args, outs, fast)) is not None:
                    decisions[c, pc] = ("view", view)
                elif isinstance(fast, Inline) and isinstance(
                    evalues[args[fast.out % len(args)]].val, Tensor
                ):
                    decisions[c, pc] = ("inline", fast)
                elif self.jit and c == 0 and flow is not None and self._plain_copy(k, args, outs):
                    decisions[c, pc] = ("copy", outs[0])
                else:
                    decisions[c, pc] = ("call", fast)
        return decisions

    def _plain_copy(self, k: Kernel, args: list[int], outs: list[int]) -> bool:
        """Whether a kernel call copies a static tensor's elements, in order, into another's
        planned storage of the same size and the same dtype or one numpy converts to as
        the kernel does (so it can fill that storage in place)."""
        at = copy_source_position(k.name)
        if at is None or len(outs) != 1 or at >= len(args) - 1:
            return False
        facts = self.facts
        src, out = args[at], outs[0]
        for j in (src, out):
            val = facts.plan.values[j].val
            if not isinstance(val, Tensor) or val.shape_dynamism != TensorShapeDynamism.STATIC:
                return False
        a, b = facts.load_time_value(src), facts.capacity[out]
        return (
            out not in facts.constant_values
            and facts.values[out] is b
            and _plain_cast(a.dtype, b.dtype)
            and a.size == b.size
            and b.flags.c_contiguous
            and not np.shares_memory(a, b)
        )

    def _inline_outputs(self, flow: Flow, decisions: Decisions) -> dict[int, int]:
        """How many times each value is filled in place by an inline call, a fused loop, a
        copy, an epilogue, a fast path marked ``fills_outputs`` or a delegate."""
        facts = self.facts
        evalues = facts.plan.values
        counts: dict[int, int] = {}

        def add(j: int) -> None:
            counts[j] = counts.get(j, 0) + 1

        for (_, pc), (kind, fast) in decisions.items():
            if kind == "fused":
                for out in fast.outputs:
                    add(out)
            elif kind == "copy":
                add(fast)
            elif kind == "skip" and fast:  # outputs an earlier call fills in place (epilogue)
                for out in fast:
                    add(out)
            elif kind == "inline":
                args, _ = facts.kernel_layout(
                    facts.kernels[flow.instructions[pc].op_index], flow.instructions[pc]
                )
                add(args[fast.out % len(args)])
            elif kind == "call" and fast_path_of(fast).fills_outputs:
                # A fast path marked so writes the out arrays it is given and returns them.
                _, outs = facts.kernel_layout(
                    facts.kernels[flow.instructions[pc].op_index], flow.instructions[pc]
                )
                for j in outs:
                    val = evalues[j].val
                    for out in val.items if isinstance(val, TensorList) else (j,):
                        add(out)
        return counts

    def _fixed_values(self, flow: Flow | None, decisions: Decisions) -> set[int]:
        """Tensors whose array at run time is always their planned storage.

        Such a value is read as a bound name rather than from the value list,
        and its writers need not store it there: a static planned tensor of a
        method :class:`Flow` follows, written only by inline numpy calls (which
        fill their output in place) or in place, or a planned input.
        """
        if flow is None:
            return set()
        facts = self.facts
        inline_outs = self._inline_outputs(flow, decisions)
        fills: dict[int, int] = {}  # delegate calls that leave a value its planned array
        for pc, a in enumerate(flow.instructions):
            if isinstance(a, DelegateCall):
                for j in flow.writes[pc]:
                    if fills_in_place(facts, a, j):
                        fills[j] = fills.get(j, 0) + 1
                        inline_outs[j] = inline_outs.get(j, 0) + 1
        writers: dict[int, int] = {}
        for pc, w in enumerate(flow.writes):
            a = flow.instructions[pc]
            if isinstance(a, KernelCall) and facts.kernels[a.op_index].n_outs == 0:
                continue  # mutates the array it is given: still the planned one
            for j in w:
                writers[j] = writers.get(j, 0) + 1
        inputs = set(facts.plan.inputs)
        fixed = set()
        for j, cap in facts.capacity.items():
            val = facts.plan.values[j].val
            if (
                j in facts.constant_values
                or j in flow.rebound
                or not isinstance(val, Tensor)
                or val.shape_dynamism != TensorShapeDynamism.STATIC
                or val.allocation_info is None
                or facts.values[j] is not cap
            ):
                continue
            if j in inputs:
                # install puts a static planned input in its storage (a delegate reading it
                # counts as writing it: see dataflow)
                if writers.get(j, 0) == fills.get(j, 0):
                    fixed.add(j)
            elif writers.get(j, 0) == inline_outs.get(j, 0):
                # (no writer at all: a static view the planner put on its base's bytes)
                fixed.add(j)
        return fixed

    def _record(
        self,
        analysis: Analysis,
        writer: ChainWriter,
        compiled: list[CompiledChain],
        channels_last: set[int],
    ) -> MethodPlan:
        """The decisions of this lowering, as the method's plan."""
        facts = self.facts
        decisions = analysis.decisions
        instructions = []
        for c, chain in enumerate(facts.plan.chains):
            for pc, instr in enumerate(chain.instructions):
                a = instr.instr_args
                operator = ""
                if isinstance(a, KernelCall):
                    operator = facts.kernels[a.op_index].name
                    kind = decisions.get((c, pc), ("folded",))[0]
                    if kind == "view" and c == 0 and pc in writer.load_time_views:
                        kind = "load_time_view"
                elif isinstance(a, DelegateCall):
                    kind, operator = "delegate", facts.plan.delegates[a.delegate_index].id
                else:
                    kind = _OTHER_KINDS.get(type(a), "unknown")
                instructions.append(InstructionPlan(c, pc, kind, operator))
        whole = writer.whole
        return MethodPlan(
            method=facts.name,
            tier="compiled" if self.jit else "numpy",
            traced=self.tracer is not None,
            whole_source=whole.source if whole else None,
            sources=tuple(chain.source for chain in compiled),
            instructions=tuple(instructions),
            fused_runs=tuple(analysis.fused_runs),
            conv_epilogues=tuple(analysis.conv_epilogues),
            channels_last=frozenset(channels_last),
            view_instructions=tuple(analysis.view_instructions),
            load_time_views=tuple(writer.load_time_views),
            folded=tuple(sorted(analysis.folded)),
            refused=dict(analysis.refused),
        )


_OTHER_KINDS: dict[type, str] = {
    MoveCall: "move",
    FreeCall: "free",
    JumpFalseCall: "jump",
}


def _plain_cast(src: np.dtype, dst: np.dtype) -> bool:
    """Whether numpy's copy of ``src`` elements into ``dst`` (``np.copyto``, same-kind
    casting) gives the copy kernels' values, and a compiled step converts alike: the same
    dtype, or a widening or integer-to-float cast (float16 has no numba arithmetic)."""
    if src.kind not in "biuf" or dst.kind not in "biuf":
        return False
    if src == dst:
        return True
    half = np.dtype(np.float16)
    return half not in (src, dst) and dst.kind in "iuf" and np.can_cast(src, dst, "same_kind")
