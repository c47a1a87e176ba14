"""Static int8 graphs whose float islands (a dequantize, float ops, a quantize: the SiLUs
of EfficientNet between quantized convolutions) sit between channels-last convolutions stay
channels-last: the XNNConvert nodes of an island follow their input's layout, so the
payload has no transposes beyond the graph's own NCHW input and output, like the official
exporter's, and the official runtime gives the same outputs on both programs. The official
exporter's program is cached on disk."""

from __future__ import annotations

import copy
import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests import official

official.silence_noise()
import executorch.exir  # noqa: E402, F401 - before ours define the same operators
import executorch.kernels.quantized  # noqa: E402, F401

from pyexecutorch.backends.xnnpack import schema as S  # noqa: E402
from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import (  # noqa: E402
    XnnpackPartitioner,
)
from pyexecutorch.exir import to_edge_transform_and_lower  # noqa: E402
from pyexecutorch.schema.pte import decode_pte  # noqa: E402


class FloatIslands(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = nn.functional.silu(self.stem(x))
        return self.head(nn.functional.silu(self.dw(y)))


@pytest.fixture(scope="module")
def programs():
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from pyexecutorch.backends.xnnpack.quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    torch.manual_seed(0)
    model = FloatIslands().eval()
    x = (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1)),)
    captured = torch.export.export(copy.deepcopy(model), x).module()
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(True))
    prepared = prepare_pt2e(captured, quantizer)
    prepared(*x)
    graph = convert_pt2e(prepared)
    ours = to_edge_transform_and_lower(
        torch.export.export(graph, x), partitioner=[XnnpackPartitioner()]
    ).to_executorch()
    return ours.buffer, _official(graph, x), x


def _official(graph: nn.Module, x: tuple) -> bytes:
    key = hashlib.sha256(Path(__file__).read_bytes())
    key.update(official.versions().encode())
    path = official.cache_dir() / f"quantlayout.{key.hexdigest()[:16]}.pte"

    def build() -> bytes:
        exir = official._exir()
        edge = exir.to_edge_transform_and_lower(
            torch.export.export(graph, x), partitioner=official._xnnpack_partitioner()
        )
        return edge.to_executorch().buffer

    return official.cached_file(path, build)


def _node_types(pte: bytes) -> Counter:
    decoded = decode_pte(pte)
    return Counter(
        type(n.xnode_union).__name__
        for seg in decoded.delegate_segments
        for n in S.decode_payload(seg).graph.xnodes
    )


def test_float_islands_stay_channels_last(programs):
    ours, theirs, _ = programs
    mine, official_types = _node_types(ours), _node_types(theirs)
    assert official_types["XNNStaticTranspose"] == 2  # the NCHW input and output
    assert mine["XNNStaticTranspose"] == official_types["XNNStaticTranspose"]
    assert mine["XNNConvert"] == official_types["XNNConvert"]


def test_official_runtime_gives_the_same_outputs(programs):
    ours, theirs, x = programs
    got = official.official_run(ours, x)
    want = official.official_run(theirs, x)
    np.testing.assert_array_equal(got[0], want[0])
