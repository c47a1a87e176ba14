"""Symbolic ints, floats and bools in ``Tensor`` argument slots go through
``aten.scalar_tensor`` (the schema wants a tensor; the dispatcher converted them
implicitly)."""

from __future__ import annotations

from pyexecutorch.exir.passes._official_names import GraphFunctionPass
from pyexecutorch.exir.passes.scalar_to_tensor_pass import _scalars_to_tensors


class SymToTensorPass(GraphFunctionPass):
    # One pass converts both kinds of scalar (see type_promotion.scalars_to_tensors).
    function = staticmethod(_scalars_to_tensors)


__all__ = ["SymToTensorPass"]
