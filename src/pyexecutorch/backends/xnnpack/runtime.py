"""The runtime half of the XNNPACK backend, registered as ``"XnnpackBackend"``.

``init`` decodes the payload and resolves its constants once; ``execute``
runs the plan for the shapes of the inputs it is given (plans are built on
first use of each input shape and kept, a few at a time).
"""

from __future__ import annotations

from typing import Any

from pyexecutorch.backends.xnnpack.interpreter import Graph, Plan, load_graph
from pyexecutorch.backends.xnnpack.schema import XnnpackError, decode_payload
from pyexecutorch.kernels.common import fp_warnings_off, fp_warnings_restore
from pyexecutorch.runtime.backend import BackendInitContext, BackendInterface, register_backend

BACKEND_ID = "XnnpackBackend"
MAX_PLANS = 8


class Delegate:
    """One initialized delegate: its graph and its plans by input shapes."""

    def __init__(self, graph: Graph, tracer: Any = None) -> None:
        self.graph = graph
        self.tracer = tracer  # an ETDump EventTracer: plans then record one event per node
        self.plans: dict[tuple[tuple[int, ...], ...], Plan] = {}
        self.last_key: tuple[tuple[int, ...], ...] | None = None
        self.last_plan: Plan | None = None
        self.input_ext = [v.external_id for v in graph.inputs]
        self.n_args = len(graph.inputs) + len(graph.outputs)

    def plan_for(self, args: list[Any]) -> Plan:
        if len(args) != self.n_args:
            raise XnnpackError(
                f"the delegate takes {self.n_args} arguments (inputs and outputs), the call passes {len(args)}"
            )
        key = tuple(tuple(args[e].shape) for e in self.input_ext)
        if key == self.last_key:
            return self.last_plan
        plan = self.plans.get(key)
        if plan is None:
            if len(self.plans) >= MAX_PLANS:
                self.plans.pop(next(iter(self.plans)))
            plan = self.plans[key] = Plan(self.graph, key, self.tracer)
        self.last_key, self.last_plan = key, plan
        return plan


class XnnpackBackend(BackendInterface):
    tensor_arguments_only = True

    def init(
        self, processed: memoryview, compile_specs: dict[str, bytes], context: BackendInitContext
    ) -> Delegate:
        graph = load_graph(decode_payload(processed), context.named_data)
        delegate = Delegate(graph, context.event_tracer)
        # Build the plan for the declared shapes now, so that graph errors surface at load.
        delegate.plans[tuple(v.dims for v in graph.inputs)] = Plan(
            graph, tuple(v.dims for v in graph.inputs), context.event_tracer, declared=True
        )
        return delegate

    def execute(self, handle: Delegate, args: list[Any]) -> list[Any] | None:
        plan = handle.plan_for(args)
        # Like XNNPACK (and torch), produce inf and NaN without numpy's warnings.
        token = fp_warnings_off()
        try:
            return plan.run(args)
        finally:
            fp_warnings_restore(token)

    def destroy(self, handle: Delegate) -> None:
        handle.plans.clear()
        handle.last_plan = None


register_backend(BACKEND_ID, XnnpackBackend())
