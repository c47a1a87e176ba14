"""A dataset: columns of rows, and how a row becomes a method's inputs.

Columns are numpy arrays of equal length (a file path, a label, a tensor per row).
``features`` turns one row into the method's input arrays *where the row runs*, so
a worker reads and decodes its own image files and a bad file fails its row only.
A text dataset (``task == "text"``) holds token windows for perplexity instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


class RowFeatures(Protocol):
    """Picklable: ``bind(plan)`` once where the program loaded, then a callable per row."""

    def bind(self, plan: Any) -> Any: ...


@dataclass(frozen=True)
class ColumnFeatures:
    """The inputs are columns, one per method input, in order."""

    names: tuple[str, ...]

    def bind(self, plan: Any) -> Any:
        names = self.names

        def features(row: dict[str, Any]) -> list[Any]:
            return [row[n] for n in names]

        return features


@dataclass
class Dataset:
    """Rows as ``columns``; ``labels`` names the label column (if any)."""

    columns: dict[str, np.ndarray]
    features: RowFeatures | None
    labels: str | None = None
    task: str = "tensor"  # or "text": token windows (see readers.text_windows)
    source: str = ""
    info: dict[str, Any] = field(default_factory=dict)  # what the reader decided

    def __post_init__(self) -> None:
        lengths = {name: len(col) for name, col in self.columns.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{self.source or 'dataset'}: columns of different lengths {lengths}")
        if self.labels is not None and self.labels not in self.columns:
            raise ValueError(
                f"{self.source or 'dataset'}: no label column '{self.labels}' "
                f"(columns: {', '.join(self.columns)})"
            )

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def with_labels(self, labels: np.ndarray) -> Dataset:
        """This dataset with ``labels`` (one integer per row) as its label column."""
        labels = np.asarray(labels)
        if labels.shape != (len(self),) or labels.dtype.kind not in "iu":
            raise ValueError(
                f"labels should be {len(self)} integers, one per row, got {labels.dtype} "
                f"{list(labels.shape)}"
            )
        columns = {**self.columns, "label": labels.astype(np.int64)}
        return Dataset(columns, self.features, "label", self.task, self.source, self.info)
