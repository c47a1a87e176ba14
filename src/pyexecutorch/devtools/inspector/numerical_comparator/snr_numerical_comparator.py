"""Signal-to-noise ratio in dB: ``10 log10(mean(a^2) / mean((a - b)^2))``; identical
outputs give +inf."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyexecutorch.devtools.inspector.numerical_comparator.numerical_comparator_base import (
    NumericalComparatorBase,
    same_shape,
)


class SNRComparator(NumericalComparatorBase):
    def element_compare(self, a: Any, b: Any) -> float:
        fa, fb = same_shape(a, b)
        signal = np.square(fa).mean()
        noise = np.square(fa - fb).mean()
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(10 * np.log10(signal / noise))


__all__ = ["SNRComparator"]
