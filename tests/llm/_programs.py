"""Tiny Llama-like decoders with a KV cache, exported by our exporter for the runner tests.

``TinyLlama`` is the decoder (RMSNorm, rotary embeddings, SwiGLU, a KV cache held
in registered buffers and written in place); two wrappers give it the two
program layouts the runner reads:

* ``LlamaLayout``: export_llama's ``forward(tokens [1, seq], input_pos [1])``
  returning the last token's logits ``[1, vocab]``;
* ``OptimumLayout``: optimum-executorch's ``forward(input_ids [1, seq],
  cache_position [seq])`` returning every position's logits ``[1, seq, vocab]``.

A ``script`` adds a large logit bonus per position, so greedy decoding writes a
chosen token sequence (multi-byte characters split over tokens, then EOS)
whatever the random weights say; ``banned`` tokens get a large negative bias
(the special tokens, and the tokens that are only part of a UTF-8 character,
which the official runner's Python callback cannot receive).

``make_tokenizer`` trains the byte-level BPE tokenizer the tests use.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

from pyexecutorch.exir import to_edge


@dataclass(frozen=True)
class Config:
    vocab: int = 300
    dim: int = 32
    heads: int = 4
    layers: int = 2
    max_seq_len: int = 64
    hidden: int = 64


BOS_ID = 0  # "<|begin_of_text|>" in the test tokenizer
EOS_ID = 1  # "<|endoftext|>"


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.head_dim = cfg.dim // cfg.heads
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
        shape = (1, cfg.heads, cfg.max_seq_len, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def forward(self, x, positions, cos, sin, mask):  # noqa: ANN001, ANN201
        t = x.shape[1]
        q, k, v = (
            w(x).view(1, t, self.heads, self.head_dim).transpose(1, 2)
            for w in (self.wq, self.wk, self.wv)
        )
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        self.k_cache.index_copy_(2, positions, k)  # the cache is a mutable buffer
        self.v_cache.index_copy_(2, positions, v)
        att = (q @ self.k_cache.transpose(-2, -1)) * (self.head_dim**-0.5)
        att = att.masked_fill(mask.logical_not(), float("-inf"))
        y = torch.softmax(att, dim=-1) @ self.v_cache
        return self.wo(y.transpose(1, 2).reshape(1, t, -1))


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim)
        self.w1 = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w2 = nn.Linear(cfg.hidden, cfg.dim, bias=False)

    def forward(self, x, positions, cos, sin, mask):  # noqa: ANN001, ANN201
        x = x + self.attn(self.attn_norm(x), positions, cos, sin, mask)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class TinyLlama(nn.Module):
    """``decode(tokens [1, seq], positions [seq]) -> logits [1, seq, vocab]``."""

    def __init__(
        self,
        cfg: Config,
        script: tuple[int, Sequence[int]] | None = None,
        banned: Sequence[int] = (),
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim)
        self.output = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        hd = cfg.dim // cfg.heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        angles = torch.outer(torch.arange(cfg.max_seq_len).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos_table", angles.cos())
        self.register_buffer("sin_table", angles.sin())
        self.register_buffer("slots", torch.arange(cfg.max_seq_len))
        # bonus[p]: added to the logits computed at position p (the next token's).
        bonus = torch.zeros(cfg.max_seq_len, cfg.vocab)
        bonus[:, list(banned)] = -100.0
        if script is not None:
            start, ids = script
            for k, token in enumerate(ids):
                bonus[start - 1 + k, token] = 100.0
        self.register_buffer("bonus", bonus)

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        cos, sin = self.cos_table[positions], self.sin_table[positions]
        mask = self.slots.unsqueeze(0) <= positions.unsqueeze(1)  # [seq, max_seq_len]
        for layer in self.layers:
            x = layer(x, positions, cos, sin, mask)
        return self.output(self.norm(x)) + self.bonus[positions]


class LlamaLayout(nn.Module):
    """export_llama: ``forward(tokens [1, seq], input_pos [1]) -> logits [1, vocab]``."""

    def __init__(self, core: TinyLlama) -> None:
        super().__init__()
        self.core = core

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        positions = input_pos + self.core.slots[: tokens.shape[1]]
        return self.core.decode(tokens, positions)[:, -1, :]


class OptimumLayout(nn.Module):
    """optimum-executorch: ``forward(input_ids [1, seq], cache_position [seq])``."""

    def __init__(self, core: TinyLlama) -> None:
        super().__init__()
        self.core = core

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        return self.core.decode(input_ids, cache_position)


class NoCacheLayout(nn.Module):
    """No KV cache to speak of: ``forward(tokens [1, seq]) -> logits [1, seq, vocab]``, the
    whole sequence each call (the cache buffers are rewritten from position 0)."""

    def __init__(self, core: TinyLlama) -> None:
        super().__init__()
        self.core = core

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.core.decode(tokens, self.core.slots[: tokens.shape[1]])


def make_core(seed: int = 0, script=None, banned: Sequence[int] = ()) -> TinyLlama:  # noqa: ANN001
    """The decoder with random weights drawn from ``seed`` (the global RNG is left as it was)."""
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        core = TinyLlama(Config(), script, banned)
        with torch.no_grad():  # larger logits than the default init, so argmax is clear-cut
            core.output.weight.mul_(4.0)
        return core.eval()
    finally:
        torch.random.set_rng_state(state)


def make_model(layout: str, seed: int = 0, script=None, banned: Sequence[int] = ()) -> nn.Module:  # noqa: ANN001
    """``TinyLlama`` in ``layout``: "llama", "optimum" or "nocache"."""
    core = make_core(seed, script, banned)
    wrappers = {"llama": LlamaLayout, "optimum": OptimumLayout, "nocache": NoCacheLayout}
    return wrappers[layout](core).eval()


def constant_methods(dynamic: bool, kv_cache: bool = True) -> dict:
    """The metadata methods export_llama writes."""
    cfg = Config()
    return {
        "get_max_seq_len": cfg.max_seq_len,
        "get_max_context_len": cfg.max_seq_len,
        "get_vocab_size": cfg.vocab,
        "get_n_layers": cfg.layers,
        "get_bos_id": BOS_ID,
        "get_eos_ids": [EOS_ID],
        "use_kv_cache": kv_cache,
        "use_sdpa_with_kv_cache": False,
        "enable_dynamic_shape": dynamic,
    }


def example_inputs(layout: str, seq: int) -> tuple[torch.Tensor, ...]:
    tokens = torch.zeros(1, seq, dtype=torch.int64)
    if layout == "llama":
        return tokens, torch.zeros(1, dtype=torch.int64)
    if layout == "optimum":
        return tokens, torch.arange(seq, dtype=torch.int64)
    return (tokens,)


def export(model: nn.Module, layout: str, dynamic: bool, metadata: bool = True) -> bytes:
    """The ``.pte`` bytes of ``model`` in ``layout``, with a dynamic sequence length or not."""
    args = example_inputs(layout, 2 if dynamic else 1)
    dynamic_shapes = None
    if dynamic:
        seq = Dim("seq", min=1, max=Config().max_seq_len - 1)
        dynamic_shapes = {
            "llama": ({1: seq}, None),
            "optimum": ({1: seq}, {0: seq}),
            "nocache": ({1: seq},),
        }[layout]
    with torch.no_grad():
        ep = torch.export.export(model, args, dynamic_shapes=dynamic_shapes, strict=False)
    methods = constant_methods(dynamic, layout != "nocache") if metadata else None
    return to_edge(ep, constant_methods=methods).to_executorch().buffer


def eager_greedy(
    model: nn.Module, layout: str, prompt: Sequence[int], n: int, dynamic: bool
) -> list[int]:
    """Greedy generation with the eager module, fed as the runner feeds the program: the
    prompt in one call (``dynamic``) or one token per call, then one call per token
    (without a KV cache, the whole sequence every call)."""

    def call(tokens: list[int], pos: int) -> torch.Tensor:
        t = torch.tensor([tokens], dtype=torch.int64)
        if layout == "llama":
            args = (t, torch.tensor([pos], dtype=torch.int64))
        elif layout == "optimum":
            args = (t, torch.arange(pos, pos + len(tokens), dtype=torch.int64))
        else:
            args = (t,)
        return model(*args).reshape(-1, Config().vocab)[-1]

    with torch.no_grad():
        if layout == "nocache":
            seq = list(prompt)
            while len(seq) < len(prompt) + n:
                seq.append(int(call(seq, 0).argmax()))
            return seq[len(prompt) :]
        if dynamic:
            logits = call(list(prompt), 0)
        else:
            for i, token in enumerate(prompt):
                logits = call([token], i)
        out = [int(logits.argmax())]
        pos = len(prompt)
        while len(out) < n:
            logits = call([out[-1]], pos)
            out.append(int(logits.argmax()))
            pos += 1
    return out


# The test tokenizer: a byte-level BPE over words with multi-byte characters.
WORDS = (
    "hello world the cat sat on a mat café naïve über é π 日本 日本語 東京 🙂 🚀 tokens stream text"
).split()


def make_tokenizer(path: Path) -> Path:
    """Train the test tokenizer (vocab 300, BOS and EOS ids 0 and 1) and save it at ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=Config().vocab,
        special_tokens=["<|begin_of_text|>", "<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    assert tok.token_to_id("<|begin_of_text|>") == BOS_ID
    assert tok.token_to_id("<|endoftext|>") == EOS_ID
    tok.save(str(path))
    return path


def partial_tokens(tokenizer_path: Path) -> list[int]:
    """The ids whose bytes are not whole UTF-8 characters on their own."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    return [i for i in range(tok.get_vocab_size()) if "\ufffd" in tok.decode([i])]
