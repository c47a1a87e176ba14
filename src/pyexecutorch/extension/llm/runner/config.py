"""``GenerationConfig`` (what to generate) and ``Stats`` (how long it took).

Field names and defaults follow the official runner's ``GenerationConfig`` and
``Stats``; ``top_k``, ``top_p`` and ``seed`` are additions of ours.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields


@dataclass(kw_only=True)
class GenerationConfig:
    """How to generate: lengths, sampling and prompt decoration.

    ``max_new_tokens`` and ``seq_len`` of ``-1`` mean "as many as the context
    allows"; ``temperature`` 0 is greedy decoding; ``top_k`` 0 and ``top_p`` 1
    keep every token; ``seed`` None draws a fresh seed each generation.
    """

    echo: bool = True  # the prompt is passed to the token callback first
    max_new_tokens: int = -1
    warming: bool = False  # a warm-up run: nothing streamed, nothing kept in the context
    seq_len: int = -1  # bound on prompt + generated tokens
    temperature: float = 0.8
    num_bos: int = 0  # BOS tokens put before the prompt
    num_eos: int = 0  # EOS tokens put after the prompt
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    def resolve_max_new_tokens(self, max_context_len: int, num_tokens_occupied: int) -> int:
        """How many tokens to generate when ``num_tokens_occupied`` positions of a
        ``max_context_len`` context are taken: bounded by ``seq_len`` and
        ``max_new_tokens`` where they are set, never negative."""
        limit = max_context_len
        if self.seq_len != -1:
            limit = min(self.seq_len, max_context_len)
        room = limit - num_tokens_occupied
        if self.max_new_tokens != -1:
            room = min(room, self.max_new_tokens)
        return max(0, room)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first field out of its range."""
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 keeps every token), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        for name in ("num_bos", "num_eos"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("max_new_tokens", "seq_len"):
            value = getattr(self, name)
            if value < -1:
                raise ValueError(f"{name} must be -1 (auto) or >= 0, got {value}")


def now_ms() -> float:
    """A monotonic clock in milliseconds (fractional: tiny models take well under 1 ms a token)."""
    return time.perf_counter() * 1000.0


def _rate(tokens: int, ms: float) -> float:
    return tokens * 1000.0 / ms if ms > 0 else 0.0


@dataclass
class Stats:
    """Timestamps (ms, monotonic) and counts of one generation, named as the official ``Stats``."""

    SCALING_FACTOR_UNITS_PER_SECOND = 1000  # timestamps are in milliseconds

    model_load_start_ms: float = 0.0
    model_load_end_ms: float = 0.0
    inference_start_ms: float = 0.0
    token_encode_end_ms: float = 0.0
    model_execution_start_ms: float = 0.0
    model_execution_end_ms: float = 0.0
    prompt_eval_end_ms: float = 0.0
    first_token_ms: float = 0.0
    inference_end_ms: float = 0.0
    aggregate_sampling_time_ms: float = 0.0
    aggregate_model_execution_time_ms: float = 0.0
    num_prompt_tokens: int = 0
    num_generated_tokens: int = 0
    # Not in the official Stats: the compiled tier's compilation within each phase (a
    # first run's; later processes read the disk cache), which the rates leave out.
    prefill_compile_ms: float = 0.0
    decode_compile_ms: float = 0.0
    _sampling_start_ms: float = field(default=0.0, repr=False)

    def on_sampling_begin(self) -> None:
        self._sampling_start_ms = now_ms()

    def on_sampling_end(self) -> None:
        self.aggregate_sampling_time_ms += now_ms() - self._sampling_start_ms

    def reset(self, all_stats: bool = False) -> None:
        """Zero everything but the model load times (everything with ``all_stats``)."""
        keep = (self.model_load_start_ms, self.model_load_end_ms)
        for f in fields(self):
            setattr(self, f.name, f.default)
        if not all_stats:
            self.model_load_start_ms, self.model_load_end_ms = keep

    # Rates: prefill over the time from the start of inference to the end of the prompt's
    # evaluation (as the official report), decode over the time after it. The first
    # generated token comes from the prompt's logits, so the decode rate counts the others:
    # one per decode step (the official runner leaves that token out of
    # num_generated_tokens itself; here the count is every token generated).
    def prefill_ms(self) -> float:
        return self.prompt_eval_end_ms - self.inference_start_ms - self.prefill_compile_ms

    def decode_ms(self) -> float:
        return self.inference_end_ms - self.prompt_eval_end_ms - self.decode_compile_ms

    def prefill_tokens_per_second(self) -> float:
        return _rate(self.num_prompt_tokens, self.prefill_ms())

    def decode_tokens_per_second(self) -> float:
        return _rate(max(self.num_generated_tokens - 1, 0), self.decode_ms())

    def tokens_per_second(self) -> tuple[float, float]:
        """``(prefill, decode)`` tokens per second."""
        return self.prefill_tokens_per_second(), self.decode_tokens_per_second()

    def to_dict(self) -> dict[str, float]:
        out = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        out["prefill_tokens_per_second"] = self.prefill_tokens_per_second()
        out["decode_tokens_per_second"] = self.decode_tokens_per_second()
        return out

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict())

    def summary(self) -> str:
        """One line: the token counts and both rates."""
        return (
            f"prefill: {self.num_prompt_tokens} tokens at "
            f"{self.prefill_tokens_per_second():.1f} tokens/s, "
            f"decode: {self.num_generated_tokens} tokens at "
            f"{self.decode_tokens_per_second():.1f} tokens/s" + self._compile_note()
        )

    def _compile_note(self) -> str:
        seconds = (self.prefill_compile_ms + self.decode_compile_ms) / 1000.0
        if not seconds:
            return ""
        return f" (and {seconds:.1f} s compiling, once: later runs read the disk cache)"

    def report(self) -> str:
        """A few lines: load time, prompt evaluation, generation, first token, sampling."""
        load = self.model_load_end_ms - self.model_load_start_ms
        total = self.inference_end_ms - self.inference_start_ms
        first = self.first_token_ms - self.inference_start_ms if self.first_token_ms else 0.0
        return "\n".join(
            [
                f"prompt tokens: {self.num_prompt_tokens}, "
                f"generated tokens: {self.num_generated_tokens}",
                f"model load: {load:.1f} ms",
                f"prompt evaluation: {self.prefill_ms():.1f} ms "
                f"({self.prefill_tokens_per_second():.1f} tokens/s)",
                f"generation: {self.decode_ms():.1f} ms "
                f"({self.decode_tokens_per_second():.1f} tokens/s)",
                f"total inference: {total:.1f} ms, first token after {first:.1f} ms",
                f"sampling: {self.aggregate_sampling_time_ms:.1f} ms, model execution: "
                f"{self.aggregate_model_execution_time_ms:.1f} ms",
            ]
            + (
                [
                    f"compiling (left out of the rates): {self.prefill_compile_ms:.1f} ms in "
                    f"the prompt evaluation, {self.decode_compile_ms:.1f} ms in generation"
                ]
                if self.prefill_compile_ms or self.decode_compile_ms
                else []
            )
        )

    __str__ = report
