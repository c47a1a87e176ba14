"""The work one worker does: load the program once, then evaluate chunks of rows.

Every engine runs the same :class:`Evaluator`: in the calling process, in each process
of a local pool, or in each Ray actor. A chunk is a dict of columns (with ``row``, the
rows' positions in the dataset); the result is a dict of per-row columns: ``row``,
``error`` (empty when the row succeeded), each metric's stat columns, ``prediction``
(output 0's argmax, for [batch, classes] logits), ``cpu_ms`` (the row's share of the
CPU time its worker spent on the chunk: reading, preprocessing, the program, metrics;
what an engine costs around it is the rest) and, when kept, ``output_<i>``.

A row whose features fail (an unreadable image) or whose call fails fails alone: the
batch it was in runs again without it, row by row (padded as the program needs).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pyexecutorch.data.batching import DTYPES as OUTPUT_DTYPES
from pyexecutorch.data.batching import BatchPlan, plan_batches, split_outputs
from pyexecutorch.data.dataset import RowFeatures
from pyexecutorch.data.metrics import MetricError, parse_metrics

Columns = dict[str, np.ndarray]


@dataclass(frozen=True)
class Job:
    """What a worker needs, picklable. ``program``/``reference``: ``.pte`` bytes (a
    reference may instead be a callable on the numpy inputs, e.g. an eager module)."""

    program: Any
    method: str = "forward"
    task: str = "tensor"
    features: RowFeatures | None = None
    labels: str | None = None
    metrics: tuple[str, ...] = ()
    reference: Any = None
    batch_size: int | None = None
    keep_outputs: bool = False
    load_options: dict[str, Any] = field(default_factory=dict)

    def with_bytes(self, program: Any, reference: Any) -> Job:
        return replace(self, program=program, reference=reference)


def as_numpy(value: Any) -> np.ndarray:
    """An output as a numpy array; a torch tensor is read through itself (no torch import)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def load_program(data: Any, options: dict[str, Any]) -> Any:
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415 - loaded where the worker runs

    return Runtime.get().load_program(data, **options)


