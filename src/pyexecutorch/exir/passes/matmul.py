"""Batched matmuls against a broadcast 2-D operand become one ``mm``.

Decomposing ``matmul``/``linear`` on batched inputs can produce
``bmm(A, expand_copy(W, [N, k, n]))``: the weight is copied ``N`` times at
run time.  Rewritten as ``view_copy(mm(view_copy(A, [N*m, k]), W), [N, m, n])``
(the views become free ``memory.view``s later), which computes the same dot
products without the copy or its memory.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from pyexecutorch.exir.graph_utils import graph_modules, insert_call

aten = torch.ops.aten


def _static(val) -> bool:
    return isinstance(val, torch.Tensor) and all(isinstance(s, int) for s in val.shape)


def _broadcast_source(node: Node) -> Node | None:
    """``W`` (2-D) when ``node`` is ``W`` expanded along a new leading batch dim."""
    while (
        isinstance(node, Node)
        and node.op == "call_function"
        and node.target == aten.view_copy.default
        and _static(node.meta.get("val"))
        and isinstance(node.args[0], Node)
        and tuple(node.args[0].meta["val"].shape) == tuple(node.meta["val"].shape)
    ):
        node = node.args[0]
    if not (
        isinstance(node, Node)
        and node.op == "call_function"
        and node.target == aten.expand_copy.default
    ):
        return None
    src = node.args[0]
    if not isinstance(src, Node) or not _static(src.meta.get("val")):
        return None
    sv, ev = src.meta["val"], node.meta["val"]
    if ev.dim() != 3:
        return None
    if sv.dim() == 2 and tuple(sv.shape) == tuple(ev.shape[1:]):
        return src
    return None


def bmm_to_mm(gm: GraphModule, fake_mode) -> int:
    rewritten = 0
    for g in graph_modules(gm):
        graph = g.graph
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target != aten.bmm.default:
                continue
            a, b = node.args
            w = _broadcast_source(b)
            av, out = a.meta.get("val") if isinstance(a, Node) else None, node.meta.get("val")
            if w is None or not _static(av) or not _static(out) or not av.is_contiguous():
                continue
            n, m, k = av.shape
            with graph.inserting_before(node):
                a2 = insert_call(
                    graph, aten.view_copy.default, (a, [n * m, k]), fake_mode=fake_mode, like=node
                )
                mm = insert_call(graph, aten.mm.default, (a2, w), fake_mode=fake_mode, like=node)
                res = insert_call(
                    graph,
                    aten.view_copy.default,
                    (mm, list(out.shape)),
                    fake_mode=fake_mode,
                    like=node,
                )
            node.replace_all_uses_with(res)
            graph.erase_node(node)
            rewritten += 1
    if rewritten:
        for g in graph_modules(gm):
            g.graph.eliminate_dead_code()
    return rewritten
