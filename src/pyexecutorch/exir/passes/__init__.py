"""Compiler passes, one concern per module.

ATen -> edge: :mod:`decompose`, :mod:`ir_validity`, :mod:`view_copy`,
:mod:`normalize`, :mod:`type_promotion`, :mod:`dim_order`,
:mod:`lift_constants`, :mod:`debug_handles`.

Edge -> executorch: :mod:`write_back`, :mod:`spec_prop` (with
:mod:`sym_shape_eval`), :mod:`remove_asserts`, :mod:`memory_view`,
:mod:`out_variants`, then :mod:`pyexecutorch.exir.memory_planning` and
:mod:`kernel_check`.
"""

from torch.fx.passes.infra.pass_base import PassBase, PassResult

from pyexecutorch.exir.memory_planning import MemoryPlanningPass
from pyexecutorch.exir.passes.executorch_passes import (
    RemoveGraphAssertsPass,
    ReplaceViewCopyWithViewPass,
    SpecPropPass,
    ToOutVarPass,
)
from pyexecutorch.exir.passes.sym_shape_eval import (
    ConstraintBasedSymShapeEvalPass,
    HintBasedSymShapeEvalPass,
)

__all__ = [
    "ConstraintBasedSymShapeEvalPass",
    "HintBasedSymShapeEvalPass",
    "MemoryPlanningPass",
    "PassBase",
    "PassResult",
    "RemoveGraphAssertsPass",
    "ReplaceViewCopyWithViewPass",
    "SpecPropPass",
    "ToOutVarPass",
]
