"""L1 distance: the sum of absolute differences."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyexecutorch.devtools.inspector.numerical_comparator.numerical_comparator_base import (
    NumericalComparatorBase,
    same_shape,
)


class L1Comparator(NumericalComparatorBase):
    def element_compare(self, a: Any, b: Any) -> float:
        fa, fb = same_shape(a, b)
        return float(np.abs(fa - fb).sum())


__all__ = ["L1Comparator"]
