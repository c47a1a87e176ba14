"""The torch-free LLM runner (``pyexecutorch.extension.llm.runner``) and ``pyexecutorch
generate``, on tiny Llama-like programs made by our exporter (see ``_programs``)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pyexecutorch.cli.main import main
from pyexecutorch.extension.llm.runner import (
    ContextLengthError,
    GenerationConfig,
    Sampler,
    Stats,
    TextLLMRunner,
    TextStreamer,
    TokenizerError,
    UnsupportedProgramError,
)
from tests.llm import _programs as P

# name -> (layout, dynamic sequence length)
PROGRAMS = {
    "llama_static": ("llama", False),
    "llama_dynamic": ("llama", True),
    "optimum_dynamic": ("optimum", True),
    "nocache_dynamic": ("nocache", True),
}
PROMPT = "hello 日本 café"
GREEDY = GenerationConfig(echo=False, temperature=0.0, max_new_tokens=20, num_bos=1)
SCRIPT_PROMPT = "hello"
SCRIPT_TEXT = " 日本 🙂 café 🚀 naïve"


class Store:
    """The test tokenizer and programs, each built on first use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tokenizer = P.make_tokenizer(root / "tokenizer.json")
        # Special tokens and partial characters never win: the random programs then end
        # only where a test says, and every token is text the official callback can take.
        self.banned = [P.BOS_ID, P.EOS_ID, *P.partial_tokens(self.tokenizer)]
        self._paths: dict[str, Path] = {}

    def hf(self):  # noqa: ANN201
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(self.tokenizer))

    def model(self, name: str):  # noqa: ANN201
        """A fresh eager module of program ``name`` (its KV cache empty)."""
        return P.make_model(PROGRAMS[name][0], banned=self.banned)

    def path(self, name: str) -> Path:
        if name not in self._paths:
            path = self.root / f"{name}.pte"
            if name == "script":
                path.write_bytes(P.export(self.script_model(), "llama", False))
            elif name == "no_metadata":
                path.write_bytes(P.export(self.model("llama_static"), "llama", False, False))
            elif name == "no_forward":
                path.write_bytes(_no_forward_program())
            else:
                layout, dynamic = PROGRAMS[name]
                path.write_bytes(P.export(self.model(name), layout, dynamic))
            self._paths[name] = path
        return self._paths[name]

    def script(self) -> tuple[list[int], list[int]]:
        """The script program's prompt ids and the ids it writes (ending with EOS)."""
        tok = self.hf()
        return tok.encode(SCRIPT_PROMPT).ids, [*tok.encode(SCRIPT_TEXT).ids, P.EOS_ID]

    def script_model(self):  # noqa: ANN201
        prompt, script = self.script()
        return P.make_model("llama", script=(len(prompt), script), banned=self.banned)

    def runner(self, name: str) -> TextLLMRunner:
        return TextLLMRunner(self.path(name), self.tokenizer, jit=False)


def _no_forward_program() -> bytes:
    import torch

    from pyexecutorch.exir import to_edge

    ep = torch.export.export(torch.nn.Linear(4, 4), (torch.randn(1, 4),))
    return to_edge({"decode": ep}).to_executorch().buffer


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    return Store(tmp_path_factory.mktemp("llm"))


def _prompt_ids(store: Store, text: str = PROMPT) -> list[int]:
    return [P.BOS_ID, *store.hf().encode(text).ids]


# --------------------------------------------------------------------------------------
# Generation against torch eager


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_greedy_matches_eager(store, name):
    layout, dynamic = PROGRAMS[name]
    runner = store.runner(name)
    prompt = _prompt_ids(store)
    assert runner.encode(PROMPT, GREEDY) == prompt  # the tokenizers library's ids, after BOS
    tokens = runner.generate(PROMPT, GREEDY)
    expected = P.eager_greedy(store.model(name), layout, prompt, 20, dynamic)
    assert tokens == expected
    # One call for a dynamic prompt, one per token for a static one; then one per token.
    prefill_calls = 1 if dynamic else len(prompt)
    assert runner.decoder.calls == prefill_calls + 19
    assert runner.pos == len(prompt) + 19
    assert runner.context_tokens == prompt + tokens


