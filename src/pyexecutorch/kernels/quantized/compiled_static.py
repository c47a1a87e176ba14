"""Static int8 kernels, compiled: XNNPACK's ``qs8`` convolutions, fully connected
layers, additions, pooling and conversions, bit-exact with the numpy interpreter.

Arithmetic (XNNPACK's, as :mod:`pyexecutorch.backends.xnnpack.nodes_quantized` states it):

* products accumulate ``(x - zx) * w`` exactly in int32 with the int32 bias, then
  requantize ``y = clamp(rint(float32(acc) * scale[c]), lo - zy, hi - zy) + zy``, the
  float32 scale ``x_scale * w_scale[c] / y_scale`` made at load, ties to even;
* an addition's 21-bit fixed point: ``(a * am + b * bm + bias) >> shift`` in int64;
* average pools requantize the window's sum less ``count * zx``.

:func:`gemm` is the dense product under convolutions and fully connected layers: rows of
int8 inputs (four a 32-bit word) against weights packed at load by :func:`pack_weights`
in tiles of ``L`` output channels (4 inputs of a channel 4 consecutive bytes), one
``vpdpbusd`` adding 4 inputs of ``L`` channels
(:func:`~pyexecutorch.kernels.quantized.compiled_int8_simd.dot_u8s8`). The unsigned
operand is the input plus 128 (each byte's sign bit flipped where the rows are laid out:
:func:`im2col`, :func:`flip`), broadcast straight from memory; the extra ``128 + zx``
times each channel's weight sum is taken out of the bias at load, so the input's zero
point costs nothing at run time. 4 rows by 2 tiles of accumulators stay in registers;
rows go in blocks that stay in L2 while every tile of weights passes, the blocks and
groups of tiles split over the threads. A convolution reads its input in place (an
implicit product: :func:`pad_flip` writes the input sign-flipped inside a border of the
zero point, and row r's inputs of tap t, a kernel row, are read at ``bases[r] + taps[t]``);
only dilated columns of channels not filling quads have :func:`im2col` lay their windows
out as rows (padding is the input's zero point: it adds nothing).
"""

from __future__ import annotations

import numpy as np
from numba import config, njit, prange, types
from numba.extending import overload

from pyexecutorch.jit import simd, spin, variants
from pyexecutorch.jit.variants import serial_and_parallel
from pyexecutorch.kernels.quantized import compiled_int8_simd as iv

NDArray = np.ndarray
L = iv.LANES
_F32 = np.float32
_FLIP = np.int8(-128)  # an int8 xor this is the uint8 of the value plus 128
_BLOCK_BYTES = 1 << 17  # input rows of a block: about this many bytes (L2-resident)
_TILE_GROUP = 4  # tiles of output channels a job takes


