"""A loaded method: planned memory, resolved kernels, generated code.

Loading follows the C++ runtime's ``Method::init``: the values over planned memory
(:mod:`pyexecutorch.runtime.memory`), then the operators and delegates
(:mod:`pyexecutorch.runtime.resolution`), then the lowering of the instructions to
generated Python and compiled code (:mod:`pyexecutorch.runtime.lowering`), whose
decisions :attr:`LoadedMethod.method_plan` records. ``run`` then only calls kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pyexecutorch.kernels.common import fit, fp_warnings_off, fp_warnings_restore
from pyexecutorch.runtime import shape_plans
from pyexecutorch.runtime.codegen import CompiledChain, Namespace, failing_instruction
from pyexecutorch.runtime.errors import ExecutionError
from pyexecutorch.runtime.etdump import EventTracer, clock
from pyexecutorch.runtime.io import ExactSlot
from pyexecutorch.runtime.limits import (
    DEFAULT_LIMITS,
    InstructionBudgetError,
    LoadLimits,
    check_load_memory,
)
from pyexecutorch.runtime.lowering import Lowering
from pyexecutorch.runtime.memory import PlannedValues, SharedArenas
from pyexecutorch.runtime.method_facts import MethodFacts
from pyexecutorch.runtime.method_plan import MethodPlan
from pyexecutorch.runtime.resolution import init_delegates, resolve_kernels
from pyexecutorch.runtime.shape_plans import ShapePlans, static_plan
from pyexecutorch.runtime.verify import check_data_flow, verify_plan
from pyexecutorch.schema.program import DelegateCall, ExecutionPlan, KernelCall
from pyexecutorch.schema.pte import PteFile

__all__ = ["LoadedMethod", "SharedArenas"]


class _BoundShapes:
    """The shapes a dynamic input has been accepted at, each with the view of its planned
    storage there (True for an input the method reads as given): what the generated input
    installer looks up, so that a repeated shape costs one dictionary look-up."""

    _MAX = 256  # distinct shapes kept; then forgotten (a dynamic dim may take many sizes)

    def __init__(self, bound: tuple[int, ...], planned: np.ndarray | None) -> None:
        self.bound = tuple(bound)
        self.planned = planned
        self.views: dict[tuple[int, ...], Any] = {}

    def accept(self, shape: tuple[int, ...]) -> Any:
        """The view for ``shape`` (True without planned storage), or None past the bounds."""
        if len(shape) != len(self.bound) or any(
            n > b for n, b in zip(shape, self.bound, strict=True)
        ):
            return None
        if len(self.views) >= self._MAX:
            self.views.clear()
        view = True if self.planned is None else fit(self.planned, shape)
        self.views[shape] = view
        return view


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
        lowered = Lowering(self.facts, jit=self.jit, tracer=event_tracer, limits=limits).lower()
        self.chains: list[CompiledChain] = lowered.chains
        self._plan = lowered.plan
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
        method = LoadedMethod(
            self._pte,
            plan,
            named_data=self._named_data,
            jit=True,
            shared=self._shared,
            limits=self.limits,
            verify=False,
            arenas=self.arenas,
            delegates=self._delegates,
        )
        method.instruction_numbers = kept
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

    def exact_installer(self, slots: Sequence[ExactSlot]) -> Callable[[Sequence[Any]], bool]:
        """A function installing the inputs when each is exactly what its slot declares, or
        returning False when one is not, generated once for these ``slots``.

        A dense, writable array of the declared dtype and shape (within its bounds for a
        dynamic one), or for a scalar input the very value the method was exported with,
        needs none of the general conversions and checks
        (:func:`pyexecutorch.runtime.io.exact_slots`); this is the common call. Each
        static check is a comparison against a bound constant and every planned input
        one copy; a dynamic input's shape is looked up among those already accepted
        (:class:`_BoundShapes`: the planned storage's view at it). An input that fails
        may leave the ones before it installed, which is harmless since the general path
        then installs them all again. Without slots only a call with no inputs is exact.
        """
        if not slots:
            return lambda inputs: len(inputs) == 0
        ns = Namespace()
        xs = [f"x{k}" for k in range(len(slots))]
        src = [
            "def install(inputs):",
            f"    if len(inputs) != {len(slots)}: return False",
            f"    {', '.join(xs)}, = inputs",
        ]
        stores = []
        for x, (index, dtype, shape, planned, dynamic, scalar) in zip(xs, slots, strict=True):
            if dtype is None:
                kind, value = ns.bind(type(scalar), "Y"), ns.bind(scalar, "S")
                src.append(f"    if type({x}) is not {kind} or {x} != {value}: return False")
                stores.append(f"    v[{index}] = {x}")
                continue
            array, dt = ns.bind(np.ndarray, "N"), ns.bind(dtype, "D")
            if dynamic:
                bounds = _BoundShapes(shape, planned)
                views, accept = ns.bind(bounds.views, "V"), ns.bind(bounds.accept, "A")
                src += [
                    f"    if type({x}) is not {array} or {x}.dtype != {dt}: return False",
                    f"    {x}s = {views}.get({x}.shape)",
                    f"    if {x}s is None: {x}s = {accept}({x}.shape)",
                    f"    if {x}s is None: return False",
                ]
                if planned is None:
                    src.append(
                        f"    if not ({x}.flags.c_contiguous and {x}.flags.writeable): return False"
                    )
                    stores.append(f"    v[{index}] = {x}")
                else:
                    stores.append(f"    {x}s[...] = {x}; v[{index}] = {x}s")
                continue
            src.append(
                f"    if type({x}) is not {array} or {x}.dtype != {dt} or {x}.shape != "
                f"{ns.bind(tuple(shape), 'S')}: return False"
            )
            if planned is None:
                # read by the method itself: dense and writable, as the general path makes it
                src.append(
                    f"    if not ({x}.flags.c_contiguous and {x}.flags.writeable): return False"
                )
                stores.append(f"    v[{index}] = {x}")
            else:
                storage = ns.bind(planned, "P")
                stores.append(f"    {storage}[...] = {x}; v[{index}] = {storage}")
        src += [*stores, "    return True"]
        namespace = {**ns.names, "v": self.values}
        exec(
            compile("\n".join(src) + "\n", f"<pyexecutorch inputs of {self.name!r}>", "exec"),
            namespace,
        )  # noqa: S102
        return namespace["install"]

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
