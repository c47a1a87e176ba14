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
from torch.fx.experimental.symbolic_shapes import has_free_symbols

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
    assert has_free_symbols(x_node.meta["val"].shape)  # still dynamic
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


class ResizeByScale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=True) * 2.0


def test_resize_to_a_dynamic_size_is_decomposed_with_its_sizes_symbolic() -> None:
    """A resize whose output size follows the input's is not XNNPACK's (as the official
    partitioner judges it): kept whole for the partitioner, it is decomposed after all by
    torch's Python decomposition, which keeps the sizes symbolic (the C++ composite kernel
    guarded on them: the program, the caller's too, specialized to the example's size)."""
    model = ResizeByScale()
    ep = torch.export.export(
        model, (torch.randn(SIZES[0]),), dynamic_shapes=({2: HEIGHT, 3: WIDTH},)
    )
    lowered = to_edge_transform_and_lower(
        ep,
        partitioner=[XnnpackPartitioner()],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    for program in (ep, lowered.exported_program()):
        x_node = [n for n in program.graph.nodes if n.op == "placeholder"][-1]
        assert has_free_symbols(x_node.meta["val"].shape), program
    pte = lowered.to_executorch().buffer
    for jit in (False, True):
        method = Runtime.get().load_program(pte, jit=jit).load_method("forward")
        for seed, size in enumerate(SIZES):
            x = torch.randn(size, generator=torch.Generator().manual_seed(seed))
            (got,) = method.execute([x])
            np.testing.assert_allclose(np.asarray(got), model(x).numpy(), atol=1e-5)
