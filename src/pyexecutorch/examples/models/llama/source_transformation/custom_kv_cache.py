"""A KV cache written through the ``llama::update_cache`` operators (the official
``examples.models.llama.source_transformation.custom_kv_cache.CustomKVCache``).

The caches are ``[batch, max_context_length, heads, head_dim]`` buffers, the layout of
the ``llama::`` operators (sequence second); ``update`` takes keys and values as
attention computes them, ``[batch, heads, seq, head_dim]``, writes them at the first
input position and returns both caches in that layout. Exported, the buffers are
mutable state of the program and the writes become ``llama::update_cache.out`` calls,
which our runtime and the official one both run.
"""

from __future__ import annotations

import torch
from torch import nn

from pyexecutorch.extension.llm import custom_ops  # noqa: F401 - defines torch.ops.llama


class CustomKVCache(nn.Module):
    def __init__(
        self,
        max_batch_size: int,
        max_context_length: int,
        n_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.max_batch_size = max_batch_size
        self.max_context_length = max_context_length
        self.n_heads = n_heads
        self.head_dim = head_dim
        shape = (max_batch_size, max_context_length, n_heads, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype))

    def update(
        self,
        input_pos: torch.Tensor,
        k_val: torch.Tensor,
        v_val: torch.Tensor,
        indices: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k_val``/``v_val`` (``[B, H, S, D]``) from position ``input_pos[0]`` (or
        at the sequence slots ``indices [B, S]``); both caches as ``[B, H, max, D]``."""
        start = input_pos[0].item()
        for value, cache in ((k_val, self.k_cache), (v_val, self.v_cache)):
            rows = value.transpose(1, 2)
            if indices is None:
                torch.ops.llama.update_cache(rows, cache, start)
            else:
                torch.ops.llama.update_cache_with_indices(rows, cache, start, indices)
        return self.k_cache.transpose(1, 2), self.v_cache.transpose(1, 2)
