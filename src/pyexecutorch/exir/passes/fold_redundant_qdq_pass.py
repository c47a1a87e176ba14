"""A ``dequantize`` feeding a ``quantize`` with the same parameters is a no-op pair:
the quantize's users read the original quantized tensor (such pairs appear where
decomposition erased an operator between them, e.g. eval-mode dropout)."""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from pyexecutorch.exir.graph_utils import graph_modules
from pyexecutorch.exir.passes._official_names import GraphFunctionPass


def _kind(node: Node, word: str) -> bool:
    target = getattr(node, "target", None)
    namespace = getattr(target, "namespace", None)
    name = getattr(target, "_opname", "")
    return namespace == "quantized_decomposed" and name.startswith(word)


def _exact(dq: Node) -> bool:
    """Whether ``quantize(dequantize(x))`` is ``x`` for every ``x`` the pair can see: the
    input comes from a quantize with the same parameters, or the range clamps nothing
    of its dtype (dequantize's arguments: input, scale, zero point, min, max, dtype)."""
    source, *params = dq.args
    if isinstance(source, Node) and _kind(source, "quantize_"):
        if list(source.args[1:]) == params and source.kwargs == dq.kwargs:
            return True
    val = source.meta.get("val") if isinstance(source, Node) else None
    if len(params) < 5 or not isinstance(val, torch.Tensor) or val.dtype.is_floating_point:
        return False
    info = torch.iinfo(val.dtype)
    return params[2] <= info.min and params[3] >= info.max


def fold_dq_q_pairs(
    gm: GraphModule, dequants: list[Node] | None = None, exact_only: bool = False
) -> bool:
    """Fold every ``dequantize -> quantize`` pair with equal parameters (among
    ``dequants`` when given; with ``exact_only``, only pairs that change no value, see
    :func:`_exact`). Returns whether the graph changed."""
    changed = False
    for g in graph_modules(gm):
        candidates = dequants if dequants is not None else list(g.graph.nodes)
        for dq in candidates:
            if dq.op != "call_function" or not _kind(dq, "dequantize_"):
                continue
            if exact_only and not _exact(dq):
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
