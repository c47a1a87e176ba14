"""Load-time limits: how much memory a method may plan, how long its loops may run.

A program file declares its arenas' sizes; a corrupt or hostile one can declare
terabytes. Before a method allocates anything, the bytes its arenas and its
unplanned tensors need are added up and checked against ``max_arena_bytes``
(by default the machine's physical memory), so that the error names the method
and the amount instead of the allocator failing somewhere inside numpy.

``max_instructions`` bounds the instructions one run of a chain with jumps may
execute, so that a ``JumpFalseCall`` loop that never ends raises
:class:`InstructionBudgetError` (an
:class:`~pyexecutorch.runtime.errors.ExecutionError`) instead of hanging. It is
on by default: :data:`DEFAULT_MAX_INSTRUCTIONS` (ten million, about ten seconds
of the cheapest instructions, far more than any exported ``cond``, ``map`` or
``while_loop`` runs; pass a larger number for a longer loop). A delegate call
counts for a thousand instructions (``codegen.DELEGATE_CALL_COST``: it runs a whole
subgraph), so a loop over delegate calls is bounded in time too. A chain without
jumps runs each instruction once and is never counted.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from pyexecutorch.runtime.errors import ExecutionError, InvalidProgramError
from pyexecutorch.schema.program import ExecutionPlan, Tensor, TensorShapeDynamism
from pyexecutorch.schema.scalar_type import SCALAR_TYPE_ITEMSIZE

_EXTERNAL = 1  # TensorDataLocation.EXTERNAL

# The instruction budget of one run of a chain with jumps when the caller sets none.
DEFAULT_MAX_INSTRUCTIONS = 10_000_000


@cache
def physical_memory() -> int:
    """Bytes of physical memory on this machine (1 TiB where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


@dataclass(frozen=True)
class LoadLimits:
    """Limits applied when a method loads and runs.

    ``max_arena_bytes``: the most memory one method may allocate at load for its
    planned arenas and unplanned tensors (``None``: the machine's physical memory).
    ``max_instructions``: the most instructions one run of a chain with jumps may
    execute (``None``: :data:`DEFAULT_MAX_INSTRUCTIONS`; a straight-line chain runs
    each instruction once and is not counted).
    """

    max_arena_bytes: int | None = None
    max_instructions: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_arena_bytes", "max_instructions"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value <= 0
            ):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        if self.max_instructions is None:  # a frozen dataclass: set through object
            object.__setattr__(self, "max_instructions", DEFAULT_MAX_INSTRUCTIONS)

    @property
    def arena_bytes(self) -> int:
        return self.max_arena_bytes if self.max_arena_bytes is not None else physical_memory()


DEFAULT_LIMITS = LoadLimits()


def _tensor_bytes(t: Tensor) -> int:
    return math.prod(t.sizes) * SCALAR_TYPE_ITEMSIZE.get(t.scalar_type, 1)


def load_bytes(plan: ExecutionPlan) -> int:
    """Bytes a method allocates when it loads: its arenas and its unplanned tensors."""
    total = sum(max(size, 0) for size in plan.non_const_buffer_sizes)
    for ev in plan.values:
        t = ev.val
        if (
            not isinstance(t, Tensor)
            or t.allocation_info is not None
            or t.data_buffer_idx
            or (t.extra_tensor_info is not None and int(t.extra_tensor_info.location) == _EXTERNAL)
            or t.shape_dynamism == TensorShapeDynamism.DYNAMIC_UNBOUND
        ):
            continue
        total += _tensor_bytes(t)
    return total


def check_load_memory(plan: ExecutionPlan, limits: LoadLimits) -> None:
    """Refuse a method whose memory at load exceeds ``limits.max_arena_bytes``."""
    need = load_bytes(plan)
    limit = limits.arena_bytes
    if need > limit:
        arenas = ", ".join(str(s) for s in plan.non_const_buffer_sizes)
        raise InvalidProgramError(
            f"method '{plan.name}' needs {need} bytes of memory at load (arenas [{arenas}] "
            f"and unplanned tensors), more than the limit of {limit} bytes "
            f"(max_arena_bytes={limits.max_arena_bytes})"
        )


class InstructionBudgetError(ExecutionError):
    """A run of a method executed more instructions than ``max_instructions`` allows."""

    @classmethod
    def raiser(cls, method: str, chain: int, budget: int) -> Callable[[], None]:
        """A function the generated dispatcher calls when the budget is spent."""
        message = (
            f"method '{method}' chain {chain} would run more than {budget} instructions "
            f"(max_instructions={budget}): a JumpFalseCall loop that does not end?"
        )

        def over_budget() -> None:
            raise cls(message)

        return over_budget
