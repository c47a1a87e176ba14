"""What loading decided for a method: the record ``Method.plan`` returns.

Every decision the load makes about how an instruction runs is visible here, so that a
test or a person can see it without reading the method's private state: which tier,
whether the method compiled to one function (and that function's generated module),
which instructions fused into one loop, which convolutions apply the loop after them in
place (epilogues), which values went channels-last, which copies became views, what was
folded into constants, which instructions' arguments the compiled forms refuse, which
batch norms were folded into convolutions, and what each instruction became.
``pyexecutorch inspect --plan model.pte`` prints it.

Instruction kinds (:attr:`InstructionPlan.kind`):

=================  ========================================================================
``call``           its kernel (or the kernel's fast path or compiled form) is called
``inline``         a numpy function called inline on its planned arrays
``fused``          the fused loop computing a run of elementwise instructions ending here
``skip``           computed by a fused loop or a convolution's epilogue elsewhere
``view``           a copy made a view of its input, each run
``load_time_view`` a copy made a view once, at load: nothing runs
``copy``           a plain copy into planned storage
``folded``         computed once at load (its inputs are constants)
``refused``        the compiled forms refuse its arguments: the reference kernel runs
``delegate``       a backend's delegate call
``move``           a value moved to another
``free``           a value returned to its planned storage
``jump``           a conditional jump
=================  ========================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

# An instruction kind's one-line meaning, for :meth:`MethodPlan.describe`'s legend.
INSTRUCTION_KINDS = {
    "call": "kernel call",
    "inline": "numpy call inline",
    "fused": "fused loop",
    "skip": "computed by a fused loop or an epilogue",
    "view": "view made per run",
    "load_time_view": "view made at load",
    "copy": "copy into planned storage",
    "folded": "folded at load",
    "refused": "arguments refused by the compiled forms",
    "delegate": "delegate call",
    "move": "move",
    "free": "free",
    "jump": "jump",
}

_NOT_KERNEL_CALLS = frozenset({"delegate", "move", "free", "jump"})
_NOTHING_AT_RUN_TIME = frozenset({"skip", "load_time_view", "folded"})


@dataclass(frozen=True)
class InstructionPlan:
    """One instruction and what it became."""

    chain: int
    pc: int  # its index in the chain
    kind: str  # see the module docstring
    operator: str = ""  # the kernel call's operator, or the delegate's backend id

    @property
    def kernel_call(self) -> bool:
        """Whether the instruction is a kernel call (whatever it became)."""
        return self.kind not in _NOT_KERNEL_CALLS

    @property
    def runs(self) -> bool:
        """Whether the instruction has code of its own at run time (not folded, not a view
        made at load, not computed by another instruction's loop)."""
        return self.kind not in _NOTHING_AT_RUN_TIME


@dataclass(frozen=True)
class MethodPlan:
    """The decisions of one method's load (see the module docstring)."""

    method: str
    tier: str  # "numpy" or "compiled"
    traced: bool  # loaded with an event tracer: every instruction runs and is timed
    whole_source: str | None  # the generated module of the method compiled whole, or None
    sources: tuple[str, ...]  # each chain's generated Python
    instructions: tuple[InstructionPlan, ...]
    fused_runs: tuple[tuple[int, ...], ...]  # chain 0's instructions of each fused loop
    conv_epilogues: tuple[int, ...]  # convolutions applying the fused run after them
    channels_last: frozenset[int]  # values stored channels-last (runtime.layout)
    view_instructions: tuple[int, ...]  # copies that became views (chain 0)
    load_time_views: tuple[int, ...]  # of those, the views made once at load
    folded: tuple[int, ...]  # chain 0's instructions computed at load
    refused: Mapping[tuple[int, int], str]  # (chain, pc) -> why its arguments are refused
    # the program's instruction numbers of the batch norms folded into the convolution
    # before them at load (runtime.batch_norm_fold); ``instructions`` then lists the
    # method's instructions without them, numbered in that order
    folded_batch_norms: tuple[int, ...] = ()
    # a dynamic-shape method on the compiled tier runs through static plans of it, one per
    # input shapes (see runtime.shape_plans): those made so far, by the shapes
    shape_plans: bool = False
    static_plans: Mapping[tuple, MethodPlan] = field(default_factory=dict)
    # the input shapes whose static plan could not be made, and why (they run generically)
    static_plan_failures: Mapping[tuple, str] = field(default_factory=dict)

    @property
    def whole(self) -> bool:
        """Whether the method's one chain runs as one compiled function."""
        return self.whole_source is not None

    def kinds(self, chain: int = 0) -> list[str]:
        """Each instruction's kind, in chain ``chain``."""
        return [i.kind for i in self.instructions if i.chain == chain]

    def operators(self, pcs: tuple[int, ...] | list[int], chain: int = 0) -> list[str]:
        """The operators of instructions ``pcs`` of chain ``chain``."""
        by_pc = {i.pc: i.operator for i in self.instructions if i.chain == chain}
        return [by_pc[pc] for pc in pcs]

    def with_static_plans(
        self, plans: Mapping[tuple, MethodPlan], failures: Mapping[tuple, str]
    ) -> MethodPlan:
        """This plan, of a method that runs through static plans, with those made so far."""
        return replace(
            self, shape_plans=True, static_plans=dict(plans), static_plan_failures=dict(failures)
        )

    def describe(self, verbose: bool = False) -> str:
        """The plan as text: a summary, each instruction, and with ``verbose`` the
        generated sources."""
        counts: dict[str, int] = {}
        for i in self.instructions:
            counts[i.kind] = counts.get(i.kind, 0) + 1
        lines = [
            f"method '{self.method}': {self.tier} tier"
            + (", traced" if self.traced else "")
            + (", compiled whole" if self.whole else "")
            + (", static plans per input shapes" if self.shape_plans else ""),
            "  instructions: " + ", ".join(f"{n} {kind}" for kind, n in counts.items()),
        ]
        facts = [
            ("fused runs", [list(r) for r in self.fused_runs]),
            ("convolution epilogues", list(self.conv_epilogues)),
            ("channels-last values", sorted(self.channels_last)),
            ("views", list(self.view_instructions)),
            ("views made at load", list(self.load_time_views)),
            ("folded", list(self.folded)),
            ("batch norms folded into convolutions", list(self.folded_batch_norms)),
            ("refused", [f"{c}:{pc} {why}" for (c, pc), why in self.refused.items()]),
        ]
        lines += [f"  {name}: {value}" for name, value in facts if value]
        for i in self.instructions:
            lines.append(f"  [{i.chain}:{i.pc:>4}] {i.kind:<15} {i.operator}")
        for shapes, plan in self.static_plans.items():
            lines.append(f"  static plan for input shapes {list(shapes)}:")
            lines += ["  " + line for line in plan.describe(verbose).splitlines()]
        for shapes, why in self.static_plan_failures.items():
            lines.append(f"  no static plan for input shapes {list(shapes)}: {why}")
        if verbose:
            for c, source in enumerate(self.sources):
                lines += [f"  chain {c} source:", *("    " + s for s in source.splitlines())]
            if self.whole_source is not None:
                lines += ["  whole-method module:"]
                lines += ["    " + s for s in self.whole_source.splitlines()]
        return "\n".join(lines)
