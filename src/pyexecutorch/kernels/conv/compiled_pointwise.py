"""A 1x1 convolution with few input channels as direct loops (compiled tier).

With K input channels per group, out[o] = bias[o] + sum over k of w[o, k] * x[k], every
term a whole row of pixels. BLAS packs both operands and blocks for a long K; at K of a
few to a few dozen (MobileNet's and EfficientNet's expansions: 8 to 48 input channels)
that overhead is most of the call: 8 -> 48 channels at 32x32 took 34-41 us in sgemm. Here
each output row is a few passes over its pixels, four input channels a pass, so each pass
loads and stores the row once for four multiply-adds; the pixel loop is long and
vectorizes. :func:`pointwise_direct_pays` picks it over the BLAS product at load.
"""

from __future__ import annotations

from numba import prange

from pyexecutorch.jit.variants import serial_and_parallel


def _pointwise_direct(x, wm, bias, out):  # noqa: ANN001, ANN201
    """out (N, G, OCg, P) = wm (G, OCg, Cg) @ x (N, G, Cg, P) + bias (G*OCg)."""
    n_batch, groups, k_n, pixels = x.shape
    ocg = wm.shape[1]
    tiles = -(-pixels // TILE)
    for job in prange(n_batch * groups * tiles):  # noqa: B020 - prange is range when serial
        n = job // (groups * tiles)
        rest = job - n * groups * tiles
        g = rest // tiles
        p0 = (rest - g * tiles) * TILE
        p1 = min(pixels, p0 + TILE)
        xs = x[n, g]
        for o in range(ocg):
            row = out[n, g, o][p0:p1]
            wo = wm[g, o]
            b = bias[g * ocg + o]
            if k_n == 8:  # (MobileNets' narrow layers: all eight in one pass)
                w0, w1, w2, w3 = wo[0], wo[1], wo[2], wo[3]
                w4, w5, w6, w7 = wo[4], wo[5], wo[6], wo[7]
                x0, x1, x2, x3 = xs[0][p0:p1], xs[1][p0:p1], xs[2][p0:p1], xs[3][p0:p1]
                x4, x5, x6, x7 = xs[4][p0:p1], xs[5][p0:p1], xs[6][p0:p1], xs[7][p0:p1]
                for i in range(p1 - p0):
                    row[i] = (
                        b
                        + w0 * x0[i]
                        + w1 * x1[i]
                        + w2 * x2[i]
                        + w3 * x3[i]
                        + w4 * x4[i]
                        + w5 * x5[i]
                        + w6 * x6[i]
                        + w7 * x7[i]
                    )
                continue
            if k_n >= 4:
                w0, w1, w2, w3 = wo[0], wo[1], wo[2], wo[3]
                x0, x1, x2, x3 = xs[0][p0:p1], xs[1][p0:p1], xs[2][p0:p1], xs[3][p0:p1]
                for i in range(p1 - p0):
                    row[i] = b + w0 * x0[i] + w1 * x1[i] + w2 * x2[i] + w3 * x3[i]
                k = 4
            else:
                w0, x0 = wo[0], xs[0][p0:p1]
                for i in range(p1 - p0):
                    row[i] = b + w0 * x0[i]
                k = 1
            while k + 4 <= k_n:
                w0, w1, w2, w3 = wo[k], wo[k + 1], wo[k + 2], wo[k + 3]
                x0, x1 = xs[k][p0:p1], xs[k + 1][p0:p1]
                x2, x3 = xs[k + 2][p0:p1], xs[k + 3][p0:p1]
                for i in range(p1 - p0):
                    row[i] += w0 * x0[i] + w1 * x1[i] + w2 * x2[i] + w3 * x3[i]
                k += 4
            while k < k_n:
                w0, x0 = wo[k], xs[k][p0:p1]
                for i in range(p1 - p0):
                    row[i] += w0 * x0[i]
                k += 1
    return out


# Pixels a job takes: its K input rows stay in L1 (8 channels x 256 float32 = 8 KB)
# while every output channel passes over them.
TILE = 256


POINTWISE_DIRECT = serial_and_parallel(_pointwise_direct, "pointwise_direct")


def pointwise_direct_pays(in_channels: int) -> bool:
    """Whether a 1x1 convolution with ``in_channels`` input channels a group runs as the
    direct loops rather than one BLAS product per group. Measured one thread, us direct /
    sgemm: K=8 to 48 channels at 32x32 19-22 / 37-45, K=8 at 16x16 8 / 9, K=4 to 64 at
    64x64 63-87 / 157-175; from K=16 BLAS is level or ahead (16 -> 96 at 16x16 21-25 /
    14-22, 32 -> 32 at 16x16 15-16 / 9-12)."""
    return in_channels <= DIRECT_MAX_CHANNELS


DIRECT_MAX_CHANNELS = 8
