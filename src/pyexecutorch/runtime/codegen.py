"""Compile a method's instruction list into Python functions, once, at load.

Each instruction becomes one line of generated source that calls its kernel
with arguments already resolved: constants and lists bound as names, live
values read from the value list ``v``. A chain without jumps becomes one
straight-line function; a chain with ``JumpFalseCall`` becomes basic blocks
run by a small dispatcher. The generated line numbers map back to
instruction indices so errors can name the instruction that failed.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_counter = itertools.count()

# What one delegate call counts for in an instruction budget: a delegate runs a whole
# subgraph (milliseconds where a kernel instruction takes microseconds), so that a loop
# over delegate calls is bounded in time as a loop over kernels is: the default budget of
# ten million instructions allows ten thousand delegate calls. A delegate's line calls its
# runner, bound under a "D" name (see the method's lowering).
DELEGATE_CALL_COST = 1000
_DELEGATE_CALL = re.compile(r"\bD\d+\(v\)")


def instruction_cost(line: Line) -> int:
    """What ``line`` counts for in an instruction budget (see DELEGATE_CALL_COST)."""
    return DELEGATE_CALL_COST if _DELEGATE_CALL.search(line.source) else 1


@dataclass
class Line:
    """One generated line and the instruction it runs."""

    source: str
    instruction: int


@dataclass
class CompiledChain:
    run: Callable[[list[Any]], None]
    filename: str
    line_to_instruction: dict[int, int] = field(default_factory=dict)
    source: str = ""  # the generated module, for debugging and profiling


class Namespace:
    """Names bound into the generated module: kernels, constants, arrays."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {}
        self._ids: dict[int, str] = {}

    def bind(self, obj: Any, prefix: str = "K") -> str:
        key = id(obj)
        name = self._ids.get(key)
        if name is None:
            name = f"{prefix}{len(self.names)}"
            self.names[name] = obj
            self._ids[key] = name
        return name


def literal(value: Any, ns: Namespace) -> str:
    """Source for a constant argument: a literal where exact, else a bound name.

    Only exact ``None``/``bool``/``int``/``float`` become text (a subclass could
    print anything); strings and everything else from a program are bound values.
    """
    kind = type(value)
    if value is None or kind is bool:
        return "True" if value is True else "False" if value is False else "None"
    if kind is int and abs(value) < 1 << 62:
        return int.__repr__(value)
    if kind is float and value == value and abs(value) != float("inf"):
        return float.__repr__(value)
    return ns.bind(value)


def compile_chain(
    method: str,
    chain_index: int,
    lines: list[Line],
    jumps: dict[int, tuple[str, int]],
    n_instructions: int,
    ns: Namespace,
    over_budget: tuple[int, Callable[[], None]] | None = None,
) -> CompiledChain:
    """Build the function(s) for one chain.

    ``lines`` hold one entry per instruction except jumps; ``jumps`` maps an
    instruction index to (condition expression, destination instruction).
    ``over_budget`` (a chain with jumps only): (instruction budget, function
    that raises) bounds the instructions one run executes, block by block (a
    delegate call counting for DELEGATE_CALL_COST of them).
    """
    filename = f"<pyexecutorch method {method!r} chain {chain_index} #{next(_counter)}>"
    src: list[str] = []
    line_map: dict[int, int] = {}

    def emit(text: str, instruction: int | None = None) -> None:
        src.append(text)
        if instruction is not None:
            line_map[len(src)] = instruction

    by_index = {line.instruction: line for line in lines}
    if not jumps:
        emit("def run(v):")
        for line in lines:
            emit(f"    {line.source}", line.instruction)
        emit("    return None")
        return _build(src, filename, line_map, ns)

    # Basic blocks start at 0, at every jump destination and after every jump.
    starts = {0}
    for pc, (_, dest) in jumps.items():
        starts.add(dest)
        starts.add(pc + 1)
    starts = sorted(s for s in starts if s < n_instructions)
    block_of = {start: b for b, start in enumerate(starts)}
    n_blocks = len(starts)
    for b, start in enumerate(starts):
        end = starts[b + 1] if b + 1 < n_blocks else n_instructions
        emit(f"def block{b}(v):")
        for pc in range(start, end):
            if pc in jumps:
                cond, dest = jumps[pc]
                emit(f"    if not {cond}: return {block_of.get(dest, n_blocks)}", pc)
            elif pc in by_index:
                emit(f"    {by_index[pc].source}", pc)
        emit(f"    return {block_of.get(end, n_blocks)}")
    emit(f"BLOCKS = ({', '.join(f'block{b}' for b in range(n_blocks))},)")
    emit("def run(v):")
    emit("    b = 0")
    if over_budget is not None:
        budget, raise_over = over_budget
        sizes = [
            sum(
                instruction_cost(by_index[pc]) if pc in by_index else 1
                for pc in range(start, starts[b + 1] if b + 1 < n_blocks else n_instructions)
            )
            for b, start in enumerate(starts)
        ]
        emit(f"    n = {int(budget)}")
        emit(f"    while b < {n_blocks}:")
        emit(f"        n -= {ns.bind(tuple(sizes), 'S')}[b]")
        emit(f"        if n < 0: {ns.bind(raise_over, 'E')}()")
        emit("        b = BLOCKS[b](v)")
        return _build(src, filename, line_map, ns)
    emit(f"    while b < {n_blocks}:")
    emit("        b = BLOCKS[b](v)")
    return _build(src, filename, line_map, ns)


def _build(src: list[str], filename: str, line_map: dict[int, int], ns: Namespace) -> CompiledChain:
    text = "\n".join(src) + "\n"
    namespace = dict(ns.names)
    exec(compile(text, filename, "exec"), namespace)  # noqa: S102
    return CompiledChain(namespace["run"], filename, line_map, text)


def failing_instruction(exc: BaseException, chain: CompiledChain) -> int | None:
    """The instruction whose generated line raised ``exc``, if any."""
    tb = exc.__traceback__
    found = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == chain.filename:
            found = chain.line_to_instruction.get(tb.tb_lineno, found)
        tb = tb.tb_next
    return found
