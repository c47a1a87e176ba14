"""The symbolic-size bound passes under their official module path."""

from pyexecutorch.exir.passes.sym_shape_eval import (
    ConstraintBasedSymShapeEvalPass,
    HintBasedSymShapeEvalPass,
)

__all__ = ["ConstraintBasedSymShapeEvalPass", "HintBasedSymShapeEvalPass"]
