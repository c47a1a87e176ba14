"""Static plans of a dynamic-shape method, one per distinct input shapes (the compiled tier).

A method whose tensors have dynamic (bounded) shapes cannot compile whole as it
stands: its kernels size their outputs per call. But when every shape in it
follows from its inputs' shapes alone (no operator whose output size depends on
data; the sizes it computes at run time come from tensors' sizes, through
``sym_size`` and the scalar ``executorch_prim`` operators), one run at given
input shapes fixes them all. Such a method keeps a small cache of static methods
keyed by its dynamic inputs' shapes. Each is the same program with every dynamic
tensor made static at the size the run gave it, each computed size a constant
(its instruction dropped) and each run-time view (``et_view``) a copy, laid over
the dynamic method's own arenas (a dynamic tensor of a smaller size is the prefix
of its upper-bound storage, as :func:`pyexecutorch.kernels.common.fit` places
it). So it compiles whole like any static method, and the disk cache serves
every size alike (generated sources do not depend on sizes).

A scalar read from data (``_local_scalar_dense``: an LLM's start position) and the
scalars computed from it stay live in a static plan, their instructions kept; they
may only reach operators whose output shapes do not depend on them (the KV-cache
operators, ``select``) or a ``slice_copy``, whose length a static plan checks after
each run against the one it was built with (a slice clamped at the end of its
dimension would be shorter). Delegate calls keep the dynamic method's handles: a
backend sees the static shapes of each plan (XNNPACK keeps a plan per shape).

A shape seen for the first time runs instruction by instruction (the numpy
tier, which stores every tensor it resizes); the second call at that shape
builds the static method from what the first recorded, and later calls run it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pyexecutorch.kernels.registry import facts_of
from pyexecutorch.runtime.dataflow import accesses
from pyexecutorch.runtime.errors import ExecutionError
from pyexecutorch.schema.program import (
    AllocationDetails,
    Bool,
    DelegateCall,
    Double,
    EValue,
    Instruction,
    Int,
    KernelCall,
    Operator,
    OptionalTensorList,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)
from pyexecutorch.schema.scalar_type import SCALAR_TYPE_ITEMSIZE

if TYPE_CHECKING:
    from pyexecutorch.runtime.method_facts import MethodFacts


@dataclass(frozen=True)
class Dynamic:
    """What a run of a dynamic-shape method fixes: its dynamic tensors' shapes and the
    scalars its size instructions (``sizers``, instruction indices) compute."""

    tensors: tuple[int, ...]
    scalars: tuple[int, ...]
    sizers: frozenset[int]
    # the run-time views (OperatorFacts.run_time_view: neither it nor its source written
    # after it): copies in a static plan
    views: frozenset[int] = frozenset()
    # slices taking scalars read from data: (instruction, its operator, its arguments:
    # input, dim, start, end, step, out), their lengths checked after each run of a static
    # plan
    slices: tuple[tuple[int, str, tuple[int, ...]], ...] = ()


# At most this many static plans per method; later new shapes run instruction by instruction.
MAX_PLANS = 16
# Shapes seen once, remembered until this many (then forgotten, to bound the memory).
_MAX_SEEN = 1024


def _default_order(t: Tensor) -> bool:
    return list(t.dim_order) in ([], list(range(len(t.sizes))))


def dynamic_values(method: MethodFacts) -> Dynamic | None:
    """What static plans of ``method`` (its MethodFacts) are made from, or None when they
    cannot serve it.

    It must be one straight-line chain of kernel and delegate calls, take tensor
    inputs only (one of them dynamic), keep its dynamic tensors dense in the default
    dim order within their bounds, compute scalars from sizes
    (OperatorFacts.computes_sizes) or read them from data (reads_scalar) where only
    operators whose output shapes ignore them (shape_ignores_scalars) and slices
    (clamped_slice) take them, and call no operator whose output size depends on data
    (shape_from_data).
    """
    plan = method.plan
    evalues = plan.values
    if len(plan.chains) != 1:
        return None
    if any(spec.kind != "tensor" for spec in method.inputs):
        return None
    if not any(spec.dynamic for spec in method.inputs):
        return None
    dynamic = []
    for j, ev in enumerate(evalues):
        t = ev.val
        if isinstance(t, Tensor) and t.shape_dynamism != TensorShapeDynamism.STATIC:
            if t.shape_dynamism != TensorShapeDynamism.DYNAMIC_BOUND or not _default_order(t):
                return None
            if j in method.constant_values:
                return None
            dynamic.append(j)
    written = set(plan.inputs)
    scalars: list[int] = []
    sizers = set()
    views: dict[int, tuple[int, int]] = {}  # et_view instruction -> (its source, its output)
    writers: dict[int, list[int]] = {}  # value -> the instructions writing it
    from_data: set[int] = set()  # scalars read from data, or computed from such scalars
    slices = []
    for pc, instr in enumerate(plan.chains[0].instructions):
        a = instr.instr_args
        if isinstance(a, DelegateCall):
            for j in _delegate_writes(method, a):
                writers.setdefault(j, []).append(pc)
                written.add(j)
            continue
        if not isinstance(a, KernelCall):
            return None
        name = method.kernels[a.op_index].name
        facts = facts_of(name)
        from_values = facts.shape_from_data
        if from_values == "always" or (from_values == "boolean_mask" and _bool_index(method, a)):
            return None
        writes = accesses(method, a)[1]
        takes_data = any(j in from_data for j in a.args)
        if facts.computes_sizes:
            if any(isinstance(evalues[j].val, (Tensor, TensorList)) for j in writes):
                return None
            if takes_data:
                from_data.update(writes)  # computed from data: kept live
            else:
                scalars += writes
                sizers.add(pc)
        elif any(not isinstance(evalues[j].val, (Tensor, TensorList)) for j in writes):
            if not facts.reads_scalar or takes_data:
                return None
            from_data.update(writes)  # a scalar read from data (item) at run time
        elif takes_data:
            if facts.clamped_slice and len(a.args) == 7:
                slices.append((pc, name, tuple(a.args[:6])))
            elif not facts.shape_ignores_scalars:
                return None  # its output shape may follow the scalar
        if facts.run_time_view is not None and len(a.args) == 3:
            views[pc] = (a.args[0], a.args[2])
        for j in writes:
            writers.setdefault(j, []).append(pc)
        written.update(writes)
    if any(j not in written for j in dynamic):
        return None  # a dynamic tensor nothing sizes: its shape is not recorded by a run
    for pc, (source, out) in views.items():
        if writers.get(out) != [pc] or any(q > pc for q in writers.get(source, [])):
            # written through, or its source changed later: the view is no copy. (Kept as
            # a view in a static plan, its source's bytes would look free to the load-time
            # view elision once the source is last read by name.)
            return None
    return Dynamic(
        tuple(dynamic), tuple(scalars), frozenset(sizers), frozenset(views), tuple(slices)
    )


def _delegate_writes(method: MethodFacts, call: DelegateCall) -> list[int]:
    """The values a delegate call writes: its outputs where its handle says how many inputs
    come first (``input_ext``, as XNNPACK's does), else every argument."""
    _, handle = method.delegates[call.delegate_index]
    inputs = getattr(handle, "input_ext", None)
    if isinstance(inputs, list) and len(inputs) <= len(call.args):
        return list(call.args[len(inputs) :])
    return accesses(method, call)[1]


def _bool_index(method: MethodFacts, call: KernelCall) -> bool:
    """Whether an ``index.Tensor`` call has a boolean mask among its indices (a mask's
    output size is its count of true elements)."""
    evalues = method.plan.values
    for j in call.args:
        val = evalues[j].val
        if isinstance(val, OptionalTensorList):
            for i in val.items:
                item = evalues[i].val if i >= 0 else None
                if isinstance(item, Tensor) and method.capacity[i].dtype == np.bool_:
                    return True
    return False


class ShapePlans:
    """The static methods of one dynamic-shape LoadedMethod, by its dynamic inputs' shapes.

    ``build(fixed)`` makes the static method for ``fixed`` (value index -> shape of each
    dynamic tensor, value of each computed scalar); ``generic()`` runs the dynamic method
    instruction by instruction.
    """

    def __init__(
        self,
        method: MethodFacts,
        dynamic: Dynamic,
        build: Callable[[dict[int, Any]], Any],
        generic: Callable[[], None],
    ) -> None:
        self._values = method.values
        self._keys = tuple(spec.index for spec in method.inputs if spec.dynamic)
        # unplanned inputs are the caller's arrays: copied into the static method's storage
        self._handed = tuple(spec.index for spec in method.inputs if not spec.planned)
        self._outputs = tuple(method.plan.outputs)
        self.dynamic = dynamic
        self._build = build
        self._generic = generic
        self.plans: dict[tuple[tuple[int, ...], ...], Any] = {}
        # per plan: its slices that take scalars read from data, checked after each run
        self._slices: dict[tuple[tuple[int, ...], ...], list[_SliceCheck]] = {}
        self._seen: set[tuple[tuple[int, ...], ...]] = set()
        self._refused: set[tuple[tuple[int, ...], ...]] = set()
        # why the plan of each refused key could not be made (for tests and debugging)
        self.failures: dict[tuple[tuple[int, ...], ...], str] = {}

    def run(self) -> None:
        """``run`` of the dynamic method: its static plan for these input shapes if built."""
        v = self._values
        key = tuple(v[j].shape for j in self._keys)
        plan = self.plans.get(key)
        if plan is None:
            self._generic()
            self._record(key)
            return
        pv = plan.values
        for j in self._handed:  # into the static plan's own input storage
            np.copyto(pv[j], v[j], casting="no")
        plan.run()
        for check in self._slices[key]:
            check.verify(pv)
        for j in self._outputs:
            if j not in self._handed:  # (an input returned is the caller's array)
                v[j] = pv[j]

    def _record(self, key: tuple[tuple[int, ...], ...]) -> None:
        """After a generic run: build the static plan for ``key`` the second time it runs."""
        if key not in self._seen:
            if len(self._seen) >= _MAX_SEEN:
                self._seen.clear()
            self._seen.add(key)
            return
        if len(self.plans) >= MAX_PLANS or key in self._refused:
            return
        v = self._values
        fixed: dict[int, Any] = {}
        for j in self.dynamic.tensors:
            if not isinstance(v[j], np.ndarray):
                self._refused.add(key)
                return
            fixed[j] = v[j].shape
        for j in self.dynamic.scalars:
            if type(v[j]) not in (int, float, bool):
                self._refused.add(key)
                return
            fixed[j] = v[j]
        try:
            built = self._build(fixed)
            sizes = built.plan.values
            # (a plan compiled whole checks its slices' lengths in its compiled steps, the
            # scalars then in cells: see kernels/prim/compiled_cells)
            self._slices[key] = [
                _SliceCheck(
                    pc, name, *args, tuple(sizes[args[0]].val.sizes), sizes[args[-1]].val.sizes
                )
                for pc, name, args in self.dynamic.slices
                if not built.method_plan.whole
            ]
            self.plans[key] = built
        except Exception as e:  # noqa: BLE001 - a plan that cannot be made leaves the generic run
            self._refused.add(key)
            self.failures[key] = f"{type(e).__name__}: {e}"


@dataclass(frozen=True)
class _SliceCheck:
    """A slice of a static plan whose bounds are read from data: the length they give must
    be the one the plan was built with (``slice_copy`` clamps them to the dimension, and a
    static output of another length would hold a stale tail)."""

    pc: int
    name: str  # the operator's
    source: int
    dim: int
    start: int
    end: int
    step: int
    out: int
    source_sizes: tuple[int, ...]
    out_sizes: list[int]

    def verify(self, values: list[Any]) -> None:
        dim = values[self.dim]
        dim += len(self.source_sizes) if dim < 0 else 0
        size = self.source_sizes[dim]
        length = _slice_length(size, values[self.start], values[self.end], values[self.step])
        if length != self.out_sizes[dim]:
            raise ExecutionError(
                f"instruction {self.pc} ({self.name}): the bounds read from "
                f"the inputs ({values[self.start]}, {values[self.end]}) give {length} "
                f"elements of dim {dim} (size {size}), not the {self.out_sizes[dim]} that "
                "the other tensors of this call's shapes have"
            )


def _slice_length(size: int, start: int | None, end: int | None, step: int) -> int:
    """torch's slice length: bounds wrapped once when negative, then clamped to the dimension."""
    start = 0 if start is None else start + (size if start < 0 else 0)
    end = size if end is None else end + (size if end < 0 else 0)
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return (end - start + step - 1) // step


_SCALAR_VALUE = {bool: Bool, int: Int, float: Double}


def static_plan(plan: Any, dynamic: Dynamic, fixed: dict[int, Any]) -> tuple[Any, list[int]]:
    """``plan`` (an ExecutionPlan) with each value of ``fixed`` fixed there: a tensor static
    at its shape, a computed scalar a constant (its instruction dropped); and the index in
    ``plan`` of each instruction kept (for error messages).

    Each input the dynamic method reads from the caller's array (unplanned) gets a memory
    id of its own after the plan's (sized in ``non_const_buffer_sizes``; the caller adds
    those arenas): a static plan copies the caller's input there (a few int64 tokens), so
    that every array it reads is bound at load and it can compile whole."""
    values = list(plan.values)
    for j, fix in fixed.items():
        val = values[j].val
        if isinstance(val, Tensor):
            val = dataclasses.replace(
                val, sizes=list(fix), shape_dynamism=TensorShapeDynamism.STATIC
            )
        else:
            val = _SCALAR_VALUE[type(fix)](fix)
        values[j] = EValue(val)
    sizes = list(plan.non_const_buffer_sizes)
    for j in plan.inputs:
        val = values[j].val
        if isinstance(val, Tensor) and val.allocation_info is None and not val.data_buffer_idx:
            nbytes = math.prod(val.sizes) * SCALAR_TYPE_ITEMSIZE.get(val.scalar_type, 8)
            val = dataclasses.replace(val, allocation_info=AllocationDetails.at(len(sizes), 0))
            sizes.append(max(nbytes, 1))
            values[j] = EValue(val)
    chain = plan.chains[0]
    operators = list(plan.operators)
    instructions = []
    kept = [pc for pc in range(len(chain.instructions)) if pc not in dynamic.sizers]
    for pc in kept:
        instr = chain.instructions[pc]
        if pc in dynamic.views:
            # The view as a copy into its own (unplanned) storage: the runtime's view
            # elision and compiled copies then treat it as any view_copy; nothing
            # writes through it, so the two read the same.
            view = plan.operators[instr.instr_args.op_index].qualified_name
            name, _, overload = facts_of(view).run_time_view.partition(".")
            copy = Operator(name=name, overload=overload)
            if copy not in operators:
                operators.append(copy)
            source, size, out = instr.instr_args.args
            call = KernelCall(operators.index(copy), [source, size, out, out])
            instr = Instruction(call)
        instructions.append(instr)
    chain = dataclasses.replace(chain, instructions=instructions)
    made = dataclasses.replace(
        plan, values=values, chains=[chain], operators=operators, non_const_buffer_sizes=sizes
    )
    return made, kept
