"""The pieces the channels-last convolution kernels share (compiled tier): the layout of
their int64 ``geometry`` argument, the epilogue of a store (residual added, clamp), masked
stores of a few pixels, the zero-padded copy of the input, and the copy of a channels-last
result into NCHW planes. See :mod:`pyexecutorch.kernels.conv.compiled_nhwc` for the step
these kernels make.
"""

from __future__ import annotations

from numba import njit, prange

from pyexecutorch.jit import simd
from pyexecutorch.jit.link_only import link_only
from pyexecutorch.jit.xnnpack_math import vector_hardswish, vector_silu

# Pieces are plain numba functions called by the kernels (_part, _call): each compiles
# once per dtype and LLVM inlines the small ones (_call) into their callers when it
# optimizes the linked module, where numba's own inlining (inline="always") deep-copies
# and retypes a piece's IR at every site (a cold compile 19 s CPU per kernel and dtype
# with it, 10-13 s without, the same speed). Tuples of vectors cross such calls, as
# arguments and as results. _inline stays for the depthwise kernel's few vector helpers.
# numba's analysis of parallel loops takes no vectors in tuples: each job is a part that
# the (parallel) loop calls. Parts take pointers, not arrays (see jit.simd.pointer). The
# copies, parallel loops over scalars, are inlined into the kernels (_loops: there they
# run in parallel).
_part = link_only(error_model="numpy")
_inline = njit(inline="always", error_model="numpy")
_call = link_only(error_model="numpy")
_loops = njit(inline="always", error_model="numpy")
# A piece LLVM inlines into every caller whatever its inliner judges (where a call cost
# more than the code it saves: see the kernels' uses).
_always = link_only(error_model="numpy", forceinline=True)

# Layout of the int64 ``geometry`` argument (see channels_last_conv_step).
(
    _N,
    _H,  # the input's
    _W,
    _CIN,
    _X_NHWC,  # whether the input is channels-last
    _XS_IMAGE,  # element strides of what the kernel reads (the input or its padded copy):
    _XS_ROW,  # per image, row, column, channel
    _XS_COL,
    _XS_CHAN,
    _OH,
    _OW,
    _COUT,
    _KH,
    _KW,
    _SH,
    _SW,
    _PH,
    _PW,
    _DH,
    _DW,
    _RUNS,  # the dense kernel: runs of _RUN_LEN weight units, _RUN_STEP elements apart,
    _RUN_LEN,  # from the offsets ``runs``
    _RUN_STEP,
    _HAS_RESIDUAL,
    _TO_PLANES,  # out is a channels-last buffer, copied to the NCHW ``planes``
    _COPY,  # 1: the input is first copied zero-padded, in its layout; 2: NCHW into NHWC
    _PIXELS_PER_VECTOR,  # (depthwise) pixels a vector spans (channels fewer than its lanes)
    _BANDS,  # (depthwise) bands of output rows a channel vector's work is split into
    _PAIRED,  # (dense) outputs in half a vector: two input elements a lane pair
    _GROUPS,  # groups of channel vectors (dense: vector pairs) an image's work is split into
    _PIXEL_MAJOR,  # (depthwise) 1: 3x3 copied, pixel by pixel; 2: clipped taps; 3: tiled
    _STRIPS,  # (dense) strips of output pixels an image is split into (whole tiles of 8)
    _BANDED,  # (dense) strips are bands of output rows that copy their input rows
    _ACTIVATION,  # SILU or HARDSWISH (below) applied to the clamped sums (channels-last)
    _GEOMETRY_SIZE,
) = range(35)

# The dtype's ``scalars`` argument: the clamp's bounds, then -inf and inf.
_LOW, _HIGH, _NO_LOW, _NO_HIGH = range(4)

# The kernels' ``has_residual`` argument is a set of these epilogue flags: the residual
# added, then (after the clamp) x * sigmoid(x) (XNNPACK's sigmoid) or hardswish.
RESIDUAL, SILU, HARDSWISH = 1, 2, 4


@_call
def _epilogue(g):  # noqa: ANN001, ANN202
    """The epilogue flags of geometry ``g``'s stores: a residual and an activation where
    the kernel writes the channels-last output itself (else _to_planes adds the residual)."""
    if g[_TO_PLANES] != 0:
        return 0
    return (RESIDUAL if g[_HAS_RESIDUAL] != 0 else 0) | g[_ACTIVATION]


@_call
def _activated(v, flags):  # noqa: ANN001, ANN202
    """``v`` with the activation among the epilogue ``flags`` applied."""
    if flags & SILU:
        return vector_silu(v)
    if flags & HARDSWISH:
        return vector_hardswish(v)
    return v


