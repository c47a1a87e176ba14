"""Distances between AOT and runtime intermediate outputs (the official
``devtools.inspector.numerical_comparator`` names)."""

from pyexecutorch.devtools.inspector.numerical_comparator.l1_numerical_comparator import (
    L1Comparator,
)
from pyexecutorch.devtools.inspector.numerical_comparator.mse_numerical_comparator import (
    MSEComparator,
)
from pyexecutorch.devtools.inspector.numerical_comparator.numerical_comparator_base import (
    DebugHandle,
    IntermediateOutputMapping,
    NumericalComparatorBase,
)
from pyexecutorch.devtools.inspector.numerical_comparator.snr_numerical_comparator import (
    SNRComparator,
)

__all__ = [
    "DebugHandle",
    "IntermediateOutputMapping",
    "L1Comparator",
    "MSEComparator",
    "NumericalComparatorBase",
    "SNRComparator",
]
