"""The class of edge-dialect operators.

Our edge dialect uses torch's own operator objects (``exir_ops.edge.aten.add.Tensor
is torch.ops.aten.add.Tensor``), so an edge operator's class is torch's
``OpOverload``: ``isinstance(node.target, EdgeOpOverload)`` holds for every
operator node of an edge graph, as in the official dialect."""

from torch._ops import OpOverload as EdgeOpOverload
from torch._ops import OpOverloadPacket as EdgeOpOverloadPacket

__all__ = ["EdgeOpOverload", "EdgeOpOverloadPacket"]
