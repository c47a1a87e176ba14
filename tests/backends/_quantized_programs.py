"""Small models quantized by the official tools and exported by the official exporter.

Shared by the quantized kernel-program tests and the quantized XNNPACK runtime
tests: a CNN, an MLP and a patch embedding, quantized with the official ``XNNPACKQuantizer``
(static int8 with per-channel weights; dynamic per-token int8) through
torchao's PT2E flow, or with torchao's ``quantize_`` (int8 dynamic activations
with 4-bit groupwise weights), then exported as a portable program or lowered
with the official ``XnnpackPartitioner``. Exports are cached on disk under a
key that covers this file's source and the package versions.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from tests import official


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 8, 1)
        self.side = nn.Conv2d(8, 8, 1)
        self.head = nn.Conv2d(24, 16, 3, stride=2, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        a = torch.relu(self.conv(x))
        b = self.pw(self.dw(a))
        s = a + b
        m = self.side(a) * b
        c = torch.cat([s, m, torch.nn.functional.hardtanh(b)], dim=1)
        y = self.pool(torch.relu(self.head(c)))
        y = torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y)


class SmallMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 96)
        self.fc2 = nn.Linear(96, 32)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class PatchEmbed(nn.Module):
    """A ViT's stem: patches by a strided convolution, then a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, 32, 4, stride=4)
        self.fc = nn.Linear(32, 16)

    def forward(self, x):
        return self.fc(self.patch(x).flatten(2).transpose(1, 2))


MODELS = {
    "cnn": (SmallCNN, (1, 3, 16, 16)),
    "mlp": (SmallMLP, (4, 64)),
    "patch": (PatchEmbed, (2, 3, 16, 16)),
}

# recipe -> models it applies to
RECIPES = {
    "static": ("cnn", "mlp"),
    "dynamic": ("mlp", "patch"),
    "int4": ("mlp",),
}


@dataclass
class Quantized:
    name: str
    float_model: nn.Module
    graph: nn.Module  # the quantized graph, runnable eagerly
    program: torch.export.ExportedProgram
    inputs: tuple[torch.Tensor, ...]


def inputs_for(model: str, seed: int) -> tuple[torch.Tensor, ...]:
    shape = MODELS[model][1]
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)),)


def _float_model(model: str) -> nn.Module:
    torch.manual_seed(0)
    return MODELS[model][0]().eval()


def quantize(model: str, recipe: str) -> Quantized:
    official.silence_noise()
    m = _float_model(model)
    example = inputs_for(model, 0)
    if recipe == "int4":
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerGroup

        graph = copy.deepcopy(m)
        quantize_(
            graph,
            Int8DynamicActivationIntxWeightConfig(
                weight_dtype=torch.int4, weight_granularity=PerGroup(32)
            ),
        )
    else:
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        config = get_symmetric_quantization_config(
            is_per_channel=True, is_dynamic=recipe == "dynamic"
        )
        quantizer = XNNPACKQuantizer().set_global(config)
        captured = torch.export.export(copy.deepcopy(m), example).module()
        prepared = prepare_pt2e(captured, quantizer)
        for seed in range(4):
            prepared(*inputs_for(model, 100 + seed))
        graph = convert_pt2e(prepared)
    program = torch.export.export(graph, example)
    return Quantized(f"{model}-{recipe}", m, graph, program, example)


def _key(name: str, flavor: str) -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(f"{name}|{flavor}|{official.versions()}".encode())
    return h.hexdigest()[:16]


def official_pte(q: Quantized, flavor: str) -> bytes:
    """The official exporter's ``.pte`` of ``q``: ``portable`` or ``xnnpack``, cached."""
    path = official.cache_dir() / f"quant-{q.name}.{flavor}.{_key(q.name, flavor)}.pte"

    def build() -> bytes:
        import executorch.kernels.quantized  # noqa: F401 - the out variants of quantized ops

        partitioner = official._xnnpack_partitioner() if flavor == "xnnpack" else None
        return official.export_programs({"forward": q.program}, partitioner=partitioner)

    return official.cached_file(path, build)


def official_run(pte: bytes, inputs) -> list[np.ndarray]:
    """The official runtime, with the official quantized kernels registered."""
    official.silence_noise()
    import executorch.kernels.quantized  # noqa: F401 - registers the quantized kernels

    return official.official_run(pte, inputs)
