"""Copies that can be views: ``permute_copy`` and friends without the copy.

A program copies to permute, reshape, slice or select (``permute_copy``,
``view_copy``, ``select_copy``...), because each value owns its planned
memory. When the source's bytes stay untouched for as long as the copy is
read, a numpy view of the source computes the same thing for a fraction of the
cost: the instruction then only binds the view. Kernels read any strided array,
so consumers are unaffected.

The copy fast paths in :mod:`pyexecutorch.kernels.shape.fast` carry the view they
copy (``view_of_input``); a plain same-shape copy is the identity view.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pyexecutorch.kernels.registry import Inline, fast_path_of
from pyexecutorch.runtime.dataflow import Flow
from pyexecutorch.schema.program import Tensor, TensorShapeDynamism

if TYPE_CHECKING:
    from pyexecutorch.runtime.method_facts import MethodFacts


def identity(a: np.ndarray) -> np.ndarray:
    return a


class ViewElider:
    """Decides, instruction by instruction in order, which copies become views."""

    def __init__(self, method: MethodFacts, flow: Flow | None) -> None:
        self.method = method
        self.flow = flow
        self.outputs = set(method.plan.outputs)
        self.region: dict[int, tuple[int, int] | None] = {}  # where an elided view's data lives

    def view_for(self, pc: int, args: list[int], outs: list[int], fast: Any) -> Callable | None:
        """The view function replacing instruction ``pc``'s copy, or None to keep it."""
        flow = self.flow
        if flow is None or len(outs) != 1:
            return None
        view = self._view_of(fast, args[0], outs[0])
        if view is None:
            return None
        m = self.method
        source, j = args[0], outs[0]
        for i in (source, j):
            val = m.plan.values[i].val
            if not isinstance(val, Tensor) or val.shape_dynamism != TensorShapeDynamism.STATIC:
                return None
        if (
            source in flow.rebound  # its array may be a backend's, reused by its next call
            or flow.write_count[j] != 1
            or j in self.outputs
            or j in flow.delegate_reads
            or flow.aliases_reading(pc, j)  # something reads j's bytes, not v[j]
        ):
            return None
        region = self._region_of(source)
        if region is not None and any(
            flow.writes_to(q, region) for q in range(pc + 1, flow.last_read.get(j, pc) + 1)
        ):
            return None
        self.region[j] = region
        return view

    def _view_of(self, fast: Any, source: int, j: int) -> Callable | None:
        view = fast_path_of(fast).view_of_input
        if view is not None:
            return view
        capacity = self.method.capacity
        if (
            isinstance(fast, Inline)
            and fast.fn is np.copyto
            and fast.parts == (-1, 0)
            and capacity[source].shape == capacity[j].shape
        ):
            return identity
        return None

    def _region_of(self, i: int) -> tuple[int, int] | None:
        """The arena bytes value ``i`` reads at run time (None: outside the arenas)."""
        if i in self.region:
            return self.region[i]
        if i in self.method.constant_values:
            return None
        return self.flow.bounds.get(i) if self.flow else None
