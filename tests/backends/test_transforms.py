"""backends.transforms: graph rewrites shared by backends' ahead-of-time halves."""

from __future__ import annotations

import operator

import torch
from torch.fx import Graph, GraphModule

from pyexecutorch.backends.transforms.duplicate_dynamic_quant_chain import (
    DuplicateDynamicQuantChainPass,
)

QD = torch.ops.quantized_decomposed


def _shared_dynamic_chain() -> GraphModule:
    """x -> choose_qparams -> quantize -> dequantize, read by two linears (and a relu)."""
    g = Graph()
    x = g.placeholder("x")
    w1, w2 = g.placeholder("w1"), g.placeholder("w2")
    qparams = g.call_function(QD.choose_qparams.tensor, (x, -128, 127, 1e-5, torch.int8))
    scale = g.call_function(operator.getitem, (qparams, 0))
    zero = g.call_function(operator.getitem, (qparams, 1))
    q = g.call_function(QD.quantize_per_tensor.tensor, (x, scale, zero, -128, 127, torch.int8))
    dq = g.call_function(QD.dequantize_per_tensor.tensor, (q, scale, zero, -128, 127, torch.int8))
    a = g.call_function(torch.ops.aten.linear.default, (dq, w1))
    b = g.call_function(torch.ops.aten.linear.default, (dq, w2))
    c = g.call_function(torch.ops.aten.relu.default, (dq,))
    g.output((a, b, c))
    return GraphModule(torch.nn.Module(), g)


def test_each_consumer_gets_its_own_dynamic_quantization_chain():
    gm = _shared_dynamic_chain()
    inputs = (torch.randn(3, 8), torch.randn(4, 8), torch.randn(5, 8))
    before = gm(*inputs)
    result = DuplicateDynamicQuantChainPass()(gm)
    assert result.modified
    dequantizes = [n for n in gm.graph.nodes if n.target == QD.dequantize_per_tensor.tensor]
    assert len(dequantizes) == 3 and all(len(d.users) == 1 for d in dequantizes)
    chooses = [n for n in gm.graph.nodes if n.target == QD.choose_qparams.tensor]
    assert len(chooses) == 3
    for got, want in zip(gm(*inputs), before, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    # a second run finds nothing left to split
    assert not DuplicateDynamicQuantChainPass()(gm).modified
