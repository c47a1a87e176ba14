"""A ``dequantize`` feeding a ``quantize`` with the same parameters is a no-op pair:
the quantize's users read the original quantized tensor (such pairs appear where
decomposition erased an operator between them, e.g. eval-mode dropout)."""

from __future__ import annotations

from torch.fx import GraphModule, Node

from pyexecutorch.exir.graph_utils import graph_modules
from pyexecutorch.exir.passes._official_names import GraphFunctionPass


def _kind(node: Node, word: str) -> bool:
    target = getattr(node, "target", None)
    namespace = getattr(target, "namespace", None)
    name = getattr(target, "_opname", "")
    return namespace == "quantized_decomposed" and name.startswith(word)


def fold_dq_q_pairs(gm: GraphModule, dequants: list[Node] | None = None) -> bool:
    """Fold every ``dequantize -> quantize`` pair with equal parameters (among
    ``dequants`` when given). Returns whether the graph changed."""
    changed = False
    for g in graph_modules(gm):
        candidates = dequants if dequants is not None else list(g.graph.nodes)
        for dq in candidates:
            if dq.op != "call_function" or not _kind(dq, "dequantize_"):
                continue
            for q in list(dq.users):
                same_family = (
                    _kind(q, "quantize_") and q.target._opname[2:] == dq.target._opname[4:]
                )
                if same_family and list(q.args[1:]) == list(dq.args[1:]) and q.kwargs == dq.kwargs:
                    q.replace_all_uses_with(dq.args[0])
                    changed = True
        if changed:
            g.graph.eliminate_dead_code()
    return changed


class FoldRedundantDequantizeQuantizePass(GraphFunctionPass):
    function = staticmethod(fold_dq_q_pairs)


__all__ = ["FoldRedundantDequantizeQuantizePass", "fold_dq_q_pairs"]