@_call
def _finish_whole(op, o, acc, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """op[o : o + L] = clamp(acc + rp[o : o + L], low, high), then its activation (the
    flags ``has_residual``: see _epilogue)."""
    if has_residual & RESIDUAL:
        acc = simd.add(acc, simd.load(rp, o))
    simd.store(op, o, _activated(simd.clamp(acc, low, high), has_residual))


@_call
def _finish(op, o, acc, count, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """op[o : o + count] = clamp(acc + rp[o : o + count], low, high)[:count]; nothing when
    count is 0 (the residual read before the store, so rp may be op)."""
    if count >= simd.lanes_of(op):
        _finish_whole(op, o, acc, rp, has_residual, low, high)
    elif count > 0:
        if has_residual & RESIDUAL:
            acc = simd.add(acc, simd.load_first(rp, o, count))
        simd.store_first(op, o, _activated(simd.clamp(acc, low, high), has_residual), count)


# ---------------------------------------------------------------------------
# Copies on the way in and out.


@_part
def _copy_run(sp, s, dp, d, count):  # noqa: ANN001, ANN202
    """dp[d : d + count] = sp[s : s + count], by vectors."""
    lanes = simd.lanes_of(dp)
    i = 0
    while i + lanes <= count:
        simd.store(dp, d + i, simd.load(sp, s + i))
        i += lanes
    if i < count:
        simd.store_first(dp, d + i, simd.load_first(sp, s + i, count - i), count - i)


@_call
def _pad_rows(sp, dp, g, n, r0, r1):  # noqa: ANN001, ANN202
    """Input rows [r0, r1) of image n into the interior of its zero-padded copy (the border
    was zeroed at load): in its own layout (_COPY 1), or NCHW into NHWC (_COPY 2)."""
    height, width, channels = g[_H], g[_W], g[_CIN]
    ph, pw = g[_PH], g[_PW]
    hp, wp = height + 2 * ph, width + 2 * pw
    lanes = simd.lanes_of(dp)
    plane = height * width
    for h in range(r0, r1):
        if g[_COPY] == 2:
            d = ((n * hp + h + ph) * wp + pw) * channels
            src = n * channels * plane + h * width
            done = 0
            if channels == 3:  # (an image's three planes: whole vectors interleaved)
                while done + lanes <= width:
                    x0, x1 = simd.load(sp, src + done), simd.load(sp, src + done + plane)
                    x2 = simd.load(sp, src + done + 2 * plane)
                    simd.store_interleaved3(dp, d + 3 * done, x0, x1, x2)
                    done += lanes
            for w in range(done, width):
                for c in range(channels):
                    dp[d + w * channels + c] = sp[src + w + c * plane]
        elif g[_X_NHWC] != 0:
            d = ((n * hp + h + ph) * wp + pw) * channels
            _copy_run(sp, (n * height + h) * width * channels, dp, d, width * channels)
        else:  # (each channel's plane row)
            for c in range(channels):
                image = n * channels + c
                d = (image * hp + h + ph) * wp + pw
                _copy_run(sp, (image * height + h) * width, dp, d, width)


@_loops
def _pad_input(x, buffer, g):  # noqa: ANN001, ANN202
    """The whole input into the interior of its zero-padded copy (_pad_rows), a row at a
    time (in parallel in the parallel kernels)."""
    height = g[_H]
    # (g by pointer, as the jobs pass it: one compiled _pad_rows for both)
    sp, dp, gp = simd.pointer(x), simd.pointer(buffer), simd.pointer(g)
    for r in prange(g[_N] * height):
        n = r // height
        h = r - n * height
        _pad_rows(sp, dp, gp, n, h, h + 1)


@_loops
def _to_planes(scratch, planes, residual, has_residual, lo, hi, n_batch, pixels, c_out):  # noqa: ANN001, ANN202
    """planes (N, C, P) = clamp(scratch (N, P, C) + residual (N, C, P), lo, hi), scalar by
    scalar (each residual element read before its store: it may be planes itself). Pixels
    outside, so that the NCHW side is accessed at a stride of one plane, never of the
    channel count (a large power of two maps every such access to one cache set)."""
    sp, pp, rp = simd.pointer(scratch), simd.pointer(planes), simd.pointer(residual)
    for job in prange(n_batch * pixels):
        n = job // pixels
        p = job - n * pixels
        src = job * c_out
        dst = n * c_out * pixels + p
        for c in range(c_out):
            v = sp[src + c]
            if has_residual:
                v += rp[dst]
            if v < lo:  # (comparisons false for NaN: it stays)
                v = lo
            if v > hi:
                v = hi
            pp[dst] = v
            dst += pixels


@_call
def _store_pixels4(op, o, step, stored, count, v, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """The first ``stored`` of 4 pixels' vectors v_m (``count`` lanes) at op[o + m * step:]."""
    if stored >= 4 and count >= simd.lanes_of(op):
        v0, v1, v2, v3 = v
        _finish_whole(op, o, v0, rp, has_residual, low, high)
        _finish_whole(op, o + step, v1, rp, has_residual, low, high)
        _finish_whole(op, o + 2 * step, v2, rp, has_residual, low, high)
        _finish_whole(op, o + 3 * step, v3, rp, has_residual, low, high)
    else:
        _store_some4(op, o, step, stored, count, v, rp, has_residual, low, high)


@_part
def _store_some4(op, o, step, stored, count, v, rp, has_residual, low, high):  # noqa: ANN001, ANN202
    """_store_pixels4 of fewer pixels or a channel tail (see _store_some8)."""
    v0, v1, v2, v3 = v
    _finish(op, o, v0, count if stored > 0 else 0, rp, has_residual, low, high)
    _finish(op, o + step, v1, count if stored > 1 else 0, rp, has_residual, low, high)
    _finish(op, o + 2 * step, v2, count if stored > 2 else 0, rp, has_residual, low, high)
    _finish(op, o + 3 * step, v3, count if stored > 3 else 0, rp, has_residual, low, high)


@_call
def _div(a, b):  # noqa: ANN001, ANN202
    """a // b, without dividing by 1 (a division costs tens of cycles)."""
    return a if b == 1 else a // b
