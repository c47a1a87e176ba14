"""Static plans of a dynamic-shape method, one per distinct input shapes (the compiled tier).

A method whose tensors have dynamic (bounded) shapes cannot compile whole as it
stands: its kernels size their outputs per call. But when every shape in it
follows from its inputs' shapes alone (no operator whose output size depends on
data, no sizes computed at run time), one run at given input shapes fixes them
all. Such a method keeps a small cache of static methods keyed by its dynamic
inputs' shapes: each is the same program with every dynamic tensor made static
at the size the run gave it, laid over the dynamic method's own arenas (a
dynamic tensor of a smaller size is the prefix of its upper-bound storage, as
:func:`pyexecutorch.kernels.common.fit` places it), so it compiles whole like
any static method, and the disk cache serves every size alike (generated
sources do not depend on sizes).

A shape seen for the first time runs instruction by instruction (the numpy
tier, which stores every tensor it resizes); the second call at that shape
builds the static method from what the first recorded, and later calls run it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from pyexecutorch.runtime.dataflow import accesses
from pyexecutorch.schema.program import (
    EValue,
    KernelCall,
    OptionalTensorList,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)

# Operators whose output sizes depend on their inputs' values, not only their shapes.
_DATA_DEPENDENT = frozenset(
    {
        "aten::nonzero.out",
        "aten::masked_select.out",
        "aten::repeat_interleave.Tensor_out",
    }
)

# At most this many static plans per method; later new shapes run instruction by instruction.
MAX_PLANS = 16
# Shapes seen once, remembered until this many (then forgotten, to bound the memory).
_MAX_SEEN = 1024


def _default_order(t: Tensor) -> bool:
    return list(t.dim_order) in ([], list(range(len(t.sizes))))


def dynamic_tensors(method: Any) -> list[int] | None:
    """The dynamic tensors of ``method`` (a LoadedMethod) when static plans can serve it,
    else None.

    It must be one straight-line chain of kernel calls with no delegate, take tensor
    inputs only (one of them dynamic), keep its dynamic tensors dense in the default
    dim order within their bounds, compute no size at run time (no instruction writes
    a non-tensor value), and call no operator whose output size depends on data.
    """
    plan = method.plan
    evalues = plan.values
    if len(plan.chains) != 1 or plan.delegates:
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
    for instr in plan.chains[0].instructions:
        a = instr.instr_args
        if not isinstance(a, KernelCall):
            return None
        name = method.kernels[a.op_index].name
        if name in _DATA_DEPENDENT or (name == "aten::index.Tensor_out" and _bool_index(method, a)):
            return None
        writes = accesses(method, a)[1]
        if any(not isinstance(evalues[j].val, (Tensor, TensorList)) for j in writes):
            return None  # a size or scalar computed at run time (sym_size, item, prim ops)
        written.update(writes)
    if any(j not in written for j in dynamic):
        return None  # a dynamic tensor nothing sizes: its shape is not recorded by a run
    return dynamic


def _bool_index(method: Any, call: KernelCall) -> bool:
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

    ``build(sizes)`` makes the static method for ``sizes`` (value index -> shape of each
    dynamic tensor); ``generic()`` runs the dynamic method instruction by instruction.
    """

    def __init__(
        self,
        method: Any,
        dynamic: list[int],
        build: Callable[[dict[int, tuple[int, ...]]], Any],
        generic: Callable[[], None],
    ) -> None:
        self._values = method.values
        self._keys = tuple(spec.index for spec in method.inputs if spec.dynamic)
        # unplanned inputs are the caller's arrays: handed to the static method per call
        self._handed = tuple(spec.index for spec in method.inputs if not spec.planned)
        self._outputs = tuple(method.plan.outputs)
        self._dynamic = dynamic
        self._build = build
        self._generic = generic
        self.plans: dict[tuple[tuple[int, ...], ...], Any] = {}
        self._seen: set[tuple[tuple[int, ...], ...]] = set()
        self._refused: set[tuple[tuple[int, ...], ...]] = set()

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
        for j in self._handed:
            pv[j] = v[j]
        plan.run()
        for j in self._outputs:
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
        sizes = {}
        for j in self._dynamic:
            a = v[j]
            if not isinstance(a, np.ndarray):
                self._refused.add(key)
                return
            sizes[j] = a.shape
        try:
            self.plans[key] = self._build(sizes)
        except Exception:  # noqa: BLE001 - a plan that cannot be made leaves the generic run
            self._refused.add(key)


def static_plan(plan: Any, sizes: dict[int, tuple[int, ...]]) -> Any:
    """``plan`` (an ExecutionPlan) with each tensor of ``sizes`` static at its size there."""
    values = list(plan.values)
    for j, shape in sizes.items():
        t = values[j].val
        values[j] = EValue(
            dataclasses.replace(t, sizes=list(shape), shape_dynamism=TensorShapeDynamism.STATIC)
        )
    return dataclasses.replace(plan, values=values)
