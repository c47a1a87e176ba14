"""Upper bounds of symbolic sizes (the official ``exir.sym_util`` names)."""

from __future__ import annotations

import torch

from pyexecutorch.exir.passes.sym_shape_eval import ConstraintBasedSymShapeEvalPass, _Unbounded


def eval_upper_bound(maybe_symint: int | torch.SymInt) -> int | None:
    """The largest value ``maybe_symint`` can take under its shape environment's
    constraints; None when it is unbounded."""
    if isinstance(maybe_symint, int):
        return maybe_symint
    try:
        return ConstraintBasedSymShapeEvalPass().upper_bound(maybe_symint)
    except _Unbounded:
        return None


def eval_shape_upper_bound(shape: tuple[int | torch.SymInt, ...]) -> list[int | None]:
    """``eval_upper_bound`` of every dimension."""
    return [eval_upper_bound(s) for s in shape]


__all__ = ["eval_shape_upper_bound", "eval_upper_bound"]
