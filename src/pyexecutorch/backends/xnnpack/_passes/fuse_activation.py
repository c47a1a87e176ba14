"""relu/hardtanh after a node XNNPACK can clamp becomes that node's ``output_min_max``."""

from __future__ import annotations

import torch

from pyexecutorch.backends.xnnpack._passes.common import PassContext, absorb

aten = torch.ops.aten
MIN_MAX = "xnn_output_min_max"

FUSABLE_PRODUCERS = {
    aten.convolution.default,
    aten.linear.default,
    aten.add.Tensor,
    aten.sub.Tensor,
    aten.mul.Tensor,
}


def _bounds(act: torch.fx.Node) -> tuple[float, float] | None:
    if act.target == aten.relu.default:
        return 0.0, float("inf")
    if act.target == aten.hardtanh.default:
        lo = act.args[1] if len(act.args) > 1 else act.kwargs.get("min_val", -1.0)
        hi = act.args[2] if len(act.args) > 2 else act.kwargs.get("max_val", 1.0)
        return float(lo), float(hi)
    return None


def fuse_activation(ctx: PassContext) -> None:
    graph = ctx.gm.graph
    for act in list(graph.nodes):
        if act.op != "call_function":
            continue
        bounds = _bounds(act)
        producer = act.args[0] if act.args else None
        if (
            bounds is None
            or not isinstance(producer, torch.fx.Node)
            or producer.op != "call_function"
            or producer.target not in FUSABLE_PRODUCERS
            or len(producer.users) != 1
            or MIN_MAX in producer.meta
        ):
            continue
        producer.meta[MIN_MAX] = bounds
        absorb(producer, act)
        act.replace_all_uses_with(producer)
        graph.erase_node(act)
