"""Channels-last (NHWC) numpy convolutions, built once and run as a few numpy calls.

The forms a channels-last graph runs without the compiled tier (the XNNPACK delegate's
interpreter: activations ``[n, h, w, c]``, filters ``[out, kh, kw, in / groups]``,
depthwise filters ``[1, kh, kw, channels * multiplier]``, padding given per side). Each
builder takes the input and output as an :class:`Operand` (a getter, and the array itself
when it is the same on every call) and returns the steps, closures over buffers made
here, that compute the convolution plus bias into the output; ``finish`` then runs on the
output (the caller's clamp).

* dense: a 1x1 convolution is one product over the pixels; others copy the im2col view
  of the (padded) input into a column buffer, one strided copy a group, then one product;
* depthwise: small outputs as one einsum over the im2col view, larger ones as one
  multiply-add a tap over whole rows of pixels and channels;
* transposed: one product per group spreading each pixel over its window, scatter-added
  tap by tap into a full-size accumulator, then cropped by the padding.

The window arithmetic is :mod:`pyexecutorch.kernels.conv.geometry`'s. NCHW tensors take
the reference kernels of :mod:`pyexecutorch.kernels.conv.conv`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pyexecutorch.kernels.conv import geometry

Step = Callable[[], None]
Finish = Callable[[np.ndarray], None]
_F32 = np.dtype(np.float32)

# Depthwise outputs (times taps) up to this many elements use one einsum; windowed inputs
# from this many elements on are split into stride phases.
EINSUM_LIMIT = 1 << 21
PHASE_LIMIT = 1 << 16


@dataclass(frozen=True)
class Operand:
    """An array a step reads or writes: ``get()`` returns it on each call; ``fixed`` is the
    array itself when it is the same object on every call (planned memory), else None."""

    get: Callable[[], np.ndarray]
    fixed: np.ndarray | None = None


@dataclass(frozen=True)
class Window:
    """A 2-D sliding window over an NHWC input, padded per side (top, right, bottom, left)."""

    n: int
    h: int
    w: int
    c: int
    pads: tuple[int, int, int, int]
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int

    @property
    def oh(self) -> int:
        return geometry.out_size(self.h, self.kh, self.sh, self.dh, self.pads[0], self.pads[2])

    @property
    def ow(self) -> int:
        return geometry.out_size(self.w, self.kw, self.sw, self.dw, self.pads[3], self.pads[1])

    @property
    def padded_shape(self) -> tuple[int, int, int, int]:
        t, r, bo, le = self.pads
        return (self.n, self.h + t + bo, self.w + le + r, self.c)

    def fits(self) -> bool:
        """Whether one window fits the padded input (at least one output each way)."""
        _, hp, wp, _ = self.padded_shape
        return hp >= geometry.extent(self.kh, self.dh) and wp >= geometry.extent(self.kw, self.dw)

    def taps(self, src: np.ndarray) -> list[np.ndarray]:
        """For each kernel tap (row-major), the ``[n, oh, ow, c]`` view of the padded
        input ``src`` that it reads."""
        oh, ow, sh, sw = self.oh, self.ow, self.sh, self.sw
        return [
            src[
                :,
                i * self.dh : i * self.dh + sh * (oh - 1) + 1 : sh,
                j * self.dw : j * self.dw + sw * (ow - 1) + 1 : sw,
            ]
            for i in range(self.kh)
            for j in range(self.kw)
        ]

    def columns(self, src: np.ndarray) -> np.ndarray:
        """The ``[n, oh, ow, kh, kw, c]`` im2col view of the padded input ``src``."""
        sn, sy, sx, sc = src.strides
        return np.lib.stride_tricks.as_strided(
            src,
            shape=(self.n, self.oh, self.ow, self.kh, self.kw, src.shape[3]),
            strides=(sn, sy * self.sh, sx * self.sw, sy * self.dh, sx * self.dw, sc),
            writeable=False,
        )


class TapSource:
    """Fixed buffers holding the input of a windowed node, and each tap's view of them.

    The input is copied once per call: into a buffer with a ``fill`` border when the
    window pads (or the input is not the same array every call), or, for strided windows
    when ``phased``, into one plane per (row, column) phase of the stride, so that every
    tap reads a unit-stride view whose rows numpy can traverse as one run. ``steps`` are
    the copies; ``src`` is the (padded) input, None when phased; ``views`` each tap's.
    """

    def __init__(self, x: Operand, dtype: np.dtype, win: Window, fill: float, phased: bool) -> None:
        self.steps: list[Step] = []
        self.src: np.ndarray | None = None
        if phased and (win.sh > 1 or win.sw > 1):
            self.views = self._phases(x.get, dtype, win, fill)
        elif any(win.pads) or x.fixed is None:
            t, le = win.pads[0], win.pads[3]
            buf = np.full(win.padded_shape, fill, dtype)
            inner = buf[:, t : t + win.h, le : le + win.w]
            get = x.get

            def pad() -> None:
                np.copyto(inner, get())

            self.steps.append(pad)
            self.src = buf
            self.views = win.taps(buf)
        else:
            self.src = x.fixed
            self.views = win.taps(self.src)

    def _phases(
        self, get: Callable[[], np.ndarray], dtype: np.dtype, win: Window, fill: float
    ) -> list[np.ndarray]:
        t, le = win.pads[0], win.pads[3]
        sh, sw = win.sh, win.sw
        _, hp, wp, _ = win.padded_shape
        planes: dict[tuple[int, int], np.ndarray] = {}
        views = []
        for i in range(win.kh):
            for j in range(win.kw):
                py, oy = geometry.tap_phase(i, sh, win.dh)
                px, ox = geometry.tap_phase(j, sw, win.dw)
                if (py, px) not in planes:
                    shape = (win.n, len(range(py, hp, sh)), len(range(px, wp, sw)), win.c)
                    planes[(py, px)] = np.full(shape, fill, dtype)
                views.append(planes[(py, px)][:, oy : oy + win.oh, ox : ox + win.ow])
        copies = []
        for (py, px), plane in planes.items():
            # the plane's first row and column inside the image, and where they come from
            r0, _ = geometry.span_inside(py - t, sh, plane.shape[1], win.h)
            c0, _ = geometry.span_inside(px - le, sw, plane.shape[2], win.w)
            y0, x0 = py + r0 * sh - t, px + c0 * sw - le
            rows, cols = len(range(y0, win.h, sh)), len(range(x0, win.w, sw))
            if rows and cols:
                key = (slice(None), slice(y0, None, sh), slice(x0, None, sw))
                copies.append((plane[:, r0 : r0 + rows, c0 : c0 + cols], key))

        def split() -> None:
            x = get()
            for dst, key in copies:
                np.copyto(dst, x[key])

        self.steps.append(split)
        return views


def _product(o2: np.ndarray, a: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> None:
    np.matmul(a, w, out=o2)
    if bias is not None:
        np.add(o2, bias, out=o2)


def conv2d_steps(
    win: Window,
    weight: np.ndarray,
    groups: int,
    bias: np.ndarray | None,
    x: Operand,
    out: Operand,
    finish: Finish,
) -> list[Step]:
    """``out [n, oh, ow, groups * cout] = conv2d(x, weight [groups * cout, kh, kw, cin])
    + bias``, then ``finish(out as [pixels, channels])``; float32."""
    g, cin = groups, weight.shape[3]
    cout = weight.shape[0] // g
    m = win.n * win.oh * win.ow
    kk = win.kh * win.kw * cin
    # [out, kh, kw, in] -> per group the [kh*kw*in, out] matrix of the im2col product.
    wmats = [
        np.ascontiguousarray(weight[q * cout : (q + 1) * cout].reshape(cout, kk).T)
        for q in range(g)
    ]
    o_get = out.get
    o2_fixed = None if out.fixed is None else out.fixed.reshape(m, g * cout)

    def out2d() -> np.ndarray:
        return o2_fixed if o2_fixed is not None else o_get().reshape(m, g * cout)

    if g == 1 and win.kh == win.kw == win.sh == win.sw == 1 and not any(win.pads):
        # A 1x1 convolution is one matmul over the NHWC pixels.
        wmat, x_get = wmats[0], x.get
        a2 = None if x.fixed is None else x.fixed.reshape(m, kk)

        def pointwise() -> None:
            o2 = out2d()
            _product(o2, a2 if a2 is not None else x_get().reshape(m, kk), wmat, bias)
            finish(o2)

        return [pointwise]
    source = TapSource(x, _F32, win, 0.0, phased=False)
    # im2col: one strided copy per group into [pixels, kh*kw*in] columns, then one matmul.
    cols = [np.empty((win.n, win.oh, win.ow, win.kh, win.kw, cin), _F32) for _ in range(g)]
    views = [win.columns(source.src[..., q * cin : (q + 1) * cin]) for q in range(g)]
    col2d = [c.reshape(m, kk) for c in cols]

    def conv() -> None:
        for dst, view in zip(cols, views, strict=True):
            np.copyto(dst, view)
        o2 = out2d()
        if g == 1:
            _product(o2, col2d[0], wmats[0], bias)
        else:
            for q in range(g):
                o2[:, q * cout : (q + 1) * cout] = col2d[q] @ wmats[q]
            if bias is not None:
                np.add(o2, bias, out=o2)
        finish(o2)

    return [*source.steps, conv]


def depthwise_steps(
    win: Window,
    weight: np.ndarray,
    multiplier: int,
    bias: np.ndarray | None,
    x: Operand,
    out: Operand,
    finish: Finish,
) -> list[Step]:
    """``out [n, oh, ow, c * multiplier]`` = the depthwise convolution of ``x`` with
    ``weight [1, kh, kw, c * multiplier]`` + bias, then ``finish(out)``; float32."""
    channels, mult = win.c, multiplier
    oh, ow = win.oh, win.ow
    o_get, fixed_out = out.get, out.fixed
    flat_shape = (win.n, oh, ow, channels * mult)
    small = math.prod(flat_shape) * win.kh * win.kw <= EINSUM_LIMIT
    source = TapSource(x, _F32, win, 0.0, phased=not small)

    def done(flat: np.ndarray) -> None:
        if bias is not None:
            np.add(flat, bias, out=flat)
        finish(flat)

    if small:
        # Small outputs: one einsum over the im2col view beats a call per tap.
        cols = win.columns(source.src)
        wk = np.ascontiguousarray(weight[0].reshape(win.kh, win.kw, channels, mult))
        shape5 = (win.n, oh, ow, channels, mult)

        def depthwise_small() -> None:
            flat = fixed_out if fixed_out is not None else o_get()
            np.einsum("nhwijc,ijcm->nhwcm", cols, wk, out=flat.reshape(shape5))
            done(flat)

        return [*source.steps, depthwise_small]
    taps = [weight[0, i, j] for i in range(win.kh) for j in range(win.kw)]
    if mult == 1:
        # Each tap's weights repeated along the output row, so that a row of pixels and
        # channels is one contiguous run for numpy.
        weights = [np.ascontiguousarray(np.broadcast_to(t, (ow, channels))) for t in taps]
        views = source.views
        shape = flat_shape
    else:
        weights = [np.ascontiguousarray(t.reshape(channels, mult)) for t in taps]
        views = [v[..., None] for v in source.views]
        shape = (win.n, oh, ow, channels, mult)
    tmp = np.empty(shape, _F32)
    pairs = list(zip(views, weights, strict=True))
    (v0, w0), rest = pairs[0], pairs[1:]

    def depthwise() -> None:
        flat = fixed_out if fixed_out is not None else o_get()
        o = flat.reshape(shape)
        np.multiply(v0, w0, out=o)
        for v, wt in rest:
            np.multiply(v, wt, out=tmp)
            np.add(o, tmp, out=o)
        done(flat)

    return [*source.steps, depthwise]


def transposed_out_hw(win: Window, adjust: tuple[int, int]) -> tuple[int, int]:
    """(oh, ow) of a transposed convolution over ``win``'s input (its pads crop the full
    output; ``adjust`` adds rows and columns at the end)."""
    t, r, bo, le = win.pads
    return (
        geometry.transposed_out_size(win.h, win.kh, win.sh, win.dh, t, bo, adjust[0]),
        geometry.transposed_out_size(win.w, win.kw, win.sw, win.dw, le, r, adjust[1]),
    )


def conv_transpose2d_steps(
    win: Window,
    weight: np.ndarray,
    groups: int,
    adjust: tuple[int, int],
    bias: np.ndarray | None,
    x: Operand,
    out: Operand,
    finish: Finish,
    dtype: np.dtype = _F32,
) -> list[Step]:
    """``out`` = the transposed convolution of ``x`` with ``weight [groups * cout, kh, kw,
    cin]`` + bias, then ``finish(out)``; in ``dtype`` (float32; float64 holds the exact
    integer sums of quantized operands)."""
    nb, h, wd, c = win.n, win.h, win.w, win.c
    g, cin = groups, weight.shape[3]
    cout = weight.shape[0] // g
    kh, kw, sh, sw, dh, dw = win.kh, win.kw, win.sh, win.sw, win.dh, win.dw
    pt, pl = win.pads[0], win.pads[3]
    oh, ow = transposed_out_hw(win, adjust)
    full_h, full_w = oh + pt + win.pads[2], ow + pl + win.pads[1]
    m = nb * h * wd
    # Per group: [in, kh*kw*out] so that x @ W gives each pixel's contribution to every tap.
    wmats = [
        np.ascontiguousarray(
            weight[q * cout : (q + 1) * cout].transpose(3, 1, 2, 0).reshape(cin, kh * kw * cout),
            dtype=dtype,
        )
        for q in range(g)
    ]
    acc = np.zeros((nb, full_h, full_w, g * cout), dtype)
    cols = np.empty((m, kh * kw * cout), dtype)
    adds = []
    cview = cols.reshape(nb, h, wd, kh, kw, cout)
    for q in range(g):
        for i in range(kh):
            for j in range(kw):
                dst = acc[
                    :,
                    i * dh : i * dh + sh * (h - 1) + 1 : sh,
                    j * dw : j * dw + sw * (wd - 1) + 1 : sw,
                ]
                adds.append((q, dst[..., q * cout : (q + 1) * cout], cview[:, :, :, i, j, :]))
    crop = acc[:, pt : pt + oh, pl : pl + ow]
    x_get, o_get = x.get, out.get

    def run() -> None:
        acc.fill(0.0)
        x2 = x_get().reshape(m, c)
        for q in range(g):
            np.matmul(x2[:, q * cin : (q + 1) * cin], wmats[q], out=cols)
            for qq, dst, src in adds:
                if qq == q:
                    np.add(dst, src, out=dst)
        o = o_get()
        np.copyto(o, crop)
        if bias is not None:
            np.add(o, bias, out=o)
        finish(o)

    return [run]
