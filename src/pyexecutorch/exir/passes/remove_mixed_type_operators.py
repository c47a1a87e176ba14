"""Arithmetic on tensors of mixed dtypes gets explicit casts to the promoted dtype,
so each kernel sees one dtype."""

from __future__ import annotations

from torch.fx import GraphModule

from pyexecutorch.exir.graph_utils import fake_mode_of
from pyexecutorch.exir.passes._official_names import GraphFunctionPass
from pyexecutorch.exir.passes.type_promotion import promote_mixed_types


def _promote(gm: GraphModule) -> bool:
    return promote_mixed_types(gm, fake_mode_of(gm))


class RemoveMixedTypeOperators(GraphFunctionPass):
    function = staticmethod(_promote)


__all__ = ["RemoveMixedTypeOperators"]
