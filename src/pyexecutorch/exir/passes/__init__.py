"""Compiler passes, one concern per module.

ATen -> edge: :mod:`decompose`, :mod:`ir_validity`, :mod:`view_copy`,
:mod:`normalize`, :mod:`type_promotion`, :mod:`dim_order`,
:mod:`lift_constants`, :mod:`debug_handles`.

Edge -> executorch: :mod:`write_back`, :mod:`spec_prop` (with
:mod:`sym_shape_eval`), :mod:`remove_asserts`, :mod:`memory_view`,
:mod:`out_variants`, then :mod:`pyexecutorch.exir.memory_planning` and
:mod:`kernel_check`.
"""

from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from pyexecutorch.exir.memory_planning import MemoryPlanningPass

# the submodule, as the official package exposes it (its function has the same name)
from pyexecutorch.exir.passes import convert_constant_dim_order_pass
from pyexecutorch.exir.passes._official_names import recompile_all
from pyexecutorch.exir.passes.debug_pass import DebugPass
from pyexecutorch.exir.passes.executorch_passes import (
    RemoveGraphAssertsPass,
    ReplaceViewCopyWithViewPass,
    SpecPropPass,
    ToOutVarPass,
)
from pyexecutorch.exir.passes.remove_noop_pass import RemoveNoopPass
from pyexecutorch.exir.passes.replace_sym_size_op_pass import ReplaceSymSizeOpPass
from pyexecutorch.exir.passes.sym_shape_eval import (
    ConstraintBasedSymShapeEvalPass,
    HintBasedSymShapeEvalPass,
)


def dead_code_elimination_pass(graph_module: GraphModule) -> PassResult:
    """Remove the nodes nothing uses, in the graph and its control-flow submodules."""
    for g in graph_module.modules():
        if isinstance(g, GraphModule):
            g.graph.eliminate_dead_code()
    recompile_all(graph_module)
    return PassResult(graph_module, True)


def propagate_dynamic_shape(dynamic_memory_planning_mode: object = None) -> list[PassBase]:
    """The passes that give every node a tensor spec with upper-bound sizes (for
    partitioners that need shapes before ``to_executorch``); dynamic sizes are planned
    at their upper bound, the only mode there is."""
    return [SpecPropPass(), HintBasedSymShapeEvalPass()]


__all__ = [
    "ConstraintBasedSymShapeEvalPass",
    "DebugPass",
    "RemoveNoopPass",
    "ReplaceSymSizeOpPass",
    "convert_constant_dim_order_pass",
    "dead_code_elimination_pass",
    "propagate_dynamic_shape",
    "HintBasedSymShapeEvalPass",
    "MemoryPlanningPass",
    "PassBase",
    "PassResult",
    "RemoveGraphAssertsPass",
    "ReplaceViewCopyWithViewPass",
    "SpecPropPass",
    "ToOutVarPass",
]
