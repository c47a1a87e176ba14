"""Compiled copies of permuted or sliced views into C-contiguous memory, as four plain loops.

numba's n-d assignment (``dst[...] = src`` on a strided view) walks the elements through a
general iterator: a ViT-S attention's query, key and value permute (3 x 6 x 197 x 64
floats from the linear's 197 x 1152 output) took 96 us on one thread. Here the view's
dims are merged at load (dims of one dropped, neighbours the source reads as one run
joined) into at most four, and the copy is four loops whose innermost walks the last
merged dim; from :data:`PERMUTE_PARALLEL` elements the outer two are shared over the
threads in force. A copy moves bits, so any split gives the same bytes. Imported only by
the compiled tier.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange

from pyexecutorch.jit.variants import can_thread, serial_and_parallel

# Copies of this many elements and more run on the threads in force (a strided copy
# costs about four times a sum's work an element: a quarter of PARALLEL_WORK).
PERMUTE_PARALLEL = 1 << 16
_RANK = 4


def _permute_copy(src, dst):  # noqa: ANN001, ANN202
    """dst (a, b, c, d) C-contiguous = src (a, b, c, d) of any strides."""
    a, b, c, d = dst.shape
    for ab in prange(a * b):  # noqa: B020 - prange is range when serial
        i = ab // b
        j = ab - i * b
        for k in range(c):
            for m in range(d):
                dst[i, j, k, m] = src[i, j, k, m]


PERMUTE_COPY = serial_and_parallel(_permute_copy, "permute_copy")


def merged(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """(shape, strides) of the same elements in C order with dims of one dropped and each
    dim joined to the one before it where the source reads the two as one run."""
    dims: list[int] = []
    steps: list[int] = []
    for n, s in zip(shape, strides, strict=True):
        if n == 1:
            continue
        if dims and steps[-1] == s * n:
            dims[-1] *= n
            steps[-1] = s
        else:
            dims.append(n)
            steps.append(s)
    return dims, steps


def permute_copy(src: np.ndarray, dst: np.ndarray) -> tuple[Any, tuple] | None:
    """(the compiled copy, its arguments) copying view ``src`` into ``dst`` (C-contiguous,
    its shape and dtype), or None where the merged view has two dims or more than four,
    the dtype is one numba lacks (float16) or the arrays are not plain and apart. Serial
    where the two outer loops have one iteration (one run, or a 3-D view's)."""
    if not (isinstance(src, np.ndarray) and isinstance(dst, np.ndarray)):
        return None
    if src.dtype != dst.dtype or src.dtype.kind not in "biuf" or src.dtype == np.float16:
        return None
    if src.shape != dst.shape or dst.size == 0 or not dst.flags.c_contiguous:
        return None
    if not dst.flags.writeable or np.shares_memory(src, dst):
        return None
    dims, steps = merged(src.shape, src.strides)
    if len(dims) == 2 or len(dims) > _RANK:
        return None  # (a 2-D transpose: numba's assignment walks it faster than these loops)
    pad = _RANK - len(dims)
    shape = (1,) * pad + tuple(dims)
    # (writable as src is: a delegate's binding remakes the view on the caller's array)
    view = np.lib.stride_tricks.as_strided(src, shape, (0,) * pad + tuple(steps))
    parallel = dst.size >= PERMUTE_PARALLEL and shape[0] * shape[1] > 1 and can_thread()
    return PERMUTE_COPY[int(parallel)], (view, dst.reshape(shape))
