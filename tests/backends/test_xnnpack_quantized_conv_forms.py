"""Quantized convolutions the XNNPACK delegate took only in float before: transposed ones
(static int8 with per-tensor or per-output-channel weights, and dynamically quantized
activations), per-tensor int8 weights on direct and depthwise convolutions, and the zero
padding of an even kernel's 'same' convolution run on the int8 values.

Each model is quantized by our XNNPACKQuantizer and lowered whole by our partitioner
(one delegate, the node type the official delegate writes); both tiers of our runtime
then match the official runtime bit for bit on the same .pte over three inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from pyexecutorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType
from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from pyexecutorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)
from pyexecutorch.backends.xnnpack.schema import decode_payload
from pyexecutorch.exir import to_edge_transform_and_lower
from pyexecutorch.exir.backend import get_lowered_backend_modules
from pyexecutorch.runtime import Runtime
from tests import official


class ConvRelu(torch.nn.Module):
    def __init__(self, conv: torch.nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def _tconv(**kw) -> torch.nn.Module:
    return torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, **kw)


# name -> (model, per-channel weights, dynamic activations, the convolution's node type)
CASES = {
    "transposed_per_tensor": (lambda: _tconv(output_padding=1), False, False, "ConvTranspose2d"),
    "transposed_per_channel_relu": (lambda: ConvRelu(_tconv()), True, False, "ConvTranspose2d"),
    # one output channel: the weight quantized along axis 1 folds to dim order [1, 0, 2, 3]
    "transposed_per_channel_one_output": (
        lambda: torch.nn.ConvTranspose2d(3, 1, 3, stride=2, padding=1),
        True,
        False,
        "ConvTranspose2d",
    ),
    "transposed_dynamic": (lambda: _tconv(output_padding=(0, 1)), True, True, "ConvTranspose2d"),
    "direct_per_tensor_relu": (
        lambda: ConvRelu(torch.nn.Conv2d(3, 5, 3, padding=1)),
        False,
        False,
        "Conv2d",
    ),
    "depthwise_per_tensor": (
        lambda: torch.nn.Conv2d(3, 6, 3, stride=2, padding=1, groups=3),
        False,
        False,
        "DepthwiseConv2d",
    ),
    "direct_dynamic_bias": (lambda: torch.nn.Conv2d(3, 5, 3, padding=1), True, True, "Conv2d"),
    # an even kernel's 'same' padding: a constant_pad_nd before the convolution, run on int8
    "depthwise_even_same_padding": (
        lambda: torch.nn.Conv2d(3, 3, 4, padding="same", groups=3),
        True,
        False,
        "DepthwiseConv2d",
    ),
}


def _lowered(name: str) -> tuple[bytes, torch.Tensor, list[str]]:
    """The program, its example input and the delegate's node types."""
    make, per_channel, dynamic, _ = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(1, 3, 6, 6)
    graph = torch.export.export(model, (x,)).module()
    config = get_symmetric_quantization_config(is_per_channel=per_channel, is_dynamic=dynamic)
    prepared = prepare_pt2e(graph, XNNPACKQuantizer().set_global(config))
    prepared(x)
    quantized = convert_pt2e(prepared)
    precision = ConfigPrecisionType.DYNAMIC_QUANT if dynamic else ConfigPrecisionType.STATIC_QUANT
    partitioner = XnnpackPartitioner(config_precisions=precision)
    edge = to_edge_transform_and_lower(
        torch.export.export(quantized, (x,)), partitioner=[partitioner]
    )
    gm = edge.exported_program().graph_module
    code = gm.code
    assert code.count("executorch_call_delegate(") == 1, code
    assert "convolution" not in code and "constant_pad" not in code, code
    (lowered,) = get_lowered_backend_modules(gm)
    graph = decode_payload(lowered.processed_bytes).graph
    kinds = [type(n.xnode_union).__name__ for n in graph.xnodes]
    return bytes(edge.to_executorch().buffer), x, kinds


@pytest.mark.parametrize("name", sorted(CASES))
def test_quantized_convolution_matches_official_runtime(name):
    pte, x, kinds = _lowered(name)
    assert f"XNN{CASES[name][3]}" in kinds
    assert ("XNNStaticConstantPad" in kinds) == ("same" in name)
    methods = [
        Runtime.get().load_program(pte, jit=jit).load_method("forward") for jit in (False, True)
    ]
    for scale in (1.0, 4.0, 0.25):  # within, past and inside the calibrated range
        xi = x * scale + 0.1 * torch.randn(x.shape)
        theirs = np.asarray(official.official_run(pte, [xi])[0])
        for method in methods:
            (got,) = method.execute([xi.numpy()])
            np.testing.assert_array_equal(np.asarray(got), theirs)
