"""pyexecutorch.exir: the ahead-of-time compiler, torch.export programs to ``.pte``.

Mirrors ``executorch.exir``: an export script ports by changing the import::

    from pyexecutorch.exir import to_edge
    et = to_edge(torch.export.export(model, args)).to_executorch()
    with open("model.pte", "wb") as f:
        et.write_to_file(f)
"""

from pyexecutorch.exir.config import EdgeCompileConfig, ExecutorchBackendConfig
from pyexecutorch.exir.dialects._ops import ops as exir_ops
from pyexecutorch.exir.error import (
    DynamicShapeError,
    ExportError,
    IRValidityError,
    MissingKernelError,
    MissingOutVariantError,
)
from pyexecutorch.exir.memory_planning import MemoryPlanningPass
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

__all__ = [
    "ConstraintBasedSymShapeEvalPass",
    "DynamicShapeError",
    "EdgeCompileConfig",
    "EdgeProgramManager",
    "ExecutorchBackendConfig",
    "ExecutorchProgramManager",
    "ExportError",
    "HintBasedSymShapeEvalPass",
    "IRValidityError",
    "MemoryPlanningPass",
    "MissingKernelError",
    "MissingOutVariantError",
    "TensorSpec",
    "exir_ops",
    "to_edge",
    "to_edge_transform_and_lower",
    "to_edge_with_preserved_ops",
]
