"""Attention over a static KV cache, plugged into Hugging Face models.

Hugging Face attention modules project, normalize and rotate queries and keys
themselves, then call the function ``config._attn_implementation`` names in
``transformers.AttentionInterface`` with ``query [B, H, S, D]``, ``key`` and
``value [B, KVH, S, D]`` (the new tokens) and whatever keyword arguments the
model was called with. The functions here take it from there: they write the new
keys and values into cache buffers held by the attention module
(``[1, max_context_length, KVH, D]``, the layout of the ``llama::`` operators) and
attend over the filled prefix, so the model needs no ``Cache`` object and exports
with its caches as mutable buffers.

Three implementations, by the export options:

- :data:`CUSTOM_OPS` (``use_sdpa_with_kv_cache``): ``llama::update_cache`` and
  ``llama::custom_sdpa``, the official LLM programs' operators;
- :data:`PLAIN` (KV cache without the custom operators): ``index_copy_`` into the
  caches and masked attention over the whole cache, in ATen operators;
- :data:`NO_CACHE`: causal attention over the call's own tokens.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pyexecutorch.extension.llm import custom_ops

CUSTOM_OPS = "pyexecutorch_custom_sdpa"
PLAIN = "pyexecutorch_kv_cache"
NO_CACHE = "pyexecutorch_causal"

# Keyword arguments the program wrapper passes through the model to the attention
# functions: the first position as a symbolic int, and every position as a tensor.
START_POS = "pyexecutorch_start_pos"
POSITIONS = "pyexecutorch_positions"


class KVCache(nn.Module):
    """One layer's key and value caches, ``[1, max_context_length, kv_heads, head_dim]``."""

    def __init__(self, max_context_length: int, kv_heads: int, head_dim: int, dtype: torch.dtype):
        super().__init__()
        shape = (1, max_context_length, kv_heads, head_dim)
        # Not persistent: a cache is state, not a weight of the checkpoint.
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype), persistent=False)


def _cache(module: nn.Module) -> KVCache:
    cache = getattr(module, "kv_cache", None)
    if not isinstance(cache, KVCache):
        raise RuntimeError(
            f"{type(module).__name__} has no KV cache: install_kv_caches() must run first"
        )
    return cache


def _repeat_kv(t: torch.Tensor, reps: int) -> torch.Tensor:
    """``[B, KVH, S, D]`` -> ``[B, KVH * reps, S, D]``, each kv head for its query heads."""
    return t if reps == 1 else t.repeat_interleave(reps, dim=1)


def _masked_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    visible: torch.Tensor,
    scaling: float,
) -> torch.Tensor:
    """Softmax attention where ``visible [S, N]`` marks the keys each query row sees.

    Returns ``[B, S, H, D]``, the layout Hugging Face modules reshape into hidden states.
    """
    reps = query.shape[1] // key.shape[1]
    scores = (query @ _repeat_kv(key, reps).transpose(-2, -1)) * scaling
    scores = scores.masked_fill(visible.logical_not(), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ _repeat_kv(value, reps)
    return out.transpose(1, 2)


def custom_ops_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """``llama::update_cache`` the new keys and values, then ``llama::custom_sdpa``."""
    cache = _cache(module)
    start = kwargs[START_POS]
    torch.ops.llama.update_cache(key.transpose(1, 2), cache.k_cache, start)
    torch.ops.llama.update_cache(value.transpose(1, 2), cache.v_cache, start)
    out = torch.ops.llama.custom_sdpa(
        query.transpose(1, 2), cache.k_cache, cache.v_cache, start, None, 0.0, True, scaling
    )
    return out, None


def plain_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The same computation in ATen operators: ``index_copy_`` and a position mask."""
    cache = _cache(module)
    positions = kwargs[POSITIONS]
    cache.k_cache.index_copy_(1, positions, key.transpose(1, 2))
    cache.v_cache.index_copy_(1, positions, value.transpose(1, 2))
    slots = torch.arange(cache.k_cache.shape[1], device=positions.device)
    visible = slots.unsqueeze(0) <= positions.unsqueeze(1)  # [S, max_context_length]
    keys, values = (c.transpose(1, 2) for c in (cache.k_cache, cache.v_cache))
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return _masked_attention(query, keys, values, visible, scale), None


def causal_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """No cache: each token attends to itself and the call's earlier tokens."""
    rows = torch.arange(query.shape[2], device=query.device)
    visible = rows.unsqueeze(0) <= rows.unsqueeze(1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return _masked_attention(query, key, value, visible, scale), None


IMPLEMENTATIONS = {
    CUSTOM_OPS: custom_ops_attention,
    PLAIN: plain_attention,
    NO_CACHE: causal_attention,
}


def register() -> None:
    """Make the implementations known to ``transformers.AttentionInterface`` (idempotent)."""
    from transformers import AttentionInterface

    custom_ops.define_ops()
    for name, fn in IMPLEMENTATIONS.items():
        AttentionInterface.register(name, fn)


def implementation(use_kv_cache: bool, use_sdpa_with_kv_cache: bool) -> str:
    """The implementation name for the export options."""
    if not use_kv_cache:
        return NO_CACHE
    return CUSTOM_OPS if use_sdpa_with_kv_cache else PLAIN


def install_kv_caches(
    attention_modules: list[nn.Module],
    max_context_length: int,
    kv_heads: int,
    dtype: torch.dtype,
) -> None:
    """Give each attention module a :class:`KVCache` (``module.kv_cache``)."""
    for module in attention_modules:
        module.kv_cache = KVCache(max_context_length, kv_heads, module.head_dim, dtype)
