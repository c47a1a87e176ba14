"""Copies that keep the dim order are dropped: their readers read the source.

Kept where XNNPACK needs a node: a delegate input copied straight to an output,
or a copy whose source is already an output (one value cannot be two outputs).
"""

from __future__ import annotations

import torch

from pyexecutorch.backends.xnnpack._passes.common import PassContext, absorb
from pyexecutorch.backends.xnnpack.partition.config import op_key

COPIES = {
    op_key(torch.ops.aten.clone.default),
    "dim_order_ops::_clone_dim_order.default",
    "dim_order_ops::_to_dim_order_copy.default",
}


def remove_copies(ctx: PassContext) -> None:
    graph = ctx.gm.graph
    output = next(n for n in graph.nodes if n.op == "output")
    for node in list(graph.nodes):
        if node.op != "call_function" or op_key(node.target) not in COPIES:
            continue
        src = node.args[0]
        to_output = output in node.users
        if to_output and (src.op == "placeholder" or output in src.users):
            continue
        # the partition's configs take dim-order-keeping copies only
        consumer = next(iter(node.users), None)
        if consumer is not None and consumer is not output:
            absorb(consumer, node)
        elif src.op == "call_function":
            absorb(src, node)
        node.replace_all_uses_with(src)
        graph.erase_node(node)