@pytest.mark.parametrize(
    ("name", "positions", "dynamic", "max_chunk", "rank"),
    [
        ("llama_static", "start", False, 1, 2),
        ("llama_dynamic", "start", True, 63, 2),
        ("optimum_dynamic", "range", True, 63, 3),
        ("nocache_dynamic", "none", True, 63, 3),
    ],
)
def test_layout_and_metadata(store, name, positions, dynamic, max_chunk, rank):
    runner = store.runner(name)
    assert not runner.is_loaded()
    runner.load()
    assert runner.is_loaded()
    layout = runner.decoder.layout
    assert (layout.positions, layout.dynamic, layout.max_chunk, layout.logits_rank) == (
        positions,
        dynamic,
        max_chunk,
        rank,
    )
    meta = runner.metadata
    assert meta.max_seq_len == meta.max_context_len == 64
    assert (meta.bos_id, meta.eos_ids, meta.vocab_size, meta.n_layers) == (0, {1}, 300, 2)
    assert meta.use_kv_cache is (positions != "none")
    assert meta.enable_dynamic_shape is dynamic
    assert meta.found == set(P.constant_methods(dynamic))
    assert runner.get_vocab_size() == 300


def test_metadata_fallbacks(store):
    """Without constant methods: the tokenizer's BOS/EOS, the logits' vocab, 128 positions."""
    runner = store.runner("no_metadata")
    meta = runner.metadata
    assert meta.found == frozenset()
    assert (meta.bos_id, meta.eos_ids, meta.vocab_size) == (0, {1}, 300)
    assert meta.max_seq_len == meta.max_context_len == 128  # the official runner's default
    assert meta.use_kv_cache and not meta.enable_dynamic_shape
    prompt = _prompt_ids(store)
    config = GenerationConfig(echo=False, temperature=0, max_new_tokens=16, num_bos=1)
    expected = P.eager_greedy(store.model("llama_static"), "llama", prompt, 16, False)
    assert runner.generate(PROMPT, config) == expected


# --------------------------------------------------------------------------------------
# Streaming, stopping, lengths


def test_streaming_never_splits_a_character(store):
    prompt, script = store.script()
    tok = store.hf()
    # The script does split characters: some of its tokens are not text on their own.
    assert any("\ufffd" in tok.decode([t]) for t in script)
    runner = store.runner("script")
    pieces: list[str] = []
    tokens = runner.generate(
        SCRIPT_PROMPT, GenerationConfig(echo=False, temperature=0, max_new_tokens=50), pieces.append
    )
    assert tokens == script  # ends at EOS, long before 50 tokens
    assert runner.stats.num_generated_tokens == len(script)
    assert "".join(pieces) == tok.decode(tokens) == SCRIPT_TEXT
    assert all(piece and "\ufffd" not in piece for piece in pieces)
    assert len(pieces) < len(tokens) - 1  # pieces were held back for whole characters
    for piece in pieces:
        assert piece.encode("utf-8").decode("utf-8") == piece


def test_echo_sends_the_prompt_first(store):
    runner = store.runner("script")
    pieces: list[str] = []
    runner.generate(SCRIPT_PROMPT, GenerationConfig(temperature=0), pieces.append)
    assert pieces[0] == SCRIPT_PROMPT
    assert "".join(pieces) == SCRIPT_PROMPT + SCRIPT_TEXT


def test_streamer_holds_back_partial_characters():
    text = "é日本🙂"
    data = text.encode()
    streamer = TextStreamer(lambda i: data[i : i + 1])  # one byte per "token"
    pieces = [streamer.push(i) for i in range(len(data))]
    assert "".join(pieces) + streamer.flush() == text
    assert [p for p in pieces if p] == list(text)
    # Bytes that can never be valid come out as U+FFFD, as a whole decode gives them.
    bad = TextStreamer(lambda i: [b"a", b"\xff", b"\xe6\x97", b"b"][i])
    out = "".join(bad.push(i) for i in range(4)) + bad.flush()
    assert out == b"a\xff\xe6\x97b".decode("utf-8", errors="replace")


