"""Float16 convolutions in the XNNPACK delegate (dense, depthwise with a depth multiplier,
transposed with output padding): lowered whole, run against torch eager and the official
runtime on the same .pte, over several calls with changing inputs, on both tiers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from pyexecutorch.exir import to_edge_transform_and_lower
from pyexecutorch.runtime import Runtime
from tests import official

CASES = {
    "dense": lambda: torch.nn.Conv2d(4, 6, 3, stride=2, padding=1),
    "dense_no_bias": lambda: torch.nn.Conv2d(4, 6, (3, 2), padding=(1, 0), bias=False),
    "grouped": lambda: torch.nn.Conv2d(4, 6, 3, padding=1, groups=2),
    "depthwise_x2": lambda: torch.nn.Conv2d(4, 8, 3, padding=1, groups=4),
    "transposed": lambda: torch.nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1),
    "transposed_adjusted": lambda: torch.nn.ConvTranspose2d(
        4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, bias=False
    ),
}


class ConvRelu(torch.nn.Module):
    def __init__(self, conv: torch.nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


@pytest.mark.parametrize("name", sorted(CASES))
def test_fp16_convolution(name):
    torch.manual_seed(0)
    model = ConvRelu(CASES[name]()).to(torch.float16).eval()
    x = torch.randn(1, 4, 7, 7, dtype=torch.float16)
    et = to_edge_transform_and_lower(
        torch.export.export(model, (x,)), partitioner=[XnnpackPartitioner()]
    ).to_executorch()
    code = et.exported_program().graph_module.code
    assert code.count("executorch_call_delegate(") == 1 and "aten_convolution" not in code
    pte = bytes(et.buffer)
    methods = [
        Runtime.get().load_program(pte, jit=jit).load_method("forward") for jit in (False, True)
    ]
    for scale in (1.0, 3.0, 0.25):
        xi = (x.float() * scale).half()
        with torch.no_grad():
            want = model.float()(xi.float()).numpy()  # float32 arithmetic, as ours
            model.half()
        theirs = official.official_run(pte, [xi])[0]
        for method in methods:
            (got,) = method.execute([xi.numpy()])
            got = got.numpy()  # a torch tensor: torch is imported
            assert got.dtype == np.float16 and got.shape == want.shape
            # Rounded once to float16 from float32 sums: within half a float16 ulp of them.
            np.testing.assert_allclose(got.astype(np.float32), want, rtol=2**-11, atol=2**-24)
            np.testing.assert_allclose(
                got.astype(np.float32), np.asarray(theirs, np.float32), rtol=4e-3, atol=4e-3
            )
