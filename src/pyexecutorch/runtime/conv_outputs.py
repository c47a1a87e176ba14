"""Activations after a convolution moved off the convolution's input bytes (compiled tier).

The official memory planner gives a tensor the bytes of any tensor dead by the time it
is written: the output of the ReLU6 / SiLU / hardswish after a convolution often lands
on the convolution's input, dead after the convolution. A convolution cannot write its
result there while it still reads its input, so such a run cannot become the
convolution's epilogue (:mod:`pyexecutorch.runtime.epilogue`), and stays one more
pass over memory. The XNNPACK path plans its own memory and never meets this.

At load, each such output is moved to bytes of its own outside the planned arenas
(scratch arenas the method adds, aligned as its arenas, shared by outputs whose lives
do not overlap), where nothing else is ever placed. Only plain cases: a static planned intermediate written once by an elementwise
instruction of the run right after a convolution, no alias of its bytes read, neither
input nor output of the method.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pyexecutorch.kernels.elementwise.formulas import FORMULAS
from pyexecutorch.kernels.registry import facts_of
from pyexecutorch.runtime.dataflow import Flow
from pyexecutorch.runtime.memory import arena_bytes
from pyexecutorch.schema.program import KernelCall, Tensor, TensorShapeDynamism

if TYPE_CHECKING:
    from pyexecutorch.runtime.method_facts import MethodFacts

# instructions of a run looked at after a convolution (hardswish as exported is five)
_RUN_LENGTH = 8


def move_conv_run_outputs(facts: MethodFacts) -> list[np.ndarray]:
    """Move the eligible run outputs of ``facts`` (see the module docstring), rebinding
    their values and planned storage; returns the scratch arenas they moved to."""
    flow = Flow.of(facts)
    if flow is None:
        return []
    moves: list[tuple[int, int, int]] = []  # (value, convolution, last read)
    for pc, a in enumerate(flow.instructions):
        if (
            not isinstance(a, KernelCall)
            or facts_of(facts.kernels[a.op_index].name).layout != "convolution"
        ):
            continue
        args, _ = facts.kernel_layout(facts.kernels[a.op_index], a)
        region = flow.bounds.get(args[0])
        if region is not None:
            # (alive from the convolution on: the epilogue writes it while reading the input)
            moves += [
                (j, pc, flow.last_read.get(j, q))
                for j, q in _run_outputs_on(facts, flow, pc, region)
            ]
    if not moves:
        return []
    scratch: list[tuple[np.ndarray, int]] = []  # (buffer, last read of its latest value)
    for j, first, last in sorted(moves, key=lambda m: m[1]):
        cap = facts.capacity[j]
        free = next(
            (
                n
                for n, (buf, until) in enumerate(scratch)
                if until < first and buf.nbytes >= cap.nbytes
            ),
            None,
        )
        if free is None:
            scratch.append((arena_bytes(cap.nbytes), last))
            free = len(scratch) - 1
        buf = scratch[free][0]
        scratch[free] = (buf, last)
        moved = buf[: cap.nbytes].view(cap.dtype).reshape(cap.shape)
        facts.values[j] = facts.capacity[j] = moved
    return [buf for buf, _ in scratch]


def _run_outputs_on(
    facts: MethodFacts, flow: Flow, pc: int, region: tuple[int, int]
) -> list[tuple[int, int]]:
    """(value, instruction writing it) of the elementwise run after the convolution at
    ``pc`` whose planned bytes meet ``region`` (the convolution's input) and may move."""
    plan = facts.plan
    boundary = set(plan.inputs) | set(plan.outputs)
    found = []
    for q in range(pc + 1, min(pc + 1 + _RUN_LENGTH, len(flow.instructions))):
        a = flow.instructions[q]
        if not isinstance(a, KernelCall):
            break
        name = facts.kernels[a.op_index].name
        if name not in FORMULAS:
            if all(j in facts.constant_values for j in flow.reads[q]):
                continue  # a constant's conversion (folded at load)
            break
        for j in flow.writes[q]:
            bounds = flow.bounds.get(j)
            if bounds is None or bounds[1] <= region[0] or region[1] <= bounds[0]:
                continue
            val = plan.values[j].val
            if (
                j in boundary
                or not isinstance(val, Tensor)
                or val.shape_dynamism != TensorShapeDynamism.STATIC
                or val.allocation_info is None
                or facts.values[j] is not facts.capacity.get(j)
                or flow.write_count[j] != 1
                or flow.aliases_reading(q, j)
            ):
                continue
            found.append((j, q))
    return found
