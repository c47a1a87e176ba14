"""``EXIREdgeDialectVerifier``: checks that a graph is in the edge dialect (Core ATen
operators, or those the config lets through) and raises a ``SpecViolationError``
(our :class:`IRValidityError`) naming every operator that is not."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch._export.verifier import Verifier, _VerifierMeta
from torch.export import ExportedProgram
from torch.fx import GraphModule

from pyexecutorch.exir.config import EdgeCompileConfig
from pyexecutorch.exir.passes.ir_validity import check_ir_validity

_REGISTRY = _VerifierMeta._registry
_OFFICIAL_EDGE = _REGISTRY.get("EDGE")  # the official package's, when it was imported first


class EdgeDialectVerifier(Verifier):
    """What an edge program's ``ExportedProgram.verifiers`` names: its ``dialect`` is
    ``"EDGE"``, as the official edge programs'; its checks are torch's (the operator
    check of the edge dialect is :class:`EXIREdgeDialectVerifier`)."""

    dialect = "EDGE"


if _OFFICIAL_EDGE is not None:  # torch's registry maps a dialect to one class: keep theirs
    _REGISTRY["EDGE"] = _OFFICIAL_EDGE


class EXIREdgeDialectVerifier:
    """``EXIREdgeDialectVerifier(config)(graph_module_or_program)``.

    ``class_only`` (official: check only the verifier's class) is accepted; the check
    here is always the operator check. ``EdgeCompileConfig(_check_ir_validity=False)``
    turns it off."""

    def __init__(
        self,
        edge_compile_config: EdgeCompileConfig | None = None,
        class_only: bool = False,
        core_aten_ops_exception_list: Sequence[torch._ops.OpOverload] | None = None,
        preserve_ops: Sequence[torch._ops.OpOverload] | None = None,
    ) -> None:
        config = edge_compile_config or EdgeCompileConfig()
        self.enable = config._check_ir_validity
        self.class_only = class_only
        self.exceptions = [
            *(config._core_aten_ops_exception_list or ()),
            *(core_aten_ops_exception_list or ()),
            *(config.preserve_ops or ()),
            *(preserve_ops or ()),
        ]

    def __call__(self, ep_or_gm: ExportedProgram | GraphModule) -> None:
        if not self.enable:
            return
        gm: Any = ep_or_gm.graph_module if isinstance(ep_or_gm, ExportedProgram) else ep_or_gm
        check_ir_validity(gm, self.exceptions)


__all__ = ["EXIREdgeDialectVerifier"]