def pack_weights(w: NDArray, bias: NDArray | None, zx: int) -> tuple[NDArray, NDArray]:
    """int8 weights (N, K) as (tiles, ceil(K / 4), 4 L) bytes (K padded with zeros), and
    the bias (tiles * L) int32 less ``(128 + zx) * sum_k w`` (see the module's note)."""
    n, k = w.shape
    tiles, kq = -(-n // L), -(-k // 4)
    full = np.zeros((tiles * L, kq * 4), np.int8)
    full[:n, :k] = w
    packed = full.reshape(tiles, L, kq, 4).transpose(0, 2, 1, 3)
    if iv.WIDE_ROWS:  # (pair-major: [tile, quad, half, lane, byte of the pair])
        packed = packed.reshape(tiles, kq, L, 2, 2).transpose(0, 1, 3, 2, 4)
    folded = np.zeros(tiles * L, np.int64)
    if bias is not None:
        folded[:n] = bias
    folded -= (128 + int(zx)) * full.astype(np.int64).sum(axis=1)
    if np.abs(folded).max(initial=0) >= 1 << 31:
        raise ValueError("pack_weights: the folded bias leaves int32")
    return np.ascontiguousarray(packed).reshape(tiles, kq, 4 * L), folded.astype(np.int32)


def padded(values: NDArray, size: int, dtype: type) -> NDArray:
    out = np.zeros(size, dtype)
    out[: values.size] = values
    return out


@njit(cache=True, error_model="numpy", inline="always")
def _requantize_store(optr, at, acc, bptr, sptr, col, zy, lo, hi, left):  # noqa: ANN001, ANN202
    acc = iv.iadd(acc, iv.iload(bptr, col))
    f = iv.rint(simd.mul(iv.to_float(acc), iv.load_scales(sptr, col)))
    f = simd.add(simd.clamp(f, lo, hi), zy)
    if left >= L:
        iv.store_int8(optr, at, f)
    else:
        iv.store_int8_first(optr, at, f, left)


@njit(cache=True, error_model="numpy", inline="always")
def _row_base(bases, r, kq):  # noqa: ANN001, ANN202
    """Row ``r``'s first element: ``bases[r]``, or ``4 kq r`` where bases is empty."""
    return bases[r] if bases.size else 4 * kq * r


@njit(cache=True, error_model="numpy")
def _job(rows, wp, bias, scales, zy, lo, hi, out, r0, r1, t0, t1, bases, taps):  # noqa: ANN001, ANN202
    """Rows r0..r1 of output tiles t0..t1 (see :func:`gemm`)."""
    kq = wp.shape[1]
    ntaps = max(1, taps.size)
    span = kq // ntaps
    n = out.shape[1]
    stride = 4 * L
    aptr, wptr, optr = simd.pointer(rows), simd.pointer(wp), simd.pointer(out)
    bptr, sptr = simd.pointer(bias), simd.pointer(scales)
    zy_v, lo_v, hi_v = simd.splat(_F32(zy)), simd.splat(_F32(lo)), simd.splat(_F32(hi))
    last = r1 - 1
    for t in range(t0, t1, 2):
        u = min(t + 1, t1 - 1)  # (one tile left: computed twice, stored once)
        w0, w1 = t * kq * stride, u * kq * stride
        for r in range(r0, r1, 4):
            p0, p1 = _row_base(bases, r, kq), _row_base(bases, min(r + 1, last), kq)
            p2 = _row_base(bases, min(r + 2, last), kq)
            p3 = _row_base(bases, min(r + 3, last), kq)
            c00, c01, c10, c11 = iv.izeros(), iv.izeros(), iv.izeros(), iv.izeros()
            c20, c21, c30, c31 = iv.izeros(), iv.izeros(), iv.izeros(), iv.izeros()
            for tap in range(ntaps):
                o = taps[tap] if taps.size else 0
                q0, q1, q2, q3 = p0 + o, p1 + o, p2 + o, p3 + o
                wt0, wt1 = w0 + tap * span * stride, w1 + tap * span * stride
                for c in range(span):
                    v0 = iv.load_weights(wptr, wt0 + c * stride)
                    v1 = iv.load_weights(wptr, wt1 + c * stride)
                    x = iv.splat_quad_at(aptr, q0 + 4 * c)
                    c00, c01 = iv.dot_u8s8(c00, x, v0), iv.dot_u8s8(c01, x, v1)
                    x = iv.splat_quad_at(aptr, q1 + 4 * c)
                    c10, c11 = iv.dot_u8s8(c10, x, v0), iv.dot_u8s8(c11, x, v1)
                    x = iv.splat_quad_at(aptr, q2 + 4 * c)
                    c20, c21 = iv.dot_u8s8(c20, x, v0), iv.dot_u8s8(c21, x, v1)
                    x = iv.splat_quad_at(aptr, q3 + 4 * c)
                    c30, c31 = iv.dot_u8s8(c30, x, v0), iv.dot_u8s8(c31, x, v1)
            left0, left1 = n - t * L, n - u * L
            rows = min(4, r1 - r)
            _requantize_store(optr, r * n + t * L, c00, bptr, sptr, t * L, zy_v, lo_v, hi_v, left0)
            if u != t:
                _requantize_store(
                    optr, r * n + u * L, c01, bptr, sptr, u * L, zy_v, lo_v, hi_v, left1
                )
            if rows > 1:
                at = (r + 1) * n
                _requantize_store(optr, at + t * L, c10, bptr, sptr, t * L, zy_v, lo_v, hi_v, left0)
                if u != t:
                    _requantize_store(
                        optr, at + u * L, c11, bptr, sptr, u * L, zy_v, lo_v, hi_v, left1
                    )
            if rows > 2:
                at = (r + 2) * n
                _requantize_store(optr, at + t * L, c20, bptr, sptr, t * L, zy_v, lo_v, hi_v, left0)
                if u != t:
                    _requantize_store(
                        optr, at + u * L, c21, bptr, sptr, u * L, zy_v, lo_v, hi_v, left1
                    )
            if rows > 3:
                at = (r + 3) * n
                _requantize_store(optr, at + t * L, c30, bptr, sptr, t * L, zy_v, lo_v, hi_v, left0)
                if u != t:
                    _requantize_store(
                        optr, at + u * L, c31, bptr, sptr, u * L, zy_v, lo_v, hi_v, left1
                    )


@njit(cache=True, error_model="numpy", inline="always")
def _store_row(optr, at, t, u, a0, a1, bptr, sptr, zy_v, lo_v, hi_v, left0, left1):  # noqa: ANN001, ANN202
    """Tiles t and u (t == u: one tile) of an output row at ``at``."""
    _requantize_store(optr, at + t * L, a0, bptr, sptr, t * L, zy_v, lo_v, hi_v, left0)
    if u != t:
        _requantize_store(optr, at + u * L, a1, bptr, sptr, u * L, zy_v, lo_v, hi_v, left1)


@njit(cache=True, error_model="numpy")
def _job7(rows, wp, bias, scales, zy, lo, hi, out, r0, r1, t0, t1, bases, taps):  # noqa: ANN001, ANN202
    """:func:`_job` 7 rows a pass (14 accumulators: AVX-512's 32 registers hold them): each
    weight vector loaded serves 7 rows, not 4 (the weights of deep layers stream from L2,
    whose bandwidth a 4-row pass saturates), and 7 divides the rows of 7x7 .. 224x224."""
    kq = wp.shape[1]
    ntaps = max(1, taps.size)
    span = kq // ntaps
    n = out.shape[1]
    stride = 4 * L
    aptr, wptr, optr = simd.pointer(rows), simd.pointer(wp), simd.pointer(out)
    bptr, sptr = simd.pointer(bias), simd.pointer(scales)
    zy_v, lo_v, hi_v = simd.splat(_F32(zy)), simd.splat(_F32(lo)), simd.splat(_F32(hi))
    last = r1 - 1
    for t in range(t0, t1, 2):
        u = min(t + 1, t1 - 1)  # (one tile left: computed twice, stored once)
        w0, w1 = t * kq * stride, u * kq * stride
        for r in range(r0, r1, 7):
            p0 = _row_base(bases, r, kq)
            p1 = _row_base(bases, min(r + 1, last), kq)
            p2 = _row_base(bases, min(r + 2, last), kq)
            p3 = _row_base(bases, min(r + 3, last), kq)
            p4 = _row_base(bases, min(r + 4, last), kq)
            p5 = _row_base(bases, min(r + 5, last), kq)
            p6 = _row_base(bases, min(r + 6, last), kq)
            z = iv.izeros()
            c00, c01, c10, c11, c20, c21, c30, c31 = z, z, z, z, z, z, z, z
            c40, c41, c50, c51, c60, c61 = z, z, z, z, z, z
            for tap in range(ntaps):
                o = taps[tap] if taps.size else 0
                wt0, wt1 = w0 + tap * span * stride, w1 + tap * span * stride
                q0, q1, q2, q3 = p0 + o, p1 + o, p2 + o, p3 + o
                q4, q5, q6 = p4 + o, p5 + o, p6 + o
                for c in range(span):
                    v0 = iv.load_weights(wptr, wt0 + c * stride)
                    v1 = iv.load_weights(wptr, wt1 + c * stride)
                    x = iv.splat_quad_at(aptr, q0 + 4 * c)
                    c00, c01 = iv.dot_u8s8(c00, x, v0), iv.dot_u8s8(c01, x, v1)
                    x = iv.splat_quad_at(aptr, q1 + 4 * c)
                    c10, c11 = iv.dot_u8s8(c10, x, v0), iv.dot_u8s8(c11, x, v1)
                    x = iv.splat_quad_at(aptr, q2 + 4 * c)
                    c20, c21 = iv.dot_u8s8(c20, x, v0), iv.dot_u8s8(c21, x, v1)
                    x = iv.splat_quad_at(aptr, q3 + 4 * c)
                    c30, c31 = iv.dot_u8s8(c30, x, v0), iv.dot_u8s8(c31, x, v1)
                    x = iv.splat_quad_at(aptr, q4 + 4 * c)
                    c40, c41 = iv.dot_u8s8(c40, x, v0), iv.dot_u8s8(c41, x, v1)
                    x = iv.splat_quad_at(aptr, q5 + 4 * c)
                    c50, c51 = iv.dot_u8s8(c50, x, v0), iv.dot_u8s8(c51, x, v1)
                    x = iv.splat_quad_at(aptr, q6 + 4 * c)
                    c60, c61 = iv.dot_u8s8(c60, x, v0), iv.dot_u8s8(c61, x, v1)
            left0, left1 = n - t * L, n - u * L
            rows = min(7, r1 - r)
            _store_row(optr, r * n, t, u, c00, c01, bptr, sptr, zy_v, lo_v, hi_v, left0, left1)
            if rows > 1:
                _store_row(optr, (r + 1) * n, t, u, c10, c11, bptr, sptr, zy_v, lo_v, hi_v,
                           left0, left1)  # fmt: skip
            if rows > 2:
                _store_row(optr, (r + 2) * n, t, u, c20, c21, bptr, sptr, zy_v, lo_v, hi_v,
                           left0, left1)  # fmt: skip
            if rows > 3:
                _store_row(optr, (r + 3) * n, t, u, c30, c31, bptr, sptr, zy_v, lo_v, hi_v,
                           left0, left1)  # fmt: skip
            if rows > 4:
                _store_row(optr, (r + 4) * n, t, u, c40, c41, bptr, sptr, zy_v, lo_v, hi_v,
                           left0, left1)  # fmt: skip
            if rows > 5:
                _store_row(optr, (r + 5) * n, t, u, c50, c51, bptr, sptr, zy_v, lo_v, hi_v,
                           left0, left1)  # fmt: skip
            if rows > 6:
                _store_row(optr, (r + 6) * n, t, u, c60, c61, bptr, sptr, zy_v, lo_v, hi_v,
                           left0, left1)  # fmt: skip


# rows a pass of the product: 7 where the vectors are AVX-512's (32 registers), else 4
_PASS, _PASS_ROWS = (_job7, 7) if L == 16 else (_job, 4)


# The jobs of a parallel kernel here are split into one contiguous range per thread in
# force at the call: thread w runs its range from the front, then takes the others' from
# the back (a thread the loaded system deschedules delays one job, not its whole share;
# at one thread the jobs run in order). Thread w's rows are then the same in each layer,
# so it reads what it wrote, in its own cache: with jobs taken in turn from one counter,
# a depthwise line's three input lines lay in both cores' caches (at two threads the
# depthwise layers of int8 MobileNetV2 ran 1.3-1.8x slower in the network than alone).
_THREADS = variants.threads_reader()
_LOW = (1 << 32) - 1


def job_words() -> NDArray:
    """The words a parallel kernel here keeps its threads' job ranges in (one a thread
    numba may run; fewer threads than that take part where a caller passes fewer)."""
    return np.zeros(max(1, config.NUMBA_NUM_THREADS), np.int64)


@njit(cache=True, error_model="numpy")
def _workers(count, jobs):  # noqa: ANN001, ANN202
    """Threads to start for ``count`` jobs (at most those in force, one a word of
    ``jobs``), each one's range written in its word (``end << 32 | next``). Not inlined
    (see compiled_linear._split)."""
    workers = max(1, min(_THREADS(), count, jobs.size))
    for w in range(workers):
        jobs[w] = (count * (w + 1) // workers) << 32 | (count * w // workers)
    return workers


@njit(cache=True, error_model="numpy", inline="always")
def _next_job(jobs, w, workers):  # noqa: ANN001, ANN202
    """Thread ``w``'s next job: the front of its own range, else the back of another
    thread's; -1 when none is left."""
    for i in range(workers):
        v = w + i if w + i < workers else w + i - workers
        word = spin.load(jobs, v)
        while (word & _LOW) < (word >> 32):
            taken = word + 1 if i == 0 else word - (1 << 32)
            seen = spin.compare_swap(jobs, v, word, taken)
            if seen == word:
                return (word & _LOW) if i == 0 else (word >> 32) - 1
            word = seen
    return -1


# elements of a job of an element step, at least (a job's bookkeeping is ~100 ns)
_SPAN_ELEMENTS = 4096


@njit(cache=True, error_model="numpy")
def _spans(units):  # noqa: ANN001, ANN202
    """Jobs of a shared element step of ``units`` (rows, or spans of elements): 8 a
    thread in force, at most one a unit. Not inlined (see :func:`_workers`)."""
    return max(1, min(8 * _THREADS(), units))


@njit(cache=True, error_model="numpy")
def _block_rows(m, size, groups):  # noqa: ANN001, ANN202
    """Rows of a job of the product: as many as keep their inputs (``size`` bytes in all:
    M rows, or an implicit convolution's padded input, which its rows share) in L2 while
    every tile of weights passes once, fewer where the threads in force would have under
    4 jobs each (a dynamic split balances only jobs of some number)."""
    per_row = max(1, size // m)
    block = _BLOCK_BYTES // per_row
    threads = _THREADS()
    if threads > 1:
        blocks = -(-4 * threads // groups)
        block = min(block, -(-m // blocks))
    return max(_PASS_ROWS, -(-block // _PASS_ROWS) * _PASS_ROWS)


@njit(cache=True, error_model="numpy", inline="always")
def _gemm_job(rows, wp, bias, scales, zy, lo, hi, out, bases, taps, j, groups, block):  # noqa: ANN001, ANN202
    """Job ``j`` of :func:`_gemm`: a block of rows by a group of tiles."""
    b, g = j // groups, j % groups
    r0, t0 = b * block, g * _TILE_GROUP
    _PASS(rows, wp, bias, scales, zy, lo, hi, out, r0, min(r0 + block, out.shape[0]), t0,
          min(t0 + _TILE_GROUP, wp.shape[0]), bases, taps)  # fmt: skip


def _gemm(rows, wp, bias, scales, zy, lo, hi, out, jobs, bases, taps):  # noqa: ANN001, ANN202
    m = out.shape[0]
    tiles = wp.shape[0]
    groups = (tiles + _TILE_GROUP - 1) // _TILE_GROUP
    block = _block_rows(m, rows.nbytes, groups)
    blocks = (m + block - 1) // block
    count = blocks * groups
    workers = _workers(count, jobs)
    if workers == 1:  # (one thread: no parallel region, ~0.7 us a call)
        for j in range(count):
            _gemm_job(rows, wp, bias, scales, zy, lo, hi, out, bases, taps, j, groups, block)
        return
    for w in prange(workers):
        j = _next_job(jobs, w, workers)
        while j >= 0:
            _gemm_job(rows, wp, bias, scales, zy, lo, hi, out, bases, taps, j, groups, block)
            j = _next_job(jobs, w, workers)


# gemm(rows: the sign-flipped int8 inputs, flat (int16 holding uint8, where
#      compiled_int8_simd.WIDE_ROWS), wp, bias, scales (tiles * L) float32,
#      zy, lo - zy, hi - zy (floats), out (M, N) int8, jobs: :func:`job_words`,
#      bases (M,) int64, taps (T,) int64: row r's inputs of tap t at rows[bases[r] + taps[t]:]
#      for K / T elements (an implicit convolution: rows the flat padded input, no im2col;
#      see :func:`conv_geometry`); both empty: row r at rows[K r:], its K inputs in a row)
GEMM = serial_and_parallel(_gemm, "qs8_gemm")


def _copy_flipped(cp, dst, xp, src, n):  # noqa: ANN001, ANN202
    """``cp[dst : dst + n] = x[src : src + n]`` sign-flipped (compiled only)."""
    raise NotImplementedError


@overload(_copy_flipped, inline="always")
def _copy_flipped_forms(cp, dst, xp, src, n):  # noqa: ANN001, ANN202
    # rows of bytes: L inputs a step (widened, plus 128, their low bytes stored), where
    # a byte at a time took 723 us of int8 ResNet-18's stem (21-byte tap rows); uint16 rows
    # (WIDE_ROWS) a value at a time
    if isinstance(cp, types.CPointer) and cp.dtype == types.int8:

        def by_vectors(cp, dst, xp, src, n):  # noqa: ANN001, ANN202
            plus = iv.isplat(128)
            for e in range(0, n, L):
                take = min(L, n - e)
                v = iv.iadd(iv.load_int8_first(xp, src + e, take), plus)
                iv.store_int8_lanes(cp, dst + e, v, take)

        return by_vectors

    def by_values(cp, dst, xp, src, n):  # noqa: ANN001, ANN202
        for e in range(n):
            cp[dst + e] = np.uint8(xp[src + e] ^ _FLIP)

    return by_values


@njit(cache=True, error_model="numpy")
def im2col(x, cols, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, pad):  # noqa: ANN001, ANN201
    """Windows of NHWC int8 ``x`` as the rows of ``cols`` (N * oh * ow, >= kh * kw * C),
    taps in (kh, kw, C) order, each byte sign-flipped (the uint8 of the value + 128, as
    :func:`gemm` reads its rows; ``cols`` int8, or int16 where ``WIDE_ROWS``); taps outside
    the image ``pad`` (flipped too); the columns past the taps 0."""
    nb, h, w, c = x.shape
    width = cols.shape[1]
    span = kw * c
    xp, cp = simd.pointer(x), simd.pointer(cols)
    fill = np.uint8(np.int8(pad) ^ _FLIP)
    for b in range(nb):
        for oy in range(oh):
            for ox in range(ow):
                dst = ((b * oh + oy) * ow + ox) * width
                ix0 = ox * sw - pl
                whole = dw == 1 and ix0 >= 0 and ix0 + kw <= w  # a tap row is one span
                for i in range(kh):
                    iy = oy * sh - pt + i * dh
                    if iy < 0 or iy >= h:
                        for e in range(span):
                            cp[dst + e] = fill
                    elif whole:
                        _copy_flipped(cp, dst, xp, ((b * h + iy) * w + ix0) * c, span)
                    else:
                        for j in range(kw):
                            ix = ix0 + j * dw
                            at = dst + j * c
                            if 0 <= ix < w:
                                _copy_flipped(cp, at, xp, ((b * h + iy) * w + ix) * c, c)
                            else:
                                for e in range(c):
                                    cp[at + e] = fill
                    dst += span
                for e in range(kh * span, width):
                    cp[((b * oh + oy) * ow + ox) * width + e] = 0


def conv_geometry(
    shape: tuple[int, int, int, int], oh: int, ow: int, kh: int, kw: int, sh: int, sw: int,
    dh: int, dw: int, pads: tuple[int, int, int, int],
) -> tuple[tuple[int, int, int, int], NDArray, NDArray, int] | None:  # fmt: skip
    """(the padded input's shape, bases, taps, a kernel row's inputs) of an implicit
    convolution (see :data:`GEMM`) over an NHWC input of ``shape`` padded by ``pads``
    (top, left, bottom, right): output pixel r's inputs of tap t start at element
    ``bases[r] + taps[t]``. A tap is a kernel row, its ``kw * C`` inputs in a row of the
    image (read in whole quads: up to 3 more, whose weights are 0, see
    :func:`implicit_weights`); with dilated columns, a kernel position (C a multiple of
    4); None where neither fits (im2col's)."""
    nb, h, w, c = shape
    pt, pl, pb, pr = pads
    hp, wp = h + pt + pb, w + pl + pr
    b, oy, ox = np.meshgrid(np.arange(nb), np.arange(oh), np.arange(ow), indexing="ij")
    bases = ((b * hp + oy * sh) * wp + ox * sw) * c
    i, j = np.meshgrid(np.arange(kh), np.arange(1 if dw == 1 else kw), indexing="ij")
    if dw == 1:
        span = -(-kw * c // 4) * 4
    elif c % 4 == 0:
        span = kw * c
    else:
        return None
    taps = (i * dh * wp + j * dw) * c
    padded = (nb, hp, wp, c)
    return padded, bases.reshape(-1).astype(np.int64), taps.reshape(-1).astype(np.int64), span


def implicit_weights(w: NDArray, span: int) -> NDArray:
    """Weights (N, kh, kw, C) as an implicit convolution's rows read its inputs: each
    kernel row's ``kw * C`` then zeros to ``span`` (see :func:`conv_geometry`), (N, kh span)."""
    n, kh, kw, c = w.shape
    out = np.zeros((n, kh, span), w.dtype)
    out[:, :, : kw * c] = w.reshape(n, kh, kw * c)
    return out.reshape(n, kh * span)


# elements past a padded input that a kernel row's last quad may read (times weights 0)
_SLACK = 4


def padded_input(shape: tuple[int, int, int, int], zx: int, dtype: type) -> NDArray:
    """The flat buffer :func:`pad_flip` fills (int8, or int16 where ``WIDE_ROWS``): an
    NHWC image of ``shape`` and a few elements of slack, its border the input's zero
    point sign-flipped (it adds nothing), written once, at load."""
    size = int(np.prod(shape)) + _SLACK
    return np.full(size, (int(zx) + 128) if dtype == np.int16 else int(zx) ^ -128, dtype)


@njit(cache=True, error_model="numpy")
def _pad_flip_rows(x, buf, hp, wp, pt, pl, r0, r1):  # noqa: ANN001, ANN202
    """Image rows ``r0 .. r1`` (of all images' rows) of :func:`pad_flip`."""
    nb, h, w, c = x.shape
    xp, bp = simd.pointer(x), simd.pointer(buf)
    row = w * c
    for r in range(r0, r1):
        b, y = r // h, r % h
        _copy_flipped(bp, ((b * hp + y + pt) * wp + pl) * c, xp, r * row, row)


@njit(cache=True, error_model="numpy")
def pad_flip(x, buf, hp, wp, pt, pl):  # noqa: ANN001, ANN201
    """NHWC int8 ``x`` sign-flipped into flat ``buf``, an image of ``hp`` x ``wp`` pixels,
    from row ``pt`` and column ``pl``: a convolution's input as an implicit :data:`GEMM`
    reads it."""
    _pad_flip_rows(x, buf, hp, wp, pt, pl, 0, x.shape[0] * x.shape[1])


def _pad_flip_shared(x, buf, hp, wp, pt, pl, jobs):  # noqa: ANN001, ANN202
    rows = x.shape[0] * x.shape[1]
    count = _spans(rows)
    workers = _workers(count, jobs)
    if workers == 1:  # (one thread: no parallel region, ~0.7 us a call)
        _pad_flip_rows(x, buf, hp, wp, pt, pl, 0, rows)
        return
    for w in prange(workers):
        j = _next_job(jobs, w, workers)
        while j >= 0:
            _pad_flip_rows(x, buf, hp, wp, pt, pl, rows * j // count, rows * (j + 1) // count)
            j = _next_job(jobs, w, workers)


@njit(cache=True, error_model="numpy")
def _flip_span(x, out, i0, i1):  # noqa: ANN001, ANN202
    xp, op = simd.pointer(x), simd.pointer(out)
    for i in range(i0, i1):
        op[i] = np.uint8(xp[i] ^ _FLIP)


@njit(cache=True, error_model="numpy")
def flip(x, out):  # noqa: ANN001, ANN201
    """Each int8 of flat ``x`` sign-flipped into ``out`` (rows for :func:`gemm`: int8, or
    int16 where ``WIDE_ROWS``: the uint8 widened)."""
    _flip_span(x, out, 0, out.size)


def _flip_shared(x, out, jobs):  # noqa: ANN001, ANN202
    n = out.size
    count = _spans(n // _SPAN_ELEMENTS)
    workers = _workers(count, jobs)
    if workers == 1:  # (one thread: no parallel region, ~0.7 us a call)
        _flip_span(x, out, 0, n)
        return
    for w in prange(workers):
        j = _next_job(jobs, w, workers)
        while j >= 0:
            _flip_span(x, out, n * j // count, n * (j + 1) // count)
            j = _next_job(jobs, w, workers)


# ------------------------------------------------------------------ depthwise


@njit(cache=True, error_model="numpy", inline="always")
def _tap(acc, xptr, at, left, zx_v, wv):  # noqa: ANN001, ANN202
    """``acc + (x[at : at + L] - zx) * wv`` (the first ``left`` channels where fewer than L;
    ``wv`` of :func:`~.compiled_int8_simd.low_words`)."""
    if left >= L:
        xv = iv.load_int8(xptr, at)
    else:
        xv = iv.load_int8_first(xptr, at, left)
    return iv.madd_words(acc, iv.iadd(xv, zx_v), wv)


@njit(cache=True, error_model="numpy", inline="always")
def _store(optr, at, acc, scale_v, zy_v, lo_v, hi_v, left):  # noqa: ANN001, ANN202
    f = iv.rint(simd.mul(iv.to_float(acc), scale_v))
    f = simd.add(simd.clamp(f, lo_v, hi_v), zy_v)
    if left >= L:
        iv.store_int8(optr, at, f)
    else:
        iv.store_int8_first(optr, at, f, left)


@njit(cache=True, error_model="numpy", inline="always")
def _word_tap(tptr, at):  # noqa: ANN001, ANN202
    """The L int32 taps at ``at`` as :func:`~.compiled_int8_simd.madd_words` multiplies by."""
    return iv.low_words(iv.iload(tptr, at))


@njit(cache=True, error_model="numpy", inline="always")
def _window3(xptr, r0, rs, cs, acc, w0, w1, w2, w3, w4, w5, w6, w7, w8):  # noqa: ANN001, ANN202
    """``acc`` plus a 3x3 window of full channel vectors inside the image (rows ``rs``,
    columns ``cs`` apart from ``r0``) times the taps (of
    :func:`~.compiled_int8_simd.low_words`); the input's zero point is in ``acc``."""
    # a sum per window row: three short chains of multiply-adds, not one of nine
    r1, r2 = r0 + rs, r0 + 2 * rs
    top = iv.madd_words(acc, iv.load_int8(xptr, r0), w0)
    top = iv.madd_words(top, iv.load_int8(xptr, r0 + cs), w1)
    top = iv.madd_words(top, iv.load_int8(xptr, r0 + 2 * cs), w2)
    mid = iv.madd_words(iv.izeros(), iv.load_int8(xptr, r1), w3)
    mid = iv.madd_words(mid, iv.load_int8(xptr, r1 + cs), w4)
    mid = iv.madd_words(mid, iv.load_int8(xptr, r1 + 2 * cs), w5)
    low = iv.madd_words(iv.izeros(), iv.load_int8(xptr, r2), w6)
    low = iv.madd_words(low, iv.load_int8(xptr, r2 + cs), w7)
    low = iv.madd_words(low, iv.load_int8(xptr, r2 + 2 * cs), w8)
    return iv.iadd(top, iv.iadd(mid, low))


@njit(cache=True, error_model="numpy", inline="always")
def _row4(xptr, r, cs, a0, a1, a2, a3, w0, w1, w2):  # noqa: ANN001, ANN202
    """Four outputs' accumulators (columns ``cs`` apart from ``r``, stride 1) plus one
    kernel row of their windows: six input vectors loaded, each used by up to three
    outputs (four independent chains: LLVM keeps each multiply-add one ``vpdpwssd``,
    where a window's chain of nine it split for latency)."""
    x0, x1 = iv.load_int8(xptr, r), iv.load_int8(xptr, r + cs)
    x2, x3 = iv.load_int8(xptr, r + 2 * cs), iv.load_int8(xptr, r + 3 * cs)
    x4, x5 = iv.load_int8(xptr, r + 4 * cs), iv.load_int8(xptr, r + 5 * cs)
    a0 = iv.madd_words(iv.madd_words(iv.madd_words(a0, x0, w0), x1, w1), x2, w2)
    a1 = iv.madd_words(iv.madd_words(iv.madd_words(a1, x1, w0), x2, w1), x3, w2)
    a2 = iv.madd_words(iv.madd_words(iv.madd_words(a2, x2, w0), x3, w1), x4, w2)
    a3 = iv.madd_words(iv.madd_words(iv.madd_words(a3, x3, w0), x4, w1), x5, w2)
    return a0, a1, a2, a3


def _depthwise(x, taps, bias, scales, nzx, zy, lo, hi, out, kh, kw, sh, sw, dh, dw, pt, pl, jobs):  # noqa: ANN001, ANN202
    nb, oh = x.shape[0], out.shape[1]
    workers = _workers(nb * oh, jobs)
    if workers == 1:  # (one thread: no parallel region, ~0.7 us a call)
        for line in range(nb * oh):
            _depthwise_line(x, taps, bias, scales, nzx, zy, lo, hi, out, kh, kw, sh, sw,
                            dh, dw, pt, pl, line)  # fmt: skip
        return
    for w in prange(workers):
        line = _next_job(jobs, w, workers)
        while line >= 0:
            _depthwise_line(x, taps, bias, scales, nzx, zy, lo, hi, out, kh, kw, sh, sw,
                            dh, dw, pt, pl, line)  # fmt: skip
            line = _next_job(jobs, w, workers)


@njit(cache=True, error_model="numpy")
def _depthwise_line(
    x, taps, bias, scales, nzx, zy, lo, hi, out, kh, kw, sh, sw, dh, dw, pt, pl, line
):  # noqa: ANN001, ANN202
    """Output row ``line`` (of all images' rows) of :func:`_depthwise`."""
    nb, h, w, c = x.shape
    oh, ow = out.shape[1], out.shape[2]
    cp = taps.shape[1]
    b, oy = line // oh, line % oh
    xptr, optr, tptr = simd.pointer(x), simd.pointer(out), simd.pointer(taps)
    bptr, sptr = simd.pointer(bias), simd.pointer(scales)
    zx_v = iv.isplat(nzx)
    zy_v, lo_v, hi_v = simd.splat(_F32(zy)), simd.splat(_F32(lo)), simd.splat(_F32(hi))
    top = oy * sh - pt
    # the output columns whose every tap is inside the image, unrolled for 3x3 windows
    # of full channel vectors; the others tap by tap
    first = min(ow, max(0, -(-pl // sw)))
    stop = min(ow, max(first, (w - 1 - (kw - 1) * dw + pl) // sw + 1))
    unrolled = kh == 3 and kw == 3 and top >= 0 and top + 2 * dh < h
    for c0 in range(0, c, L):
        left = c - c0
        bias_v = iv.iload(bptr, c0)
        scale_v = iv.load_scales(sptr, c0)
        fast = unrolled and left >= L
        ox = 0
        while ox < ow:
            if fast and ox == first and first < stop:
                w0, w1, w2 = (
                    _word_tap(tptr, c0),
                    _word_tap(tptr, cp + c0),
                    _word_tap(tptr, 2 * cp + c0),
                )
                w3, w4 = _word_tap(tptr, 3 * cp + c0), _word_tap(tptr, 4 * cp + c0)
                w5, w6 = _word_tap(tptr, 5 * cp + c0), _word_tap(tptr, 6 * cp + c0)
                w7, w8 = _word_tap(tptr, 7 * cp + c0), _word_tap(tptr, 8 * cp + c0)
                # -zx times the taps' sum, once a row: the window then adds x * w alone
                total = iv.izeros()
                for t in range(9):
                    total = iv.iadd(total, iv.iload(tptr, t * cp + c0))
                start = iv.iadd(bias_v, iv.imul(zx_v, total))
                r0 = ((b * h + top) * w + first * sw - pl) * c + c0
                at = ((b * oh + oy) * ow + first) * c + c0
                rs = dh * w * c
                q = first
                if sw == 1 and dw == 1:  # four outputs a pass, sharing their columns
                    while q + 4 <= stop:
                        a0, a1, a2, a3 = start, start, start, start
                        a0, a1, a2, a3 = _row4(xptr, r0, c, a0, a1, a2, a3, w0, w1, w2)
                        a0, a1, a2, a3 = _row4(xptr, r0 + rs, c, a0, a1, a2, a3, w3, w4, w5)
                        a0, a1, a2, a3 = _row4(xptr, r0 + 2 * rs, c, a0, a1, a2, a3, w6, w7, w8)
                        _store(optr, at, a0, scale_v, zy_v, lo_v, hi_v, L)
                        _store(optr, at + c, a1, scale_v, zy_v, lo_v, hi_v, L)
                        _store(optr, at + 2 * c, a2, scale_v, zy_v, lo_v, hi_v, L)
                        _store(optr, at + 3 * c, a3, scale_v, zy_v, lo_v, hi_v, L)
                        r0 += 4 * c
                        at += 4 * c
                        q += 4
                for _ in range(q, stop):
                    acc = _window3(xptr, r0, dh * w * c, dw * c, start,
                                   w0, w1, w2, w3, w4, w5, w6, w7, w8)  # fmt: skip
                    _store(optr, at, acc, scale_v, zy_v, lo_v, hi_v, L)
                    r0 += sw * c
                    at += c
                ox = stop
                continue
            acc = bias_v
            for i in range(kh):
                iy = top + i * dh
                if 0 <= iy < h:
                    base = (b * h + iy) * w * c + c0
                    for j in range(kw):
                        ix = ox * sw - pl + j * dw
                        if 0 <= ix < w:
                            wv = _word_tap(tptr, (i * kw + j) * cp + c0)
                            acc = _tap(acc, xptr, base + ix * c, left, zx_v, wv)
            at = ((b * oh + oy) * ow + ox) * c + c0
            _store(optr, at, acc, scale_v, zy_v, lo_v, hi_v, left)
            ox += 1


# depthwise(x NHWC int8, taps (kh * kw, Cp) int32, bias (Cp) int32, scales (Cp) float32,
#           -zx (int), zy, lo - zy, hi - zy, out NHWC int8, kh, kw, sh, sw, dh, dw, pt, pl,
#           jobs: :func:`job_words`)
DEPTHWISE = serial_and_parallel(_depthwise, "qs8_depthwise")


# ------------------------------------------------------------------ depthwise, channel quads
# Where the CPU has AVX-512 VNNI: a block of 4 L channels is one byte vector, loaded as it
# lies (no widening), times four tap vectors each holding channel 4 k + m's tap in byte m
# of lane k (zeros elsewhere): four vpdpbusd give the four accumulators of channels
# 4 k + m (m = 0 .. 3) in lane k; the requantized bytes are shuffled back in one pass. The
# inputs enter as uint8 x + 128 (a flip), the 128 + zx times each channel's taps' sum is
# taken out of the bias at load, and a tap in the padding reads zx + 128: it adds nothing.
# (Widened to int32 lanes, each tap took a sign extension and a vpdpwssd that LLVM split
# into a multiply and an addition: port 5 filled with them.)

Q = 4 * L  # channels a block


def pack_depthwise_quads(
    taps: NDArray, bias: NDArray | None, scales: NDArray, zx: int
) -> tuple[NDArray, NDArray, NDArray, NDArray]:
    """(taps (T, blocks, 4, Q) int8, bias and scales (blocks, 4, L): channel 4 k + m of a
    block at [m, k], the bias less ``(128 + zx) * sum_t taps``, the padding's bytes (Q,)
    int8) of a depthwise convolution's ``taps`` (T, C) for :data:`DEPTHWISE_QUADS`."""
    count, c = taps.shape
    blocks = -(-c // Q)
    full = np.zeros((count, blocks * Q), np.int64)
    full[:, :c] = taps
    quads = np.zeros((count, blocks, 4, Q), np.int8)
    by_block = full.reshape(count, blocks, Q)
    for m in range(4):
        quads[:, :, m, m::4] = by_block[:, :, m::4]
    folded = np.zeros(blocks * Q, np.int64)
    if bias is not None:
        folded[:c] = bias
    folded -= (128 + int(zx)) * full.sum(axis=0)
    if np.abs(folded).max(initial=0) >= 1 << 31:
        raise ValueError("pack_depthwise_quads: the folded bias leaves int32")
    wide = np.zeros(blocks * Q, np.float32)
    wide[:c] = scales[:c]
    lanes = (blocks, L, 4)
    bias4 = np.ascontiguousarray(folded.astype(np.int32).reshape(lanes).transpose(0, 2, 1))
    scales4 = np.ascontiguousarray(wide.reshape(lanes).transpose(0, 2, 1))
    pad = np.full(Q, int(zx) ^ -128, np.int8)
    return quads, bias4, scales4, pad


@njit(cache=True, error_model="numpy", inline="always")
def _quad_tap(a0, a1, a2, a3, xv, tptr, at):  # noqa: ANN001, ANN202
    """The four accumulators plus a block's inputs ``xv`` times tap vectors at ``at``."""
    a0 = iv.dot_u8s8(a0, xv, iv.load_bytes(tptr, at))
    a1 = iv.dot_u8s8(a1, xv, iv.load_bytes(tptr, at + Q))
    a2 = iv.dot_u8s8(a2, xv, iv.load_bytes(tptr, at + 2 * Q))
    a3 = iv.dot_u8s8(a3, xv, iv.load_bytes(tptr, at + 3 * Q))
    return a0, a1, a2, a3


@njit(cache=True, error_model="numpy", inline="always")
def _quad_input(xptr, at, left):  # noqa: ANN001, ANN202
    """A block's inputs at ``at`` as uint8 (its first ``left`` channels where fewer)."""
    if left >= Q:
        return iv.flip_bytes(iv.load_bytes(xptr, at))
    return iv.flip_bytes(iv.load_bytes_first(xptr, at, left))


@njit(cache=True, error_model="numpy", inline="always")
def _quad_requantized(acc, sptr, at, zy_v, lo_v, hi_v):  # noqa: ANN001, ANN202
    f = iv.rint(simd.mul(iv.to_float(acc), iv.load_scales(sptr, at)))
    return simd.add(simd.clamp(f, lo_v, hi_v), zy_v)


@njit(cache=True, error_model="numpy", inline="always")
def _quad_row3(xptr, r, cs, left, tptr, at, tap_bytes, a0, a1, a2, a3):  # noqa: ANN001, ANN202
    """The accumulators plus a window row of three inputs inside the image (``cs`` apart
    from ``r``) times their taps (from ``at``, ``tap_bytes`` apart)."""
    a0, a1, a2, a3 = _quad_tap(a0, a1, a2, a3, _quad_input(xptr, r, left), tptr, at)
    xv = _quad_input(xptr, r + cs, left)
    a0, a1, a2, a3 = _quad_tap(a0, a1, a2, a3, xv, tptr, at + tap_bytes)
    xv = _quad_input(xptr, r + 2 * cs, left)
    return _quad_tap(a0, a1, a2, a3, xv, tptr, at + 2 * tap_bytes)


@njit(cache=True, error_model="numpy")
def _depthwise_quads_line(
    x, taps, bias, scales, pad, zy, lo, hi, out, kh, kw, sh, sw, dh, dw, pt, pl, line
):  # noqa: ANN001, ANN202
    """Output row ``line`` (of all images' rows) of :data:`DEPTHWISE_QUADS`."""
    nb, h, w, c = x.shape
    oh, ow = out.shape[1], out.shape[2]
    blocks = bias.shape[0]
    b, oy = line // oh, line % oh
    xptr, optr, tptr = simd.pointer(x), simd.pointer(out), simd.pointer(taps)
    bptr, sptr = simd.pointer(bias), simd.pointer(scales)
    pad_v = iv.load_bytes(simd.pointer(pad), 0)
    zy_v, lo_v, hi_v = simd.splat(_F32(zy)), simd.splat(_F32(lo)), simd.splat(_F32(hi))
    top = oy * sh - pt
    tap_bytes = blocks * 4 * Q
    # the output columns whose every tap is inside the image, unrolled for 3x3 windows
    first = min(ow, max(0, -(-pl // sw)))
    stop = min(ow, max(first, (w - 1 - (kw - 1) * dw + pl) // sw + 1))
    unrolled = kh == 3 and kw == 3 and top >= 0 and top + 2 * dh < h
    rs = dh * w * c
    for blk in range(blocks):
        c0 = blk * Q
        left = c - c0
        lane0 = blk * 4 * L
        for ox in range(ow):
            a0, a1 = iv.iload(bptr, lane0), iv.iload(bptr, lane0 + L)
            a2, a3 = iv.iload(bptr, lane0 + 2 * L), iv.iload(bptr, lane0 + 3 * L)
            ix0 = ox * sw - pl
            if unrolled and first <= ox < stop:  # a 3x3 window inside the image
                r0 = ((b * h + top) * w + ix0) * c + c0
                t0 = blk * 4 * Q
                a0, a1, a2, a3 = _quad_row3(xptr, r0, dw * c, left, tptr, t0, tap_bytes,
                                            a0, a1, a2, a3)  # fmt: skip
                a0, a1, a2, a3 = _quad_row3(xptr, r0 + rs, dw * c, left, tptr,
                                            t0 + 3 * tap_bytes, tap_bytes, a0, a1, a2, a3)  # fmt: skip
                a0, a1, a2, a3 = _quad_row3(xptr, r0 + 2 * rs, dw * c, left, tptr,
                                            t0 + 6 * tap_bytes, tap_bytes, a0, a1, a2, a3)  # fmt: skip
                kh_left = 0
            else:
                kh_left = kh
            for i in range(kh_left):
                iy = top + i * dh
                row = (b * h + iy) * w
                for j in range(kw):
                    ix = ix0 + j * dw
                    if 0 <= iy < h and 0 <= ix < w:
                        xv = _quad_input(xptr, (row + ix) * c + c0, left)
                    else:
                        xv = pad_v
                    at = (i * kw + j) * tap_bytes + blk * 4 * Q
                    a0, a1, a2, a3 = _quad_tap(a0, a1, a2, a3, xv, tptr, at)
            f0 = _quad_requantized(a0, sptr, lane0, zy_v, lo_v, hi_v)
            f1 = _quad_requantized(a1, sptr, lane0 + L, zy_v, lo_v, hi_v)
            f2 = _quad_requantized(a2, sptr, lane0 + 2 * L, zy_v, lo_v, hi_v)
            f3 = _quad_requantized(a3, sptr, lane0 + 3 * L, zy_v, lo_v, hi_v)
            iv.store_int8_quads(optr, ((b * oh + oy) * ow + ox) * c + c0, f0, f1, f2, f3, left)


def _depthwise_quads(
    x, taps, bias, scales, pad, zy, lo, hi, out, kh, kw, sh, sw, dh, dw, pt, pl, jobs
):  # noqa: ANN001, ANN202, E501
    workers = _workers(x.shape[0] * out.shape[1], jobs)
    if workers == 1:  # (one thread: no parallel region, ~0.7 us a call)
        for line in range(x.shape[0] * out.shape[1]):
            _depthwise_quads_line(x, taps, bias, scales, pad, zy, lo, hi, out, kh, kw, sh, sw,
                                  dh, dw, pt, pl, line)  # fmt: skip
        return
    for wk in prange(workers):
        line = _next_job(jobs, wk, workers)
        while line >= 0:
            _depthwise_quads_line(x, taps, bias, scales, pad, zy, lo, hi, out, kh, kw, sh, sw,
                                  dh, dw, pt, pl, line)  # fmt: skip
            line = _next_job(jobs, wk, workers)


# depthwise_quads(x NHWC int8, then pack_depthwise_quads's taps, bias, scales and padding,
#                 zy, lo - zy, hi - zy, out NHWC int8, kh, kw, sh, sw, dh, dw, pt, pl,
#                 jobs: :func:`job_words`); only where iv.VNNI and L == 16
DEPTHWISE_QUADS = serial_and_parallel(_depthwise_quads, "qs8_depthwise_quads")
QUADS = iv.VNNI is not None and L == 16


# ------------------------------------------------------------------ elementwise, pooling


@njit(cache=True, error_model="numpy")
def _add_span(a, b, out, am, bm, bias, shift, zy, lo, hi, i0, i1):  # noqa: ANN001, ANN202
    # (through pointers: an array index from i0 would be checked for wrapping around,
    # and that loop was left scalar, 6x slower)
    ap, bp, op = simd.pointer(a), simd.pointer(b), simd.pointer(out)
    for i in range(i0, i1):
        acc = np.int64(ap[i]) * am + np.int64(bp[i]) * bm + bias
        acc = (acc >> shift) + zy
        op[i] = np.int8(min(max(acc, lo), hi))


@njit(cache=True, error_model="numpy")
def add(a, b, out, am, bm, bias, shift, zy, lo, hi):  # noqa: ANN001, ANN201
    """XNNPACK's int8 addition of equal-sized flat ``a`` and ``b`` into ``out``."""
    _add_span(a, b, out, am, bm, bias, shift, zy, lo, hi, 0, out.size)


def _add_shared(a, b, out, am, bm, bias, shift, zy, lo, hi, jobs):  # noqa: ANN001, ANN202
    n = out.size
    count = _spans(n // _SPAN_ELEMENTS)
    workers = _workers(count, jobs)
    if workers == 1:  # (one thread: no parallel region, ~0.7 us a call)
        _add_span(a, b, out, am, bm, bias, shift, zy, lo, hi, 0, n)
        return
    for w in prange(workers):
        j = _next_job(jobs, w, workers)
        while j >= 0:
            _add_span(a, b, out, am, bm, bias, shift, zy, lo, hi, n * j // count,
                      n * (j + 1) // count)  # fmt: skip
            j = _next_job(jobs, w, workers)


@njit(cache=True, error_model="numpy")
def max_pool(x, out, kh, kw, sh, sw, dh, dw, pt, pl, lo, hi):  # noqa: ANN001, ANN201
    """Max over each window's taps inside the image (NHWC int8), clamped to [lo, hi]."""
    nb, h, w, c = x.shape
    oh, ow = out.shape[1], out.shape[2]
    xptr, optr = simd.pointer(x), simd.pointer(out)
    lo_v, hi_v = iv.isplat(lo), iv.isplat(hi)
    for b in range(nb):
        for oy in range(oh):
            for ox in range(ow):
                for c0 in range(0, c, L):
                    left = min(c - c0, L)
                    m = iv.isplat(-128)
                    for i in range(kh):
                        iy = oy * sh - pt + i * dh
                        if 0 <= iy < h:
                            for j in range(kw):
                                ix = ox * sw - pl + j * dw
                                if 0 <= ix < w:
                                    at = ((b * h + iy) * w + ix) * c + c0
                                    m = iv.imax(m, iv.load_int8_first(xptr, at, left))
                    m = iv.imin(iv.imax(m, lo_v), hi_v)
                    iv.store_int8_lanes(optr, ((b * oh + oy) * ow + ox) * c + c0, m, left)


@njit(cache=True, error_model="numpy")
def mean_hw(x, out, acc, bias, scale, zy, lo, hi):  # noqa: ANN001, ANN201
    """``out[b, c] = requantized(sum over pixels of x[b, :, c] - bias)``: x (N, HW, C)."""
    nb, hw, c = x.shape
    for b in range(nb):
        for ch in range(c):
            acc[ch] = 0
        for p in range(hw):
            for ch in range(c):
                acc[ch] += np.int64(x[b, p, ch])
        for ch in range(c):
            f = np.rint(_F32(acc[ch] - bias) * scale)
            f = min(max(f, _F32(lo - zy)), _F32(hi - zy))
            out[b, ch] = np.int8(f + _F32(zy))


@njit(cache=True, error_model="numpy")
def quantize(x, out, inv, zp):  # noqa: ANN001, ANN201
    """float32 ``x`` to int8: ``clamp(rint(x * inv), -128 - zp, 127 - zp) + zp``."""
    lo, hi = _F32(-128 - zp), _F32(127 - zp)
    for i in range(out.size):
        f = np.rint(x[i] * inv)
        out[i] = np.int8(min(max(f, lo), hi) + _F32(zp))


@njit(cache=True, error_model="numpy")
def _quantize_pixels(x, out, inv, zp, p0, p1):  # noqa: ANN001, ANN202
    """Pixels ``p0 .. p1`` (of all images' pixels) of :func:`quantize_to_nhwc`."""
    nb, c, h, w = x.shape
    hw = h * w
    xf = x.reshape(x.size)
    xp, op = simd.pointer(x), simd.pointer(out)
    lo, hi = _F32(-128 - zp), _F32(127 - zp)
    inv_v, zp_v = simd.splat(_F32(inv)), simd.splat(_F32(zp))
    lo_v, hi_v = simd.splat(lo), simd.splat(hi)
    for b in range(p0 // hw, min(nb, -(-p1 // hw))):
        first, stop = max(p0 - b * hw, 0), min(p1 - b * hw, hw)
        start = first
        if c == 3:
            start = first + (stop - first) // L * L
            for p in range(first, start, L):
                at = b * 3 * hw + p
                v0 = simd.clamp(iv.rint(simd.mul(simd.load(xf, at), inv_v)), lo_v, hi_v)
                v1 = simd.clamp(iv.rint(simd.mul(simd.load(xf, at + hw), inv_v)), lo_v, hi_v)
                v2 = simd.clamp(iv.rint(simd.mul(simd.load(xf, at + 2 * hw), inv_v)), lo_v, hi_v)
                iv.store_int8_interleaved3(op, (b * hw + p) * 3, simd.add(v0, zp_v),
                                           simd.add(v1, zp_v), simd.add(v2, zp_v))  # fmt: skip
        for p in range(start, stop):
            for ch in range(c):
                f = np.rint(xp[(b * c + ch) * hw + p] * inv)
                op[(b * hw + p) * c + ch] = np.int8(min(max(f, lo), hi) + _F32(zp))


@njit(cache=True, error_model="numpy")
def quantize_to_nhwc(x, out, inv, zp):  # noqa: ANN001, ANN201
    """NCHW float32 ``x`` quantized as :func:`quantize` into NHWC int8 ``out`` (a network's
    input and the transpose after its quantization, in one pass; three channels, an
    image's, L pixels a step)."""
    _quantize_pixels(x, out, inv, zp, 0, x.shape[0] * x.shape[2] * x.shape[3])


def _quantize_to_nhwc_shared(x, out, inv, zp, jobs):  # noqa: ANN001, ANN202
    n = x.shape[0] * x.shape[2] * x.shape[3]
    count = _spans(n // _SPAN_ELEMENTS)
    workers = _workers(count, jobs)
    if workers == 1:  # (one thread: no parallel region, ~0.7 us a call)
        _quantize_pixels(x, out, inv, zp, 0, n)
        return
    for w in prange(workers):
        j = _next_job(jobs, w, workers)
        while j >= 0:
            _quantize_pixels(x, out, inv, zp, n * j // count, n * (j + 1) // count)
            j = _next_job(jobs, w, workers)


@njit(cache=True, error_model="numpy")
def _add_flip_span(a, b, out, rows, am, bm, bias, shift, zy, lo, hi, i0, i1):  # noqa: ANN001, ANN202
    """:func:`_add_span` also storing each sum sign-flipped in ``rows`` (int8)."""
    ap, bp, op, rp = simd.pointer(a), simd.pointer(b), simd.pointer(out), simd.pointer(rows)
    for i in range(i0, i1):
        acc = np.int64(ap[i]) * am + np.int64(bp[i]) * bm + bias
        y = np.int8(min(max((acc >> shift) + zy, lo), hi))
        op[i] = y
        rp[i] = y ^ _FLIP


@njit(cache=True, error_model="numpy")
def add_flip(a, b, out, rows, am, bm, bias, shift, zy, lo, hi):  # noqa: ANN001, ANN201
    """:func:`add` into ``out`` and, sign-flipped, into ``rows``: the sum and the rows of
    a 1x1 convolution reading it (a block's input: one pass, not an addition then a
    :func:`flip`)."""
    _add_flip_span(a, b, out, rows, am, bm, bias, shift, zy, lo, hi, 0, out.size)


def _add_flip_shared(a, b, out, rows, am, bm, bias, shift, zy, lo, hi, jobs):  # noqa: ANN001, ANN202
    n = out.size
    count = _spans(n // _SPAN_ELEMENTS)
    workers = _workers(count, jobs)
    if workers == 1:  # (one thread: no parallel region, ~0.7 us a call)
        _add_flip_span(a, b, out, rows, am, bm, bias, shift, zy, lo, hi, 0, n)
        return
    for w in prange(workers):
        j = _next_job(jobs, w, workers)
        while j >= 0:
            _add_flip_span(a, b, out, rows, am, bm, bias, shift, zy, lo, hi, n * j // count,
                           n * (j + 1) // count)  # fmt: skip
            j = _next_job(jobs, w, workers)


# The element steps between convolutions, shared over the threads in force as the
# convolutions are (each thread's range the same part of the image): done by one thread,
# the next convolution's other threads read all their inputs from its cache.
# (pad_flip(..., jobs), flip(..., jobs), add(..., jobs), add_flip(..., jobs),
# quantize_to_nhwc(..., jobs))
PAD_FLIP_SHARED = variants.njit_renamed(
    _pad_flip_shared, "qs8_pad_flip_shared", parallel=True, error_model="numpy"
)
FLIP_SHARED = variants.njit_renamed(
    _flip_shared, "qs8_flip_shared", parallel=True, error_model="numpy"
)
ADD_SHARED = variants.njit_renamed(
    _add_shared, "qs8_add_shared", parallel=True, error_model="numpy"
)
ADD_FLIP_SHARED = variants.njit_renamed(
    _add_flip_shared, "qs8_add_flip_shared", parallel=True, error_model="numpy"
)
QUANTIZE_TO_NHWC_SHARED = variants.njit_renamed(
    _quantize_to_nhwc_shared, "qs8_quantize_to_nhwc_shared", parallel=True, error_model="numpy"
)


@njit(cache=True, error_model="numpy")
def dequantize(x, out, scale, zp):  # noqa: ANN001, ANN201
    """int8 ``x`` to float32: ``(x - zp) * scale``."""
    for i in range(out.size):
        out[i] = _F32(np.int32(x[i]) - zp) * scale


@njit(cache=True, error_model="numpy")
def clamp(x, out, lo, hi):  # noqa: ANN001, ANN201
    """Flat int8 ``x`` clamped to [lo, hi] into ``out`` (one quantization in and out)."""
    for i in range(out.size):
        out[i] = min(max(x[i], lo), hi)


@njit(cache=True, error_model="numpy")
def lookup(x, out, table):  # noqa: ANN001, ANN201
    """``out[i] = table[x[i] + 128]``: an int8 unary function tabulated at load."""
    for i in range(out.size):
        out[i] = table[np.int32(x[i]) + 128]
