"""Convolution epilogues (compiled tier): the elementwise run after a convolution, in place.

A convolution followed by a fused elementwise run that reads nothing but the
convolution's output (bias is already in the product; ReLU, ReLU6/hardtanh,
hardswish, SiLU, ... as the fusion code generated them) becomes one call: the
convolution writes straight into the run's output and the run's loop then
rewrites that buffer in place while it is still in cache. The convolution's
own output buffer, and one pass over memory per layer, are no longer needed.

The run may read other tensors of the output's shape besides the convolution's
output (a residual add, an add-then-ReLU): those are bound at load. When one of
them is the run's output's very memory (the planner reuses a skip tensor's
buffer for the add), the convolution keeps its own output and the run's loop
updates that memory in place; any other overlap declines.

Only where it is plainly safe: one static planned output of the same shape and
dtype, the run immediately after the convolution (so the output's planned
memory holds nothing else meanwhile), nobody else reading the convolution's
output, and the run's output sharing no memory with the convolution's input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pyexecutorch.jit import deferral
from pyexecutorch.kernels.registry import facts_of, fast_path_of, get_compiled_form, offer
from pyexecutorch.runtime.dataflow import Flow
from pyexecutorch.runtime.fusion import flat_views, same_elements, single_op_call
from pyexecutorch.runtime.whole_method import Step
from pyexecutorch.schema.program import KernelCall

if TYPE_CHECKING:
    from pyexecutorch.kernels.registry import Kernel
    from pyexecutorch.runtime.method_facts import MethodFacts

# The form a kernel call takes, as runtime.fast_paths.FastPaths.specialized decides it:
# (kernel, arguments, values written, values read) -> fast path or the kernel.
Specialize = Callable[["Kernel", list[int], set[int], set[int]], Any]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def fuse_epilogues(
    facts: MethodFacts,
    flow: Flow | None,
    decisions: dict[tuple[int, int], tuple[str, Any]],
    written: set[int],
    read: set[int],
    specialize: Specialize,
) -> list[int]:
    """Fold each eligible run into the convolution before it (chain 0): the convolution
    becomes ``("call", conv_then_epilogue)``, the run's last instruction ``("skip", [its
    output])``.
    Returns the convolutions' instruction indices."""
    done: list[int] = []
    if flow is None:
        return done
    for (c, pc), (kind, _fast) in list(decisions.items()):
        if c != 0 or kind not in ("call", "inline"):
            continue
        a = flow.instructions[pc]
        if (
            not isinstance(a, KernelCall)
            or facts_of(facts.kernels[a.op_index].name).epilogue is None
        ):
            continue
        k = facts.kernels[a.op_index]
        if facts.widened_kernel(k, *facts.kernel_layout(k, a)) is not None:
            continue  # bfloat16 / float8 operands: its call widens them, a fused one would not
        fused = _with_epilogue(facts, flow, decisions, pc, written, read, specialize)
        if fused is not None:
            conv, last, written_out = fused
            decisions[0, pc] = ("call", conv)
            # (the skipped instruction's output is filled in place by the call: see
            # lowering.Lowering._fixed_values)
            decisions[0, last] = ("skip", [written_out])
            done.append(pc)
    return done


def _run_after(facts, flow, decisions, pc):  # noqa: ANN001, ANN202
    """The elementwise run starting right after instruction ``pc``: its loop, its
    instructions, and the values it reads and writes; or None.

    Either a fused run (skipped members, then the fused last one) or a single
    elementwise instruction, which the fusion code leaves to numpy but has a loop for.
    """
    last = pc + 1
    n = len(flow.instructions)
    # (a kernel call with no decision was folded at load: nothing runs there)
    while last < n and (
        decisions.get((0, last), ("",))[0] == "skip"
        or (isinstance(flow.instructions[last], KernelCall) and (0, last) not in decisions)
    ):
        last += 1
    kind, fast = decisions.get((0, last), ("", None))
    if kind == "fused":
        if fast.pcs != [q for q in range(pc + 1, last + 1) if (0, q) in decisions]:
            return None
        return fast, fast.pcs, fast.inputs, fast.outputs
    if kind not in ("inline", "call") or last != pc + 1:
        return None
    a = flow.instructions[last]
    if not isinstance(a, KernelCall):
        return None
    k = facts.kernels[a.op_index]
    args, outs = facts.kernel_layout(k, a)
    if len(outs) != 1 or outs[0] not in facts.capacity:
        return None
    ins = args[: len(args) - 1]
    call = single_op_call(k.name, [facts.load_time_value(j) for j in ins], facts.capacity[outs[0]])
    if call is None:
        return None
    return call, [last], [ins[p] for p in call.inputs], outs


