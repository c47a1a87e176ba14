"""The exported ``forward``: a Hugging Face causal LM behind the official LLM program layout.

- With a KV cache: ``forward(tokens [1, seq] int64, input_pos [1] int64) -> logits
  [1, vocab]`` of the last token, the tokens sitting at positions ``input_pos[0]...``
  (export_llama's layout, which the runners read).
- Without: ``forward(tokens [1, seq] int64) -> logits [1, vocab]`` over the whole
  sequence each call.

Plus the constant methods the runners read (:func:`constant_methods`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.export import Dim

from pyexecutorch.extension.llm.export import attention, source
from pyexecutorch.extension.llm.export.config import ExportLlmConfig, ExportLlmConfigError


class CachedCausalLM(nn.Module):
    """``forward(tokens, input_pos) -> logits [1, vocab]`` with static KV caches in buffers."""

    def __init__(self, lm: nn.Module, context_length: int) -> None:
        super().__init__()
        self.lm = lm
        self.context_length = context_length

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        positions = input_pos[0] + torch.arange(seq, device=tokens.device)
        start = input_pos[0].item()
        # Bounds for the symbolic start position: the cache writes stay inside the cache.
        torch._check(start >= 0)
        torch._check(start + seq <= self.context_length)
        out = self.lm(
            input_ids=tokens,
            position_ids=positions.unsqueeze(0),
            use_cache=False,
            logits_to_keep=1,
            **{attention.START_POS: start, attention.POSITIONS: positions},
        )
        return out.logits[:, -1, :]


class UncachedCausalLM(nn.Module):
    """``forward(tokens) -> logits [1, vocab]`` of the last token, no state between calls."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0)
        out = self.lm(input_ids=tokens, position_ids=positions, use_cache=False, logits_to_keep=1)
        return out.logits[:, -1, :]


def _check_window(lm: nn.Module, context_length: int) -> None:
    """A sliding window shorter than the context would change attention: refuse it."""
    config = lm.config
    window = getattr(config, "sliding_window", None)
    if window and getattr(config, "use_sliding_window", True) and window < context_length:
        raise ExportLlmConfigError(
            f"{type(lm).__name__} attends within a sliding window of {window} tokens, shorter "
            f"than the context ({context_length}); use max_context_length <= {window}"
        )


def wrap(lm: nn.Module, config: ExportLlmConfig) -> nn.Module:
    """``lm`` (changed in place) behind the program's ``forward``, attention replaced."""
    context = config.context_length
    _check_window(lm, context)
    attention.register()
    name = attention.implementation(config.use_kv_cache, config.sdpa_with_kv_cache)
    lm.set_attn_implementation(name)
    if lm.config._attn_implementation != name:
        raise source.UnsupportedArchitectureError(
            f"{type(lm).__name__} does not take its attention from transformers' "
            "AttentionInterface, so its attention cannot be replaced"
        )
    if not config.use_kv_cache:
        return UncachedCausalLM(lm).eval()
    dtype = next(lm.parameters()).dtype
    attention.install_kv_caches(source.attention_modules(lm), context, source.kv_heads(lm), dtype)
    return CachedCausalLM(lm, context).eval()


def example_inputs(config: ExportLlmConfig) -> tuple[tuple[torch.Tensor, ...], Any]:
    """``(example inputs, dynamic_shapes)`` for ``torch.export``."""
    # Two tokens when the length is dynamic: torch.export specializes sizes 0 and 1.
    seq = min(2, config.max_seq_length) if config.enable_dynamic_shape else 1
    tokens = torch.zeros(1, seq, dtype=torch.int64)
    dims = None
    if config.enable_dynamic_shape and config.max_seq_length > 1:
        dims = {1: Dim("seq", min=1, max=config.max_seq_length)}
    if not config.use_kv_cache:
        return (tokens,), (None if dims is None else (dims,))
    inputs = (tokens, torch.zeros(1, dtype=torch.int64))
    return inputs, (None if dims is None else (dims, None))


def _token_ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]


def constant_methods(lm: nn.Module, config: ExportLlmConfig) -> dict[str, Any]:
    """The metadata methods export_llama writes, from the model's configuration."""
    hf = lm.config
    methods: dict[str, Any] = {
        "get_max_seq_len": config.max_seq_length,
        "get_max_context_len": config.context_length,
        "get_vocab_size": int(hf.vocab_size),
        "get_n_layers": len(source.decoder_layers(lm)),
        "use_kv_cache": config.use_kv_cache,
        "use_sdpa_with_kv_cache": config.sdpa_with_kv_cache,
        "enable_dynamic_shape": config.enable_dynamic_shape,
    }
    bos = _token_ids(getattr(hf, "bos_token_id", None))
    if bos:
        methods["get_bos_id"] = bos[0]
    eos = _token_ids(getattr(hf, "eos_token_id", None))
    if eos:
        methods["get_eos_ids"] = eos
    methods.update(config.extra_metadata())
    return methods
