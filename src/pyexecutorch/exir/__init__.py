"""pyexecutorch.exir: the ahead-of-time compiler, torch.export programs to ``.pte``.

Mirrors ``executorch.exir``: an export script ports by changing the import::

    from pyexecutorch.exir import to_edge
    et = to_edge(torch.export.export(model, args)).to_executorch()
    with open("model.pte", "wb") as f:
        et.write_to_file(f)
"""

from typing import Any

from torch.export import ExportedProgram, ExportGraphSignature

from pyexecutorch.exir.config import (
    DynamicMemoryPlanningMode,
    EdgeCompileConfig,
    ExecutorchBackendConfig,
    PropagateDeviceConfig,
)
from pyexecutorch.exir.dialects._ops import ops as exir_ops
from pyexecutorch.exir.error import (
    DynamicShapeError,
    ExportError,
    IRValidityError,
    MissingKernelError,
    MissingOutVariantError,
    UnsupportedQuantizedOperatorError,
)
from pyexecutorch.exir.legacy import (
    ExecutorchProgram,
    ExirExportedProgram,
    lift_constant_tensor_pass,
    transform_exported_program,
)
from pyexecutorch.exir.memory_planning import MemoryPlanningPass
from pyexecutorch.exir.pass_manager import PassManager
from pyexecutorch.exir.passes.executorch_passes import (
    ToOutVarPass,
    edge_to_executorch_passes,
    pre_memory_planning_passes,
)
from pyexecutorch.exir.passes.sym_shape_eval import (
    ConstraintBasedSymShapeEvalPass,
    HintBasedSymShapeEvalPass,
)
from pyexecutorch.exir.program_manager import (
    EdgeProgramManager,
    ExecutorchProgramManager,
    to_edge,
    to_edge_transform_and_lower,
    to_edge_with_preserved_ops,
)
from pyexecutorch.exir.tensor_spec import TensorSpec

# A value of a traced graph (the official package's alias, for type hints).
Value = Any

__all__ = [
    "ConstraintBasedSymShapeEvalPass",
    "DynamicMemoryPlanningMode",
    "DynamicShapeError",
    "EdgeCompileConfig",
    "EdgeProgramManager",
    "ExecutorchBackendConfig",
    "ExportGraphSignature",
    "ExportedProgram",
    "ExecutorchProgram",
    "ExecutorchProgramManager",
    "ExirExportedProgram",
    "ExportError",
    "HintBasedSymShapeEvalPass",
    "IRValidityError",
    "MemoryPlanningPass",
    "MissingKernelError",
    "UnsupportedQuantizedOperatorError",
    "MissingOutVariantError",
    "PassManager",
    "PropagateDeviceConfig",
    "TensorSpec",
    "ToOutVarPass",
    "Value",
    "edge_to_executorch_passes",
    "exir_ops",
    "lift_constant_tensor_pass",
    "pre_memory_planning_passes",
    "to_edge",
    "to_edge_transform_and_lower",
    "to_edge_with_preserved_ops",
    "transform_exported_program",
]
