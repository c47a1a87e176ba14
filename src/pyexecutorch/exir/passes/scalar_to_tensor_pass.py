"""Python scalars in ``Tensor`` argument slots become 0-dim constants."""

from __future__ import annotations

from torch.fx import GraphModule

from pyexecutorch.exir.graph_utils import fake_mode_of
from pyexecutorch.exir.passes._official_names import GraphFunctionPass
from pyexecutorch.exir.passes.type_promotion import scalars_to_tensors


def _scalars_to_tensors(gm: GraphModule) -> bool:
    return scalars_to_tensors(gm, fake_mode_of(gm))


class ScalarToTensorPass(GraphFunctionPass):
    function = staticmethod(_scalars_to_tensors)


__all__ = ["ScalarToTensorPass"]
