"""Transposed convolutions as whole-method steps (compiled tier): one BLAS product, then col2im.

Per image and group, ``col = wt @ x`` gives every input pixel's contribution to every
(output channel, tap) (wt: the weight as (OCg*kh*kw, Cg), transposed once at load);
then each output plane starts at its bias and adds its taps' rows, in tap order, at the
output positions ``i*stride - padding + tap*dilation`` that lie inside the output. That
is the reference's sum in the reference's order (``conv.conv_transpose_forward``: the
bias, then one scatter-add per tap). Strides, padding, dilation, output padding (only
the output's size) and groups of 1-D and 2-D float convolutions with constant weights.

Reached through the convolution's compiled form (``compiled.py``) when it is asked for
a whole-method step of a transposed convolution.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from pyexecutorch.jit.blas import gemm
from pyexecutorch.kernels.conv.compiled import HAS_BLAS, ConvStep, planned


# (named as it is imported: whole-method functions import their steps by name; the
# products' threads are BLAS's own)
@njit(cache=True, error_model="numpy")
def conv_transpose(x, wt, bias, col, out, sh, sw, ph, pw, dh, dw, kh_n, kw_n, width):  # noqa: ANN001, ANN201
    """out (N, G, OCg, OH, OW) = transposed convolution of x (N, G, Cg, H*W) by wt
    (G, OCg*kh*kw, Cg), + bias (G, OCg); ``col`` (OCg*kh*kw, H*W) is scratch."""
    n_batch, groups, ocg, out_h, out_w = out.shape
    height = x.shape[3] // width
    for n in range(n_batch):
        for g in range(groups):
            gemm(wt[g], x[n, g], col)
            for o in range(ocg):
                plane = out[n, g, o]
                b = bias[g, o]
                for i in range(out_h):
                    line = plane[i]
                    for j in range(out_w):
                        line[j] = b
                for kh in range(kh_n):
                    for kw in range(kw_n):
                        taps = col[(o * kh_n + kh) * kw_n + kw]
                        shift = kw * dw - pw
                        # the input columns whose output column lies inside [0, out_w)
                        first = max(0, (sw - 1 - shift) // sw)
                        last = min(width, (out_w - 1 - shift) // sw + 1)
                        for ih in range(height):
                            oh = ih * sh + kh * dh - ph
                            if oh < 0 or oh >= out_h:
                                continue
                            line = plane[oh]
                            src = taps[ih * width : (ih + 1) * width]
                            for iw in range(first, last):
                                line[iw * sw + shift] += src[iw]
    return out


def transposed_step(
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
    """The transposed convolution on these planned arrays as a compiled step, or None:
    what :func:`compiled.planned` takes, and a BLAS for compiled code."""
    from pyexecutorch.kernels.conv.conv import convolution  # noqa: PLC0415

    if transposed is not True or not HAS_BLAS:
        return None
    plan = planned(
        input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out
    )
    if plan is None:
        return None
    input, weight, out = plan.input, plan.weight, plan.out
    s, p, d = plan.stride, plan.padding, plan.dilation
    dt = input.dtype
    n, c, h, w = input.shape
    _, ocg, kh, kw = weight.shape
    g = groups
    cg = c // g
    rows = ocg * kh * kw
    wt = np.ascontiguousarray(weight.reshape(g, cg, rows).transpose(0, 2, 1))
    b = np.zeros((g, ocg), dt) if bias is None else np.ascontiguousarray(bias).reshape(g, ocg)
    x4 = input.reshape(n, g, cg, h * w)
    o5 = out.reshape(n, g, ocg, *out.shape[2:])
    col = np.empty((rows, h * w), dt)
    geometry = tuple(int(v) for v in (*s, *p, *d))
    step = (conv_transpose, (x4, wt, b, col, o5, *geometry, kh, kw, w))
    return ConvStep(step, plan.originals, convolution)
