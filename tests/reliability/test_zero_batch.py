"""A dynamic input with a 0-sized dim at execute (issue 29: "a batch of 0 is accepted where
the declared minimum is 1").

The program format stores each dynamic dim's upper bound only (its planned size), not
the minimum ``torch.export`` was given, so the runtime cannot refuse a size below it. What
it does instead: a 0-sized dim within the bound runs, and each kernel either computes
torch's empty result (an empty batch through linear, convolution, pooling, layer norm,
softmax; a sum over it is 0, a mean NaN) or refuses as torch does, with a precise error
(``amax`` over an empty dim: an ``ExecutionError`` caused by the kernel's ``KernelError``,
where torch raises ``IndexError``). The same on both tiers, call after call, between
calls with rows (the official pybindings abort the process on a zero-row input instead).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch import nn
from torch.export import Dim

from pyexecutorch.exir import to_edge, to_edge_transform_and_lower
from pyexecutorch.runtime import ExecutionError, Runtime

pytestmark = pytest.mark.filterwarnings("ignore")


class _Norm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.linear = nn.LayerNorm(16), nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.linear(self.norm(x)), -1) * x


class _Reductions(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.sum(0) * 2.0, x.mean(0) + 1.0  # over the batch: 0 and NaN for none


class _Max(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.amax(0) + 1.0  # torch refuses an empty reduced dim


# name -> (module, one row's shape, lowered to XNNPACK)
MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), (8,), False),
    "mlp_xnnpack": (
        lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)),
        (8,),
        True,
    ),
    "norm_softmax": (_Norm, (16,), False),
    "reductions": (_Reductions, (6,), False),
    "amax": (_Max, (6,), False),
}


@functools.cache
def exported(name: str) -> tuple[nn.Module, bytes]:
    make, shape, xnnpack = MODELS[name]
    torch.manual_seed(0)
    module = make().eval()
    batch = {0: Dim("batch", min=1, max=8)}  # the minimum does not reach the file
    ep = torch.export.export(module, (torch.randn(3, *shape),), dynamic_shapes=(batch,))
    if xnnpack:
        from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import (  # noqa: PLC0415
            XnnpackPartitioner,
        )

        return module, to_edge_transform_and_lower(
            ep, partitioner=[XnnpackPartitioner()]
        ).to_executorch().buffer
    return module, to_edge(ep).to_executorch().buffer


@pytest.mark.parametrize("jit", [False, True], ids=["numpy", "compiled"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_zero_batch_gives_torchs_result_or_its_error(name, jit):
    module, data = exported(name)
    shape = MODELS[name][1]
    method = Runtime.get().load_program(data, jit=jit).load_method("forward")
    for batch in (3, 0, 2, 0):  # what load decided holds between sizes
        x = torch.randn(batch, *shape)
        try:
            with torch.no_grad():
                want = module(x)
        except IndexError as e:  # torch refuses: so does the runtime, with the same reason
            with pytest.raises(ExecutionError, match="KernelError") as got:
                method.execute([x.numpy()])
            assert str(e).split(":")[-1].strip() in str(got.value)
            assert batch == 0
            continue
        want = want if isinstance(want, tuple) else (want,)
        got = method.execute([x.numpy()])
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            g = np.asarray(g)
            assert g.shape == tuple(w.shape)
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
