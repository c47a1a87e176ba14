"""``TextLLMRunner``: generate text from a ``.pte`` text decoder, the official runner's
API on our runtime (numpy, no torch).

    runner = TextLLMRunner("llama.pte", "tokenizer.json")
    runner.generate("Once upon a time", GenerationConfig(max_new_tokens=32),
                    token_callback=lambda piece: print(piece, end=""))

The runner keeps the conversation: the KV cache holds every token fed so far, and
the next ``generate`` or ``prefill`` only feeds its new tokens (after the last
token of the previous reply, which was sampled but not yet fed). ``reset()``
starts over.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyexecutorch.extension.llm.runner.config import GenerationConfig, Stats, now_ms
from pyexecutorch.extension.llm.runner.decoder import Decoder
from pyexecutorch.extension.llm.runner.errors import ContextLengthError
from pyexecutorch.extension.llm.runner.program import (
    FORWARD,
    ModelMetadata,
    read_constants,
    read_layout,
    read_metadata,
)
from pyexecutorch.extension.llm.runner.sampling import Sampler
from pyexecutorch.extension.llm.runner.streaming import TextStreamer
from pyexecutorch.extension.llm.runner.tokenizer import Tokenizer, load_tokenizer

TokenCallback = Callable[[str], None]
StatsCallback = Callable[[Stats], None]


def _existing(path: str | os.PathLike[str], what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    return str(p)


class TextLLMRunner:
    """Text generation with a ``.pte`` decoder and a tokenizer file.

    ``data_path``: a ``.ptd`` holding the program's external weights. ``jit`` and
    ``threads`` go to :meth:`pyexecutorch.runtime.Runtime.load_program`.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        tokenizer_path: str | os.PathLike[str],
        data_path: str | os.PathLike[str] | None = None,
        *,
        jit: bool | None = None,
        threads: int | None = None,
    ) -> None:
        self.model_path = _existing(model_path, "model file")
        self.data_path = None if data_path is None else _existing(data_path, "data file")
        self.tokenizer: Tokenizer = load_tokenizer(tokenizer_path)
        self._load_options = {"jit": jit, "threads": threads}
        self._decoder: Decoder | None = None
        self._metadata: ModelMetadata | None = None
        self._stop = threading.Event()
        self.stats = Stats()
        self._context: list[int] = []  # the tokens in the KV cache, in position order
        self._pending: int | None = None  # the last sampled token, not yet fed

    # ----------------------------------------------------------------------------------
    # Loading

    def load(self) -> None:
        """Load the program, read its metadata and load ``forward`` (once)."""
        if self._decoder is not None:
            return
        from pyexecutorch.runtime import Runtime  # noqa: PLC0415 - the runtime loads on demand

        self.stats.model_load_start_ms = now_ms()
        data_files = [self.data_path] if self.data_path else []
        program = Runtime.get().load_program(
            self.model_path, data_files=data_files, **self._load_options
        )
        constants = read_constants(program)
        layout = read_layout(program, constants)
        method = program.load_method(FORWARD)
        vocab = method.metadata.output_tensor_meta(0).sizes()[-1]
        self._metadata = read_metadata(constants, layout, self.tokenizer, vocab)
        self._decoder = Decoder(method, layout, self._metadata.max_seq_len)
        self.stats.model_load_end_ms = now_ms()

    def is_loaded(self) -> bool:
        return self._decoder is not None

    @property
    def metadata(self) -> ModelMetadata:
        self.load()
        return self._metadata

    @property
    def decoder(self) -> Decoder:
        """The method driver (its ``calls`` and ``tokens_fed`` count the work done)."""
        self.load()
        return self._decoder

    def get_vocab_size(self) -> int:
        return self.metadata.vocab_size

    # ----------------------------------------------------------------------------------
    # The conversation

    @property
    def pos(self) -> int:
        """How many positions of the context are taken."""
        return len(self._context)

    @property
    def context_tokens(self) -> list[int]:
        """The tokens fed so far, then the last sampled one if it is still to be fed."""
        return self._context + ([self._pending] if self._pending is not None else [])

    def reset(self) -> None:
        """Forget the conversation: the next prompt starts at position 0."""
        self._context = []
        self._pending = None
        if self._decoder is not None:
            self._decoder.reset()
        self.stats.reset()

    def stop(self) -> None:
        """Stop the generation in progress after its current token (e.g. from a callback)."""
        self._stop.set()

    def encode(self, prompt: str, config: GenerationConfig | None = None) -> list[int]:
        """The prompt's token ids with ``config``'s BOS and EOS tokens."""
        config = config or GenerationConfig()
        return self.tokenizer.encode(
            prompt, config.num_bos, config.num_eos, bos_id=self.metadata.bos_id
        )

    def _to_feed(self, tokens: Sequence[int], generating: bool) -> list[int]:
        """The pending token and ``tokens``, checked to fit in the context."""
        feed = ([self._pending] if self._pending is not None else []) + [int(t) for t in tokens]
        if not feed:
            raise ValueError("the prompt is empty: there is nothing to prefill")
        limit = self.metadata.max_context_len
        if self.pos + len(feed) > limit - (1 if generating else 0):
            raise ContextLengthError(len(feed), self.pos, limit, generating)
        return feed

    def _feed(self, feed: list[int]) -> Any:
        """Prefill ``feed`` (from :meth:`_to_feed`); the logits after its last token."""
        logits = self.decoder.prefill(feed, self.pos)
        self._context.extend(feed)
        self._pending = None
        self.stats.num_prompt_tokens = len(feed)
        return logits

    def prefill(self, prompt: str, config: GenerationConfig | None = None) -> list[int]:
        """Feed ``prompt`` to the model without generating (a chat history, a system
        prompt); returns its token ids."""
        tokens = self.encode(prompt, config)
        self.prefill_tokens(tokens)
        return tokens

    def prefill_tokens(self, tokens: Sequence[int]) -> None:
        """Feed token ids to the model without generating."""
        self._feed(self._to_feed(tokens, generating=False))

    # ----------------------------------------------------------------------------------
    # Generation

    def generate(
        self,
        prompt: str,
        config: GenerationConfig | None = None,
        token_callback: TokenCallback | None = None,
        stats_callback: StatsCallback | None = None,
    ) -> list[int]:
        """Generate after ``prompt``; each piece of text goes to ``token_callback`` as it
        is made, the :class:`Stats` to ``stats_callback`` at the end. Returns the
        generated token ids (the last may be an EOS id)."""
        config = config or GenerationConfig()
        self.load()  # before the clock starts: loading is not inference
        start = now_ms()
        tokens = self.encode(prompt, config)
        return self._generate(tokens, prompt, config, token_callback, stats_callback, start)

    def generate_from_tokens(
        self,
        tokens: Sequence[int],
        config: GenerationConfig | None = None,
        token_callback: TokenCallback | None = None,
        stats_callback: StatsCallback | None = None,
    ) -> list[int]:
        """:meth:`generate` after prompt token ids (echoed as their text)."""
        config = config or GenerationConfig()
        self.load()
        start = now_ms()
        text = self.tokenizer.decode(list(tokens)) if config.echo else ""
        return self._generate(tokens, text, config, token_callback, stats_callback, start)

    def generate_text(self, prompt: str, config: GenerationConfig | None = None) -> str:
        """:meth:`generate`, returning the text the callback would have received."""
        pieces: list[str] = []
        self.generate(prompt, config, pieces.append)
        return "".join(pieces)

    def _generate(
        self,
        tokens: Sequence[int],
        echo_text: str,
        config: GenerationConfig,
        token_callback: TokenCallback | None,
        stats_callback: StatsCallback | None,
        start_ms: float,
    ) -> list[int]:
        config.validate()
        self.load()
        self._stop.clear()
        saved = (list(self._context), self._pending)
        stats = self.stats
        stats.reset()
        stats.inference_start_ms = start_ms
        stats.token_encode_end_ms = now_ms()
        emit = None if config.warming else token_callback
        exec_before = self._decoder.execution_ms
        compile_before = self._decoder.compile_ms
        feed = self._to_feed(tokens, generating=True)
        if emit is not None and config.echo and echo_text:
            emit(echo_text)  # before the prefill, which may take a while
        stats.model_execution_start_ms = now_ms()
        logits = self._feed(feed)
        stats.prompt_eval_end_ms = now_ms()
        stats.prefill_compile_ms = self._decoder.compile_ms - compile_before
        generated: list[int] = []
        try:
            self._decode(logits, config, emit, generated)
        finally:
            self._pending = generated[-1] if generated else None
            stats.model_execution_end_ms = now_ms()
            stats.inference_end_ms = now_ms()
            stats.num_generated_tokens = len(generated)
            stats.aggregate_model_execution_time_ms = self._decoder.execution_ms - exec_before
            stats.decode_compile_ms = (
                self._decoder.compile_ms - compile_before - stats.prefill_compile_ms
            )
            if config.warming:  # a warm-up leaves the conversation as it was
                self._context, self._pending = saved
        if stats_callback is not None and not config.warming:
            stats_callback(dataclasses.replace(stats))
        return generated

    def _decode(
        self,
        logits: Any,
        config: GenerationConfig,
        emit: TokenCallback | None,
        generated: list[int],
    ) -> None:
        """Sample, stream and feed tokens until EOS, the token budget, the context's end
        or :meth:`stop`; ``generated`` receives each token as it is sampled."""
        stats = self.stats
        metadata = self._metadata
        budget = config.resolve_max_new_tokens(metadata.max_context_len, self.pos)
        sampler = Sampler(config.temperature, config.top_k, config.top_p, config.seed)
        streamer = TextStreamer(self.tokenizer.token_bytes)
        while len(generated) < budget:
            stats.on_sampling_begin()
            token = sampler.sample(logits)
            stats.on_sampling_end()
            generated.append(token)
            if len(generated) == 1:
                stats.first_token_ms = now_ms()
            if token in metadata.eos_ids:
                break  # the EOS token ends the reply; its text is not streamed
            piece = streamer.push(token)
            if piece and emit is not None:
                emit(piece)
            if (
                self._stop.is_set()
                or len(generated) == budget
                or self.pos >= metadata.max_context_len
            ):
                break
            logits = self._decoder.step(token, self.pos)
            self._context.append(token)
        rest = streamer.flush()
        if rest and emit is not None:
            emit(rest)

    def __repr__(self) -> str:
        state = f"pos={self.pos}" if self.is_loaded() else "not loaded"
        return (
            f"TextLLMRunner(model={self.model_path!r}, tokenizer={self.tokenizer.path!r}, {state})"
        )
