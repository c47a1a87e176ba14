"""Quantized versions of the architecture cases, for the quantized export tests and
the quantized benchmark.

Recipes:

- ``static``: our ``XNNPACKQuantizer``, int8 per-tensor activations with per-channel
  int8 weights, calibrated on a few random inputs (PT2E through torchao);
- ``dynamic``: our quantizer's dynamic configuration (int8 activations chosen at
  run time, per-channel int8 weights) on the linears;
- ``llm4``: torchao ``quantize_``: 4-bit groupwise weights (groups of 32) with int8
  dynamic activations on the linears, int8 per-row weights on the embeddings.

The official exporter's ``.pte`` of each quantized graph is cached on disk.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tests import official
from tests.architectures import get_arch


@dataclass
class QuantizedCase:
    name: str
    float_model: torch.nn.Module
    graph: torch.nn.Module  # the quantized graph, runnable eagerly
    inputs: tuple[torch.Tensor, ...]
    calibration: list[tuple[torch.Tensor, ...]]
    # Quantized embeddings fused into embedding_byte/4bit (do_quant_fusion_and_const_prop).
    fuse: bool = False

    def program(self) -> torch.export.ExportedProgram:
        """A fresh export (the official exporter changes the program it is given)."""
        return torch.export.export(self.graph, self.inputs)


def _calibration(arch: str, n: int) -> list[tuple[torch.Tensor, ...]]:
    base = get_arch(arch).inputs()
    out = []
    for i in range(n):
        g = torch.Generator().manual_seed(1000 + i)
        x = base[0]
        if x.is_floating_point():
            out.append((torch.randn(x.shape, generator=g),))
        else:
            out.append((torch.randint(0, 128, x.shape, generator=g),))
    return out


def _pt2e(model: torch.nn.Module, inputs, calibration, dynamic: bool) -> torch.nn.Module:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from pyexecutorch.backends.xnnpack.quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)
    captured = torch.export.export(copy.deepcopy(model), inputs).module()
    prepared = prepare_pt2e(captured, XNNPACKQuantizer().set_global(config))
    for x in calibration:
        prepared(*x)
    return convert_pt2e(prepared)


def _llm4(model: torch.nn.Module) -> torch.nn.Module:
    from torchao.quantization import (
        Int8DynamicActivationIntxWeightConfig,
        IntxWeightOnlyConfig,
        quantize_,
    )
    from torchao.quantization.granularity import PerAxis, PerGroup

    q = copy.deepcopy(model)
    quantize_(
        q,
        IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)),
        lambda m, fqn: isinstance(m, torch.nn.Embedding),
    )
    quantize_(
        q,
        Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4, weight_granularity=PerGroup(32)
        ),
    )
    return q


def quantized_case(arch: str, recipe: str) -> QuantizedCase:
    official.silence_noise()
    case = get_arch(arch)
    model = case.make().eval()
    inputs = case.inputs()
    calibration = _calibration(arch, 1)
    if recipe == "llm4":
        graph = _llm4(model)
    else:
        graph = _pt2e(model, inputs, calibration, dynamic=recipe == "dynamic")
    fuse = recipe == "llm4"
    return QuantizedCase(f"{arch}-{recipe}", model, graph, inputs, calibration, fuse)


def _key(q: QuantizedCase, flavor: str) -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(official.__file__).with_name("architectures.py").read_bytes())
    h.update(f"{q.name}|{flavor}|{q.fuse}|{official.versions()}".encode())
    return h.hexdigest()[:16]


def official_build(q: QuantizedCase, flavor: str, verify: bool = False) -> bytes:
    """The official exporter's ``.pte`` (``xnnpack`` or ``portable``), uncached; ``verify``:
    with the exporter's own IR checks (the same bytes: official.edge_compile_config)."""
    import executorch.kernels.quantized  # noqa: F401 - the out variants of quantized ops

    exir = official._exir()
    partitioner = official._xnnpack_partitioner() if flavor == "xnnpack" else None
    edge = exir.to_edge_transform_and_lower(
        q.program(), partitioner=partitioner, compile_config=official.edge_compile_config(verify)
    )
    config = exir.ExecutorchBackendConfig(do_quant_fusion_and_const_prop=q.fuse)
    return edge.to_executorch(config).buffer


def official_pte(q: QuantizedCase, flavor: str) -> bytes:
    """The official exporter's ``.pte`` (``xnnpack`` or ``portable``), cached."""
    path = official.cache_dir() / f"quantarch-{q.name}.{flavor}.{_key(q, flavor)}.pte"
    return official.cached_file(path, lambda: official_build(q, flavor))


def snr_db(reference: np.ndarray, got: np.ndarray) -> float:
    noise = float(np.sum((reference.astype(np.float64) - got) ** 2))
    signal = float(np.sum(reference.astype(np.float64) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(signal / noise)


def top1_agreement(reference: np.ndarray, got: np.ndarray) -> float:
    return float(np.mean(reference.argmax(-1) == got.argmax(-1)))
