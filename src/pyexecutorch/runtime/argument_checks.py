"""The load-time gate in front of every faster tier: instructions whose arguments their
kernel's argument check refuses (:mod:`pyexecutorch.kernels.checks`).

Before a method's instructions become fused loops, compiled forms, whole-method
steps or numpy fast paths, each instruction whose arguments are all fixed at
load (static tensors, constant scalars and lists) is put to its family's check,
the very function its numpy kernel calls. One the check refuses, or whose
results would not fit its static planned outputs, stays on its reference
kernel: it raises the same error, of the same type, on every tier when it runs,
instead of a faster form reading past an operand, ignoring an argument or
keeping a stale output. The check costs nothing per call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyexecutorch.kernels.checks import get_argument_check, refusal
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


_UNKNOWN = object()  # a value known only at run time


def _static(evalues: list[Any], j: int) -> bool:
    val = evalues[j].val
    return isinstance(val, Tensor) and val.shape_dynamism == TensorShapeDynamism.STATIC


def _fixed(method: MethodFacts, j: int, written: set[int]) -> Any:
    """Value ``j`` as the kernel will get it, if that is known at load (a tensor's shape and
    dtype; its elements may change), else ``_UNKNOWN``."""
    evalues = method.plan.values
    val = evalues[j].val
    if isinstance(val, Tensor):
        return method.load_time_value(j) if _static(evalues, j) else _UNKNOWN
    if isinstance(val, (TensorList, OptionalTensorList)):
        if any(i >= 0 and not _static(evalues, i) for i in val.items):
            return _UNKNOWN
        return method.load_time_value(j)
    if j in written or (isinstance(val, IntList) and any(i in written for i in val.items)):
        return _UNKNOWN
    return method.values[j]


def _planned_output(method: MethodFacts, j: int) -> Any:
    """Output ``j``'s planned array(s) when their size cannot change, else None."""
    evalues = method.plan.values
    val = evalues[j].val
    if isinstance(val, Tensor):
        return method.capacity.get(j) if _static(evalues, j) else None
    if isinstance(val, TensorList):
        items = [method.capacity.get(i) if _static(evalues, i) else None for i in val.items]
        return None if any(a is None for a in items) else items
    return None


def refused_instructions(method: MethodFacts, written: set[int]) -> dict[tuple[int, int], str]:
    """(chain, instruction) -> why, for each kernel call its argument check refuses."""
    refused: dict[tuple[int, int], str] = {}
    for c, chain in enumerate(method.plan.chains):
        for pc, instr in enumerate(chain.instructions):
            call = instr.instr_args
            if not isinstance(call, KernelCall):
                continue
            k = method.kernels[call.op_index]
            check = get_argument_check(k.name)
            if check is None:
                continue
            args, outs = method.kernel_layout(k, call)
            inputs = [_fixed(method, j, written) for j in args[: len(args) - len(outs)]]
            if any(x is _UNKNOWN for x in inputs):
                continue
            why = refusal(check, inputs, [_planned_output(method, j) for j in outs])
            if why is not None:
                refused[c, pc] = why
    return refused
