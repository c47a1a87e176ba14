"""XNNPACK fully connected layers from a standalone ``addmm``: a (1, N) bias row is one
value per output channel and is delegated (the official delegate takes it); a full
(M, N) bias matrix is not a fully connected layer's bias and stays portable."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from pyexecutorch.exir import to_edge_transform_and_lower
from pyexecutorch.exir.backend import get_delegation_info
from pyexecutorch.runtime import Runtime


class _AddMM(nn.Module):
    def __init__(self, bias_rows: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.mat = nn.Parameter(torch.randn(5, 4))
        self.bias = nn.Parameter(torch.randn(bias_rows, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x, self.mat)


@pytest.mark.parametrize(("bias_rows", "delegated"), [(1, 1), (3, 0)])
def test_addmm_bias_shapes(bias_rows: int, delegated: int) -> None:
    model = _AddMM(bias_rows).eval()
    ep = torch.export.export(model, (torch.randn(3, 5),))
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    info = get_delegation_info(edge.exported_program().graph_module)
    assert info.num_delegated_subgraphs == delegated
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for seed in range(3):  # the bias, bound at load, serves every call
        x = torch.randn(3, 5, generator=torch.Generator().manual_seed(seed))
        (out,) = method.execute([x])
        torch.testing.assert_close(torch.as_tensor(out), model(x).detach())
