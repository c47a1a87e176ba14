"""Running ``forward``: prefill a run of tokens, or decode one, returning the next-token
logits. The layout (:class:`ForwardLayout`) says how tokens and positions go in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pyexecutorch.extension.llm.runner.config import now_ms
from pyexecutorch.extension.llm.runner.program import ForwardLayout
from pyexecutorch.jit.numba_env import compile_totals


def _last_logits(value: Any) -> np.ndarray:
    """The last position's logits as float32 ``[vocab]`` from ``[1, vocab]`` or ``[1, seq, vocab]``.

    The runtime returns torch tensors when torch is loaded; those are read through the
    tensor itself (torch is never imported here).
    """
    if hasattr(value, "detach"):
        value = value.detach()[..., -1, :] if value.dim() == 3 else value.detach()
        return value.float().numpy().reshape(-1).copy()
    array = np.asarray(value)
    row = array[0, -1] if array.ndim == 3 else array[0]
    return np.array(row, dtype=np.float32)  # a copy: the method reuses its output memory


class Decoder:
    """Feeds tokens to a loaded ``forward`` method and counts what it fed.

    ``calls`` and ``tokens_fed`` count method calls and the tokens given to them;
    ``execution_ms`` is the time spent in the method, less ``compile_ms``, the time the
    compiled tier spent compiling within those calls. A program without a KV cache
    is given its whole history each call.
    """

    def __init__(self, method: Any, layout: ForwardLayout, max_seq_len: int) -> None:
        self.method = method
        self.layout = layout
        self.chunk = max(1, min(layout.max_chunk, max_seq_len))
        self.calls = 0
        self.tokens_fed = 0
        self.execution_ms = 0.0
        self.compile_ms = 0.0
        self._history: list[int] = []  # only for a program without a KV cache

    def reset(self) -> None:
        self._history = []

    def _run(self, tokens: Sequence[int], start: int) -> np.ndarray:
        layout = self.layout
        inputs = [np.asarray([tokens], dtype=layout.token_dtype)]
        if layout.positions == "start":
            inputs.append(np.asarray([start], dtype=layout.position_dtype))
        elif layout.positions == "range":
            inputs.append(np.arange(start, start + len(tokens), dtype=layout.position_dtype))
        compiled_before = compile_totals["seconds"]
        begin = now_ms()
        outputs = self.method.execute(inputs, clone_outputs=False)
        logits = _last_logits(outputs[0])
        elapsed = now_ms() - begin
        # A plan's first call on the compiled tier may compile it (once: later processes
        # read the disk cache); that time is counted apart from the method's own.
        compiling = (compile_totals["seconds"] - compiled_before) * 1000.0
        self.compile_ms += compiling
        self.execution_ms += elapsed - compiling
        self.calls += 1
        self.tokens_fed += len(tokens)
        return logits

    def prefill(self, tokens: Sequence[int], start: int) -> np.ndarray:
        """Feed ``tokens`` at positions ``start, start + 1, ...``; the logits after the last.

        In calls of up to ``chunk`` tokens (one at a time for a static program)."""
        if not tokens:
            raise ValueError("nothing to prefill: the prompt has no tokens")
        if self.layout.positions == "none":
            self._history = self._history[:start] + list(tokens)
            if len(self._history) > self.layout.max_chunk:
                raise ValueError(
                    f"the sequence has {len(self._history)} tokens, but '{self.method.name}' "
                    f"(no KV cache) takes at most {self.layout.max_chunk}"
                )
            return self._run(self._history, 0)
        logits = None
        for i in range(0, len(tokens), self.chunk):
            logits = self._run(tokens[i : i + self.chunk], start + i)
        return logits

    def step(self, token: int, pos: int) -> np.ndarray:
        """Feed one token at ``pos``; the logits of the next."""
        return self.prefill([token], pos)
