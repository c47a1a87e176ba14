"""What the compiled forms (``kernels/<family>/compiled*.py``) ask of the arrays they bind.

A compiled form makes its views of the planned arrays once, at load; that is only
sound for C-contiguous arrays, whose reshapes are views rather than copies that
would go stale. At run time an argument that is not the planned array is made
contiguous in the kernel's shape first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))  # the dtypes compiled loops compute


def dense(a: Any) -> bool:
    """A C-contiguous array: its load-time views are views, never stale copies."""
    return isinstance(a, np.ndarray) and a.flags.c_contiguous


def planned(a: Any, dtype: np.dtype, shape: tuple[int, ...]) -> bool:
    """A C-contiguous array of exactly ``dtype`` and ``shape``."""
    return dense(a) and a.dtype == dtype and a.shape == shape


def contiguous(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``a`` as a C-contiguous array of ``shape`` (a view when it already is one)."""
    return np.ascontiguousarray(a).reshape(shape)


def channels_last(a: Any) -> bool:
    """A 4-D array (logically N, C, H, W) whose memory is N, H, W, C in C order: the
    ``np.empty((n, h, w, c)).transpose(0, 3, 1, 2)`` of the compiled tier's channels-last
    tensors. With one channel or one pixel a plane both layouts are the same memory, and
    this and :func:`dense` both hold."""
    return isinstance(a, np.ndarray) and a.ndim == 4 and a.transpose(0, 2, 3, 1).flags.c_contiguous


def memory_order(a: np.ndarray) -> np.ndarray:
    """A 4-D channels-last or C-contiguous array as the C-contiguous view of its memory:
    (N, H, W, C) for a channels-last one (that is not also C-contiguous), else ``a``."""
    if a.flags.c_contiguous:
        return a
    if channels_last(a):
        return a.transpose(0, 2, 3, 1)
    raise ValueError(f"an array of strides {a.strides} is neither C-contiguous nor channels-last")
