"""The program managers under the official ``executorch.exir.program`` path
(implemented in :mod:`pyexecutorch.exir.program_manager`)."""

from pyexecutorch.exir.legacy import ExecutorchProgram, ExirExportedProgram
from pyexecutorch.exir.passes.executorch_passes import edge_to_executorch_passes
from pyexecutorch.exir.program._fake_program import get_fake_program, update_to_real_program
from pyexecutorch.exir.program_manager import (
    EdgeProgramManager,
    ExecutorchProgramManager,
    to_edge,
    to_edge_transform_and_lower,
)

__all__ = [
    "EdgeProgramManager",
    "ExecutorchProgram",
    "ExecutorchProgramManager",
    "ExirExportedProgram",
    "edge_to_executorch_passes",
    "get_fake_program",
    "to_edge",
    "to_edge_transform_and_lower",
    "update_to_real_program",
]
