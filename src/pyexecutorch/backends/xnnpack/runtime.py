"""The runtime half of the XNNPACK backend, registered as ``"XnnpackBackend"``.

``init`` decodes the payload and resolves its constants once; ``execute``
runs the plan for the shapes of the inputs it is given (plans are built on
first use of each input shape and kept, a few at a time). On the compiled tier
(a method loaded with jit on, not logging its delegates' node outputs) a plan is a
:class:`~pyexecutorch.backends.xnnpack.compiled.CompiledPlan`: the numpy plan of
the same shapes is built first, which checks the graph, then its nodes become
compiled calls (timed one node, or fused group, at a time when an ETDump tracer
profiles them).
"""

from __future__ import annotations

import logging
from typing import Any

from pyexecutorch.backends.xnnpack.interpreter import Graph, Plan, load_graph
from pyexecutorch.backends.xnnpack.schema import XnnpackError, decode_payload
from pyexecutorch.kernels.common import fp_warnings_off, fp_warnings_restore
from pyexecutorch.runtime.backend import BackendInitContext, BackendInterface, register_backend

BACKEND_ID = "XnnpackBackend"
MAX_PLANS = 8
logger = logging.getLogger(__name__)


class Delegate:
    """One initialized delegate: its graph and its plans by input shapes."""

    def __init__(self, graph: Graph, tracer: Any = None, jit: bool = False) -> None:
        self.graph = graph
        self.tracer = tracer  # an ETDump EventTracer: plans then record one event per node
        # Compiled plans, timed per node (or fused group of nodes) when traced; logging every
        # node's output (numeric debugging) takes numpy's plan, whose nodes are all apart.
        self.jit = jit and not (tracer is not None and tracer.logs_delegate_outputs)
        self.plans: dict[tuple[tuple[int, ...], ...], Any] = {}
        self.last_key: tuple[tuple[int, ...], ...] | None = None
        self.last_plan: Any = None
        self.input_ext = [v.external_id for v in graph.inputs]
        self.output_ext = [v.external_id for v in graph.outputs]
        self.n_args = graph.num_args

    def make_plan(self, key: tuple[tuple[int, ...], ...], declared: bool = False) -> Any:
        """The plan for input shapes ``key``: compiled where the delegate is, else numpy's."""
        plan = Plan(self.graph, key, self.tracer, declared)  # (checks the graph)
        if not self.jit:
            return plan
        from pyexecutorch.backends.xnnpack.compiled import CompiledPlan  # noqa: PLC0415

        try:
            compiled = CompiledPlan(self.graph, key, declared, self.tracer)
        except Exception:  # a defect of the compiled tier must not stop the model
            logger.warning(
                "XNNPACK delegate: the compiled plan for input shapes %s failed; running "
                "the numpy interpreter",
                key,
                exc_info=True,
            )
            return plan
        # (with no compiled step at all, as in a quantized delegate, numpy's plan binds
        # the caller's arrays where the compiled one would copy them)
        return compiled if compiled.steps else plan

    def _same_memory_plan(self, key: tuple[tuple[int, ...], ...]) -> Any:
        """A compiled plan for shapes that differ from ``key`` in dimensions of size 1 only
        (a method passes a 0-d scalar where the payload declares one element): it binds
        the same memory, so it serves these shapes too."""
        squeezed = _squeezed(key)
        for other, plan in self.plans.items():
            if plan.compiled and _squeezed(other) == squeezed:
                self.plans[key] = plan
                return plan
        return None

    def plan_for(self, args: list[Any]) -> Any:
        if len(args) != self.n_args:
            raise XnnpackError(
                f"the delegate takes {self.n_args} arguments (inputs and outputs), the call passes {len(args)}"
            )
        key = tuple(tuple(args[e].shape) for e in self.input_ext)
        if key == self.last_key:
            return self.last_plan
        plan = self.plans.get(key)
        if plan is None and self.jit:
            plan = self._same_memory_plan(key)
        if plan is None:
            if len(self.plans) >= MAX_PLANS:
                self.plans.pop(next(iter(self.plans)))
            plan = self.plans[key] = self.make_plan(key)
        self.last_key, self.last_plan = key, plan
        return plan


def _squeezed(key: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(d for d in shape if d != 1) for shape in key)


class XnnpackBackend(BackendInterface):
    tensor_arguments_only = True
    fills_static_outputs = True  # (see Plan.run and CompiledPlan.run)

    def init(
        self, processed: memoryview, compile_specs: dict[str, bytes], context: BackendInitContext
    ) -> Delegate:
        graph = load_graph(decode_payload(processed), context.named_data)
        delegate = Delegate(graph, context.event_tracer, getattr(context, "jit", False))
        # Build the plan for the declared shapes now, so that graph errors surface at load
        # (and a compiled plan compiles at load).
        key = tuple(v.dims for v in graph.inputs)
        delegate.plans[key] = delegate.make_plan(key, declared=True)
        return delegate

    def execute(self, handle: Delegate, args: list[Any]) -> list[Any] | None:
        plan = handle.last_plan
        if plan is not None and plan.compiled and plan.holds(args):
            return plan.run_bound(args)  # the same arrays as the last call
        plan = handle.plan_for(args)
        if plan.compiled:
            return plan.run(args)
        # Like XNNPACK (and torch), produce inf and NaN without numpy's warnings.
        token = fp_warnings_off()
        try:
            return plan.run(args)
        finally:
            fp_warnings_restore(token)

    def whole_steps(self, handle: Delegate, args: list[Any]) -> list[Any] | None:
        """The delegate's compiled steps on ``args`` (its call's inputs then outputs: arrays
        a method made at load and passes on every call), for a method that compiles its
        instructions into one function: :class:`~pyexecutorch.runtime.whole_method.Step`
        calls, or None where the delegate is not one compiled function on those arrays."""
        if not handle.jit or len(args) != handle.n_args:
            return None
        plan = handle.plan_for(args)
        return plan.whole_steps(args) if plan.compiled else None

    def tensor_arguments(self, handle: Delegate, count: int) -> list[int]:
        """The positions the graph's values read or write (external ids): the other
        arguments are sizes the exporter passed in, which XNNPACK does not read."""
        return [e for e in handle.input_ext + handle.output_ext if e < count]

    def written_arguments(self, handle: Delegate) -> frozenset[int]:
        """The graph's outputs (an external that is also an input is read too)."""
        return frozenset(v.external_id for v in handle.graph.outputs) - set(handle.input_ext)

    def destroy(self, handle: Delegate) -> None:
        handle.plans.clear()
        handle.last_plan = None


register_backend(BACKEND_ID, XnnpackBackend())
