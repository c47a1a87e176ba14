"""A loaded method: planned memory, resolved kernels, generated code.

Loading follows the C++ runtime's ``Method::init``: the values over planned memory
(:mod:`pyexecutorch.runtime.memory`), then the operators and delegates
(:mod:`pyexecutorch.runtime.resolution`), then the lowering of the instructions to
generated Python and compiled code (:mod:`pyexecutorch.runtime.lowering`), whose
decisions :attr:`LoadedMethod.method_plan` records. ``run`` then only calls kernels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from pyexecutorch.kernels.common import fit, fp_warnings_off, fp_warnings_restore
from pyexecutorch.runtime import shape_plans
from pyexecutorch.runtime.batch_norm_fold import fold_batch_norms
from pyexecutorch.runtime.codegen import CompiledChain, failing_instruction
from pyexecutorch.runtime.conv_outputs import move_conv_run_outputs
from pyexecutorch.runtime.errors import ExecutionError
from pyexecutorch.runtime.etdump import EventTracer, clock
from pyexecutorch.runtime.limits import (
    DEFAULT_LIMITS,
    InstructionBudgetError,
    LoadLimits,
    check_load_memory,
)
from pyexecutorch.runtime.lowering import Lowering
from pyexecutorch.runtime.memory import PlannedValues, SharedArenas, arena_bytes
from pyexecutorch.runtime.method_facts import MethodFacts
from pyexecutorch.runtime.method_plan import MethodPlan
from pyexecutorch.runtime.resolution import init_delegates, resolve_kernels
from pyexecutorch.runtime.shape_plans import ShapePlans, static_plan
from pyexecutorch.runtime.verify import check_data_flow, verify_plan
from pyexecutorch.schema.program import DelegateCall, ExecutionPlan, KernelCall
from pyexecutorch.schema.pte import PteFile

__all__ = ["LoadedMethod", "SharedArenas"]


class LoadedMethod:
    """The executable form of one execution plan."""

    def __init__(
        self,
        pte: PteFile,
        plan: ExecutionPlan,
        *,
        named_data: Mapping[str, Any] | None = None,
        backend_options: Mapping[str, Mapping[str, Any]] | None = None,
        jit: bool = False,
        shared: SharedArenas | None = None,
        event_tracer: EventTracer | None = None,
        limits: LoadLimits = DEFAULT_LIMITS,
        verify: bool = True,
        arenas: list[np.ndarray] | None = None,
        delegates: list[tuple[Any, Any]] | None = None,
    ) -> None:
        """``arenas``: those of the dynamic-shape method this one is a static plan of (see
        :mod:`pyexecutorch.runtime.shape_plans`); their state is kept, no initial data
        written. ``delegates``: that method's delegate handles, used (not destroyed) here."""
        start = clock()
        # With a tracer the method compiles to an instrumented variant (see runtime.traced).
        self.tracer = event_tracer
        self.name = plan.name
        self.plan = plan  # the program's execution plan (method_plan: what loading made of it)
        self._pte = pte
        self._named_data = named_data or {}
        self._shared = shared
        self.limits = limits
        if verify:  # a program loaded with Verification.Minimal is checked method by method
            verify_plan(pte, plan)
        check_load_memory(plan, limits)
        memory = PlannedValues(pte, plan, named_data=self._named_data, shared=shared, arenas=arenas)
        self.arenas = memory.arenas
        self.values = memory.values
        # Planned storage of each tensor value (upper-bound shape for dynamic ones).
        self.capacity = memory.capacity
        self.constant_values = memory.constant_values
        self.inputs = [memory.input_spec(i) for i in plan.inputs]
        self.kernels = resolve_kernels(plan)
        facts = MethodFacts(
            self.name,
            plan,
            self.values,
            self.capacity,
            self.constant_values,
            self.kernels,
            self.inputs,
        )
        check_data_flow(facts)  # needs the kernels: which arguments each call writes
        if delegates is None:
            self._delegates, self._release = init_delegates(
                self,
                pte,
                plan,
                named_data=self._named_data,
                backend_options=backend_options,
                event_tracer=event_tracer,
                jit=jit,
            )
        else:
            self._delegates, self._release = delegates, lambda: None
        # What the load-time rewrites read of this method (runtime.method_facts).
        self.facts = replace(facts, delegates=self._delegates)
        dynamic = shape_plans.dynamic_values(self.facts) if jit and event_tracer is None else None
        # The compiled tier (fused loops and compiled kernel forms) runs such a method
        # through static plans of it, one per input shapes; its own code is the numpy
        # tier's, which stores every size it computes.
        self.jit = jit and dynamic is None
        # The index in the program of each instruction (a static plan drops some), if not pc.
        self.instruction_numbers: list[int] | None = None
        # The program's numbers of the batch norms folded into convolutions at load.
        self.folded_batch_norms: tuple[int, ...] = ()
        if self.jit and event_tracer is None:
            folded = fold_batch_norms(self.facts)
            if folded is not None:
                self.plan = folded.plan
                self.facts = replace(self.facts, plan=folded.plan)
                self.instruction_numbers = folded.instruction_numbers
                self.folded_batch_norms = folded.batch_norms
                self.arenas = [*self.arenas, *folded.arenas]
            # (the scratch arenas of activations moved off a convolution's input come last)
            self.arenas = [*self.arenas, *move_conv_run_outputs(self.facts)]
        lowered = Lowering(self.facts, jit=self.jit, tracer=event_tracer, limits=limits).lower()
        self.chains: list[CompiledChain] = lowered.chains
        self._plan = lowered.plan
        if self.folded_batch_norms:
            self._plan = replace(self._plan, folded_batch_norms=self.folded_batch_norms)
        self.whole_arrays = lowered.whole_arrays  # held as long as the method
        self._slot_times = lowered.slot_times
        # The static plans of a dynamic-shape method on the compiled tier, else None.
        self.shape_plans: ShapePlans | None = None
        if self._plan.whole:
            self.run = self._run_whole
        elif dynamic is not None:
            self.shape_plans = ShapePlans(self.facts, dynamic, self._static_plan, self.run)
            self.run = self.shape_plans.run
        if event_tracer is not None:
            end = clock()
            event_tracer.profile("Method::init", start, end)
            event_tracer.profile("Program::load_method", start, end)
            self.run = self._traced_run

    @property
    def method_plan(self) -> MethodPlan:
        """What loading decided for this method (see :mod:`pyexecutorch.runtime.method_plan`),
        with the static plans made so far of a dynamic-shape method."""
        if self.shape_plans is None:
            return self._plan
        made = {key: p.method_plan for key, p in self.shape_plans.plans.items()}
        return self._plan.with_static_plans(made, self.shape_plans.failures)

    def _static_plan(self, fixed: dict[int, Any]) -> LoadedMethod:
        """This dynamic-shape method with each value of ``fixed`` fixed (see
        shape_plans.static_plan), on the compiled tier, over this method's arenas."""
        plan, kept = static_plan(self.plan, self.shape_plans.dynamic, fixed)
        # (the arenas of the inputs static_plan plans, after this method's)
        inputs = plan.non_const_buffer_sizes[len(self.arenas) :]
        method = LoadedMethod(
            self._pte,
            plan,
            named_data=self._named_data,
            jit=True,
            shared=self._shared,
            limits=self.limits,
            verify=False,
            arenas=[*self.arenas, *(arena_bytes(size) for size in inputs)],
            delegates=self._delegates,
        )
        # (numbers of the static plan's instructions; its load may have dropped some too)
        folded = method.instruction_numbers
        method.instruction_numbers = kept if folded is None else [kept[n] for n in folded]
        return method

    def destroy(self) -> None:
        self._release()
        self._delegates = []

    # ----------------------------------------------------------------- execute

    def set_input(self, position: int, value: Any) -> None:
        """Store one converted input (a numpy array or a Python scalar).

        A memory-planned input is copied into its planned memory. Any other
        tensor input is used as given, as the official runtime does: the
        method reads the caller's array, and an output that is this input
        is that array. Kernels never write into it (they write planned or
        capacity storage and rebind the value).
        """
        spec = self.inputs[position]
        if spec.kind != "tensor" or not spec.planned:
            self.values[spec.index] = value
            return
        cap = self.capacity[spec.index]
        shape = value.shape
        dst = cap if shape == cap.shape else fit(cap, shape)
        np.copyto(dst, value, casting="no")
        self.values[spec.index] = dst

    def _traced_run(self) -> None:
        """``run`` of a traced method: one ``Execute`` block per run, outputs logged."""
        tracer = self.tracer
        tracer.begin_block("Execute")
        start = clock()
        try:
            LoadedMethod.run(self)
        finally:
            end = clock()
            for keys, times in self._slot_times:
                tracer.record_slots(keys, times)
            tracer.flush()
        tracer.profile("Method::execute", start, end)
        if tracer.logs_outputs:
            tracer.log_run_outputs(self.outputs())

    def _run_whole(self) -> None:
        """``run`` of a method compiled whole: numba code raises no numpy warnings."""
        chain = self.chains[0]
        try:
            chain.run(self.values)
        except Exception as e:
            raise self._execution_error(e, chain) from e

    def run(self) -> None:
        v = self.values
        # torch never warns about inf/nan arithmetic; silence numpy once per run.
        token = fp_warnings_off()
        chain = None
        try:
            for chain in self.chains:  # noqa: B007 - the failing chain names the error
                chain.run(v)
        except InstructionBudgetError:
            raise
        except Exception as e:
            raise self._execution_error(e, chain) from e
        finally:
            fp_warnings_restore(token)

    def _execution_error(self, e: Exception, chain: CompiledChain) -> ExecutionError:
        pc = failing_instruction(e, chain)
        numbers = self.instruction_numbers
        where = "an instruction" if pc is None else f"instruction {numbers[pc] if numbers else pc}"
        op = ""
        if pc is not None:
            instr = self.plan.chains[self.chains.index(chain)].instructions[pc].instr_args
            if isinstance(instr, KernelCall):
                op = f" ({self.plan.operators[instr.op_index].qualified_name})"
            elif isinstance(instr, DelegateCall):
                op = f" (delegate {instr.delegate_index}, {self.plan.delegates[instr.delegate_index].id})"
        return ExecutionError(
            f"method '{self.name}' failed at {where}{op}: {type(e).__name__}: {e}"
        )

    def outputs(self) -> list[Any]:
        v = self.values
        return [v[i] for i in self.plan.outputs]
