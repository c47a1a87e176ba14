"""The outcome of an evaluation: metrics, counts, per-row columns; as a table, JSON, Parquet."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class EvalResult:
    """``metrics`` over the rows that succeeded; ``per_row`` holds every row's columns
    in dataset order (``row``, ``error``, stat columns, ``prediction``, ``output_<i>``)."""

    metrics: dict[str, float]
    rows: int
    failed: int
    seconds: float
    engine: str
    workers: int
    batch_size: int
    per_row: dict[str, np.ndarray] = field(repr=False, default_factory=dict)

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else math.inf

    @property
    def worker_cpu_ms(self) -> float:
        """The CPU milliseconds a row cost in its worker (reading, preprocessing, the
        program, metrics), on average; what the engine costs around the workers is extra."""
        cpu = self.per_row.get("cpu_ms")
        return float(np.mean(cpu)) if cpu is not None and len(cpu) else math.nan

    @property
    def errors(self) -> list[tuple[int, str]]:
        """``(row, message)`` of every failed row."""
        err = self.per_row.get("error")
        if err is None:
            return []
        return [(int(self.per_row["row"][i]), str(err[i])) for i in np.flatnonzero(err != "")]

    def to_dict(self) -> dict[str, Any]:
        def number(v: float) -> float | str:
            return v if math.isfinite(v) else str(v)  # JSON has no inf/nan

        return {
            "metrics": {k: number(v) for k, v in self.metrics.items()},
            "rows": self.rows,
            "failed": self.failed,
            "seconds": self.seconds,
            "rows_per_second": self.rows_per_second,
            "worker_cpu_ms_per_row": number(self.worker_cpu_ms),
            "engine": self.engine,
            "workers": self.workers,
            "batch_size": self.batch_size,
            "errors": [{"row": r, "error": e} for r, e in self.errors],
        }

    def write_json(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")

    def write_parquet(self, path: str | os.PathLike[str]) -> None:
        """Every row's columns; tensors as nested lists (one list level per dimension)."""
        try:
            import pyarrow as pa  # noqa: PLC0415
            import pyarrow.parquet as pq  # noqa: PLC0415
        except ImportError as e:
            raise ImportError(
                "writing Parquet needs pyarrow: pip install 'pyexecutorch[scale]'"
            ) from e
        arrays = {}
        for name, col in self.per_row.items():
            if col.dtype == object:
                arrays[name] = pa.array([str(v) for v in col])
            elif col.ndim > 1:
                arrays[name] = pa.array(list(col.tolist()))
            else:
                arrays[name] = pa.array(col)
        pq.write_table(pa.table(arrays), path)

    def table(self, max_errors: int = 5) -> str:
        """The summary as an aligned text table, then the first failed rows."""
        lines = [("metric", "value")]
        lines += [(k, _format(v)) for k, v in self.metrics.items()]
        lines += [
            ("rows", str(self.rows)),
            ("failed rows", str(self.failed)),
            ("rows/s", f"{self.rows_per_second:.1f}"),
            ("worker CPU", f"{self.worker_cpu_ms:.2f} ms a row"),
            ("engine", f"{self.engine}, {self.workers} worker(s), batch {self.batch_size}"),
        ]
        width = max(len(a) for a, _ in lines)
        text = [f"{a:<{width}}  {b}" for a, b in lines]
        text.insert(1, "-" * (width + 2 + max(len(b) for _, b in lines)))
        for row, message in self.errors[:max_errors]:
            text.append(f"row {row} failed: {message}")
        if self.failed > max_errors:
            text.append(f"... and {self.failed - max_errors} more failed rows")
        return "\n".join(text)


def _format(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    return f"{v:.6g}" if abs(v) >= 1e-4 or v == 0 else f"{v:.3e}"
