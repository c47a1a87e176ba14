"""Upper bounds of symbolic sizes (the official ``exir.sym_util`` names)."""

from __future__ import annotations

import torch

from pyexecutorch.exir.passes.sym_shape_eval import (
    ConstraintBasedSymShapeEvalPass,
    HintBasedSymShapeEvalPass,
    _Unbounded,
)


def eval_upper_bound(maybe_symint: int | torch.SymInt) -> int:
    """The largest value ``maybe_symint`` can take under its shape environment's
    constraints. A size with no finite bound (torch's ``int_oo``: a ``Dim`` without
    ``max``) falls back to its trace hint, the example's size, as the official
    function does; a size with neither (an unbacked, data-dependent one) raises
    ``RuntimeError``."""
    if isinstance(maybe_symint, int):
        return maybe_symint
    try:
        return ConstraintBasedSymShapeEvalPass().upper_bound(maybe_symint)
    except _Unbounded:
        pass
    try:
        return HintBasedSymShapeEvalPass().upper_bound(maybe_symint)
    except _Unbounded:
        raise RuntimeError(
            f"Cannot evaluate a finite upper bound for symbolic expression "
            f"{maybe_symint.node.expr} (int_oo) and no trace hint is available."
        ) from None


def eval_shape_upper_bound(shape: tuple[int | torch.SymInt, ...]) -> list[int]:
    """``eval_upper_bound`` of every dimension."""
    return [eval_upper_bound(s) for s in shape]


__all__ = ["eval_shape_upper_bound", "eval_upper_bound"]
