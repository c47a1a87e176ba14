"""Metrics: each is a per-row statistic computed where the row ran, and a reduction over
the rows that succeeded, computed once on the driver in row order (so every engine
reduces the same numbers in the same order and reports the same value).

``top1``/``top5``/``topK``: the label is among the K largest logits of output 0 (and of
the reference's, when there is one). ``agreement``: output 0's argmax equals the
reference's. ``max_error``: the largest absolute difference from the reference over
every output. ``snr``: the signal-to-noise ratio in dB, ``10 log10(sum ref^2 / sum
(out - ref)^2)`` over every output of every row. ``perplexity``: ``exp`` of the mean
negative log-likelihood of the scored tokens of an LLM corpus.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Outputs = list[np.ndarray]
Stats = dict[str, np.ndarray]


class MetricError(ValueError):
    """A metric cannot be computed from what the run has (no labels, no reference, ...)."""


@dataclass(frozen=True)
class Metric:
    """``rows(outputs, reference, labels)`` -> per-row stat columns; ``reduce(stats)``."""

    name: str
    needs: tuple[str, ...]  # of "labels", "reference", "text"
    rows: Callable[[Outputs, Outputs | None, np.ndarray | None], Stats]
    reduce: Callable[[Stats], dict[str, float]]
    stats: tuple[str, ...]  # the stat columns ``rows`` returns (a failed row holds NaN)
    reference_stats: tuple[str, ...] = ()  # and these too when there is a reference

    def stat_names(self, has_reference: bool) -> tuple[str, ...]:
        return self.stats + (self.reference_stats if has_reference else ())


def _logits(outputs: Outputs, what: str) -> np.ndarray:
    out = np.asarray(outputs[0])
    if out.ndim != 2:
        raise MetricError(
            f"{what}: output 0 should be logits [batch, classes], got {list(out.shape)}"
        )
    return out


def _in_top_k(logits: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    if not (np.all(labels >= 0) and np.all(labels < logits.shape[1])):
        raise MetricError(f"a label is outside the {logits.shape[1]} classes of output 0")
    target = logits[np.arange(len(labels)), labels][:, None]
    # Ties rank the label first, as the index order of a stable sort would not.
    return (np.sum(logits > target, axis=1) < k).astype(np.float64)


def _top_k(k: int) -> Metric:
    name = f"top{k}"

    def rows(outputs: Outputs, reference: Outputs | None, labels: np.ndarray | None) -> Stats:
        stats = {name: _in_top_k(_logits(outputs, name), labels, k)}
        if reference is not None:
            stats[f"reference_{name}"] = _in_top_k(_logits(reference, name), labels, k)
        return stats

    def reduce(stats: Stats) -> dict[str, float]:
        return {
            key: float(np.mean(stats[key])) for key in (name, f"reference_{name}") if key in stats
        }

    return Metric(name, ("labels",), rows, reduce, (name,), (f"reference_{name}",))


def _agreement_rows(
    outputs: Outputs, reference: Outputs | None, labels: np.ndarray | None
) -> Stats:
    same = _logits(outputs, "agreement").argmax(1) == _logits(reference, "agreement").argmax(1)
    return {"agreement": same.astype(np.float64)}


def _flat_pairs(outputs: Outputs, reference: Outputs) -> list[tuple[np.ndarray, np.ndarray]]:
    n = len(outputs[0])
    if len(outputs) != len(reference):
        raise MetricError(
            f"the program has {len(outputs)} outputs and the reference {len(reference)}"
        )
    pairs = []
    for i, (o, r) in enumerate(zip(outputs, reference, strict=True)):
        if o.shape != r.shape:
            raise MetricError(
                f"output {i} has shape {list(o.shape)}, the reference's {list(r.shape)}"
            )
        pairs.append((o.reshape(n, -1).astype(np.float64), r.reshape(n, -1).astype(np.float64)))
    return pairs


def _max_error_rows(
    outputs: Outputs, reference: Outputs | None, labels: np.ndarray | None
) -> Stats:
    pairs = _flat_pairs(outputs, reference)
    return {"max_error": np.max([np.max(np.abs(o - r), axis=1) for o, r in pairs], axis=0)}


def _snr_rows(outputs: Outputs, reference: Outputs | None, labels: np.ndarray | None) -> Stats:
    pairs = _flat_pairs(outputs, reference)
    signal = np.sum([np.sum(r * r, axis=1) for _, r in pairs], axis=0)
    noise = np.sum([np.sum((o - r) ** 2, axis=1) for o, r in pairs], axis=0)
    return {"snr_signal": signal, "snr_noise": noise}


def _snr(stats: Stats) -> dict[str, float]:
    signal, noise = float(np.sum(stats["snr_signal"])), float(np.sum(stats["snr_noise"]))
    if noise == 0.0:
        return {"snr_db": math.inf}
    return {"snr_db": 10.0 * math.log10(signal / noise) if signal > 0 else -math.inf}


def _perplexity(stats: Stats) -> dict[str, float]:
    tokens = float(np.sum(stats["tokens"]))
    nll = float(np.sum(stats["nll"]))
    return {"perplexity": math.exp(nll / tokens) if tokens else math.nan, "tokens": tokens}


def _no_rows(outputs: Outputs, reference: Outputs | None, labels: np.ndarray | None) -> Stats:
    raise MetricError("perplexity is computed over text windows, not tensor outputs")


_FIXED = {
    "agreement": Metric(
        "agreement",
        ("reference",),
        _agreement_rows,
        lambda s: {"agreement": float(np.mean(s["agreement"]))},
        ("agreement",),
    ),
    "max_error": Metric(
        "max_error",
        ("reference",),
        _max_error_rows,
        lambda s: {"max_error": float(np.max(s["max_error"]))},
        ("max_error",),
    ),
    "snr": Metric("snr", ("reference",), _snr_rows, _snr, ("snr_signal", "snr_noise")),
    "perplexity": Metric("perplexity", ("text",), _no_rows, _perplexity, ("nll", "tokens")),
}
_TOP_K = re.compile(r"top([1-9][0-9]*)")
NAMES = ("top1", "top5", "topK", *_FIXED)


def get_metric(name: str) -> Metric:
    """The metric called ``name`` (see the module's documentation)."""
    match = _TOP_K.fullmatch(name)
    if match:
        return _top_k(int(match.group(1)))
    if name not in _FIXED:
        raise MetricError(f"unknown metric '{name}'; the metrics: {', '.join(NAMES)}")
    return _FIXED[name]


def parse_metrics(spec: str | list[str] | tuple[str, ...]) -> list[Metric]:
    """Metrics from ``"top1,agreement"`` or a list of names; each once."""
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise MetricError("no metric named")
    return [get_metric(n) for n in dict.fromkeys(names)]


def reduce_all(metrics: list[Metric], stats: Stats) -> dict[str, float]:
    """Every metric's values from the succeeded rows' stat columns (empty: NaN)."""
    out: dict[str, float] = {}
    n = len(next(iter(stats.values()))) if stats else 0
    for metric in metrics:
        if n == 0:
            out[metric.name] = math.nan
            continue
        out.update(metric.reduce(stats))
    return out
