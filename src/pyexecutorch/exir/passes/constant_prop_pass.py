"""Constant propagation over an exported program's lifted weights (the official
``constant_prop_pass``): operators whose inputs are all constants run now, their
results becoming new constant inputs."""

from __future__ import annotations

from typing import Any

from torch.export import ExportedProgram

from pyexecutorch.exir.graph_utils import fake_mode_of, rebuild
from pyexecutorch.exir.passes._official_names import recompile_all
from pyexecutorch.exir.passes.const_fold import fold_constants


def constant_prop_pass(
    exported_program: ExportedProgram,
    custom_skip_targets: set[Any] | None = None,
    _skip_dim_order: bool = True,
) -> ExportedProgram:
    """The program with its constant subexpressions folded. ``custom_skip_targets``
    is accepted for the official signature; our folder already skips operators
    whose results must stay computed (random, in-place, quantization steps that a
    backend fuses)."""
    gm = exported_program.graph_module
    signature = fold_constants(gm, exported_program.graph_signature, fake_mode_of(gm))
    if signature is exported_program.graph_signature:
        return exported_program
    recompile_all(gm)
    return rebuild(exported_program, gm, signature)


__all__ = ["constant_prop_pass"]
