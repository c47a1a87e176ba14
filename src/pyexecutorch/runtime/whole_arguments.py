"""The arguments of a whole-method function as one array of words (the compiled tier).

A CNN compiled whole passes a few hundred arrays to its function (380 for
mobilenet_v2), and numba unboxes every array argument on every call: about 70 ns
each, 26 us a call, a fifth of the model's time. The function takes instead one
int64 array, ``meta``, holding for each array its data address, shape and strides
(:func:`describe`, once at load), and rebuilds each array inside from those words
(:func:`bound_array`, a few loads): a call costs a fraction of a microsecond.

Each array's dtype, rank and layout are part of the generated source (``bound_array(meta,
offset, np.float32, 4, "A")``), which stays generic in sizes. The arrays rebuilt this
way own nothing (no reference count): whoever holds ``meta`` keeps the arrays it
describes alive (:class:`WholeFunction` does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pyexecutorch.jit import generated

# Generated whole-method functions inline bound_array's code (runtime/bound_arrays.py, which
# numba does not stamp them with): its file's stamp is in their key, so that a change to
# it compiles them again rather than reading back machine code made from the old one.
generated.stamp_sources(Path(__file__).parent, "bound_arrays.py")


def layout_of(a: np.ndarray) -> str:
    """numba's layout letter of ``a``: "C", "F" or "A"."""
    if a.flags.c_contiguous:
        return "C"
    if a.flags.f_contiguous:
        return "F"
    return "A"


def words(a: np.ndarray) -> int:
    """How many int64 words :func:`describe` gives ``a``."""
    return 1 + 2 * a.ndim


def describe(arrays: tuple[np.ndarray, ...] | list[np.ndarray]) -> np.ndarray:
    """Each array's data address, shape and strides (in bytes), one after another."""
    out: list[int] = []
    for a in arrays:
        out.append(a.ctypes.data)
        out.extend(a.shape)
        out.extend(a.strides)
    return np.array(out, np.int64)


def bound_array_source(a: np.ndarray, offset: int) -> str:
    """The generated expression rebuilding ``a`` from ``meta`` at ``offset``."""
    return f'bound_array(meta, {offset}, np.{a.dtype.name}, {a.ndim}, "{layout_of(a)}")'


class WholeFunction:
    """A compiled ``whole(meta)`` and the kinds (dtype, rank, layout) of the arrays it
    takes; :meth:`bind` makes ``meta`` for arrays of those kinds."""

    def __init__(self, entry: Any, kinds: tuple[tuple[np.dtype, int, str], ...]) -> None:
        self.entry = entry
        self.kinds = kinds

    def bind(self, arrays: tuple[np.ndarray, ...] | list[np.ndarray]) -> np.ndarray:
        """``meta`` for ``arrays`` (which the caller keeps alive while it uses ``meta``)."""
        if len(arrays) != len(self.kinds):
            raise ValueError(f"the function takes {len(self.kinds)} arrays, not {len(arrays)}")
        for k, (a, (dtype, ndim, layout)) in enumerate(zip(arrays, self.kinds, strict=True)):
            if not isinstance(a, np.ndarray) or a.dtype != dtype or a.ndim != ndim:
                raise ValueError(f"array {k}: expected {dtype} of rank {ndim}")
            if layout != "A" and layout_of(a) != layout:
                raise ValueError(f"array {k}: expected layout {layout}, got {layout_of(a)}")
        return describe(arrays)

    def __call__(self, *arrays: np.ndarray) -> Any:
        """The function on ``arrays`` (binding them on every call: for tests and one-offs)."""
        return self.entry(self.bind(arrays))


def kinds_of(arrays: tuple[np.ndarray, ...] | list[np.ndarray]) -> tuple:
    return tuple((a.dtype, a.ndim, layout_of(a)) for a in arrays)
