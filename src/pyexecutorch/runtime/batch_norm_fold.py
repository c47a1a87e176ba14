"""Inference batch norms folded into the convolution before them (the compiled tier).

An official portable program keeps each ``Conv2d -> BatchNorm2d`` pair as two kernel
calls: the convolution writes its output, then the batch norm reads it back and
writes a second tensor, ``(x - mean) / sqrt(var + eps) * gamma + beta``, per
channel. The XNNPACK exporter folds the pair into one convolution ahead of time; a
portable program loaded on the compiled tier gets the same fold at load, so that
its convolutions then take the layout and epilogue decisions the XNNPACK path's
take (:mod:`pyexecutorch.runtime.layout`, :mod:`pyexecutorch.runtime.epilogue`).

The fold scales each output channel's filter by ``gamma / sqrt(var + eps)`` and
makes the bias ``(bias - mean) * scale + beta`` (computed in float64, stored in the
weight's dtype): the convolution is then rebound to write the batch norm's output
(where the planner put that output over the convolution's input: the convolution keeps
its own output and the batch norm's readers read it, or, when those bytes are written
again before the last read, the output moves to a scratch arena of its own), and the
batch norm's instruction is dropped from the method's plan (as a static
shape plan drops instructions: the method keeps the program's instruction number of
each kept instruction, for errors). Numerics: one rounding of the folded weights
instead of the batch norm's pass, as the XNNPACK program's own folded weights.

Only where it is plainly the same computation: a float 2-D convolution (not
transposed) on constant weights and bias, read only there, immediately followed by
an inference batch norm on constant statistics that is the only reader of its output
(no alias of those bytes read either), whose other two outputs nobody reads, whose
output is static planned memory, and whose ``beta`` (or the convolution's own bias) can hold the folded bias. The numpy
tier and traced loads keep the program's instructions as they are.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pyexecutorch.kernels.elementwise.formulas import FORMULAS
from pyexecutorch.kernels.registry import facts_of
from pyexecutorch.runtime.dataflow import Flow
from pyexecutorch.runtime.memory import arena_bytes
from pyexecutorch.schema.program import (
    Instruction,
    KernelCall,
    Null,
)

if TYPE_CHECKING:
    from pyexecutorch.runtime.method_facts import MethodFacts

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# Argument positions (kernel arguments, outputs last) of the two operators.
_CONV_INPUT, _CONV_WEIGHT, _CONV_BIAS, _CONV_TRANSPOSED, _CONV_OUT = 0, 1, 2, 6, 9
_BN_INPUT, _BN_GAMMA, _BN_BETA, _BN_MEAN, _BN_VAR, _BN_EPS = 0, 1, 2, 3, 4, 6
_BN_OUT, _BN_SAVE_MEAN, _BN_SAVE_INVSTD = 7, 8, 9


@dataclass(frozen=True)
class FoldedBatchNorms:
    """A method's plan with its batch norms folded: the plan, the program's instruction
    number of each of its instructions, and the program's numbers of those dropped."""

    plan: object  # schema.program.ExecutionPlan
    instruction_numbers: list[int]
    batch_norms: tuple[int, ...]
    arenas: list[np.ndarray]  # scratch arenas of batch norm outputs moved (see _fold_pair)


def fold_batch_norms(facts: MethodFacts) -> FoldedBatchNorms | None:
    """Fold each eligible (convolution, batch norm) pair of ``facts``'s one chain (see the
    module docstring), rebinding the folded weights and biases in ``facts``'s values.
    None when nothing folds."""
    flow = Flow.of(facts)
    if flow is None:
        return None
    instructions = facts.plan.chains[0].instructions
    roles = [
        facts_of(facts.kernels[a.op_index].name).batch_norm_fold
        if isinstance(a, KernelCall)
        else None
        for a in flow.instructions
    ]
    rewritten: dict[int, KernelCall] = {}
    dropped: list[int] = []
    # a dropped batch norm's output, read from the convolution's own output instead
    renamed: dict[int, int] = {}
    arenas: list[np.ndarray] = []
    for pc in range(len(instructions) - 1):
        if roles[pc] != "convolution" or roles[pc + 1] != "batch_norm":
            continue
        folded = _fold_pair(facts, flow, pc, renamed, arenas)
        if folded is not None:
            rewritten[pc], rename = folded
            renamed.update(rename)
            dropped.append(pc + 1)
    if not dropped:
        return None
    skip = set(dropped)
    kept = [pc for pc in range(len(instructions)) if pc not in skip]
    chain = dataclasses.replace(
        facts.plan.chains[0],
        instructions=[_renamed(rewritten.get(pc), instructions[pc], renamed) for pc in kept],
    )
    plan = dataclasses.replace(facts.plan, chains=[chain])
    return FoldedBatchNorms(plan, kept, tuple(dropped), arenas)


