"""Engines: where the chunks of rows run. Each calls ``on_result`` with each chunk's
result (in any order) as it arrives.

* ``embedded``: in this process (one worker), or a local process pool (started from a
  fork server, the program loaded once per process by the pool's initializer).
* ``ray``: Ray Data. The chunks become Arrow blocks; ``map_batches`` runs them through
  a callable class that loads the program once per actor, the program's bytes fetched
  from the object store. Ray schedules, retries and spills; nothing here does.
"""

from __future__ import annotations

import concurrent.futures as futures
import logging
import multiprocessing
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pyexecutorch.data.worker import Columns, Evaluator, Job

OnResult = Callable[[Columns], None]

# ----------------------------------------------------------------------------------------
# Embedded

_EVALUATOR: Evaluator | None = None  # one per pool process


def _init_process(job: Job) -> None:
    global _EVALUATOR
    _EVALUATOR = Evaluator(job)


def _run_in_process(chunk: Columns) -> Columns:
    return _EVALUATOR(chunk)


def run_embedded(job: Job, chunks: Iterator[Columns], workers: int, on_result: OnResult) -> None:
    if workers == 1:
        evaluator = Evaluator(job)
        for chunk in chunks:
            on_result(evaluator(chunk))
        return
    # Not fork: the parent may hold BLAS and numba thread pools mid-flight. A fork server
    # imports the runtime once, and every pool after the first starts from it.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["pyexecutorch.data.worker", "pyexecutorch.runtime"])
    with futures.ProcessPoolExecutor(
        workers, mp_context=context, initializer=_init_process, initargs=(job,)
    ) as pool:
        pending = [pool.submit(_run_in_process, chunk) for chunk in chunks]
        for done in futures.as_completed(pending):
            on_result(done.result())


# ----------------------------------------------------------------------------------------
# Ray


class RayEvaluator:
    """The callable class ``map_batches`` runs: one per actor, the program loaded once."""

    def __init__(self, job: Job, refs: list[Any]) -> None:
        import ray  # noqa: PLC0415

        # The refs arrive inside a list, so Ray hands them over unresolved: the bytes
        # come from the object store once, here, rather than with every task.
        program, reference = ray.get(refs[0]), (ray.get(refs[1]) if refs[1] is not None else None)
        self.evaluator = Evaluator(job.with_bytes(program, reference))

    def __call__(self, batch: Columns) -> Columns:
        return self.evaluator(batch)


def _arrow_table(chunk: Columns) -> Any:
    import pyarrow as pa  # noqa: PLC0415
    from ray.data.extensions import ArrowTensorArray  # noqa: PLC0415

    arrays = {}
    for name, col in chunk.items():
        if col.dtype == object:
            arrays[name] = pa.array([str(v) for v in col])
        elif col.ndim > 1:
            arrays[name] = ArrowTensorArray.from_numpy(np.ascontiguousarray(col))
        else:
            arrays[name] = pa.array(col)
    return pa.table(arrays)


def ray_connect(address: str | None) -> Any:
    """Ray, initialised: the running instance, ``address`` ("auto", "ray://host:port",
    "host:port") or, with neither, a local instance on this machine's cores."""
    try:
        import ray  # noqa: PLC0415
    except ImportError as e:
        raise ImportError("the Ray engine needs Ray Data: pip install 'pyexecutorch[scale]'") from e
    if not ray.is_initialized():
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    return ray


def run_ray(
    job: Job,
    chunks: Iterator[Columns],
    workers: int,
    on_result: OnResult,
    address: str | None = None,
    chunk_rows: int = 1,
) -> None:
    ray = ray_connect(address)
    import ray.data as ray_data  # noqa: PLC0415

    context = ray_data.DataContext.get_current()
    context.enable_progress_bars = False  # ours counts rows; Ray's would interleave
    context.print_on_execution_start = False
    refs = [ray.put(job.program), None if job.reference is None else ray.put(job.reference)]
    light = job.with_bytes(None, None)
    dataset = ray_data.from_arrow([_arrow_table(c) for c in chunks])
    results = dataset.map_batches(
        RayEvaluator,
        fn_constructor_kwargs={"job": light, "refs": refs},
        batch_size=chunk_rows,
        batch_format="numpy",
        compute=ray_data.ActorPoolStrategy(size=workers),
        num_cpus=1,
    )
    for batch in results.iter_batches(batch_size=None, batch_format="numpy"):
        on_result(batch)