def test_max_new_tokens_and_seq_len(store):
    runner = store.runner("llama_static")
    prompt = _prompt_ids(store)
    five = runner.generate(PROMPT, GenerationConfig(echo=False, max_new_tokens=5, num_bos=1))
    assert len(five) == 5
    runner.reset()
    config = GenerationConfig(echo=False, seq_len=len(prompt) + 3, num_bos=1, temperature=0)
    assert len(runner.generate(PROMPT, config)) == 3
    runner.reset()
    # -1: until the context is full (EOS is never chosen by these programs).
    everything = runner.generate(PROMPT, GenerationConfig(echo=False, num_bos=1, temperature=0))
    assert len(everything) == 64 - len(prompt)
    assert everything[:20] == P.eager_greedy(
        store.model("llama_static"), "llama", prompt, 20, False
    )


def test_stop_from_the_callback(store):
    runner = store.runner("llama_dynamic")
    pieces: list[str] = []

    def callback(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 3:
            runner.stop()

    tokens = runner.generate(PROMPT, GREEDY, callback)
    assert len(tokens) == 3 and len(pieces) == 3
    runner.reset()
    assert runner.generate(PROMPT, GREEDY)[:3] == tokens  # stop() does not outlive its generation


def test_prompt_longer_than_the_context(store):
    runner = store.runner("llama_dynamic")
    prompt = "hello world " * 40
    n = len(runner.encode(prompt, GREEDY))
    assert n > 64
    with pytest.raises(ContextLengthError) as info:
        runner.generate(prompt, GREEDY)
    assert isinstance(info.value, ValueError)
    assert f"{n} tokens" in str(info.value) and "holds 64 tokens" in str(info.value)
    assert runner.pos == 0 and runner.decoder.calls == 0  # nothing was fed
    # A prompt that fills the context leaves no position to generate from.
    exact = [P.BOS_ID] * 64
    with pytest.raises(ContextLengthError, match="64 tokens.*free position"):
        runner.generate_from_tokens(exact, GREEDY)
    runner.prefill_tokens(exact)  # but a prefill may fill it
    assert runner.pos == 64
    with pytest.raises(ContextLengthError, match="has 1 token after the 64 already"):
        runner.generate("a", GenerationConfig(temperature=0))


# --------------------------------------------------------------------------------------
# Sampling


def test_seeded_sampling_repeats_and_top_k_1_is_greedy(store):
    runner = store.runner("llama_dynamic")

    def sample(**kw) -> list[int]:
        runner.reset()
        config = GenerationConfig(echo=False, max_new_tokens=20, num_bos=1, **kw)
        return runner.generate(PROMPT, config)

    greedy = sample(temperature=0)
    first = sample(temperature=1.5, seed=7)
    assert sample(temperature=1.5, seed=7) == first
    assert sample(temperature=1.5, seed=8) != first
    assert first != greedy
    assert sample(temperature=1.5, top_k=1, seed=3) == greedy
    assert sample(temperature=1.5, top_p=1e-6, seed=3) == greedy
    top3 = sample(temperature=5.0, top_k=3, seed=1)
    assert top3 != greedy


def test_sampler_distribution():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))
    assert Sampler().sample(logits) == 0
    draws = [Sampler(1.0, seed=s).sample(logits) for s in range(400)]
    assert set(draws) == {0, 1, 2, 3}
    sampler = Sampler(1.0, top_k=2, seed=0)
    assert {sampler.sample(logits) for _ in range(200)} == {0, 1}
    sampler = Sampler(1.0, top_p=0.7, seed=0)  # 0.5 + 0.3 reaches 0.7
    assert {sampler.sample(logits) for _ in range(200)} == {0, 1}
    counts = np.bincount([Sampler(1.0, seed=s).sample(logits) for s in range(2000)], minlength=4)
    np.testing.assert_allclose(counts / 2000, [0.5, 0.3, 0.15, 0.05], atol=0.04)
    for bad in ({"temperature": -1}, {"top_k": -1}, {"top_p": 0.0}, {"top_p": 1.5}):
        with pytest.raises(ValueError):
            Sampler(**bad)
    with pytest.raises(ValueError, match="NaN"):
        Sampler().sample(np.array([0.0, np.nan]))


