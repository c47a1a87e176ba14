"""Weight quantization with torchao ``quantize_``, in the forms our XNNPACK backend lowers.

- ``qmode="8da4w"``: the linears get int4 weights in groups of ``group_size`` (one
  scale per row when 0) and int8 activations quantized per token at run time
  (``Int8DynamicActivationIntxWeightConfig``); a linear whose input size is not a
  multiple of the group size stays float, as in the official recipe.
- ``qmode="int8"``: int8 weights with one scale per output channel, float
  activations: :class:`Int8WeightOnlyLinear` casts the weights at run time and
  scales the product, in ATen operators every runtime has (as the official
  recipe does; torchao's weight-only form needs torchao kernels in the runtime).
- ``embedding_quantize="BITS,GROUP"``: weight-only embeddings, which
  ``to_executorch`` fuses into ``quantized_decomposed::embedding_byte``/``embedding_4bit``.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from pyexecutorch.extension.llm.export.config import ExportLlmConfig


def _granularity(group_size: int):  # noqa: ANN202 - a torchao granularity
    from torchao.quantization.granularity import PerAxis, PerGroup

    return PerAxis(0) if group_size == 0 else PerGroup(group_size)


class Int8WeightOnlyLinear(nn.Module):
    """``linear`` with int8 weights: ``(x @ q.T) * scales + bias``, one scale per output row.

    Symmetric: ``scales = max |w_row| / 127``, ``q = round(w / scales)`` in ``[-127, 127]``.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        scales = w.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / 127
        q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
        self.register_buffer("weight", q)
        self.register_buffer("scales", scales.to(linear.weight.dtype))
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight.to(x.dtype)) * self.scales
        return y if self.bias is None else y + self.bias


def _int8_weight_only(model: nn.Module) -> None:
    """Replace every ``nn.Linear`` of ``model`` with an :class:`Int8WeightOnlyLinear`."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, Int8WeightOnlyLinear(child))


def _untie_output(model: nn.Module) -> None:
    """Give the output projection its own weight when it shares the embedding's.

    The embedding is quantized weight-only and the output linear possibly otherwise;
    a shared tensor cannot be both.
    """
    head = getattr(model, "lm_head", None)
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if isinstance(head, nn.Linear) and embed is not None and head.weight is embed.weight:
        head.weight = nn.Parameter(embed.weight.detach().clone(), requires_grad=False)


def quantize(model: nn.Module, config: ExportLlmConfig) -> None:
    """Quantize ``model`` in place as ``config`` says."""
    # torchao logs each module it skips or replaces; keep the export's output to its stages.
    logger = logging.getLogger("torchao")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        _quantize(model, config)
    finally:
        logger.setLevel(level)


def _quantize(model: nn.Module, config: ExportLlmConfig) -> None:
    spec = config.embedding_spec()
    if spec is None and config.qmode is None:
        return
    from torchao.quantization import (
        Int8DynamicActivationIntxWeightConfig,
        IntxWeightOnlyConfig,
        quantize_,
    )

    _untie_output(model)
    if spec is not None:
        bits, group = spec
        quantize_(
            model,
            IntxWeightOnlyConfig(
                weight_dtype=getattr(torch, f"int{bits}"), granularity=_granularity(group)
            ),
            lambda m, fqn: isinstance(m, nn.Embedding),
        )
    group = config.group_size

    def grouped_linear(m: nn.Module, fqn: str) -> bool:
        return isinstance(m, nn.Linear) and (group == 0 or m.in_features % group == 0)

    if config.qmode == "8da4w":
        quantize_(
            model,
            Int8DynamicActivationIntxWeightConfig(
                weight_dtype=torch.int4, weight_granularity=_granularity(group)
            ),
            grouped_linear,
        )
    elif config.qmode == "int8":
        _int8_weight_only(model)
