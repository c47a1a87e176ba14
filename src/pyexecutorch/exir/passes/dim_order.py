"""Memory-format ops to their ``dim_order_ops`` equivalents (unless
``EdgeCompileConfig._skip_dim_order``)."""

from __future__ import annotations

import torch
from torch.fx import GraphModule

from pyexecutorch.exir.dialects import dim_order_ops
from pyexecutorch.exir.dialects.edge._ops import in_dialect_of
from pyexecutorch.exir.graph_utils import call_nodes

aten = torch.ops.aten


def _table():
    return {
        aten._to_copy.default: dim_order_ops.to_dim_order_copy(),
        aten.clone.default: dim_order_ops.clone_dim_order(),
        aten.empty.memory_format: dim_order_ops.empty_dim_order(),
    }


def to_dim_order_ops(gm: GraphModule) -> bool:
    table = _table()
    changed = False
    for _, node in call_nodes(gm):
        new = table.get(node.target)
        if new is None:
            continue
        kwargs = dict(node.kwargs)
        fmt = kwargs.pop("memory_format", torch.preserve_format)
        src = node.args[0]
        if node.target == aten.empty.memory_format:
            ndim = len(src)
            src_val = None
        else:
            src_val = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
            ndim = (
                src_val.dim() if isinstance(src_val, torch.Tensor) else len(node.meta["val"].shape)
            )
        if fmt in (None, torch.preserve_format):
            if isinstance(src_val, torch.Tensor):
                dim_order = [int(d) for d in src_val.dim_order()]
            else:
                dim_order = list(range(ndim))
        else:
            dim_order = dim_order_ops.dim_order_of(fmt, ndim)
        kwargs["dim_order"] = dim_order
        if new is dim_order_ops.clone_dim_order():
            kwargs.pop("layout", None)
        node.target = in_dialect_of(node.target, new)
        node.kwargs = kwargs
        changed = True
    return changed
