"""No-op operators removed: a ``_to_copy``/``to`` to the same dtype and layout, a
full-range ``slice_copy``; a ``dequantize -> quantize`` pair left around a removed
operator goes too."""

from __future__ import annotations

from torch.fx import GraphModule

from pyexecutorch.exir.graph_utils import graph_modules
from pyexecutorch.exir.passes._official_names import GraphFunctionPass
from pyexecutorch.exir.passes.fold_redundant_qdq_pass import fold_dq_q_pairs
from pyexecutorch.exir.passes.normalize import is_noop


def remove_noops(gm: GraphModule) -> bool:
    changed = False
    for g in graph_modules(gm):
        dequants = []
        for node in list(g.graph.nodes):
            if node.op != "call_function" or not is_noop(node):
                continue
            if any(u.op == "output" for u in node.users):
                continue  # an output must stay a distinct tensor
            source = node.args[0]
            if getattr(source, "op", None) == "call_function":
                dequants.append(source)
            node.replace_all_uses_with(source)
            g.graph.erase_node(node)
            changed = True
        if dequants:
            fold_dq_q_pairs(g, dequants)
    return changed


class RemoveNoopPass(GraphFunctionPass):
    function = staticmethod(remove_noops)


__all__ = ["RemoveNoopPass", "remove_noops"]
