"""Export options, named as in the official ``export_llm`` configuration.

``max_seq_length``, ``max_context_length``, ``use_kv_cache``, ``use_sdpa_with_kv_cache``,
``enable_dynamic_shape``, ``qmode``, ``group_size``, ``embedding_quantize`` and
``metadata`` mean what the official fields of those names mean; ``xnnpack`` is the
official ``backend.xnnpack.enabled``. Our defaults are the common choice for a
phone-sized model: a KV cache through the custom operators, a dynamic sequence
length, XNNPACK.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# Linear-layer quantization modes (official ``quantization.qmode`` values).
QMODES = ("8da4w", "int8")
# Bit widths of ``embedding_quantize`` ("BITS,GROUP_SIZE"; group size 0: per row).
EMBEDDING_BITS = (4, 8)


class ExportLlmConfigError(ValueError):
    """An export option has a value the exporter does not accept."""


@dataclass(frozen=True)
class ExportLlmConfig:
    """How :func:`~pyexecutorch.extension.llm.export.export_llm` builds a program.

    - ``max_seq_length``: the most tokens one ``forward`` call takes (the prefill
      chunk), written as ``get_max_seq_len``.
    - ``max_context_length``: the positions the KV cache holds (``get_max_context_len``);
      ``None``: ``max_seq_length``.
    - ``use_kv_cache``: keep keys and values between calls (``forward(tokens,
      input_pos)``); without it ``forward(tokens)`` recomputes the whole sequence.
    - ``use_sdpa_with_kv_cache``: attend with ``llama::update_cache`` and
      ``llama::custom_sdpa`` rather than ATen operators (ignored without a KV cache).
    - ``enable_dynamic_shape``: ``forward`` takes 1 to ``max_seq_length`` tokens;
      otherwise exactly one per call.
    - ``qmode``: ``None``, ``"8da4w"`` (int8 dynamic activations, int4 weights in
      groups of ``group_size``) or ``"int8"`` (int8 per-channel weights) for the linears.
    - ``embedding_quantize``: ``None``, ``"8,0"``, ``"4,32"``...: ``BITS,GROUP_SIZE``
      weight-only quantization of the embeddings (group size 0: one scale per row).
    - ``xnnpack``: delegate what the XNNPACK backend supports.
    - ``metadata``: constant methods to add or override, as a dict or a JSON string
      (``'{"get_bos_id": 1, "get_eos_ids": [2]}'``).
    - ``seed``: the random weights of a model built from a configuration.
    """

    max_seq_length: int = 128
    max_context_length: int | None = None
    use_kv_cache: bool = True
    use_sdpa_with_kv_cache: bool = True
    enable_dynamic_shape: bool = True
    qmode: str | None = None
    group_size: int = 32
    embedding_quantize: str | None = None
    xnnpack: bool = True
    metadata: dict[str, Any] | str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.max_seq_length, int) or self.max_seq_length < 1:
            raise ExportLlmConfigError(
                f"max_seq_length must be a positive int, got {self.max_seq_length!r}"
            )
        if self.max_context_length is not None and self.max_context_length < self.max_seq_length:
            raise ExportLlmConfigError(
                f"max_context_length ({self.max_context_length}) must be >= max_seq_length "
                f"({self.max_seq_length}): one call's tokens must fit in the KV cache"
            )
        if self.qmode is not None and self.qmode not in QMODES:
            raise ExportLlmConfigError(
                f"unknown qmode {self.qmode!r}; supported: {', '.join(QMODES)} (or None)"
            )
        if not isinstance(self.group_size, int) or self.group_size < 0:
            raise ExportLlmConfigError(f"group_size must be an int >= 0, got {self.group_size!r}")
        if self.embedding_quantize is not None:
            self.embedding_spec()
        if not self.use_kv_cache and not self.enable_dynamic_shape:
            raise ExportLlmConfigError(
                "use_kv_cache=False needs enable_dynamic_shape=True: without a cache each call "
                "takes the whole sequence, whose length varies"
            )
        self.extra_metadata()

    @property
    def context_length(self) -> int:
        """The KV cache's length: ``max_context_length``, else ``max_seq_length``."""
        return self.max_context_length or self.max_seq_length

    @property
    def sdpa_with_kv_cache(self) -> bool:
        """Whether the custom operators are used (they need the KV cache)."""
        return self.use_kv_cache and self.use_sdpa_with_kv_cache

    def embedding_spec(self) -> tuple[int, int] | None:
        """``embedding_quantize`` as ``(bits, group_size)``, or None."""
        if self.embedding_quantize is None:
            return None
        text = str(self.embedding_quantize)
        parts = text.split(",")
        try:
            bits, group = (int(p) for p in parts) if len(parts) == 2 else (None, None)
        except ValueError:
            bits = group = None
        if bits is None or group is None:
            raise ExportLlmConfigError(
                f"embedding_quantize must be 'BITS,GROUP_SIZE' (e.g. '8,0' or '4,32'), got {text!r}"
            )
        if bits not in EMBEDDING_BITS:
            raise ExportLlmConfigError(
                f"embedding_quantize: {bits}-bit embeddings are not supported; bits must be one "
                f"of {', '.join(map(str, EMBEDDING_BITS))}"
            )
        if group < 0:
            raise ExportLlmConfigError(f"embedding_quantize: group size must be >= 0, got {group}")
        return bits, group

    def extra_metadata(self) -> dict[str, Any]:
        """``metadata`` as a dict (parsed from JSON when a string)."""
        if self.metadata is None:
            return {}
        value = self.metadata
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise ExportLlmConfigError(f"metadata is not valid JSON: {e}") from None
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ExportLlmConfigError(
                f"metadata must map method names to values, got {type(value).__name__}"
            )
        return dict(value)
