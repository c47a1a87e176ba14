"""The official ``executorch.exir.program._program`` module's names, over our program
managers: official scripts and tests import the managers and a few helpers from it."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pyexecutorch.exir.backend.preserve import _filter_ops
from pyexecutorch.exir.legacy import (
    ExecutorchProgram,
    ExirExportedProgram,
    lift_constant_tensor_pass,
)
from pyexecutorch.exir.legacy import transform_exported_program as _transform
from pyexecutorch.exir.passes.executorch_passes import edge_to_executorch_passes
from pyexecutorch.exir.program_manager import (
    EdgeProgramManager,
    ExecutorchProgramManager,
    to_edge,
    to_edge_transform_and_lower,
    to_edge_with_preserved_ops,
)


def _remove_invalid_ops_for_not_decompose(
    preserve_ops: Sequence[torch._ops.OpOverload],
) -> list[torch._ops.OpOverload]:
    """The operators of ``preserve_ops`` that may stay undecomposed: functional ones
    whose outputs alias no input (split, chunk and other view-returning operators go)."""
    return _filter_ops(preserve_ops, None)


__all__ = [
    "EdgeProgramManager",
    "ExecutorchProgram",
    "ExecutorchProgramManager",
    "ExirExportedProgram",
    "_remove_invalid_ops_for_not_decompose",
    "_transform",
    "edge_to_executorch_passes",
    "lift_constant_tensor_pass",
    "to_edge",
    "to_edge_transform_and_lower",
    "to_edge_with_preserved_ops",
]
