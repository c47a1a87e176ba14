"""The compiled copies of permuted and sliced views (kernels/shape/compiled_permute.py)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba", reason="the compiled copies need numba (the jit extra)")

from pyexecutorch.kernels.shape import compiled_permute as cp  # noqa: E402


def test_merged_dims_drop_ones_and_join_runs():
    x = np.zeros((1, 197, 3, 6, 64), np.float32)
    view = x.transpose(2, 0, 3, 1, 4)  # an attention's q, k, v permute
    assert cp.merged(view.shape, view.strides) == ([18, 197, 64], [256, 4608, 4])
    assert cp.merged((2, 3, 4), (48, 16, 4)) == ([24], [4])  # C-contiguous: one run
    assert cp.merged((1, 1), (4, 4)) == ([], [])


@pytest.mark.parametrize(
    "shape, perm, cut, dtype",
    [
        ((1, 197, 3, 6, 64), (2, 0, 3, 1, 4), None, np.float32),  # 3 dims merged, parallel
        ((1, 6, 197, 64), (2, 0, 1, 3), None, np.float32),
        ((3, 1, 6, 197, 64), None, (slice(1, 2),), np.float32),  # a slice: one run
        ((4, 5, 6, 7, 3), (4, 0, 3, 1, 2), None, np.float64),  # 4 dims, small: serial
        ((2, 33, 3, 40), (0, 2, 3, 1), None, np.int8),
    ],
)
def test_copies_are_numpys_over_calls_and_threads(shape, perm, cut, dtype):
    from pyexecutorch.runtime.threads import set_threads  # noqa: PLC0415

    x = np.zeros(shape, dtype)
    view = x.transpose(perm) if perm is not None else x[cut]
    out = np.full(view.shape, -1, dtype)
    function, args = cp.permute_copy(view, out)
    parallel = view.size >= cp.PERMUTE_PARALLEL and args[0].shape[0] * args[0].shape[1] > 1
    assert function is cp.PERMUTE_COPY[int(parallel)]
    try:
        for seed, threads in ((1, 2), (2, 1), (3, 2)):  # new values in the source each call
            set_threads(threads)
            x[...] = (np.random.default_rng(seed).standard_normal(shape) * 50).astype(dtype)
            function(*args)
            np.testing.assert_array_equal(out, view)
    finally:
        set_threads(1)


def test_what_the_loops_leave_to_numbas_assignment():
    x = np.zeros((384, 196), np.float32)
    assert cp.permute_copy(x.T, np.zeros((196, 384), np.float32)) is None  # a 2-D transpose
    h = np.zeros((4, 5, 6), np.float16)
    assert cp.permute_copy(h.transpose(2, 0, 1), np.zeros((6, 4, 5), np.float16)) is None
    wide = np.zeros((2, 3, 2, 3, 2, 3), np.float32).transpose(5, 4, 3, 2, 1, 0)
    assert cp.permute_copy(wide, np.zeros(wide.shape, np.float32)) is None  # 6 dims apart
    y = np.zeros((3, 4, 5, 2), np.float32)
    view = y.transpose(2, 0, 1, 3)  # (5, 3, 4, 2): three dims merged
    assert cp.permute_copy(view, np.zeros((5, 3, 4, 2), np.float32)) is not None
    assert cp.permute_copy(view, np.zeros((5, 4, 3, 2), np.float32)) is None  # another shape
    assert cp.permute_copy(view, y.reshape(5, 3, 4, 2)) is None  # its own memory
    strided = np.zeros((2, 4, 3, 5), np.float32).transpose(3, 2, 1, 0)
    assert cp.permute_copy(view, strided) is None  # an out that is not C-contiguous
