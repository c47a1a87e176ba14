"""Compiled (numba) forms of convolutions: where numpy's shifted multiply-adds are weakest.

A depthwise convolution (one filter per channel) is, in numpy, one shifted
multiply-add over the whole tensor per filter tap: kh*kw passes over memory,
each over rows as short as the image (8 floats late in a CNN). Here the image
is copied channels-last once, every output pixel accumulates its taps over a
contiguous run of channels (bias first; padding, even wider than the image,
is skipped, never materialized), and rows run in parallel. Imported only by the
compiled tier (it needs numba); the kernel in ``conv.py`` stays the reference.

Inside a whole-method function (``whole=True``, see :func:`conv_step`) every float
convolution with constant weights is a compiled step: depthwise ones as loops (the
channels-last one above for the smallest images, see :func:`_channels_last`; else a few
long loops per plane over its zero-padded row phases), 1x1 ones as one BLAS product on
the input itself (with a few input channels, direct loops:
:mod:`pyexecutorch.kernels.conv.compiled_pointwise`), the others as the dense steps of
:mod:`pyexecutorch.kernels.conv.compiled_dense` (shifted runs of one padded copy of the
input: loops or one BLAS product, no im2col per output row). BLAS is numpy's own
(:mod:`pyexecutorch.jit.blas`), else numba's ``np.dot`` through scipy:
with neither only the depthwise and direct 1x1 steps exist.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import get_num_threads, njit, prange

from pyexecutorch.jit.arrays import FLOATS, channels_last
from pyexecutorch.jit.blas import NUMPY_BLAS, gemm
from pyexecutorch.jit.variants import choose, njit_renamed, serial_and_parallel
from pyexecutorch.kernels.conv.compiled_dense import dense_step
from pyexecutorch.kernels.conv.compiled_pointwise import POINTWISE_DIRECT, pointwise_direct_pays
from pyexecutorch.kernels.conv.conv import signature_or_none
from pyexecutorch.kernels.registry import Const, Inline, KernelError, compiled_form, offer

# Without a BLAS for compiled code only the depthwise steps (plain loops) are offered and
# the products stay on numpy.
HAS_BLAS = NUMPY_BLAS or importlib.util.find_spec("scipy") is not None


# Both layout copies loop over pixels outside and channels inside, so that the NCHW side
# is read or written at a stride of one plane (rarely a large power of two), never of
# the channel count (512 or 1024 channels would map every such access to one cache set:
# 1024 channels at 7x7 took 174 us so against 43 us).
def _depthwise2d(x, wt, bias, xt, ot, out, sh, sw, ph, pw, dh, dw):  # noqa: ANN001, ANN201
    """out = bias + depthwise conv of x (NCHW), through channels-last copies xt and ot.

    wt is the weight as (kh, kw, channels): the innermost loop runs over
    channels, contiguous in xt, ot and wt, whatever the image's size.
    """
    n_batch, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    kh_n, kw_n = wt.shape[0], wt.shape[1]
    for n in range(n_batch):
        planes = x[n].reshape(channels, height * width)
        pixels = xt[n].reshape(height * width, channels)
        for p in prange(height * width):
            line = pixels[p]
            for c in range(channels):
                line[c] = planes[c, p]
    three = kh_n == 3 and kw_n == 3
    w00, w01, w02 = wt[0, 0], wt[0, kw_n - 1], wt[0, (kw_n - 1) // 2]
    w10, w11, w12 = wt[kh_n // 2, 0], wt[kh_n // 2, kw_n // 2], wt[kh_n // 2, kw_n - 1]
    w20, w21, w22 = wt[kh_n - 1, 0], wt[kh_n - 1, kw_n // 2], wt[kh_n - 1, kw_n - 1]
    if three:  # (above, any taps of the right type; only a 3x3 filter reads them)
        w01, w02 = wt[0, 1], wt[0, 2]
    for row in prange(n_batch * out_h):  # noqa: B020 - prange is range when serial
        n = row // out_h
        oh = row - n * out_h
        top = oh * sh - ph
        rows_inside = top >= 0 and top + 2 * dh < height
        for ow in range(out_w):
            acc = ot[n, oh, ow]
            left = ow * sw - pw
            if three and rows_inside and left >= 0 and left + 2 * dw < width:
                # all nine taps inside the image: one pass, one store per channel
                r, q0, q1, q2 = top, left, left + dw, left + 2 * dw
                a0, a1, a2 = xt[n, r, q0], xt[n, r, q1], xt[n, r, q2]
                r += dh
                b0, b1, b2 = xt[n, r, q0], xt[n, r, q1], xt[n, r, q2]
                r += dh
                c0, c1, c2 = xt[n, r, q0], xt[n, r, q1], xt[n, r, q2]
                for c in range(channels):
                    acc[c] = (
                        bias[c]
                        + w00[c] * a0[c]
                        + w01[c] * a1[c]
                        + w02[c] * a2[c]
                        + w10[c] * b0[c]
                        + w11[c] * b1[c]
                        + w12[c] * b2[c]
                        + w20[c] * c0[c]
                        + w21[c] * c1[c]
                        + w22[c] * c2[c]
                    )
                continue
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
        pixels = ot[n].reshape(out_h * out_w, channels)
        planes = out[n].reshape(channels, out_h * out_w)
        for p in prange(out_h * out_w):
            line = pixels[p]
            for c in range(channels):
                planes[c, p] = line[c]
    return out


# One source, two compilations: the parallel one only where the work pays for waking
# threads (a parallel region costs tens of microseconds, far more on a busy machine).
depthwise2d = njit_renamed(_depthwise2d, "depthwise2d", error_model="numpy")
depthwise2d_parallel = njit_renamed(
    _depthwise2d, "depthwise2d_parallel", parallel=True, error_model="numpy"
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
    *,
    whole: bool = False,
) -> Inline | ConvStep | None:
    """The depthwise 2-D float convolution (groups == channels, one filter each), else None.

    With ``whole`` (a step of a whole-method function): any float convolution
    :func:`conv_step` takes, and transposed ones (``compiled_transposed``).
    """
    if whole:
        if transposed is True:
            from pyexecutorch.kernels.conv import compiled_transposed  # noqa: PLC0415 - imports this

            make = compiled_transposed.transposed_step
        else:
            make = conv_step
        return make(
            input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out
        )
    if not (_tensor(input) and _tensor(weight) and _tensor(out)) or transposed:
        return None
    if _strided(input) or _strided(out):  # a channels-last activation (runtime.layout)
        return channels_last_step(
            input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out
        )
    dt = input.dtype
    if dt not in FLOATS or weight.dtype != dt or out.dtype != dt or input.ndim != 4:
        return None
    if bias is not None and (not _tensor(bias) or bias.dtype != dt):
        return None
    channels = input.shape[1]
    if not isinstance(groups, int) or groups != channels or weight.shape[:2] != (channels, 1):
        return None
    sig = signature_or_none(
        input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )
    if sig is None:
        return None
    s, p, d, shape, _ = sig
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


# ---------------------------------------------------------------------------
# Convolution steps for whole-method functions (see runtime.whole_method): every float
# 2-D convolution with constant weights as one compiled call on its planned arrays, so
# that a CNN can run as one function. Generic in shape (dtype and rank only), so the
# disk cache serves every model.


def _depthwise_planes(x, w, bias, pad, out, sh, sw, ph, pw, dh, dw):  # noqa: ANN001, ANN201
    """out = bias + depthwise conv of x, all NCHW, each plane as a few long loops.

    w is (channels, kh, kw); ``pad[plane]`` (see _padded) holds the plane zero-padded
    and split into its sh row phases, phase r holding padded rows r, r + sh, ...: each
    a block of (Hq, Wp) values, one flat run. Output row oh's tap row kh is row
    oh + (kh*dh)//sh of phase (kh*dh)%sh, so, read flat, every tap is one run shifted by
    a constant and a plane's output is computed as one loop over out_h * Wp values
    (the columns past the row's end are computed for nothing, and with a column stride
    every column is). Loops that long vectorize; loops over one output row (8-32 pixels)
    mostly ran in their scalar remainder, and gathering strided columns (or splitting the
    columns into phases) runs one element at a time. The result goes to the scratch run
    after the phases and every sw-th column of it to ``out``. A 3x3 filter at dilation 1
    takes its nine taps in one expression (constant offsets: an index plus a run-time
    offset is tested for being negative on every read), a 5x5 one a row of five taps a
    pass; others add a tap at a time.
    """
    n_batch, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    kh_n, kw_n = w.shape[1], w.shape[2]
    wp = width + 2 * pw
    hq = -(-(height + 2 * ph) // sh)
    block = hq * wp
    span = (out_h - 1) * wp + (out_w - 1) * sw + 1  # the values a plane computes
    tap_start = np.empty(kh_n, np.int64)  # where tap row kh's run begins
    for kh in range(kh_n):
        tap_start[kh] = ((kh * dh) % sh) * block + ((kh * dh) // sh) * wp
    first_phase, first_row = ph % sh, ph // sh
    nine = kh_n == 3 and kw_n == 3 and dw == 1
    five = kh_n == 5 and kw_n == 5 and dw == 1
    for plane in prange(n_batch * channels):  # noqa: B020 - prange is range when serial
        n = plane // channels
        c = plane - n * channels
        buf = pad[plane]
        src = x[n, c]
        phase, r = first_phase, first_row
        for h in range(height):  # the padding cells are never written (zero since load)
            line = src[h]
            dst = buf[phase * block + r * wp + pw :]
            for q in range(width):
                dst[q] = line[q]
            phase += 1
            if phase == sh:
                phase = 0
                r += 1
        full = buf[sh * block :]
        t = w[c]
        b = bias[c]
        if nine:
            w00, w01, w02 = t[0, 0], t[0, 1], t[0, 2]
            w10, w11, w12 = t[1, 0], t[1, 1], t[1, 2]
            w20, w21, w22 = t[2, 0], t[2, 1], t[2, 2]
            a = buf[tap_start[0] :]
            m = buf[tap_start[1] :]
            z = buf[tap_start[2] :]
            for i in range(span):
                full[i] = (
                    b
                    + w00 * a[i]
                    + w01 * a[i + 1]
                    + w02 * a[i + 2]
                    + w10 * m[i]
                    + w11 * m[i + 1]
                    + w12 * m[i + 2]
                    + w20 * z[i]
                    + w21 * z[i + 1]
                    + w22 * z[i + 2]
                )
        elif five:  # a 5x5 filter's row of taps a pass
            for i in range(span):
                full[i] = b
            for kh in range(5):
                v0, v1, v2, v3, v4 = t[kh, 0], t[kh, 1], t[kh, 2], t[kh, 3], t[kh, 4]
                s = buf[tap_start[kh] :]
                for i in range(span):
                    full[i] += (
                        v0 * s[i] + v1 * s[i + 1] + v2 * s[i + 2] + v3 * s[i + 3] + v4 * s[i + 4]
                    )
        else:
            for i in range(span):
                full[i] = b
            for kh in range(kh_n):
                for kw in range(kw_n):
                    tap = t[kh, kw]
                    s = buf[tap_start[kh] + kw * dw :]
                    for i in range(span):
                        full[i] += tap * s[i]
        plane_out = out[n, c]
        for oh in range(out_h):
            row = plane_out[oh]
            f = full[oh * wp :]
            if sw == 1:
                for i in range(out_w):
                    row[i] = f[i]
            else:
                for i in range(out_w):
                    row[i] = f[i * sw]
    return out


def _add_bias(out, bias):  # noqa: ANN001, ANN201
    """out (N, OC, P) += bias per output channel."""
    for n in range(out.shape[0]):
        for o in range(out.shape[1]):
            row = out[n, o]
            b = bias[o]
            for i in range(row.shape[0]):
                row[i] += b


_add_bias_jit = njit(cache=True, inline="always", error_model="numpy")(_add_bias)


def _pointwise_conv(x, wm, bias, out, has_bias):  # noqa: ANN001, ANN201
    """out (N, G, OCg, P) = wm (G, OCg, Cg) @ x (N, G, Cg, P), + bias: a 1x1 convolution,
    stride 1, no padding, multiplied on the input itself."""
    for n in range(x.shape[0]):
        for g in range(x.shape[1]):
            gemm(wm[g], x[n, g], out[n, g])
    if has_bias:
        _add_bias_jit(out.reshape(out.shape[0], out.shape[1] * out.shape[2], out.shape[3]), bias)
    return out


DEPTHWISE = serial_and_parallel(_depthwise_planes, "depthwise_planes")
# The products' threads are BLAS's own.
pointwise_conv = njit_renamed(_pointwise_conv, "pointwise_conv", error_model="numpy")


def _channels_last(out_h: int, out_w: int, kh: int, kw: int) -> bool:
    """Whether a depthwise step vectorizes over channels (through channels-last copies)
    rather than over each plane (:func:`_depthwise_planes`): for the smallest images only.

    The plane loops pay a fixed cost per plane and (other than 3x3) per tap, the
    channels-last loop two layout copies and a cost per pixel and tap. Measured one
    thread, us channels-last / planes: 3x3 at 4x4 out (192 channels) 12 / 18, 6x6 (64)
    7 / 16, 7x7 (1024) 166 / 137, 8x8 (96) 19 / 14, 16x16 (128) 171 / 37; 5x5 at 4x4
    (576) 36 / 139, 6x6 (96) 13 / 55, 8x8 (96) 35 / 37, 16x16 (48) 98 / 40.
    """
    limit = CHANNELS_LAST_PIXELS_3X3 if (kh, kw) == (3, 3) else CHANNELS_LAST_PIXELS
    return out_h * out_w <= limit


CHANNELS_LAST_PIXELS_3X3 = 36
CHANNELS_LAST_PIXELS = 64


def _padded(planes: int, h: int, w: int, s: tuple, p: tuple, dt: np.dtype) -> np.ndarray:
    """Zeroed buffers, one a plane (see _depthwise_planes): its padded image split into
    row phases, then a scratch run of the plane's computed values."""
    (sh, _), (ph, pw) = s, p
    wp = w + 2 * pw
    hq = -(-(h + 2 * ph) // sh)
    return np.zeros((planes, (sh * hq + hq) * wp), dt)


class ConvStep:
    """A convolution as a compiled call on its planned arrays (``step``); called as the
    kernel is, it runs that call when given those arrays and the reference otherwise."""

    def __init__(self, step: tuple, arrays: tuple, reference: Any):
        self._step = step
        self._arrays = arrays
        self._reference = reference
        offer(self, step=step, fills_outputs=True)  # out stays the planned array

    def __call__(self, x, w, b, stride, padding, dilation, transposed, output_padding, groups, out):  # noqa: ANN001, ANN204, E501
        x0, w0, b0, o0 = self._arrays
        if x is x0 and w is w0 and b is b0 and out is o0:
            fn, args = self._step
            fn(*args)
            return out
        return self._reference(
            x, w, b, stride, padding, dilation, transposed, output_padding, groups, out
        )


@dataclass(frozen=True)
class Planned:
    """A convolution's planned arrays that a compiled step may take, 1-D ones as 2-D images
    of height 1, with its geometry; ``originals`` are the arrays as the instruction has them
    (input, weight, bias, out)."""

    input: np.ndarray
    weight: np.ndarray
    out: np.ndarray
    stride: tuple
    padding: tuple
    dilation: tuple
    originals: tuple


def planned(
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
) -> Planned | None:
    """What every compiled convolution step needs of its arguments, or None: float32/float64,
    1-D or 2-D, constant weights and bias, dense input and output that share no memory, and
    arguments the reference kernel accepts for an output of ``out``'s shape."""
    if not (_tensor(input) and _tensor(weight) and _tensor(out)):
        return None
    dt = input.dtype
    if dt not in FLOATS or weight.dtype != dt or out.dtype != dt or input.ndim not in (3, 4):
        return None
    if bias is not None and (not _tensor(bias) or bias.dtype != dt or bias.flags.writeable):
        return None
    if weight.flags.writeable or not isinstance(groups, int) or groups <= 0:
        return None
    if not (input.flags.c_contiguous and out.flags.c_contiguous and out.flags.writeable):
        return None
    if np.shares_memory(input, out):
        return None
    sig = signature_or_none(
        input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )
    if sig is None:
        return None
    s, p, d, shape, _ = sig
    if shape != out.shape or out.size == 0 or input.size == 0 or weight.size == 0:
        return None
    originals = (input, weight, bias, out)
    if input.ndim == 3:  # 1-D: an image of height 1
        s, p, d = (1, *s), (0, *p), (1, *d)
        input = input.reshape(*input.shape[:2], 1, input.shape[2])
        out = out.reshape(*out.shape[:2], 1, out.shape[2])
        weight = weight.reshape(*weight.shape[:2], 1, weight.shape[2])
    return Planned(input, weight, out, tuple(s), tuple(p), tuple(d), originals)


def _strided(a: Any) -> bool:
    return isinstance(a, np.ndarray) and not a.flags.c_contiguous


def _one_pixel(*arrays: Any) -> bool:
    return all(
        isinstance(a, np.ndarray) and a.ndim == 4 and a.shape[2] * a.shape[3] == 1 for a in arrays
    )


def channels_last_step(
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
    **epilogue: Any,
) -> ConvStep | None:
    """A 2-D convolution reading or writing a channels-last activation (runtime.layout) as
    the step of :mod:`pyexecutorch.kernels.conv.compiled_nhwc`, or None. ``epilogue``:
    that step's ``low``, ``high`` and ``residual`` (the clamp and residual add after the
    convolution, see runtime.epilogue)."""
    from pyexecutorch.kernels.conv.compiled_nhwc import channels_last_conv_step  # noqa: PLC0415
    from pyexecutorch.kernels.conv.conv import convolution  # noqa: PLC0415

    if not (_tensor(input) and _tensor(weight) and _tensor(out)) or input.ndim != 4:
        return None
    if not all(channels_last(a) or a.flags.c_contiguous for a in (input, out)):
        return None
    if weight.flags.writeable or (bias is not None and (not _tensor(bias) or bias.flags.writeable)):
        return None
    sig = signature_or_none(
        input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )
    if sig is None:
        return None
    s, p, d, shape, _ = sig
    if shape != out.shape or out.size == 0 or isinstance(groups, bool):
        return None
    step = channels_last_conv_step(
        input, weight, bias, tuple(s), tuple(p), tuple(d), groups, out, **epilogue
    )
    if step is None:
        return None
    if epilogue:  # (the convolution alone is not what the step computes)
        return ConvStep(step, (input, weight, bias, out), _no_reference)
    return ConvStep(step, (input, weight, bias, out), convolution)


def _no_reference(*args: Any) -> Any:
    raise KernelError("a convolution with its epilogue runs only on its planned arrays")


def conv_step(
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
) -> ConvStep | None:
    """The convolution on these planned arrays as a compiled step, or None.

    Not transposed, and what :func:`planned` takes.
    """
    from pyexecutorch.kernels.conv.conv import convolution  # noqa: PLC0415

    if transposed:
        return None
    if _strided(input) or _strided(out) or _one_pixel(input, out):
        # (one pixel: both layouts are one memory; the channels-last kernels vectorize over
        # channels where these would run rows of one element)
        step = channels_last_step(
            input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out
        )
        if step is not None or not _one_pixel(input, out):
            return step
    plan = planned(
        input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out
    )
    if plan is None:
        return None
    input, weight, out = plan.input, plan.weight, plan.out
    s, p, d = plan.stride, plan.padding, plan.dilation
    dt = input.dtype
    n, c, h, w = input.shape
    oc, cg, kh, kw = weight.shape
    oh, ow = out.shape[2:]
    g = groups
    b = np.zeros(oc, dt) if bias is None else np.ascontiguousarray(bias)
    geometry = tuple(int(v) for v in (*s, *p, *d))
    macs = out.size * cg * kh * kw
    pointwise = (kh, kw) == (1, 1) and s == (1, 1) and p == (0, 0)
    if g == c and cg == 1 and oc == c and _channels_last(oh, ow, kh, kw):
        wt = np.ascontiguousarray(weight[:, 0].transpose(1, 2, 0))
        xt = np.empty((n, h, w, c), dt)
        ot = np.empty((n, oh, ow, c), dt)
        fn = (
            depthwise2d_parallel if macs >= PARALLEL_MACS and get_num_threads() > 1 else depthwise2d
        )
        step = (fn, (input, wt, b, xt, ot, out, *geometry))
    elif g == c and cg == 1 and oc == c:
        wd = np.ascontiguousarray(weight[:, 0])
        args = (input, wd, b, _padded(n * c, h, w, s, p, dt), out, *geometry)
        step = (choose(DEPTHWISE, macs // 8), args)
    elif pointwise and pointwise_direct_pays(cg):
        wm = np.ascontiguousarray(weight.reshape(g, oc // g, cg))
        x4, o4 = input.reshape(n, g, cg, h * w), out.reshape(n, g, oc // g, oh * ow)
        step = (choose(POINTWISE_DIRECT, macs // 8), (x4, wm, b, o4))
    elif not HAS_BLAS:
        return None
    else:
        wm = np.ascontiguousarray(weight.reshape(g, oc // g, cg * kh * kw))
        o4 = out.reshape(n, g, oc // g, oh * ow)
        has_bias = bias is not None
        if pointwise:
            x4 = input.reshape(n, g, cg, h * w)
            step = (pointwise_conv, (x4, wm, b, o4, has_bias))
        else:
            x5 = input.reshape(n, g, cg, h, w)
            o5 = out.reshape(n, g, oc // g, oh, ow)
            step = dense_step(x5, weight, b, o5, s, p, d)
    return ConvStep(step, plan.originals, convolution)
