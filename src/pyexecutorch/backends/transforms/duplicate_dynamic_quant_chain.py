"""Give each consumer of a dynamically quantized value its own quantization chain.

After pt2e conversion with a dynamic-quantization config, an activation is
quantized at run time by ``choose_qparams`` → ``quantize`` → ``dequantize``. When
that dequantized value feeds several operators (two linears reading one input), a
partitioner can take each operator only with a chain of its own; this pass copies
the chain (from ``choose_qparams`` on) for every consumer but the first.
"""

from __future__ import annotations

import operator

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers quantized_decomposed
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

_QD = torch.ops.quantized_decomposed
# The dynamic chain's operators: the scale and zero point are computed, not constants.
_CHOOSE = (_QD.choose_qparams.tensor, _QD.choose_qparams_symmetric.tensor)
_QUANTIZE = (_QD.quantize_per_tensor.tensor,)
_DEQUANTIZE = (_QD.dequantize_per_tensor.tensor,)


def _chain(dequantize: Node) -> tuple[Node, Node] | None:
    """(choose_qparams, quantize) of a dynamic dequantize, or None for another node."""
    quantize = dequantize.args[0]
    if not (isinstance(quantize, Node) and quantize.target in _QUANTIZE):
        return None
    scale = quantize.args[1]
    if not (isinstance(scale, Node) and scale.target is operator.getitem):
        return None
    choose = scale.args[0]
    if not (isinstance(choose, Node) and choose.target in _CHOOSE):
        return None
    return choose, quantize


def _copy_chain(graph: torch.fx.Graph, nodes: list[Node], before: Node) -> Node:
    """Copies of ``nodes`` (in order, each reading the copies of those before it),
    inserted before ``before``; the copy of the last is returned."""
    copies: dict[Node, Node] = {}
    with graph.inserting_before(before):
        for node in nodes:
            copies[node] = graph.node_copy(node, lambda n: copies.get(n, n))
    return copies[nodes[-1]]


class DuplicateDynamicQuantChainPass(PassBase):
    """One choose_qparams → quantize → dequantize chain per consumer of a dynamically
    quantized value."""

    def call(self, graph_module: GraphModule) -> PassResult:
        graph = graph_module.graph
        modified = False
        for dequantize in [n for n in graph.nodes if n.target in _DEQUANTIZE]:
            found = _chain(dequantize)
            users = list(dequantize.users)
            if found is None or len(users) < 2:
                continue
            choose, quantize = found
            # the chain in graph order: choose_qparams, its getitems, quantize, dequantize
            getitems = sorted(
                (u for u in choose.users if u.target is operator.getitem),
                key=lambda n: n.args[1],
            )
            nodes = [choose, *getitems, quantize, dequantize]
            for user in users[1:]:
                copy = _copy_chain(graph, nodes, user)
                user.replace_input_with(dequantize, copy)
            modified = True
        if modified:
            graph.lint()
            graph_module.recompile()
        return PassResult(graph_module, modified)