def _renamed(call: KernelCall | None, instruction: Instruction, renamed: dict[int, int]):  # noqa: ANN202
    """The instruction kept in the folded plan: its rewritten call, if any, reading each
    renamed value under its new name."""
    a = instruction.instr_args if call is None else call
    if not isinstance(a, KernelCall) or not renamed.keys() & set(a.args):
        return instruction if call is None else Instruction(call)
    return Instruction(KernelCall(a.op_index, [renamed.get(j, j) for j in a.args]))


def _fold_pair(
    facts: MethodFacts, flow: Flow, pc: int, renamed: dict[int, int], arenas: list[np.ndarray]
) -> tuple[KernelCall, dict[int, int]] | None:
    """The convolution at ``pc`` rewritten to compute the batch norm after it, its folded
    weight and bias stored in ``facts``'s values, and the batch norm's output renamed
    when the convolution keeps its own; or None (nothing changed). ``renamed``: the
    renames of the pairs folded before it; ``arenas``: the scratch arenas of batch norm
    outputs moved off the convolution's input, to which it may add one."""
    conv_call, bn_call = flow.instructions[pc], flow.instructions[pc + 1]
    conv, _ = facts.kernel_layout(facts.kernels[conv_call.op_index], conv_call)
    bn, _ = facts.kernel_layout(facts.kernels[bn_call.op_index], bn_call)
    if len(conv) != _CONV_OUT + 1 or len(bn) != _BN_SAVE_INVSTD + 1:
        return None
    values, evalues = facts.values, facts.plan.values
    conv_out, out = conv[_CONV_OUT], bn[_BN_OUT]
    x = renamed.get(conv[_CONV_INPUT], conv[_CONV_INPUT])
    if bn[_BN_INPUT] != conv_out or values[conv[_CONV_TRANSPOSED]] is not False:
        return None
    if flow.read_at.get(conv_out) != [pc + 1] or flow.aliases_reading(pc, conv_out):
        return None  # something else reads the convolution's output
    if any(flow.read_at.get(j) for j in (bn[_BN_SAVE_MEAN], bn[_BN_SAVE_INVSTD])):
        return None
    if flow.write_count[out] != 1 or flow.write_count[conv_out] != 1:
        return None
    weight, bias_at = conv[_CONV_WEIGHT], conv[_CONV_BIAS]
    has_bias = not isinstance(evalues[bias_at].val, Null)
    # the folded bias goes where the convolution's bias was, or into beta's value
    bias_into = bias_at if has_bias else bn[_BN_BETA]
    params = [weight, bias_into, *(bn[i] for i in (_BN_GAMMA, _BN_BETA, _BN_MEAN, _BN_VAR))]
    if any(isinstance(evalues[j].val, Null) for j in params):
        return None  # (an affine-free batch norm without a convolution bias: nowhere to fold)
    if not all(j in facts.constant_values for j in params):
        return None
    readers = {weight: pc, bias_into: pc if has_bias else pc + 1}
    if any(flow.read_at.get(j) != [at] for j, at in readers.items()):
        return None  # a constant read elsewhere too keeps its program bytes
    w, x_cap = values[weight], facts.capacity.get(x)
    target, conv_cap = facts.static_planned(out), facts.static_planned(conv_out)
    if (
        target is None
        or conv_cap is None
        or x_cap is None
        or w.ndim != 4
        or w.dtype not in _FLOATS
        or target.dtype != w.dtype
        or target.shape != conv_cap.shape
        or target.strides != conv_cap.strides
    ):
        return None
    rename: dict[int, int] = {}
    move = False
    if np.may_share_memory(target, x_cap):
        # The planner put the batch norm's output over the convolution's input: the
        # convolution keeps its own output, which its readers read instead; or, where
        # those bytes are soon written again, the output moves to bytes of its own.
        if _keeps_until_read(facts, flow, pc, conv_out, out):
            rename = {out: conv_out}
        elif _movable(facts, flow, pc + 1, out):
            move = True
        else:
            return None
    gamma, beta, mean, var = (values[bn[i]] for i in (_BN_GAMMA, _BN_BETA, _BN_MEAN, _BN_VAR))
    channels = w.shape[0]
    stats = (gamma, beta, mean, var, values[bias_at] if has_bias else None)
    if any(a is not None and (a.dtype != w.dtype or a.shape != (channels,)) for a in stats):
        return None
    eps = values[bn[_BN_EPS]]
    if type(eps) is not float:
        return None
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    shift = values[bias_at].astype(np.float64) - mean if has_bias else -mean.astype(np.float64)
    folded_w = (w.astype(np.float64) * scale[:, None, None, None]).astype(w.dtype)
    folded_b = (shift * scale + beta).astype(w.dtype)
    if move:
        arena = arena_bytes(target.nbytes)
        arenas.append(arena)
        values[out] = facts.capacity[out] = arena.view(target.dtype).reshape(target.shape)
    for j, arr in ((weight, folded_w), (bias_into, folded_b)):
        arr.flags.writeable = False
        values[j] = facts.capacity[j] = arr
    into = conv_out if rename else out
    # (the call's trailing return slot is its out value again)
    raw = [into if n >= _CONV_OUT and j == conv_out else j for n, j in enumerate(conv_call.args)]
    raw[_CONV_BIAS] = bias_into
    return KernelCall(conv_call.op_index, raw), rename


