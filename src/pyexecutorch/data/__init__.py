"""Evaluate a ``.pte`` program over a dataset: readers, batching, metrics, and two
engines, embedded (this process or a local process pool) and Ray Data.

>>> from pyexecutorch import data
>>> ds = data.read("images/")                                  # doctest: +SKIP
>>> result = data.evaluate("int8.pte", ds, metrics="top1,agreement,snr",
...                        reference="float.pte", workers=2)   # doctest: +SKIP
>>> print(result.table())                                      # doctest: +SKIP

Torch-free, like the runtime; Ray, pyarrow and Pillow are imported when used (the
``scale`` extra).
"""

from pyexecutorch.data.api import ENGINES, evaluate
from pyexecutorch.data.batching import BatchPlan, plan_batches
from pyexecutorch.data.dataset import ColumnFeatures, Dataset
from pyexecutorch.data.metrics import NAMES as METRICS
from pyexecutorch.data.metrics import MetricError, parse_metrics
from pyexecutorch.data.progress import Progress
from pyexecutorch.data.readers import (
    Preprocess,
    image_folder,
    npz,
    parquet,
    read,
    text_windows,
)
from pyexecutorch.data.results import EvalResult
from pyexecutorch.data.worker import EagerReference, Evaluator, Job, TextScorer

__all__ = [
    "ENGINES",
    "METRICS",
    "BatchPlan",
    "ColumnFeatures",
    "Dataset",
    "EagerReference",
    "EvalResult",
    "Evaluator",
    "Job",
    "MetricError",
    "Preprocess",
    "Progress",
    "TextScorer",
    "evaluate",
    "image_folder",
    "npz",
    "parquet",
    "parse_metrics",
    "plan_batches",
    "read",
    "text_windows",
]
