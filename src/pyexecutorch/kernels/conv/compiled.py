"""Compiled (numba) forms of convolutions: where numpy's shifted multiply-adds are weakest.

A depthwise convolution (one filter per channel) is, in numpy, one shifted
multiply-add over the whole tensor per filter tap: kh*kw passes over memory,
each over rows as short as the image (8 floats late in a CNN). Here the image
is copied channels-last once, every output pixel accumulates its taps over a
contiguous run of channels (bias first; padding, even wider than the image,
is skipped, never materialized), and rows run in parallel. Imported only by the
compiled tier (it needs numba); the kernel in ``conv.py`` stays the reference.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
from numba import get_num_threads, njit, prange

from pyexecutorch.kernels.compiled_arrays import FLOATS
from pyexecutorch.kernels.conv.conv import _signature
from pyexecutorch.kernels.registry import Const, Inline, KernelError, compiled_form


def _depthwise2d(x, wt, bias, xt, ot, out, sh, sw, ph, pw, dh, dw):  # noqa: ANN001, ANN201
    """out = bias + depthwise conv of x (NCHW), through channels-last copies xt and ot.

    wt is the weight as (kh, kw, channels): the innermost loop runs over
    channels, contiguous in xt, ot and wt, whatever the image's size.
    """
    n_batch, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    kh_n, kw_n = wt.shape[0], wt.shape[1]
    for n in range(n_batch):
        for c in range(channels):
            for h in range(height):
                for w in range(width):
                    xt[n, h, w, c] = x[n, c, h, w]
    for row in prange(n_batch * out_h):  # noqa: B020 - prange is range when serial
        n = row // out_h
        oh = row - n * out_h
        for ow in range(out_w):
            acc = ot[n, oh, ow]
            acc[:] = bias
            for kh in range(kh_n):
                ih = oh * sh - ph + kh * dh
                if ih < 0 or ih >= height:
                    continue  # padding is never materialized, however wide
                for kw in range(kw_n):
                    iw = ow * sw - pw + kw * dw
                    if iw < 0 or iw >= width:
                        continue
                    src = xt[n, ih, iw]
                    tap = wt[kh, kw]
                    for c in range(channels):
                        acc[c] += tap[c] * src[c]
    for n in range(n_batch):
        for c in range(channels):
            for h in range(out_h):
                for w in range(out_w):
                    out[n, c, h, w] = ot[n, h, w, c]
    return out


# One source, two compilations: the parallel one only where the work pays for waking
# threads (a parallel region costs tens of microseconds, far more on a busy machine).
def _named(fn: Any, name: str) -> Any:
    # A copy under its own name: numba names its cache files by the function's name.
    copy = types.FunctionType(fn.__code__, fn.__globals__, name)
    copy.__qualname__ = name
    return copy


depthwise2d = njit(cache=True, error_model="numpy")(_named(_depthwise2d, "depthwise2d"))
depthwise2d_parallel = njit(cache=True, parallel=True, error_model="numpy")(
    _named(_depthwise2d, "depthwise2d_parallel")
)
PARALLEL_MACS = 2_000_000


# Above this many input pixels per channel the numpy fast path's copies and batched
# products over long rows are as fast as this loop and its two layout copies (one
# thread: 48 channels at 16x16, 3x3: 29 us here against 48 us; at 32x32 stride 2,
# 78 us against 56 us).
MAX_PIXELS = 256


def _tensor(a: Any) -> bool:
    return isinstance(a, np.ndarray)


@compiled_form("aten::convolution.out")
def _convolution(
    input: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: Any,
    output_padding: Any,
    groups: Any,
    out: Any,
) -> Inline | None:
    """The depthwise 2-D float convolution (groups == channels, one filter each), else None."""
    if not (_tensor(input) and _tensor(weight) and _tensor(out)) or transposed:
        return None
    dt = input.dtype
    if dt not in FLOATS or weight.dtype != dt or out.dtype != dt or input.ndim != 4:
        return None
    if bias is not None and (not _tensor(bias) or bias.dtype != dt):
        return None
    channels = input.shape[1]
    if not isinstance(groups, int) or groups != channels or weight.shape[:2] != (channels, 1):
        return None
    try:
        s, p, d, shape, _ = _signature(
            input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
        )
    except (KernelError, TypeError, ValueError):
        return None
    if shape != out.shape or out.size == 0 or input.size == 0:
        return None
    if (
        input.shape[2] * input.shape[3] > MAX_PIXELS
        or weight.flags.writeable
        or (bias is not None and bias.flags.writeable)
    ):
        return None  # large images stay on numpy; weights must be constants to pack at load
    wt = np.ascontiguousarray(weight[:, 0].transpose(1, 2, 0))
    b = np.zeros(channels, dt) if bias is None else np.ascontiguousarray(bias)
    n = input.shape[0]
    xt = np.empty((n, input.shape[2], input.shape[3], channels), dt)
    ot = np.empty((n, shape[2], shape[3], channels), dt)
    consts = (Const(wt), Const(b), Const(xt), Const(ot))
    macs = out.size * weight.shape[2] * weight.shape[3]
    fn = depthwise2d_parallel if macs >= PARALLEL_MACS and get_num_threads() > 1 else depthwise2d
    return Inline(fn, (0, *consts, -1, *(Const(int(v)) for v in (*s, *p, *d))))