def _with_epilogue(facts, flow, decisions, pc, written, read, specialize):  # noqa: ANN001, ANN202
    k = facts.kernels[flow.instructions[pc].op_index]
    args, outs = facts.kernel_layout(k, flow.instructions[pc])
    if len(outs) != 1:
        return None
    conv_out, x = outs[0], args[0]
    run = _run_after(facts, flow, decisions, pc)
    if run is None:
        return None
    call, pcs, inputs, outputs = run
    last = pcs[-1]
    if inputs.count(conv_out) != 1 or len(outputs) != 1 or not call.same_shape:
        return None
    if not set(flow.read_at.get(conv_out, ())) <= set(pcs):
        return None
    if (
        flow.last_read.get(conv_out, -1) > last
        or conv_out in flow.delegate_reads
        or conv_out in flow.rebound
        or flow.write_count[conv_out] != 1
        or x in flow.rebound
    ):
        return None
    others = [j for j in inputs if j != conv_out]
    if any(_viewed(flow, decisions, j, pc) for j in (x, *others)):
        return None  # a view of another tensor at run time: its memory is unknown
    target = facts.static_planned(outputs[0])
    conv_cap, x_cap = facts.static_planned(conv_out), facts.static_planned(x)
    if target is None or conv_cap is None or x_cap is None:
        return None
    if not all(a.flags.c_contiguous for a in (target, conv_cap, x_cap)):
        # channels-last (runtime.layout): a clamp or residual add goes into the store
        stored = _channels_last_epilogue(
            facts, k.name, args, conv_out, pcs, outputs[0], target, x_cap
        )
        if stored is not None:
            return stored
    if (
        target.shape != conv_cap.shape
        or target.dtype != conv_cap.dtype
        or target.dtype not in _FLOATS
        or target.strides != conv_cap.strides
        or flat_views([target]) is None
        or np.may_share_memory(target, x_cap)
    ):
        return None
    extra = {j: _other_input(facts, flow, j, target) for j in others}
    if any(a is None for a in extra.values()):
        return None
    in_place = [j for j, a in extra.items() if np.may_share_memory(a, target)]
    if not in_place:
        # The convolution writes the run's output, and the run's loop reads the other
        # inputs and reads and rewrites that one buffer. (Its fast path on that output is
        # made only if a line calls it: not inside a whole-method function.)
        into_args = [*args[:-1], outputs[0]]
        conv = deferral.deferred_function(lambda: specialize(k, into_args, written, read))
        into, alias = target, conv_out
    elif (
        len(in_place) == 1
        and same_elements(extra[in_place[0]], target)
        and not any(np.may_share_memory(conv_cap, a) for a in (target, *extra.values()))
    ):
        # The planner put the run's output over a skip tensor (a residual add's usual
        # layout): the convolution keeps its own output and the loop updates the skip
        # tensor's memory in place, element by element.
        conv = deferral.deferred_function(lambda: specialize(k, args, written, read))
        into, alias = conv_cap, in_place[0]
        extra[conv_out] = conv_cap
    else:
        return None
    flats = flat_views([*(extra[j] for j in inputs if j != alias), target])
    if flats is None:
        return None
    loop_args = tuple(flats)
    loop_fn = call.lazy_function(True, {inputs.index(alias): 0})
    # deferred: inside a whole-method function the loop's own entry point is never called
    loop = deferral.form_entry_point(loop_fn, loop_args)
    step = _conv_step(facts, k, args, conv_out, into, Step(loop_fn, loop_args))

    def conv_then_epilogue(*args: Any) -> Any:
        conv(*args[:-1], into)
        loop(*loop_args)
        return args[-1]

    # (without a step the pair keeps its method from compiling whole: the convolution's
    # plain step would leave out the run; with one, the pair is two steps of a
    # whole-method function)
    offer(conv_then_epilogue, with_epilogue=True, step=step, fills_outputs=step is not None)
    return conv_then_epilogue, last, outputs[0]


