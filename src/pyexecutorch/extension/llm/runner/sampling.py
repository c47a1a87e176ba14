"""Choosing the next token from logits, in numpy: greedy, temperature, top-k, top-p."""

from __future__ import annotations

import numpy as np


class Sampler:
    """``sample(logits)`` returns a token id.

    ``temperature`` 0 (or ``top_k`` 1) is greedy argmax; otherwise the logits are
    divided by the temperature, cut to the ``top_k`` largest (0: all), then to the
    smallest set whose probability reaches ``top_p`` (1: all), and a token is drawn
    from what is left with a ``numpy.random.Generator`` seeded by ``seed``.
    """

    def __init__(
        self,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> None:
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        self.temperature = float(temperature)
        self.top_k = int(top_k)
        self.top_p = float(top_p)
        self.rng = np.random.default_rng(seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    def sample(self, logits: np.ndarray) -> int:
        logits = np.asarray(logits).reshape(-1)
        if logits.size == 0:
            raise ValueError("cannot sample from empty logits")
        if np.isnan(logits).any():
            raise ValueError("the model's logits contain NaN")
        if self.greedy:
            return int(np.argmax(logits))
        return self._draw(logits.astype(np.float64) / self.temperature)

    def _draw(self, scores: np.ndarray) -> int:
        ids = np.arange(scores.size)
        if 0 < self.top_k < scores.size:
            ids = np.argpartition(-scores, self.top_k - 1)[: self.top_k]
        # Sorted from most to least likely: top-p keeps a prefix of this order.
        ids = ids[np.argsort(-scores[ids], kind="stable")]
        probs = np.exp(scores[ids] - scores[ids[0]])
        probs /= probs.sum()
        if self.top_p < 1:
            keep = int(np.searchsorted(np.cumsum(probs), self.top_p)) + 1
            ids, probs = ids[:keep], probs[:keep]
            probs /= probs.sum()
        return int(ids[self.rng.choice(ids.size, p=probs)])