class EagerReference:
    """A reference computed by a callable (an eager ``torch.nn.Module``) on the inputs.

    Torch is imported here only, when the reference runs."""

    def __init__(self, module: Callable[..., Any]) -> None:
        self.module = module

    def __call__(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        import torch  # noqa: PLC0415 - only an eager reference needs torch

        with torch.no_grad():
            out = self.module(*(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs))
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        return [as_numpy(o) for o in outs]


class _PteReference:
    def __init__(self, data: Any, method: str, options: dict[str, Any], plan: BatchPlan) -> None:
        program = load_program(data, options)
        ref_plan = plan_batches(program, method, plan.size if not plan.padded else None)
        if (ref_plan.size, ref_plan.padded, ref_plan.inputs) != (
            plan.size,
            plan.padded,
            plan.inputs,
        ):
            raise ValueError(
                f"the reference's '{method}' takes batches of {ref_plan.size} rows "
                f"{[list(d.row_shape) for d in ref_plan.inputs]}, the program's "
                f"{plan.size} rows {[list(d.row_shape) for d in plan.inputs]}: they must match"
            )
        self.method = program.load_method(method)

    def __call__(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [as_numpy(o) for o in self.method.execute(inputs)]


class Evaluator:
    """Loads ``job``'s program (and reference) once; ``__call__(chunk)`` evaluates rows."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.program = load_program(job.program, job.load_options)
        self.metrics = parse_metrics(job.metrics) if job.metrics else []
        self._scorer = None
        if job.task == "text":
            self._scorer = TextScorer(self.program)
            self.stat_names = ("nll", "tokens")
            return
        self.plan = plan_batches(self.program, job.method, job.batch_size)
        self.method = self.program.load_method(job.method)
        self.features = job.features.bind(self.plan)
        ref = job.reference
        if ref is None or callable(ref):
            self.reference = ref
        else:
            self.reference = _PteReference(ref, job.method, job.load_options, self.plan)
        self.stat_names = tuple(
            s for m in self.metrics for s in m.stat_names(self.reference is not None)
        )
        meta = self.method.metadata
        infos = [meta.output_tensor_meta(i) for i in range(meta.num_outputs())]
        self.output_shapes = [tuple(info.sizes()[1:]) for info in infos]
        self.output_dtypes = [
            np.dtype(OUTPUT_DTYPES.get(info.dtype(), np.float32)) for info in infos
        ]
        self.predicts = len(self.output_shapes) > 0 and len(self.output_shapes[0]) == 1

    # ----------------------------------------------------------------------------------

    def __call__(self, chunk: Columns) -> Columns:
        start = time.thread_time()  # this thread's: a Ray actor runs tasks off its main one
        result = self._evaluate(chunk)
        rows = len(result["row"])
        result["cpu_ms"] = np.full(rows, 1e3 * (time.thread_time() - start) / max(rows, 1))
        return result

    def _evaluate(self, chunk: Columns) -> Columns:
        rows = np.asarray(chunk["row"], dtype=np.int64)
        n = len(rows)
        errors = np.full(n, "", dtype=object)
        stats = {name: np.full(n, math.nan) for name in self.stat_names}
        if self._scorer is not None:
            self._score_text(chunk, errors, stats)
            return {"row": rows, "error": errors.astype(np.str_), **stats}
        outputs = (
            [
                np.zeros((n, *s), dtype=d)
                for s, d in zip(self.output_shapes, self.output_dtypes, strict=True)
            ]
            if self.job.keep_outputs
            else None
        )
        prediction = np.full(n, -1, dtype=np.int64) if self.predicts else None
        labels = chunk[self.job.labels] if self.job.labels else None
        ready: list[tuple[int, list[np.ndarray]]] = []
        for i in range(n):
            row = {name: col[i] for name, col in chunk.items()}
            try:
                ready.append((i, self.plan.row_inputs(self.features(row), f"row {rows[i]}")))
            except Exception as e:  # noqa: BLE001 - a bad row fails alone, with its reason
                errors[i] = _describe(e)
        size = self.plan.size
        for start in range(0, len(ready), size):
            group = ready[start : start + size]
            try:
                self._run(group, labels, stats, outputs, prediction)
            except MetricError:
                raise  # the run's setup is wrong, not a row
            except Exception:  # noqa: BLE001 - find the failing rows: each alone
                for item in group:
                    try:
                        self._run([item], labels, stats, outputs, prediction)
                    except MetricError:
                        raise
                    except Exception as e:  # noqa: BLE001
                        errors[item[0]] = _describe(e)
        # Fixed-width strings, not objects: Ray carries them as an Arrow string column
        # rather than pickling each row's Python object.
        result = {"row": rows, "error": errors.astype(np.str_), **stats}
        if prediction is not None:
            result["prediction"] = prediction
        if outputs is not None:
            result.update({f"output_{i}": o for i, o in enumerate(outputs)})
        return result

    def _run(
        self,
        group: list[tuple[int, list[np.ndarray]]],
        labels: np.ndarray | None,
        stats: Columns,
        outputs: list[np.ndarray] | None,
        prediction: np.ndarray | None,
    ) -> None:
        index = np.asarray([i for i, _ in group])
        inputs = self.plan.stack([x for _, x in group])
        total = len(inputs[0])
        outs = [as_numpy(o) for o in self.method.execute(inputs)]
        outs = split_outputs(outs, len(group), total, self.job.method)
        ref = None
        if self.reference is not None:
            ref = split_outputs(self.reference(inputs), len(group), total, "the reference")
        group_labels = None if labels is None else np.asarray(labels)[index].astype(np.int64)
        for metric in self.metrics:
            for name, values in metric.rows(outs, ref, group_labels).items():
                stats[name][index] = values
        if prediction is not None:
            prediction[index] = outs[0].argmax(1)
        if outputs is not None:
            for full, o in zip(outputs, outs, strict=True):
                full[index] = o

    def _score_text(self, chunk: Columns, errors: np.ndarray, stats: Columns) -> None:
        for i in range(len(errors)):
            try:
                nll, count = self._scorer.score(
                    chunk["tokens"][i], int(chunk["length"][i]), int(chunk["score_from"][i])
                )
            except Exception as e:  # noqa: BLE001 - a failing window fails alone
                errors[i] = _describe(e)
                continue
            stats["nll"][i], stats["tokens"][i] = nll, count


def _describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


class TextScorer:
    """The negative log-likelihood of a token window through an LLM program's ``forward``
    (the layouts :mod:`pyexecutorch.extension.llm.runner` reads), positions from 0."""

    def __init__(self, program: Any) -> None:
        from pyexecutorch.extension.llm.runner.program import (  # noqa: PLC0415
            FORWARD,
            read_constants,
            read_layout,
            read_metadata,
        )

        constants = read_constants(program)
        self.layout = read_layout(program, constants)
        self.method = program.load_method(FORWARD)
        vocab = self.method.metadata.output_tensor_meta(0).sizes()[-1]
        meta = read_metadata(constants, self.layout, _NoTokenizer(), vocab)
        self.context = meta.max_context_len
        # All positions' logits come back only from a [1, seq, vocab] output; otherwise
        # each call feeds one token and returns the logits after it.
        whole = self.layout.logits_rank == 3 and self.layout.positions != "none"
        self.chunk = self.layout.max_chunk if whole else 1

    def _call(self, tokens: np.ndarray, start: int) -> np.ndarray:
        layout = self.layout
        inputs = [tokens.reshape(1, -1).astype(layout.token_dtype)]
        if layout.positions == "start":
            inputs.append(np.asarray([start], dtype=layout.position_dtype))
        elif layout.positions == "range":
            inputs.append(np.arange(start, start + tokens.size, dtype=layout.position_dtype))
        logits = as_numpy(self.method.execute(inputs)[0]).astype(np.float64)
        return logits.reshape(-1, logits.shape[-1])

    def score(self, tokens: np.ndarray, length: int, score_from: int) -> tuple[float, int]:
        """``(sum of -log p(token j | tokens before it), count)`` for ``j >= score_from``."""
        if self.layout.positions != "none" and length > self.context:
            raise ValueError(
                f"a window of {length} tokens is longer than the program's context of "
                f"{self.context} positions"
            )
        if self.layout.positions == "none" and length - 1 > self.layout.max_chunk:
            raise ValueError(
                f"a window of {length} tokens: the program (no KV cache) takes at most "
                f"{self.layout.max_chunk}"
            )
        tokens = np.asarray(tokens[:length], dtype=np.int64)
        nll, count = 0.0, 0
        pos = 0
        while pos < length - 1:
            if self.layout.positions == "none":
                step, logits = 1, self._call(tokens[: pos + 1], 0)[-1:]
            else:
                step = min(self.chunk, length - 1 - pos)
                logits = self._call(tokens[pos : pos + step], pos)[-step:]
            targets = np.arange(pos + 1, pos + step + 1)
            keep = targets >= score_from
            if keep.any():
                chosen, rows = targets[keep], logits[keep]
                top = rows.max(axis=1)
                lse = top + np.log(np.exp(rows - top[:, None]).sum(axis=1))
                nll += float(np.sum(lse - rows[np.arange(len(chosen)), tokens[chosen]]))
                count += int(keep.sum())
            pos += step
        return nll, count


class _NoTokenizer:
    """read_metadata's fallbacks for values perplexity does not use."""

    bos_id = eos_id = vocab_size = 0