def _number(facts: MethodFacts, j: int) -> float | None:
    """Value ``j`` as a number: a scalar, or a one-element constant tensor."""
    v = facts.values[j]
    if isinstance(v, np.ndarray) and v.size == 1 and j in facts.constant_values:
        v = v.reshape(()).item()
    return float(v) if type(v) in (int, float) else None


def _run_ops(facts: MethodFacts, pcs: list[int]) -> list[tuple[str, list[int], int | None]]:
    """The run's instructions as (operator name, arguments, output) triples."""
    instructions = facts.plan.chains[0].instructions
    ops = []
    for pc in pcs:
        a = instructions[pc].instr_args
        k = facts.kernels[a.op_index]
        args, outs = facts.kernel_layout(k, a)
        ops.append((k.name, args, outs[0] if outs else None))
    return ops


def _channels_last_epilogue(facts, name, args, conv_out, pcs, out, target, x_cap):  # noqa: ANN001, ANN202
    """A convolution with a channels-last operand and the clamp / residual add after it as
    one step of the channels-last kernels, written straight into the run's output (see
    OperatorFacts.epilogue)."""
    epilogue = facts_of(name).epilogue
    found = epilogue.store_pass(
        _run_ops(facts, pcs), conv_out, lambda j: _number(facts, j), facts.values.__getitem__
    )
    if found is None:
        return None
    residual = found.residual
    extra = None
    if residual is not None:
        extra = facts.static_planned(residual)
        if extra is None or extra.shape != target.shape or extra.dtype != target.dtype:
            return None
        if np.may_share_memory(extra, target) and not (
            extra.ctypes.data == target.ctypes.data and extra.strides == target.strides
        ):
            return None
    if np.may_share_memory(target, x_cap):
        return None
    values = [facts.load_time_value(j) for j in args[:-1]]
    conv = epilogue.channels_last_step(values, target, found, extra)
    if conv is None:
        return None
    return conv, pcs[-1], out


def _conv_step(facts, k, args, conv_out, into, loop: Step) -> list[tuple] | None:  # noqa: ANN001
    """The convolution writing ``into`` then the epilogue's loop, as two calls, or None."""
    form = get_compiled_form(k.name)
    if form is None:
        return None
    values = [facts.load_time_value(j) for j in args[:-1]]
    try:
        conv = form(*values, into, whole=True)
    except Exception:  # noqa: BLE001 - a form that cannot decide offers no step
        return None
    if conv is None:
        return None
    step = fast_path_of(conv).step
    return None if step is None else [step, (loop.function, loop.args)]


def _viewed(flow: Flow, decisions: dict, j: int, pc: int) -> bool:
    """Whether an instruction before ``pc`` makes value ``j`` a view at run time."""
    return any(j in flow.writes[q] and decisions.get((0, q), ("",))[0] == "view" for q in range(pc))


def _other_input(facts: MethodFacts, flow: Flow, j: int, target: np.ndarray) -> np.ndarray | None:
    """The array a run's input other than the convolution's output is at every run, when
    the fused call may read it: bound at load, dense, of the output's shape and dtype."""
    arr = facts.values[j] if j in facts.constant_values else facts.static_planned(j)
    if (
        not isinstance(arr, np.ndarray)
        or j in flow.rebound
        or arr.shape != target.shape
        or arr.dtype != target.dtype
        or flat_views([arr, target]) is None
    ):
        return None
    return arr
