"""A small GPT-style language model with a KV cache, for the demo.

One call decodes one token: ``forward(token, pos)`` takes the token id as a
``[1, 1]`` int64 tensor and its position as a ``[1]`` int64 tensor, appends the
token's keys and values to the caches (registered buffers, updated in place with
``index_copy_`` and slice assignment), attends over positions ``<= pos`` and
returns the next-token logits ``[1, vocab]``. The weights are random with a fixed
seed, so every build of the model is the same.

    pyexecutorch export pyexecutorch.examples.gpt:make_model --inputs 1x1:int64,1:int64 -o gpt.pte
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 256
    dim: int = 64
    heads: int = 4
    layers: int = 2
    ctx: int = 64


class CachedSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.head_dim = cfg.dim // cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        shape = (1, cfg.heads, cfg.ctx, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))
        self.register_buffer("positions", torch.arange(cfg.ctx))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape  # [1, 1, dim]
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, self.head_dim).transpose(1, 2) for y in (q, k, v))
        self.k_cache.index_copy_(2, pos, k)  # the cache is a mutable buffer
        self.v_cache[:, :, pos] = v
        att = (q @ self.k_cache.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        att = att.masked_fill(self.positions > pos, float("-inf"))
        y = torch.softmax(att, dim=-1) @ self.v_cache
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.dim)
        self.attn = CachedSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.dim)
        self.fc = nn.Linear(cfg.dim, 4 * cfg.dim)
        self.fc_out = nn.Linear(4 * cfg.dim, cfg.dim)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), pos)
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class KVCacheGPT(nn.Module):
    """``forward(token [1, 1] int64, pos [1] int64) -> logits [1, vocab]``."""

    def __init__(self, cfg: GPTConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or GPTConfig()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.ctx, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = self.tok(token) + self.pos(pos)
        for block in self.blocks:
            x = block(x, pos)
        return self.head(self.ln_f(x))[:, -1, :]

    def example_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(1, 1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)


def make_model(seed: int = 0, **config: int) -> KVCacheGPT:
    """The example model with random weights drawn from ``seed``, in eval mode."""
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return KVCacheGPT(GPTConfig(**config)).eval()
    finally:
        torch.random.set_rng_state(generator_state)


def eager_step(model: KVCacheGPT):
    """A step function ``(token, pos) -> logits`` (numpy) over the eager model."""

    def step(token: int, pos: int):
        with torch.no_grad():
            logits = model(torch.tensor([[token]]), torch.tensor([pos]))
        return logits[0].numpy()

    return step
