"""Bilinear resizing of a dynamically sized image to a fixed size (the official
resnet.py's ``DynamicResNet``: ``interpolate(x, size=(224, 224))`` before the network).

As the official UpsampleBilinear2dConfig, the partitioner judges the output's size
only: XNNPACK's static resize takes any input size. The delegate's resize is bit for
bit the official runtime's on both tiers, over several input sizes, for both corner
modes (XNNPACK's float32 source positions, half-pixel offsets folded into one
constant and clamped, across the rows first, then down). Lowering leaves the
caller's exported program as it was: its input stays dynamic (decomposing the
resize had specialized the input to the example's size through the shared shape
environment, so the program's own ``module()`` refused other sizes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pyexecutorch.backends.xnnpack.partition.config import op_key
from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from pyexecutorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
from pyexecutorch.runtime import Runtime
from tests import official

HEIGHT, WIDTH = torch.export.Dim("height", min=8, max=40), torch.export.Dim("width", min=8, max=40)
SIZES = ((1, 3, 16, 16), (1, 3, 23, 37), (1, 3, 40, 9))  # equal, down and up, both ways


class ResizeThenScale(torch.nn.Module):
    def __init__(self, align_corners: bool) -> None:
        super().__init__()
        self.align_corners = align_corners

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.interpolate(x, size=(16, 16), mode="bilinear", align_corners=self.align_corners)
        return y * 2.0


@pytest.mark.parametrize("align_corners", [True, False])
def test_resize_of_a_dynamic_input_is_delegated_and_runs_as_the_official(align_corners) -> None:
    model = ResizeThenScale(align_corners)
    dims = ({2: HEIGHT, 3: WIDTH},)
    ep = torch.export.export(model, (torch.randn(SIZES[0]),), dynamic_shapes=dims)
    lowered = to_edge_transform_and_lower(
        ep,
        partitioner=[XnnpackPartitioner()],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    graph = lowered.exported_program().graph_module.graph
    left = {op_key(n.target) for n in graph.nodes if n.op == "call_function"}
    assert left == {"executorch_call_delegate", "getitem"}, left
    (x_node,) = [n for n in ep.graph.nodes if n.op == "placeholder"]
    assert not all(isinstance(d, int) for d in x_node.meta["val"].shape)  # still dynamic
    wide = torch.randn(SIZES[1])
    torch.testing.assert_close(ep.module()(wide), model(wide))

    pte = lowered.to_executorch().buffer
    runner = official.official_runner(pte)
    methods = [Runtime.get().load_program(pte, jit=jit).load_method("forward") for jit in (0, 1)]
    for seed, size in enumerate(SIZES):
        x = torch.randn(size, generator=torch.Generator().manual_seed(seed))
        expected = runner.run([x])[0]
        for jit, method in enumerate(methods):
            got = np.asarray(method.execute([x])[0])
            np.testing.assert_array_equal(got, expected, err_msg=f"jit={jit} {size}")
        np.testing.assert_allclose(expected, model(x).numpy(), atol=1e-5)
