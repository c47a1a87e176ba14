"""Load-time folding: kernel calls whose inputs are all constants run once, at load.

An official program permutes, casts or expands its constant weights on every
run (``permute_copy`` before ``mm``); after the first run that is pure waste.
A folded call's output becomes a constant of its own, outside the arenas
(whose memory other values reuse), and the call leaves the compiled code.

Static views are no instruction at all: the memory planner gives a view its
base's bytes. So a tensor in an arena that nothing writes is such a view, and
the write it sees is the last one to its bytes before it is first read. When
that write is a folded call, the view becomes a reshape of the folded output;
a view that cannot follow (a partial or non-contiguous overlap) keeps its
base unfolded.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from numpy.lib.array_utils import byte_bounds

from pyexecutorch.kernels.common import quiet_fp
from pyexecutorch.schema.program import (
    DelegateCall,
    FreeCall,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    OptionalTensorList,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)

# Operators whose result is not a function of their arguments.
IMPURE_OPERATORS = frozenset(
    {
        "aten::rand.out",
        "aten::randn.out",
        "aten::native_dropout.out",
        "aten::empty.out",
        "dim_order_ops::_empty_dim_order.out",
    }
)


def _expand(evalues: Any, ids: Any) -> list[int]:
    """Value indices with tensor lists replaced by their items."""
    out = []
    for j in ids:
        val = evalues[j].val
        if isinstance(val, (TensorList, OptionalTensorList)):
            out.extend(i for i in val.items if i >= 0)
        else:
            out.append(j)
    return out


def _accesses(method: Any, a: Any) -> tuple[list[int], list[int]]:
    """(values read, values written) by one instruction."""
    evalues = method.plan.values
    if isinstance(a, KernelCall):
        k = method.kernels[a.op_index]
        args, outs = method.kernel_layout(k, a)
        reads = _expand(evalues, args[: len(args) - len(outs)])
        writes = _expand(evalues, outs) if k.n_outs else args[:1]  # in place: the first
        return reads, writes
    if isinstance(a, DelegateCall):
        ids = _expand(evalues, a.args)
        return ids, ids
    if isinstance(a, MoveCall):
        return [a.move_from], [a.move_to]
    return [], []


def fold_constants(method: Any, written: set[int]) -> set[int]:
    """Fold what can be folded in ``method`` (a LoadedMethod); returns the instructions folded.

    ``written`` holds the non-tensor values that can change at run time.
    Only single-chain methods without jumps are folded: there, instruction
    order is execution order.
    """
    plan = method.plan
    if len(plan.chains) != 1:
        return set()
    instructions = [i.instr_args for i in plan.chains[0].instructions]
    if any(isinstance(a, (JumpFalseCall, FreeCall)) for a in instructions):
        return set()
    evalues = plan.values
    constants = method.constant_values
    capacity = method.capacity
    accesses = [_accesses(method, a) for a in instructions]
    write_count = Counter(plan.inputs)
    first_read: dict[int, int] = {}
    for pc, (reads, writes) in enumerate(accesses):
        write_count.update(writes)
        for j in reads:
            first_read.setdefault(j, pc)
    for j in plan.outputs:
        first_read.setdefault(j, len(instructions))
    bounds = {i: byte_bounds(cap) for i, cap in capacity.items() if i not in constants and cap.size}
    view_base = {}  # view -> the instruction whose write it reads
    for i in bounds:
        if write_count[i] or i not in first_read:
            continue
        lo, hi = bounds[i]
        for pc in range(first_read[i] - 1, -1, -1):
            if any(
                j in bounds and bounds[j][0] < hi and lo < bounds[j][1] for j in accesses[pc][1]
            ):
                view_base[i] = pc
                break
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
        if k.n_outs != 1 or k.name in IMPURE_OPERATORS:
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
        views = [i for i, base in view_base.items() if base == pc]
        if views and not _views_follow(capacity[j], [capacity[i] for i in views]):
            continue
        if keep.intersection(views):
            continue
        target = np.empty_like(capacity[j])  # same shape, dtype and dim order
        try:
            with quiet_fp():
                result = k.fn(*(method.load_time_value(i) for i in args[:-1]), target)
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
