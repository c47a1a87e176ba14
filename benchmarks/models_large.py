"""Larger models for the benchmark suite, as ``ModelCase`` entries (see tests/models.py).

- ``mobilenet_like``: MobileNet-v1 layout (a stride-2 stem, 13 depthwise-separable
  blocks with BatchNorm + ReLU6, global pooling, a 1000-way classifier), 224x224, batch 1.
- ``gpt6``: a 6-layer GPT (width 256, 4 heads, vocab 512) over a 64-token sequence.
- ``gpt6_kv``: the same network decoding one token per call with a KV cache held in
  mutable buffers (``calls`` consecutive steps).

These are above the 1 MB weight limit of the unit suite and are not part of CASES.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.models import ModelCase, TinyGPT, _fresh, _perturb_norm_stats, randint, randn  # noqa: E402

# --------------------------------------------------------------------------------------
# MobileNet-like CNN


def _conv_bn(cin, cout, k, stride, groups=1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, padding=k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(),
    )


class MobileNetLike(nn.Module):
    # (output channels, stride) of each depthwise-separable block (MobileNet v1)
    BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)]
    BLOCKS += [(512, 1)] * 5 + [(1024, 2), (1024, 1)]

    def __init__(self, width: float = 1.0, classes: int = 1000):
        super().__init__()
        c = int(32 * width)
        layers = [_conv_bn(3, c, 3, 2)]
        for cout, stride in self.BLOCKS:
            cout = int(cout * width)
            layers += [_conv_bn(c, c, 3, stride, groups=c), _conv_bn(c, cout, 1, 1)]
            c = cout
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(c, classes)
        _perturb_norm_stats(self)

    def forward(self, x):
        return self.classifier(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


# --------------------------------------------------------------------------------------
# GPT with a KV cache (same parameter names as TinyGPT, so weights are shared by seed)


class CachedAttention(nn.Module):
    def __init__(self, d, heads, ctx):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        hd = d // heads
        self.register_buffer("k_cache", torch.zeros(1, heads, ctx, hd))
        self.register_buffer("v_cache", torch.zeros(1, heads, ctx, hd))
        self.register_buffer("pos_ids", torch.arange(ctx))

    def forward(self, x, pos):
        # x: [1, 1, d], pos: [1] int64
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        att = (q @ self.k_cache.transpose(-2, -1)) * (1.0 / (k.shape[-1] ** 0.5))
        att = att.masked_fill(self.pos_ids > pos, float("-inf"))
        y = torch.softmax(att, dim=-1) @ self.v_cache
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class CachedBlock(nn.Module):
    def __init__(self, d, heads, ctx):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CachedAttention(d, heads, ctx)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_out = nn.Linear(4 * d, d)

    def forward(self, x, pos):
        x = x + self.attn(self.ln1(x), pos)
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class CachedGPT(nn.Module):
    def __init__(self, vocab=512, d=256, heads=4, layers=6, ctx=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(CachedBlock(d, heads, ctx) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, pos):
        # idx: [1, 1] int64 token, pos: [1] int64 position
        x = self.tok(idx) + self.pos(pos)
        for b in self.blocks:
            x = b(x, pos)
        return self.head(self.ln_f(x))


GPT = dict(vocab=512, d=256, heads=4, layers=6, ctx=64)
KV_STEPS = 8


def _kv_calls():
    tokens = randint(0, GPT["vocab"], KV_STEPS, seed=5)
    return [(tokens[i].view(1, 1), torch.tensor([i])) for i in range(KV_STEPS)]


LARGE_CASES: list[ModelCase] = [
    ModelCase(
        "mobilenet_like",
        _fresh(MobileNetLike),
        lambda: (randn(1, 3, 224, 224),),
        rtol=1e-3,
        atol=1e-4,
        tags=frozenset({"conv", "benchmark"}),
    ),
    ModelCase(
        "gpt6",
        _fresh(TinyGPT, sdpa=True, **GPT),
        lambda: (randint(0, GPT["vocab"], 1, GPT["ctx"]),),
        rtol=1e-3,
        atol=1e-4,
        tags=frozenset({"transformer", "benchmark"}),
    ),
    ModelCase(
        "gpt6_kv",
        _fresh(CachedGPT, **GPT),
        lambda: _kv_calls()[0],
        calls=KV_STEPS,
        call_inputs=_kv_calls,
        rtol=1e-3,
        atol=1e-4,
        tags=frozenset({"transformer", "stateful", "benchmark"}),
    ),
]

LARGE_CASES_BY_NAME = {c.name: c for c in LARGE_CASES}
