"""``evaluate``: run a program's method over a dataset and compute metrics on its outputs."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pyexecutorch.data.batching import plan_batches
from pyexecutorch.data.dataset import Dataset
from pyexecutorch.data.engines import run_embedded, run_ray
from pyexecutorch.data.metrics import MetricError, parse_metrics, reduce_all
from pyexecutorch.data.progress import Progress
from pyexecutorch.data.results import EvalResult
from pyexecutorch.data.worker import Columns, EagerReference, Job, load_program

ENGINES = ("embedded", "ray")
# Rows a worker takes at a time, at most (rounded up to whole batches; fewer on a small
# dataset, so that every worker gets two chunks). A Ray task costs tens of milliseconds
# of CPU over the driver, the raylet and the actor (at one actor, Ray's extra CPU a row
# measured about a quarter lower at 128 rows a task than at 32); a pool's, next to none.
CHUNK_ROWS = {"embedded": 32, "ray": 128}


def _bytes(source: Any, what: str) -> Any:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"{what} not found: {path}")
        return path.read_bytes()
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    raise TypeError(f"{what} should be a path or bytes, got {type(source).__name__}")


def _reference(reference: Any) -> Any:
    if reference is None or isinstance(reference, EagerReference):
        return reference
    if callable(reference):  # an eager module
        return EagerReference(reference)
    return _bytes(reference, "reference program")


def _check_needs(metrics: list[Any], dataset: Dataset, reference: Any) -> None:
    have = {
        "labels": dataset.labels is not None,
        "reference": reference is not None,
        "text": dataset.task == "text",
    }
    for metric in metrics:
        for need in metric.needs:
            if not have[need]:
                what = {"labels": "labels", "reference": "a reference", "text": "a text dataset"}
                raise MetricError(f"metric '{metric.name}' needs {what[need]}")
        if dataset.task == "text" and "text" not in metric.needs:
            raise MetricError(f"metric '{metric.name}' does not apply to a text dataset")


def _chunks(dataset: Dataset, rows: int) -> Iterator[Columns]:
    n = len(dataset)
    index = np.arange(n, dtype=np.int64)
    for start in range(0, n, rows):
        chunk = {name: col[start : start + rows] for name, col in dataset.columns.items()}
        chunk["row"] = index[start : start + rows]
        yield chunk


def evaluate(
    program: str | os.PathLike[str] | bytes,
    dataset: Dataset,
    *,
    method: str = "forward",
    metrics: str | list[str] = "top1",
    reference: str | os.PathLike[str] | bytes | Callable[..., Any] | None = None,
    batch_size: int | None = None,
    engine: str = "embedded",
    workers: int = 1,
    ray_address: str | None = None,
    chunk_rows: int | None = None,
    keep_outputs: bool = False,
    progress: bool | Progress = False,
    jit: bool | None = None,
    threads: int | None = None,
    max_arena_bytes: int | None = None,
) -> EvalResult:
    """Evaluate ``method`` of ``program`` over ``dataset``.

    ``metrics``: names from :mod:`pyexecutorch.data.metrics` ("top1,agreement"). A
    ``reference`` (another ``.pte``, or an eager module taking the same inputs) gives
    agreement, max error and SNR. ``batch_size``: rows per call for a program with a
    dynamic batch (a static batch is the program's). ``engine``: "embedded" (this
    process for one worker, a local process pool for more) or "ray" (Ray Data over
    ``workers`` actors; ``ray_address`` as ``ray.init`` takes it). ``chunk_rows``:
    rows per task (default: up to 32 embedded, 128 on Ray, rounded up to whole batches;
    one window for text).
    ``threads``: BLAS/compiled threads in each worker (default: 1 in pool processes
    and actors, unchanged in this process). ``max_arena_bytes`` bounds each loaded
    method's memory. Failed rows are counted and reported, and the run goes on.
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine '{engine}'; the engines: {', '.join(ENGINES)}")
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if len(dataset) == 0:
        raise ValueError(f"{dataset.source or 'the dataset'} has no rows")
    chosen = parse_metrics(metrics)
    ref = _reference(reference)
    _check_needs(chosen, dataset, ref)
    data = _bytes(program, "program")
    in_process = engine == "embedded" and workers == 1
    options = {"jit": jit, "max_arena_bytes": max_arena_bytes}
    options["threads"] = threads if (threads is not None or in_process) else 1
    # Plan here too: a program that cannot take these rows fails before any worker starts.
    planner = load_program(data, {**options, "threads": None})
    if dataset.task == "text":
        batch, chunk = 1, chunk_rows or 1
    else:
        plan = plan_batches(planner, method, batch_size)
        dataset.features.bind(plan)
        batch = plan.size
        rows = chunk_rows or min(CHUNK_ROWS[engine], math.ceil(len(dataset) / (2 * workers)))
        chunk = batch * max(1, math.ceil(rows / batch))
    job = Job(
        data,
        method,
        dataset.task,
        dataset.features,
        dataset.labels,
        tuple(m.name for m in chosen),
        ref,
        batch_size,
        keep_outputs,
        options,
    )
    bar = progress if isinstance(progress, Progress) else Progress(len(dataset), enabled=progress)
    parts: list[Columns] = []

    def on_result(part: Columns) -> None:
        parts.append(part)
        bar.update(len(part["row"]), int(np.count_nonzero(np.asarray(part["error"]) != "")))

    start = time.perf_counter()
    try:
        if engine == "embedded":
            run_embedded(job, _chunks(dataset, chunk), workers, on_result)
        else:
            run_ray(job, _chunks(dataset, chunk), workers, on_result, ray_address, chunk)
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    per_row = _gather(parts, len(dataset))
    ok = per_row["error"] == ""
    stat_names = [s for m in chosen for s in m.stat_names(ref is not None)]
    stats = {name: per_row[name][ok] for name in stat_names if name in per_row}
    return EvalResult(
        metrics=reduce_all(chosen, stats),
        rows=len(dataset),
        failed=int(np.count_nonzero(~ok)),
        seconds=seconds,
        engine=engine,
        workers=workers,
        batch_size=batch,
        per_row=per_row,
    )


def _gather(parts: list[Columns], n: int) -> dict[str, np.ndarray]:
    """The chunks' columns joined in row order; every row exactly once."""
    columns = {name: np.concatenate([np.asarray(p[name]) for p in parts]) for name in parts[0]}
    order = np.argsort(columns["row"], kind="stable")
    columns = {name: col[order] for name, col in columns.items()}
    if not np.array_equal(columns["row"], np.arange(n)):
        raise RuntimeError(
            f"the engine returned {len(columns['row'])} rows for a dataset of {n}: "
            "a chunk was lost or duplicated"
        )
    columns["error"] = np.asarray([str(e) for e in columns["error"]], dtype=object)
    return columns
