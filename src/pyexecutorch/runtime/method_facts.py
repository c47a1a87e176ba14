"""What the load-time rewrites read of a method: its values and its resolved operators.

The optimizer modules (data flow, constant folding, views, fusion, epilogues, layouts,
argument checks, static shape plans) see a method through this record only: the plan,
the values over planned memory (:mod:`pyexecutorch.runtime.memory`), the kernels and
delegates (:mod:`pyexecutorch.runtime.resolution`). The containers are the method's own:
a rewrite that rebinds a value (a view made at load, a channels-last layout) changes the
method's value list, as it is meant to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyexecutorch.kernels.registry import Kernel
from pyexecutorch.runtime.dataflow import accesses
from pyexecutorch.runtime.low_precision import is_low, widened
from pyexecutorch.runtime.memory import InputSpec
from pyexecutorch.runtime.resolution import kernel_layout
from pyexecutorch.schema.program import (
    ExecutionPlan,
    KernelCall,
    OptionalTensorList,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)


@dataclass(frozen=True, eq=False)
class MethodFacts:
    """One method's plan, values and operators, as the load-time rewrites read them."""

    name: str
    plan: ExecutionPlan
    values: list[Any]  # value j as the method starts (see memory.PlannedValues)
    capacity: dict[int, np.ndarray]  # each tensor's planned storage
    constant_values: set[int]  # tensors read from constant data (read-only arrays)
    kernels: list[Kernel]  # by operator index
    inputs: list[InputSpec]
    # (backend, handle) by delegate index; empty while the delegates are not initialized
    delegates: Sequence[tuple[Any, Any]] = ()

    def kernel_layout(self, k: Kernel, call: KernelCall) -> tuple[list[int], list[int]]:
        """(arguments passed to the kernel, output value indices) of a kernel call."""
        return kernel_layout(k, call, self.plan.values)

    def load_time_value(self, j: int) -> Any:
        """Value ``j`` as a specializer sees it: planned storage for tensors and lists of them."""
        val = self.plan.values[j].val
        if isinstance(val, Tensor):
            return self.capacity[j]
        if isinstance(val, (TensorList, OptionalTensorList)):
            return [self.capacity[i] if i >= 0 and i in self.capacity else None for i in val.items]
        return self.values[j]

    def static_planned(self, j: int) -> np.ndarray | None:
        """Value ``j``'s planned array, when it is a static planned tensor bound at load."""
        val, cap = self.plan.values[j].val, self.capacity.get(j)
        if (
            cap is None
            or not isinstance(val, Tensor)
            or val.shape_dynamism != TensorShapeDynamism.STATIC
            or val.allocation_info is None
            or self.values[j] is not cap
        ):
            return None
        return cap

    def widened_kernel(self, k: Kernel, args: list[int], outs: list[int]) -> Callable | None:
        """The kernel computing in float32 when the call touches bfloat16 or float8
        tensors (see :mod:`pyexecutorch.runtime.low_precision`), else None."""
        if not any(is_low(self.values[j]) for j in args if j < len(self.values)):
            return None
        return widened(k.fn, len(args) - len(outs), len(outs))

    def written_values(self) -> set[int]:
        """Values that instructions (or inputs) may change: read them live, never inline."""
        written = set(self.plan.inputs)
        for chain in self.plan.chains:
            for instr in chain.instructions:
                written.update(accesses(self, instr.instr_args)[1])
        return written

    def read_values(self) -> set[int]:
        """Values something reads: instruction inputs, method and chain outputs."""
        read = set(self.plan.outputs)
        for chain in self.plan.chains:
            read.update(chain.outputs)
            for instr in chain.instructions:
                read.update(accesses(self, instr.instr_args)[0])
        return read
