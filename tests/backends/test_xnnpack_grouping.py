"""Quantized groups are never split across XNNPACK delegates.

An attention block quantized dynamically: the q, k and v projections read one
activation quantized at run time (one choose_qparams, quantize and dequantize), and a
masked fill between the projections and the output stays portable. Our partitioner
must keep each projection with that quantization, and cut the program into the
official partitioner's delegates (node histograms compared delegate by delegate); the
official runtime loads our program and computes what the official exporter's does.
"""

from __future__ import annotations

import collections
import copy

import numpy as np
import torch
from torch import nn

from tests import official

official.silence_noise()
import executorch.exir  # noqa: E402, F401 - before ours define the same operators
import executorch.kernels.quantized  # noqa: E402, F401 - the official quantized out variants

from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import (  # noqa: E402
    XnnpackPartitioner,
)
from pyexecutorch.exir import to_edge_transform_and_lower  # noqa: E402

T, D, HEADS = 6, 16, 2


class MaskedAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x):
        h = self.norm(x)

        def heads(t):
            return t.view(1, T, HEADS, D // HEADS).transpose(1, 2)

        q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
        scores = q @ k.transpose(-1, -2)
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))  # portable
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(1, T, D)
        return x + self.o(y)


def _quantized() -> tuple[nn.Module, tuple[torch.Tensor]]:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from pyexecutorch.backends.xnnpack.quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    torch.manual_seed(0)
    model = MaskedAttention().eval()
    x = (torch.randn(1, T, D, generator=torch.Generator().manual_seed(1)),)
    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    captured = torch.export.export(copy.deepcopy(model), x).module()
    prepared = prepare_pt2e(captured, XNNPACKQuantizer().set_global(config))
    prepared(*x)
    return convert_pt2e(prepared), x


def _name(node: torch.fx.Node) -> str:
    # "aten._softmax.default" and "_softmax.default" alike: the op and its overload
    name = getattr(node.target, "__name__", str(node.target)).split("::")[-1]
    return ".".join(name.split(".")[-2:])


def _delegates(gm: torch.fx.GraphModule) -> list[collections.Counter]:
    """One histogram of operator names per delegate, in program order."""
    out = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and "call_delegate" in str(node.target):
            lowered = getattr(gm, node.args[0].target)
            graph = lowered.original_module.graph
            out.append(
                collections.Counter(_name(n) for n in graph.nodes if n.op == "call_function")
            )
    return out


def test_shared_dynamic_quantization_stays_with_its_linears():
    graph, x = _quantized()
    ours = to_edge_transform_and_lower(
        torch.export.export(graph, x), partitioner=[XnnpackPartitioner()]
    )
    theirs = official._exir().to_edge_transform_and_lower(
        torch.export.export(graph, x), partitioner=official._xnnpack_partitioner()
    )
    ours_hist = _delegates(ours.exported_program().graph_module)
    theirs_hist = _delegates(theirs.exported_program().graph_module)
    # the q/k/v delegate: one run-time quantization, three linears reading it
    qkv = [h for h in ours_hist if h["linear.default"] == 3]
    assert len(qkv) == 1 and qkv[0]["dequantize_per_tensor.tensor"] == 1, ours_hist
    assert sorted(map(sorted, (h.items() for h in ours_hist))) == sorted(
        map(sorted, (h.items() for h in theirs_hist))
    )

    ours_pte = ours.to_executorch().buffer
    theirs_pte = theirs.to_executorch().buffer
    got = official.official_run(ours_pte, x)[0]
    want = official.official_run(theirs_pte, x)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
