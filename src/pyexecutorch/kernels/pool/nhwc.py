"""Channels-last (NHWC) numpy max and average pooling over a window padded per side.

The separable reduction of :mod:`pyexecutorch.kernels.pool.pool` (a row pass, then a
column pass: ``2(k - 1)`` ufunc calls for a ``k x k`` window) run on NCHW views of
channels-last buffers, which numpy walks in memory order. The input is copied into a
buffer with a border of the identity (-inf for maxima, 0 for sums) where windows reach
outside it or it is not the same array every call. An average divides by the taps
inside the input (padding excluded), as XNNPACK does.
"""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.conv import geometry
from pyexecutorch.kernels.conv.nhwc import Finish, Operand, Step, Window
from pyexecutorch.kernels.pool.pool import separable_geometry, separable_steps


def _nchw(a: np.ndarray) -> np.ndarray:
    return a.transpose(0, 3, 1, 2)


def pool2d_steps(
    win: Window, is_max: bool, dtype: np.dtype, x: Operand, out: Operand, finish: Finish
) -> list[Step]:
    """``out [n, oh, ow, c]`` = the maximum or the average of each window of ``x``, then
    ``finish(out)``. An output that is not the same array every call is computed into a
    buffer and copied."""
    o = out.fixed if out.fixed is not None else np.empty((win.n, win.oh, win.ow, win.c), dtype)
    o_get = None if out.fixed is not None else out.get
    t, le = win.pads[0], win.pads[3]
    ohw = (win.oh, win.ow)
    hp, wp, padded, cols, rows = separable_geometry(
        (win.h, win.w), (win.kh, win.kw), (win.sh, win.sw), (t, le), (win.dh, win.dw), ohw
    )
    steps: list[Step] = []
    src = x.fixed
    if padded or src is None:
        src = np.full((win.n, hp, wp, win.c), -np.inf if is_max else 0.0, dtype)
        inner = src[:, t : t + win.h, le : le + win.w]
        get = x.get

        def pad() -> None:
            np.copyto(inner, get())

        steps.append(pad)
    tmp = np.empty((win.n, src.shape[1], win.ow, win.c), dtype) if len(cols) > 1 else None
    ufunc = np.maximum if is_max else np.add
    o_nchw = _nchw(o)
    calls, result = separable_steps(
        ufunc, _nchw(src), cols, rows, None if tmp is None else _nchw(tmp), o_nchw
    )
    copy = result is not o_nchw  # (a single row or column: nothing folded into o)
    scale = None
    if not is_max:
        rows_in = geometry.taps_each(win.h, win.oh, win.kh, win.sh, t, win.dh)
        cols_in = geometry.taps_each(win.w, win.ow, win.kw, win.sw, le, win.dw)
        counts = np.maximum(np.outer(rows_in, cols_in).astype(dtype), 1.0)
        scale = np.ascontiguousarray(
            np.broadcast_to((1.0 / counts)[None, :, :, None], (1, win.oh, win.ow, win.c))
        )

    def pool() -> None:
        for a, b, dst in calls:
            ufunc(a, b, out=dst)
        if copy:
            np.copyto(o_nchw, result)
        if scale is not None:
            np.multiply(o, scale, out=o)
        finish(o)
        if o_get is not None:
            np.copyto(o_get(), o)

    return [*steps, pool]