# --------------------------------------------------------------------------------------
# Conversations


@pytest.mark.parametrize("name", ["llama_static", "llama_dynamic", "optimum_dynamic"])
def test_chat_second_turn_prefills_only_the_new_turn(store, name):
    config = GenerationConfig(echo=False, temperature=0, max_new_tokens=8)
    runner = store.runner(name)
    first = runner.generate(
        PROMPT, GenerationConfig(echo=False, temperature=0, max_new_tokens=8, num_bos=1)
    )
    fed, calls = runner.decoder.tokens_fed, runner.decoder.calls
    second_prompt = store.hf().encode(" 東京 🚀").ids
    second = runner.generate(" 東京 🚀", config)
    # Fed this turn: the first reply's last token (sampled, not yet fed), the new prompt,
    # then every new token but the last.
    assert runner.decoder.tokens_fed - fed == 1 + len(second_prompt) + len(second) - 1
    dynamic = PROGRAMS[name][1]
    prefill_calls = 1 if dynamic else 1 + len(second_prompt)
    assert runner.decoder.calls - calls == prefill_calls + len(second) - 1
    assert runner.stats.num_prompt_tokens == 1 + len(second_prompt)
    # The same as one generation after the whole conversation's tokens.
    whole = [*_prompt_ids(store), *first, *second_prompt]
    fresh = store.runner(name)
    assert fresh.generate_from_tokens(whole, config) == second
    assert runner.context_tokens == [*whole, *second]


def test_prefill_then_generate(store):
    runner = store.runner("llama_dynamic")
    config = GenerationConfig(echo=False, temperature=0, max_new_tokens=10)
    history = runner.prefill(PROMPT, GenerationConfig(num_bos=1))
    assert history == _prompt_ids(store)
    assert runner.pos == len(history) and runner.decoder.calls == 1
    after = runner.generate(" naïve", config)
    fresh = store.runner("llama_dynamic")
    assert fresh.generate_from_tokens(history + store.hf().encode(" naïve").ids, config) == after
    runner.reset()
    assert runner.pos == 0 and runner.context_tokens == []


def test_reset_repeats_and_warming_leaves_no_trace(store):
    runner = store.runner("llama_dynamic")
    first = runner.generate(PROMPT, GREEDY)
    runner.reset()
    assert runner.generate(PROMPT, GREEDY) == first
    runner.reset()
    pieces: list[str] = []
    warm = GenerationConfig(echo=True, temperature=0, max_new_tokens=5, num_bos=1, warming=True)
    assert runner.generate(PROMPT, warm, pieces.append) == first[:5]
    assert pieces == [] and runner.pos == 0
    assert runner.generate(PROMPT, GREEDY) == first


# --------------------------------------------------------------------------------------
# Config, stats, errors