def _keeps_until_read(facts: MethodFacts, flow: Flow, pc: int, conv_out: int, out: int) -> bool:
    """Whether the convolution's output at ``pc`` can stand for the batch norm's output
    ``out``: nothing writes its bytes before ``out``'s last read, every reader names
    ``out`` itself (no list, no alias of its bytes), and ``out`` is no output."""
    plan = facts.plan
    if out in plan.outputs or out in plan.chains[0].outputs or flow.aliases_reading(pc + 1, out):
        return False
    readers = flow.read_at.get(out, [])
    if not all(
        isinstance(flow.instructions[q], KernelCall) and out in flow.instructions[q].args
        for q in readers
    ):
        return False
    region = flow.bounds.get(conv_out)
    if region is None:
        return False
    last = max(readers, default=pc + 1)
    if any(flow.writes_to(q, region) for q in range(pc + 2, last)):
        return False
    # The last reader may store over those very bytes if it is elementwise and stores
    # element for element on them (the planner's usual reuse: the activation after it).
    return not flow.writes_to(last, region) or _in_place(facts, flow, last, conv_out)


def _in_place(facts: MethodFacts, flow: Flow, q: int, conv_out: int) -> bool:
    """Whether instruction ``q`` is elementwise and each value it writes on ``conv_out``'s
    bytes is exactly those bytes, element for element."""
    a = flow.instructions[q]
    if not isinstance(a, KernelCall) or facts.kernels[a.op_index].name not in FORMULAS:
        return False
    cap, region = facts.capacity[conv_out], flow.bounds[conv_out]
    for j in flow.writes[q]:
        if not flow.writes_to(q, region) or j not in flow.bounds:
            continue
        lo, hi = flow.bounds[j]
        if hi <= region[0] or region[1] <= lo:
            continue
        other = facts.capacity[j]
        if flow.bounds[j] != region or other.shape != cap.shape or other.strides != cap.strides:
            return False
    return True


def _movable(facts: MethodFacts, flow: Flow, pc: int, out: int) -> bool:
    """Whether value ``out``, written at ``pc``, may move to bytes of its own: no alias of
    its bytes read after, neither input nor output of the method, written once."""
    plan = facts.plan
    return (
        out not in plan.inputs
        and out not in plan.outputs
        and flow.write_count[out] == 1
        and not flow.aliases_reading(pc, out)
    )
