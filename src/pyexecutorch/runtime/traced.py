"""A method's lines timed into an event tracer (ETDump), as the official runtime times them.

A traced method compiles to an instrumented variant of its lines
(:func:`traced_lines`): every kernel and delegate call records its time. A
straight-line chain without a debug buffer takes one clock reading per call into a
list of times (a call ends when the next begins; the list goes to the tracer after
each run, see :data:`SlotTimes`); otherwise each call appends ``(key, start, end)``
and logs its outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyexecutorch.runtime.codegen import Line
from pyexecutorch.runtime.etdump import EventTracer, clock
from pyexecutorch.runtime.method_facts import MethodFacts
from pyexecutorch.runtime.resolution import stack_style
from pyexecutorch.schema.etdump import ProfileEvent
from pyexecutorch.schema.program import DelegateCall, KernelCall

if TYPE_CHECKING:
    from pyexecutorch.runtime.writer import ChainWriter

# Per straight-line chain: the event keys of its calls and the list of clock readings its
# lines fill (one more than the calls), handed to the tracer after each run.
SlotTimes = list[tuple[tuple[int, ...], list[int]]]


def traced_lines(
    facts: MethodFacts,
    tracer: EventTracer,
    c: int,
    lines: list[Line],
    jumps: dict,
    writer: ChainWriter,
    slot_times: SlotTimes,
) -> list[Line]:
    """``lines`` of chain ``c`` with their kernel and delegate calls timed into ``tracer``
    (see the module docstring); a chain timed in slots is added to ``slot_times``."""
    ns = writer.ns
    plan = facts.plan
    clk = ns.bind(clock, "clk")
    slots = not jumps and not tracer.logs_outputs
    keys: list[int] = []
    times: list[int] = []
    out: list[Line] = []
    for line in lines:
        pc = line.instruction
        a = plan.chains[c].instructions[pc].instr_args
        if isinstance(a, KernelCall):
            k = facts.kernels[a.op_index]
            op = plan.operators[a.op_index]
            key = tracer.kernel_key(op.name, op.overload, c, pc, prim=stack_style(k.name))
            logged = facts.kernel_layout(k, a)[1]
            before = ""
        elif isinstance(a, DelegateCall):
            key = tracer.key(ProfileEvent(name="DELEGATE_CALL", chain_index=c, instruction_id=pc))
            logged = list(a.args)
            before = f"{ns.bind(tracer, 'tr')}.instruction = ({c}, {pc}); "
        else:
            out.append(line)
            continue
        if slots:
            out.append(
                Line(f"{ns.bind(times, 'T')}[{len(keys)}] = {clk}(); {before}{line.source}", pc)
            )
            keys.append(key)
            continue
        record = ns.bind(tracer.record, "ev")
        source = f"_t = {clk}(); {before}{line.source}; {record}(({key}, _t, {clk}()))"
        if tracer.logs_outputs and logged:
            values = "".join(f"{writer.expr(j)}, " for j in logged)
            source += f"; {ns.bind(tracer.log_values, 'log')}({c}, {pc}, ({values}))"
        out.append(Line(source, pc))
    if keys:
        times.extend([0] * (len(keys) + 1))
        out.append(Line(f"{ns.bind(times, 'T')}[{len(keys)}] = {clk}()", out[-1].instruction))
        slot_times.append((tuple(keys), times))
    return out