def test_generation_config_matches_the_official():
    ours = GenerationConfig()
    assert (ours.echo, ours.max_new_tokens, ours.warming, ours.seq_len) == (True, -1, False, -1)
    assert (ours.temperature, ours.num_bos, ours.num_eos) == (0.8, 0, 0)
    assert (ours.top_k, ours.top_p, ours.seed) == (0, 1.0, None)
    assert "max_new_tokens=-1" in repr(ours) and "temperature=0.8" in repr(ours)
    try:
        from executorch.extension.llm.runner import GenerationConfig as Official
    except (ImportError, RuntimeError) as e:  # pragma: no cover - the oracle is installed
        pytest.skip(f"official runner not importable: {e}")
    off = Official()
    for name in ("echo", "max_new_tokens", "warming", "seq_len", "num_bos", "num_eos"):
        assert getattr(off, name) == getattr(ours, name), name
    assert off.temperature == pytest.approx(ours.temperature)
    for seq_len in (-1, 0, 50, 512, 2048):
        for max_new in (-1, 0, 7, 200):
            for occupied in (0, 100, 1023, 1024, 1500):
                off.seq_len, off.max_new_tokens = seq_len, max_new
                ours.seq_len, ours.max_new_tokens = seq_len, max_new
                assert ours.resolve_max_new_tokens(1024, occupied) == off.resolve_max_new_tokens(
                    1024, occupied
                ), (seq_len, max_new, occupied)


