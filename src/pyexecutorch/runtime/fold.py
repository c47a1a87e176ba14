"""Load-time folding: kernel calls whose inputs are all constants run once, at load.

An official program permutes, casts or expands its constant weights on every
run (``permute_copy`` before ``mm``); after the first run that is pure waste.
A folded call's output becomes a constant of its own, outside the arenas
(whose memory other values reuse), and the call leaves the compiled code.

A static view of a folded output (shared planned memory, no instruction; see
:mod:`pyexecutorch.runtime.dataflow`) becomes a reshape of the folded output;
a view that cannot follow (a partial or non-contiguous overlap) keeps its
base unfolded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.array_utils import byte_bounds

from pyexecutorch.kernels.common import quiet_fp
from pyexecutorch.kernels.registry import facts_of
from pyexecutorch.runtime.dataflow import Flow
from pyexecutorch.schema.program import (
    IntList,
    KernelCall,
    OptionalTensorList,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)

if TYPE_CHECKING:
    from pyexecutorch.runtime.method_facts import MethodFacts


def fold_constants(method: MethodFacts, written: set[int], flow: Flow | None) -> set[int]:
    """Fold what can be folded in ``method`` (its MethodFacts); returns the instructions folded.

    ``written`` holds the non-tensor values that can change at run time;
    ``flow`` is the method's :class:`~pyexecutorch.runtime.dataflow.Flow`.
    Only methods :class:`~pyexecutorch.runtime.dataflow.Flow` can follow are folded.
    """
    if flow is None:
        return set()
    plan = method.plan
    evalues = plan.values
    constants = method.constant_values
    capacity = method.capacity
    instructions = flow.instructions
    write_count = flow.write_count
    keep = set(plan.outputs)  # a returned array must not be a shared constant

    def constant(j: int) -> bool:
        val = evalues[j].val
        if isinstance(val, Tensor):
            return j in constants
        if isinstance(val, (TensorList, OptionalTensorList)):
            return all(i < 0 or constant(i) for i in val.items)
        if isinstance(val, IntList) and any(i in written for i in val.items):
            return False
        return j not in written

    folded = set()
    for pc, a in enumerate(instructions):
        if not isinstance(a, KernelCall):
            continue
        k = method.kernels[a.op_index]
        if k.n_outs != 1 or facts_of(k.name).impure:
            continue
        args, outs = method.kernel_layout(k, a)
        j = outs[0]
        val = evalues[j].val
        if (
            not isinstance(val, Tensor)
            or val.shape_dynamism != TensorShapeDynamism.STATIC
            or write_count[j] != 1
            or j in keep
            or not all(constant(i) for i in args[:-1])
        ):
            continue
        views = flow.aliases_reading(pc, j)
        if views and not _views_follow(capacity[j], [capacity[i] for i in views]):
            continue
        if keep.intersection(views) or any(write_count[i] for i in views):
            continue  # a view something writes (a delegate argument) keeps its memory
        target = np.empty_like(capacity[j])  # same shape, dtype and dim order
        try:
            with quiet_fp():
                fn = method.widened_kernel(k, args, outs) or k.fn
                result = fn(*(method.load_time_value(i) for i in args[:-1]), target)
        except Exception:  # noqa: BLE001 - it then fails at run time, with the run's error
            continue
        if not isinstance(result, np.ndarray) or result.shape != target.shape:
            continue
        result.flags.writeable = False
        method.values[j] = capacity[j] = result
        constants.add(j)
        for i in views:
            method.values[i] = capacity[i] = result.reshape(capacity[i].shape)
            constants.add(i)
        folded.add(pc)
    return folded


def _views_follow(base: np.ndarray, views: list[np.ndarray]) -> bool:
    """Whether each view is the base's whole memory, contiguous, of its dtype."""
    if not base.flags.c_contiguous:
        return False
    return all(
        v.dtype == base.dtype and v.flags.c_contiguous and byte_bounds(v) == byte_bounds(base)
        for v in views
    )
