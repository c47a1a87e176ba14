"""Between memory-format operators and their dim-order forms, both ways."""

from __future__ import annotations

import torch
from torch.fx import GraphModule

from pyexecutorch.exir.dialects import dim_order_ops
from pyexecutorch.exir.dialects.edge._ops import in_dialect_of
from pyexecutorch.exir.graph_utils import call_nodes
from pyexecutorch.exir.passes._official_names import GraphFunctionPass
from pyexecutorch.exir.passes.dim_order import to_dim_order_ops

aten = torch.ops.aten


def from_dim_order_ops(gm: GraphModule) -> bool:
    """``_to_dim_order_copy``/``_clone_dim_order``/``_empty_dim_order`` back to
    ``_to_copy``/``clone``/``empty.memory_format`` with the matching memory format."""
    table = {
        dim_order_ops.to_dim_order_copy(): aten._to_copy.default,
        dim_order_ops.clone_dim_order(): aten.clone.default,
        dim_order_ops.empty_dim_order(): aten.empty.memory_format,
    }
    changed = False
    for _, node in call_nodes(gm):
        old = table.get(node.target)
        if old is None:
            continue
        kwargs = dict(node.kwargs)
        kwargs["memory_format"] = dim_order_ops.memory_format_of(kwargs.pop("dim_order", None))
        node.target, node.kwargs = in_dialect_of(node.target, old), kwargs
        changed = True
    return changed


class MemoryFormatOpsPass(GraphFunctionPass):
    function = staticmethod(to_dim_order_ops)


class DimOrderOpsRevertPass(GraphFunctionPass):
    function = staticmethod(from_dim_order_ops)


__all__ = ["DimOrderOpsRevertPass", "MemoryFormatOpsPass"]