def test_config_validation(store):
    runner = store.runner("llama_dynamic")
    for bad in ({"temperature": -0.1}, {"top_k": -2}, {"top_p": 0}, {"max_new_tokens": -5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            runner.generate(PROMPT, GenerationConfig(**bad))
    with pytest.raises(ValueError, match="empty"):
        runner.generate("", GenerationConfig())
    with pytest.raises(TypeError, match="str"):
        runner.generate(b"bytes", GenerationConfig())  # type: ignore[arg-type]


def test_stats(store):
    runner = store.runner("llama_dynamic")
    received: list[Stats] = []
    tokens = runner.generate(PROMPT, GREEDY, None, received.append)
    (stats,) = received
    assert stats.num_prompt_tokens == len(_prompt_ids(store))
    assert stats.num_generated_tokens == len(tokens) == 20
    assert stats.SCALING_FACTOR_UNITS_PER_SECOND == 1000
    assert stats.model_load_start_ms <= stats.model_load_end_ms <= stats.inference_start_ms
    assert stats.inference_start_ms <= stats.token_encode_end_ms <= stats.prompt_eval_end_ms
    assert stats.prompt_eval_end_ms <= stats.first_token_ms <= stats.inference_end_ms
    assert (
        0
        < stats.aggregate_model_execution_time_ms
        <= stats.inference_end_ms - stats.inference_start_ms
    )
    assert stats.aggregate_sampling_time_ms > 0
    prefill, decode = stats.tokens_per_second()
    assert prefill > 0 and decode > 0
    assert "tokens/s" in stats.summary() and "prompt evaluation" in str(stats)
    as_json = json.loads(stats.to_json_string())
    assert as_json["num_generated_tokens"] == 20 and "decode_tokens_per_second" in as_json
    stats.reset()
    assert stats.num_generated_tokens == 0 and stats.model_load_end_ms > 0
    stats.reset(all_stats=True)
    assert stats.model_load_end_ms == 0


class _CompilingOnFirstCalls:
    """A loaded method whose first prefill and first decode call compile (0.2 s, with a
    compilation nested inside, as a whole plan compiling its kernels), as a cold compiled
    tier's do."""

    def __init__(self, method):
        self._method = method
        self.compiled_lengths: set[int] = set()

    def __getattr__(self, name):
        return getattr(self._method, name)

    def execute(self, inputs, **kwargs):
        import time

        from pyexecutorch.jit import numba_env

        length = np.asarray(inputs[0]).shape[-1]
        if length not in self.compiled_lengths:
            self.compiled_lengths.add(length)
            with numba_env.compiling("a plan"), numba_env.compiling("a kernel of it"):
                time.sleep(0.2)
        return self._method.execute(inputs, **kwargs)


def test_stats_leave_compilation_out_of_the_rates(store):
    runner = store.runner("llama_dynamic")
    runner.load()
    runner._decoder.method = _CompilingOnFirstCalls(runner._decoder.method)
    received: list[Stats] = []
    runner.generate(PROMPT, GREEDY, None, received.append)
    (stats,) = received
    # once each, not twice for the nested compilation
    assert 200 <= stats.prefill_compile_ms < 390 and 200 <= stats.decode_compile_ms < 390
    assert stats.prefill_ms() == pytest.approx(
        stats.prompt_eval_end_ms - stats.inference_start_ms - stats.prefill_compile_ms
    )
    assert stats.decode_ms() < stats.inference_end_ms - stats.prompt_eval_end_ms - 199
    assert "s compiling, once" in stats.summary() and "left out of the rates" in str(stats)
    runner.reset()
    runner.generate(PROMPT, GREEDY, None, received.append)  # plans compiled: nothing to leave out
    assert received[1].prefill_compile_ms == received[1].decode_compile_ms == 0
    assert "compiling" not in received[1].summary()


def test_errors(store, tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer file not found"):
        TextLLMRunner(store.path("llama_static"), tmp_path / "missing.json")
    with pytest.raises(FileNotFoundError, match="model file not found"):
        TextLLMRunner(tmp_path / "missing.pte", store.tokenizer)
    with pytest.raises(FileNotFoundError, match="data file not found"):
        TextLLMRunner(store.path("llama_static"), store.tokenizer, tmp_path / "missing.ptd")
    garbage = tmp_path / "tokenizer.model"
    garbage.write_bytes(b"\x00not a tokenizer")
    with pytest.raises(TokenizerError, match="tiktoken.*SentencePiece.*llama2.c"):
        TextLLMRunner(store.path("llama_static"), garbage)
    runner = TextLLMRunner(store.path("no_forward"), store.tokenizer)
    with pytest.raises(UnsupportedProgramError, match="no 'forward' method.*decode"):
        runner.load()


# --------------------------------------------------------------------------------------
# Other tokenizer kinds

MIXED = "hello 日本 🙂 ñ"  # "ñ" is not in the training text: SentencePiece falls back to bytes


def _sentencepiece_model(tmp_path: Path) -> Path:
    import random

    import sentencepiece as spm

    rng = random.Random(0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n".join(" ".join(rng.choice(P.WORDS) for _ in range(12)) for _ in range(400))
    )
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=300,
        byte_fallback=True, model_type="bpe", minloglevel=2,
    )  # fmt: skip
    return tmp_path / "sp.model"


def test_sentencepiece_tokenizer(store, tmp_path):
    import sentencepiece as spm

    from pyexecutorch.extension.llm.runner import load_tokenizer

    path = _sentencepiece_model(tmp_path)
    sp = spm.SentencePieceProcessor(model_file=str(path))
    tok = load_tokenizer(path)
    assert tok.kind == "SentencePiece"
    assert (tok.bos_id, tok.eos_id, tok.vocab_size) == (sp.bos_id(), sp.eos_id(), 300)
    ids = sp.encode(MIXED)
    assert any(sp.is_byte(i) for i in ids)
    assert tok.encode(MIXED, 1, 1) == [sp.bos_id(), *ids, sp.eos_id()]
    assert tok.decode([sp.bos_id(), *ids, sp.eos_id()]) == sp.decode(ids) == MIXED
    streamer = TextStreamer(tok.token_bytes)
    pieces = [streamer.push(i) for i in ids] + [streamer.flush()]
    assert "".join(pieces) == " " + MIXED and not any("\ufffd" in p for p in pieces)
    # The runner with it (the programs' vocabulary has the same size).
    runner = TextLLMRunner(store.path("llama_dynamic"), path, jit=False)
    pieces = []
    tokens = runner.generate(MIXED, GREEDY, pieces.append)
    assert len(tokens) == 20
    data = b"".join(runner.tokenizer.token_bytes(t) for t in tokens)
    assert "".join(pieces) == data.decode("utf-8", errors="replace")


def test_tiktoken_tokenizer(tmp_path):
    import base64

    from pyexecutorch.extension.llm.runner import load_tokenizer

    # Every byte alone, then a few merges: characters split over single-byte tokens.
    vocab = [bytes([i]) for i in range(256)] + [b"he", b"ll", b"hell", b"hello"]
    path = tmp_path / "tokenizer.model"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(vocab)))
    tok = load_tokenizer(path)
    assert tok.kind == "tiktoken"
    ids = tok.encode(MIXED, 1, 1)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id and 259 in ids  # "hello"
    assert tok.decode(ids) == MIXED  # the special tokens are left out
    assert tok.token_bytes(0xE6) == b"\xe6"  # a lone lead byte
    streamer = TextStreamer(tok.token_bytes)
    pieces = [streamer.push(i) for i in ids] + [streamer.flush()]
    assert "".join(pieces) == MIXED and not any("\ufffd" in p for p in pieces)


