"""The demo's text model: a small random-weight Llama and a tokenizer trained on the spot.

``make_tokenizer(path)`` trains a byte-level BPE (``tokenizers``) on a fixed built-in
corpus and saves its ``tokenizer.json``; ``make_llama(seed)`` builds a Hugging Face
``LlamaForCausalLM`` with random weights sized for a quick export; ``eager_text``
greedy-decodes a prompt with Hugging Face ``generate``, the oracle the demo holds the
exported program's text against. Needs ``transformers`` (imports torch).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

VOCAB = 1024
BOS_ID, EOS_ID = 0, 1
MAX_SEQ = 128
PROMPT = "the quick brown fox"
# Small enough to export in seconds, large enough that decoding is real work.
LLAMA = dict(
    hidden_size=256,
    intermediate_size=704,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    vocab_size=VOCAB,
    max_position_embeddings=MAX_SEQ,
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
    pad_token_id=EOS_ID,
)
_WORDS = (
    "the quick brown fox jumps over lazy dog a cat sat on mat while birds sing in "
    "tall green trees and rivers run to wide blue seas under bright warm sun"
).split()


def make_tokenizer(path: Path) -> Path:
    """Train the demo's tokenizer (``VOCAB`` ids; BOS ``<s>`` 0, EOS ``</s>`` 1) into ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415

    rng = random.Random(0)
    # Invented words beside the real ones, so BPE has enough to merge into VOCAB ids.
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = _WORDS + [
        "".join(rng.choice(letters) for _ in range(rng.randint(3, 8))) for _ in range(900)
    ]
    corpus = [" ".join(rng.choice(words) for _ in range(16)) for _ in range(1500)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<s>", "</s>"], show_progress=False
    )
    tokenizer.train_from_iterator(corpus, trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path


def make_llama(seed: int = 0) -> Any:
    """A ``LlamaForCausalLM`` with random weights drawn from ``seed`` (eval mode)."""
    import torch  # noqa: PLC0415
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(LlamaConfig(**LLAMA)).eval()


def eager_text(model: Any, tokenizer_path: Path, prompt: str, n: int) -> str:
    """The text Hugging Face greedy ``generate`` writes after ``prompt`` (``n`` tokens
    at most, ending early at EOS), decoded as the runner decodes it."""
    import torch  # noqa: PLC0415
    from tokenizers import Tokenizer  # noqa: PLC0415

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    ids = tokenizer.encode(prompt).ids
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=EOS_ID
        )
    new = [t for t in out[0, len(ids) :].tolist() if t != EOS_ID]
    return tokenizer.decode(new, skip_special_tokens=True)