def test_missing_tokenizers_package(store, monkeypatch):
    from pyexecutorch.extension.llm.runner import load_tokenizer

    monkeypatch.setitem(sys.modules, "pytorch_tokenizers", None)
    with pytest.raises(ImportError, match="pytorch-tokenizers"):
        load_tokenizer(store.tokenizer)


# --------------------------------------------------------------------------------------
# Without torch


def test_runner_and_cli_without_torch(store):
    path = store.path("llama_dynamic")
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["torch"] = None  # importing torch now raises ImportError
        from pyexecutorch.extension.llm.runner import TextLLMRunner, GenerationConfig
        from pyexecutorch.cli.main import main
        runner = TextLLMRunner({str(path)!r}, {str(store.tokenizer)!r}, jit=False)
        config = GenerationConfig(echo=False, temperature=0, max_new_tokens=20, num_bos=1)
        tokens = runner.generate({PROMPT!r}, config)
        rc = main(["generate", {str(path)!r}, "--tokenizer", {str(store.tokenizer)!r},
                   "--prompt", "hello", "--max-new-tokens", "4", "--jit", "0"])
        loaded = sorted(m for m, v in sys.modules.items() if v is not None and m.split(".")[0] == "torch")
        print(json.dumps({{"tokens": tokens, "rc": rc, "torch": loaded}}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["rc"] == 0 and report["torch"] == []
    assert report["tokens"] == P.eager_greedy(
        store.model("llama_dynamic"), "llama", _prompt_ids(store), 20, True
    )


# --------------------------------------------------------------------------------------
# The official runner on our programs

OFFICIAL_SCRIPT = """
import json, sys
from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner
tokenizer, prompt, out = sys.argv[1], sys.argv[2], sys.argv[3]
results = {}
for pte in sys.argv[4:]:
    runner = TextLLMRunner(pte, tokenizer)
    pieces, stats = [], []
    config = GenerationConfig(echo=False, temperature=0.0, max_new_tokens=20)
    runner.generate(prompt, config, pieces.append, stats.append)
    results[pte] = {"pieces": pieces, "generated": stats[0].num_generated_tokens,
                    "prompt": stats[0].num_prompt_tokens}
with open(out, "w") as f:
    json.dump(results, f)
"""


def test_official_runner_generates_the_same(store, tmp_path):
    """The official ``TextLLMRunner`` loads our programs and decodes the same greedy text
    (run in a subprocess: it prints to stdout from C++)."""
    pytest.importorskip("executorch")
    paths = [str(store.path(name)) for name in PROGRAMS]
    out = tmp_path / "official.json"
    result = subprocess.run(
        [sys.executable, "-c", OFFICIAL_SCRIPT, str(store.tokenizer), PROMPT, str(out), *paths],
        capture_output=True,
        timeout=300,
    )
    # A failure of the official runner on our programs is a regression of ours: it fails here.
    assert result.returncode == 0, (
        "the official runner failed on our programs: "
        + result.stderr.decode(errors="replace")[-2000:]
    )
    official = json.loads(out.read_text())
    config = GenerationConfig(echo=False, temperature=0, max_new_tokens=20)
    for name, path in zip(PROGRAMS, paths, strict=True):
        runner = store.runner(name)
        pieces: list[str] = []
        tokens = runner.generate(PROMPT, config, pieces.append)
        theirs = official[path]
        assert theirs["prompt"] == runner.stats.num_prompt_tokens, name
        # Every token here is whole text, so each is one piece on both sides.
        assert theirs["pieces"] == pieces == [runner.tokenizer.decode([t]) for t in tokens], name
        # The official count leaves out the token sampled from the prompt's logits.
        assert theirs["generated"] == len(tokens) - 1, name


# --------------------------------------------------------------------------------------
# pyexecutorch generate


def _cli(capsys, *args: object) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main([str(a) for a in args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_cli_generate(store, capsys):
    path = store.path("llama_dynamic")
    rc, out, err = _cli(
        capsys, "generate", path, "--tokenizer", store.tokenizer, "--prompt", PROMPT,
        "--max-new-tokens", "12", "--temperature", "0", "--bos", "1", "--jit", "0",
    )  # fmt: skip
    assert rc == 0, err
    runner = store.runner("llama_dynamic")
    tokens = runner.generate(
        PROMPT, GenerationConfig(echo=False, temperature=0, max_new_tokens=12, num_bos=1)
    )
    assert out == PROMPT + runner.tokenizer.decode(tokens) + "\n"
    (line,) = [ln for ln in err.splitlines() if "tokens/s" in ln]
    assert line.startswith(f"prefill: {len(_prompt_ids(store))} tokens at ")
    assert "decode: 12 tokens at" in line
    # Sampling options are accepted and repeat with a seed.
    args = ["generate", path, "--tokenizer", store.tokenizer, "--prompt", PROMPT, "--no-echo",
            "--max-new-tokens", "8", "--temperature", "1.2", "--top-k", "20", "--top-p", "0.9",
            "--seed", "5", "--jit", "0"]  # fmt: skip
    first = _cli(capsys, *args)
    assert first[0] == 0 and first[1] == _cli(capsys, *args)[1]
    assert not first[1].startswith(PROMPT)


def test_cli_chat(store, capsys, monkeypatch):
    path = store.path("llama_dynamic")
    monkeypatch.setattr(sys, "stdin", io.StringIO(" 東京\n\n naïve 🚀\n"))
    rc, out, err = _cli(
        capsys, "generate", path, "--tokenizer", store.tokenizer, "--prompt", PROMPT, "--chat",
        "--max-new-tokens", "6", "--temperature", "0", "--bos", "1", "--jit", "0",
    )  # fmt: skip
    assert rc == 0, err
    runner = store.runner("llama_dynamic")
    config = GenerationConfig(echo=False, temperature=0, max_new_tokens=6)
    replies = []
    for i, turn in enumerate([PROMPT, " 東京", " naïve 🚀"]):
        config.num_bos = 1 if i == 0 else 0
        replies.append(runner.tokenizer.decode(runner.generate(turn, config)))
    assert out == "".join(r + "\n" for r in replies)
    lines = [ln for ln in err.splitlines() if "tokens/s" in ln]
    assert len(lines) == 3
    # The later turns prefill only their own tokens (plus the previous reply's last).
    second = len(store.hf().encode(" 東京").ids) + 1
    assert lines[1].startswith(f"prefill: {second} tokens")


def test_cli_errors(store, capsys, tmp_path):
    path = store.path("llama_dynamic")
    rc, _, err = _cli(
        capsys, "generate", path, "--tokenizer", tmp_path / "none.json", "--prompt", "x"
    )
    assert rc == 1 and "tokenizer file not found" in err
    rc, _, err = _cli(capsys, "generate", path, "--tokenizer", store.tokenizer)
    assert rc == 2 and "--prompt is required" in err
    rc, _, err = _cli(
        capsys, "generate", path, "--tokenizer", store.tokenizer, "--prompt", "hello world " * 40
    )
    assert rc == 1 and "holds 64 tokens" in err
    rc, _, err = _cli(
        capsys, "generate", path, "--tokenizer", store.tokenizer, "--prompt", "x", "--top-p", "2"
    )
    assert rc == 1 and "top_p" in err
