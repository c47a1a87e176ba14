"""Channels-last (NHWC) 2-D convolutions written with explicit SIMD vectors (compiled tier).

The step the runtime's layout pass calls::

    channels_last_conv_step(
        input, weight, bias, stride, padding, dilation, groups, out,
        *, low=-math.inf, high=math.inf, residual=None, activation=None,
    ) -> tuple[dispatcher, tuple] | None

returns ``(function, args)``; ``function(*args)`` computes, into ``out``,
``clamp(conv2d(input, weight, bias, stride, padding, dilation, groups) + residual, low, high)``
(the residual term only when given; the clamp as torch.clamp's: NaN stays NaN, an infinite
bound clamps nothing). ``function`` is the serial compilation of :data:`DENSE` or
:data:`DEPTHWISE`, or from :data:`PARALLEL_MACS` (where numba can run more than one thread)
:func:`nhwc_dense_at_threads` or :func:`nhwc_depthwise_at_threads`, which run the parallel
compilation on the threads in force at the call, its jobs split for one thread (the serial
plan) or for several (two geometry arguments, the several's last); all importable by name,
``cache=True``, generic in shape. ``args`` are arrays (the weights packed here,
flat views of ``input``, ``out`` and ``residual``, buffers) and nothing else.
It is None, and the existing steps apply, unless:

* ``input`` and ``out`` are 4-D float32/float64 arrays of logical shape (N, C, H, W), each
  C-contiguous (NCHW memory) or channels-last (:func:`jit.arrays.channels_last`), at
  least one of them channels-last;
* ``weight`` (C_out, C_in/groups, KH, KW) and ``bias`` (C_out,) or None are constants (not
  writeable) of the same dtype: they are packed at load, never in the hot loop;
* ``groups`` is 1 (any kernel size, stride, padding, dilation) or depthwise
  (groups == C_in == C_out);
* ``residual`` is None or an array of ``out``'s shape, dtype and memory layout; it may be
  ``out``'s own memory (same data, same strides: each element's residual is read before
  its store). ``input`` may not overlap ``out``, nor a residual overlap it otherwise; no
  bound is NaN.

The kernels are :data:`~.compiled_nhwc_dense.DENSE` (any dense convolution, 1x1 included)
and :data:`~.compiled_nhwc_depthwise.DEPTHWISE`; their shared pieces (the layout of the
``geometry`` argument, stores, copies) are in :mod:`.compiled_nhwc_common`. This module
plans a call at load: it packs the weights, lays out the geometry and picks the kernel,
its variant and its split into jobs.

An NCHW ``out`` is computed channels-last into a buffer made at load and copied over with
the residual and clamp applied on the way (a rare case: a layer before a flatten).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from pyexecutorch.jit import simd, symbol_calls, variants, xnnpack_math
from pyexecutorch.jit.arrays import FLOATS, channels_last
from pyexecutorch.kernels.conv import geometry
from pyexecutorch.kernels.conv.compiled_nhwc_common import (  # noqa: PLC2701
    _ACTIVATION,
    _BANDED,
    _BANDS,
    _CIN,
    _COPY,
    _COUT,
    _DH,
    _DW,
    _GEOMETRY_SIZE,
    _GROUPS,
    _H,
    _HAS_RESIDUAL,
    _KH,
    _KW,
    _N,
    _OH,
    _OW,
    _PAIRED,
    _PH,
    _PIXEL_MAJOR,
    _PIXELS_PER_VECTOR,
    _PW,
    _RUN_LEN,
    _RUN_STEP,
    _RUNS,
    _SH,
    _STRIPS,
    _SW,
    _TO_PLANES,
    _W,
    _X_NHWC,
    _XS_CHAN,
    _XS_COL,
    _XS_IMAGE,
    _XS_ROW,
    HARDSWISH,
    SILU,
)
from pyexecutorch.kernels.conv.compiled_nhwc_dense import DENSE
from pyexecutorch.kernels.conv.compiled_nhwc_depthwise import DEPTHWISE

# ---------------------------------------------------------------------------
# The parallel kernels on the threads in force at each call: their jobs split as planned
# for one thread (bands, strips that stay in cache; a lone thread runs the jobs in order,
# so bands may share the copy buffer) or for several. Only the parallel compilation is
# linked: a switch to the serial one would double each whole method's machine code, for
# the few microseconds a parallel region costs on one thread.

_THREADS = variants.threads_reader()
# (called by symbol: these wrappers do not optimise the kernels' code again; jit.symbol_calls)
_DENSE_PARALLEL = symbol_calls.by_symbol(symbol_calls.callee_of(DENSE[1]))
_DEPTHWISE_PARALLEL = symbol_calls.by_symbol(symbol_calls.callee_of(DEPTHWISE[1]))


@njit(cache=True, error_model="numpy")
def nhwc_dense_at_threads(
    x, wp, bias, runs, windows, g, scalars, residual, out, planes, buffer, gp
):  # noqa: ANN001, ANN201
    """DENSE's parallel variant on geometry ``g`` (one thread's jobs) or ``gp`` (more)."""
    geometry = gp if _THREADS() > 1 else g
    return _DENSE_PARALLEL(
        x, wp, bias, runs, windows, geometry, scalars, residual, out, planes, buffer
    )


@njit(cache=True, error_model="numpy")
def nhwc_depthwise_at_threads(x, wp, bias, g, scalars, residual, out, planes, buffer, gp):  # noqa: ANN001, ANN201
    """DEPTHWISE's parallel variant on geometry ``g`` (one thread's jobs) or ``gp`` (more)."""
    geometry = gp if _THREADS() > 1 else g
    return _DEPTHWISE_PARALLEL(x, wp, bias, geometry, scalars, residual, out, planes, buffer)


# ---------------------------------------------------------------------------
# The step, built at load.

# Multiply-adds from which a step takes its parallel compilation (with more than one
# thread). A parallel region costs a few microseconds, but a serial convolution between
# parallel ones also gathers its whole output in one core's cache, which the next layer's
# other thread then reads from that core: MobileNetV2's 14x14 and 7x7 stride-2 depthwise
# layers (0.34M, 0.25M) were serial, and the 1x1 convolutions after them took 38 -> 111 us
# and 96 -> 142 at two threads. At two threads, from 0.6M / 0.4M (dense / depthwise) to
# 0.2M / 0.1M: MobileNetV2 4.16-4.24 -> 3.86-3.91 ms a call, MobileNetV3-Small 1.388 ->
# 1.366, EfficientNet-B0 9.35 -> 9.22, SqueezeNet 1.1 and ResNet-18 unchanged; one thread
# unchanged (official XNNPACK programs, prioritised runs on the loaded 2-core VM,
# alternated in one process).
PARALLEL_MACS = 200_000
DEPTHWISE_PARALLEL_MACS = 100_000

# Input bytes a depthwise job's band of rows reads at most (held in L2 across the channel
# vectors that read it in turn).
BAND_BYTES = 64 * 1024

# Input pixels up to which a 3x3 depthwise convolution with padding (or a channel tail)
# reads a zero-padded copy rather than the input with masked loads at its borders; at
# stride 1 (where the copy costs a ninth of the filter) up to the larger number.
COPY_PIXELS_3X3 = 64
COPY_PIXELS_3X3_STRIDE_1 = 256

# Channel vectors from which a 3x3 depthwise convolution runs pixel by pixel over them
# (see _dw3x3_tiled) rather than vector by vector.
TILED_VECTORS = 2

# Bytes a tile of 4 pixels of such a convolution reads over its channel vectors (the
# input columns of its 3 rows and the weights), up to which the vectors are taken in one
# group: past it, in groups each reading that much at most, so that the columns a tile
# shares with the next are still in L1 (us, one thread, stride 1: 576 channels at 14x14
# 59-71 -> 53, 960 at 7x7 38 -> 31, 384 at 14x14 38 -> 34; 192 at 28x28, 20 KB, kept
# whole: 57, and 64 in two groups).
TILE_BYTES = 24 * 1024

# The share of a depthwise filter's taps (over all output pixels) inside the image below
# which only those are computed (us, 1 thread: 288 channels 5x5 at 2x2, 4 of 25 taps a
# pixel, 2.76 -> 0.58; 120 at 4x4, 12 of 25, 1.45 -> 1.50, so not then).
CLIPPED_SHARE = 0.45

# Bytes of padded input rows a dense band copies and then reads (see _dense_job): well
# inside L1.
BAND_COPY_BYTES = 16 * 1024

# Input bytes a serial dense strip reads about (see _dense_jobs): its pixels stay in L2 while
# each block of output vectors reads them.
STRIP_BYTES = 128 * 1024


def _aligned(values: np.ndarray) -> np.ndarray:
    """A copy of 1-D ``values`` starting on a 64-byte boundary (a cache line): a vector read
    across two lines costs two."""
    raw = np.empty(values.size * values.itemsize + 64, np.uint8)
    start = -raw.ctypes.data % 64
    out = raw[start : start + values.size * values.itemsize].view(values.dtype)
    out[:] = values
    return out


def _zeros(size: int, dtype: Any) -> np.ndarray:
    return _aligned(np.zeros(size, dtype))


def _flat(a: np.ndarray, nhwc: bool) -> np.ndarray:
    """The 1-D view of a 4-D array's memory, read as NHWC or NCHW."""
    return (a.transpose(0, 2, 3, 1) if nhwc else a).reshape(-1)


def _data(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _pack_vectors(units: np.ndarray, lanes: int) -> np.ndarray:
    """Weights (C_out, U) in the tiles' order: output channels zero-padded to whole vectors;
    vector pairs (v, v + 1) at element v * lanes * U, unit by unit, the pair's 2 * lanes
    values of a unit together; an odd last vector unit by unit alone."""
    c_out, count = units.shape
    vectors = -(-c_out // lanes)
    padded = np.zeros((vectors * lanes, count), units.dtype)
    padded[:c_out] = units
    parts = []
    for v in range(0, vectors - 1, 2):
        pair = padded[v * lanes : (v + 2) * lanes].reshape(2, lanes, count)
        parts.append(pair.transpose(2, 0, 1).reshape(-1))
    if vectors % 2:
        parts.append(padded[(vectors - 1) * lanes :].T.reshape(-1))
    return _aligned(np.concatenate(parts))


def _pack_paired(
    units: np.ndarray, bias: np.ndarray, lanes: int, run_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """Weights (C_out <= lanes / 2, units in runs of ``run_len``) and bias for the paired
    tile: a run's unit pair j in one vector, output k's weights of units 2j, 2j + 1 in
    lanes 2k, 2k + 1 (of an odd run's last unit in lane 2k, lane 2k + 1 zero); the bias in
    the even lanes."""
    c_out, count = units.shape
    runs = count // run_len
    pairs = -(-run_len // 2)
    even = np.zeros((c_out, runs, 2 * pairs), units.dtype)
    even[:, :, :run_len] = units.reshape(c_out, runs, run_len)
    packed = np.zeros((runs, pairs, lanes), units.dtype)
    for e in range(2):
        packed[:, :, e : 2 * c_out : 2] = even[:, :, e::2].transpose(1, 2, 0)
    b = np.zeros(lanes, bias.dtype)
    b[0 : 2 * c_out : 2] = bias
    return _aligned(packed.reshape(-1)), _aligned(b)


def _padded(values: np.ndarray, lanes: int) -> np.ndarray:
    """``values`` zero-padded to whole vectors, aligned."""
    out = np.zeros(-(-len(values) // lanes) * lanes, values.dtype)
    out[: len(values)] = values
    return _aligned(out)


def _strides(nhwc: bool, c: int, h: int, w: int) -> tuple[int, int, int, int]:
    """Element strides (image, row, column, channel) of an (N, C, H, W) array's memory."""
    return (h * w * c, w * c, c, 1) if nhwc else (c * h * w, w, 1, h * w)


def _dense_plan(
    weight: np.ndarray, geometry: np.ndarray, lanes: int
) -> tuple[np.ndarray, np.ndarray]:
    """(weights as (C_out, units) in the runs' order, run offsets) of the dense kernel;
    sets geometry's run fields.

    NHWC memory holds a tap row's (kw, c_in) contiguous at dilation 1: a run per kh.
    Otherwise a run per tap over c_in, or, on NCHW memory with filters as wide as its
    channels (a stem: 3 channels, 3x3 or 7x7) or outputs in half a vector (paired: runs
    of contiguous elements), a run per (c_in, kh) over kw.
    """
    c_out, c_in, kh_n, kw_n = weight.shape
    g = geometry
    xs_row, xs_col, xs_chan = int(g[_XS_ROW]), int(g[_XS_COL]), int(g[_XS_CHAN])
    dh, dw = int(g[_DH]), int(g[_DW])
    nhwc = xs_chan == 1 and c_in > 1
    over_kw = kw_n >= c_in or (c_out <= lanes // 2 and dw * xs_col == 1)
    if not nhwc and kw_n > 1 and over_kw:  # units (c_in, kh, kw)
        units = weight.reshape(c_out, c_in * kh_n * kw_n)
        runs = [c * xs_chan + kh * dh * xs_row for c in range(c_in) for kh in range(kh_n)]
        g[_RUN_LEN], g[_RUN_STEP] = kw_n, dw * xs_col
    else:  # units (kh, kw, c_in)
        units = weight.transpose(0, 2, 3, 1).reshape(c_out, kh_n * kw_n * c_in)
        if nhwc and dw == 1:
            runs = [kh * dh * xs_row for kh in range(kh_n)]
            g[_RUN_LEN], g[_RUN_STEP] = kw_n * c_in, 1
        else:
            runs = [kh * dh * xs_row + kw * dw * xs_col for kh in range(kh_n) for kw in range(kw_n)]
            g[_RUN_LEN], g[_RUN_STEP] = c_in, xs_chan
    g[_RUNS] = len(runs)
    return units, np.array(runs, np.int64)


def _window_starts(oh: int, ow: int, row_step: int, col_step: int) -> np.ndarray:
    """The first element of each output pixel's window in what the dense kernel reads
    (relative to its image), row by row; the last repeated for 8 more and up to whole
    tiles of 8 (a tail tile, of an image or a band of rows, computes copies of pixels
    past its end, not stored)."""
    h, w = np.divmod(np.arange(-(-oh * ow // 8) * 8 + 8), ow)
    starts = np.minimum(h, oh - 1) * row_step + np.where(h < oh, w, ow - 1) * col_step
    return starts.astype(np.int64)


def _depthwise_weights(
    weight: np.ndarray, bias: np.ndarray, lanes: int, per_vector: int
) -> tuple[np.ndarray, np.ndarray]:
    """(packed weights, bias) of the depthwise kernel: channel vector by vector, its taps'
    vectors in order, zero-padded; with ``per_vector`` pixels a vector, the channels
    repeated that many times across one vector."""
    c, _, kh, kw = weight.shape
    taps = weight.reshape(c, kh * kw)
    if per_vector > 1:
        return _aligned(np.tile(taps.T, (1, per_vector)).reshape(-1)), _aligned(
            np.tile(bias, per_vector)
        )
    vectors = -(-c // lanes)
    packed = np.zeros((vectors * lanes, kh * kw), weight.dtype)
    packed[:c] = taps
    packed = packed.reshape(vectors, lanes, kh * kw).transpose(0, 2, 1)
    return _aligned(packed.reshape(-1)), _padded(bias, lanes)


def _dense_jobs(
    threads: int, input_bytes: int, weight_bytes: int, pixels: int, c_out: int, lanes: int
) -> tuple[int, int]:
    """(strips, groups) an image's dense convolution is split into: jobs of whole tiles of
    8 pixels by groups of output vector pairs.

    Serially (``threads`` 1), strips whose input (about :data:`STRIP_BYTES`) stays in cache
    while every block of output vectors reads it in turn. In parallel (the loop's threads
    each take an equal run of jobs), a number of jobs a multiple of the threads: by output
    channels where the weights outweigh the input (each thread then reads only its share of
    the weights: small late images), else by pixels.
    """
    tiles = -(-pixels // 8)
    strips = min(tiles, max(1, input_bytes // STRIP_BYTES))
    if threads == 1:
        return strips, 1
    pairs = -(-c_out // lanes) // 2
    even = pairs % threads == 0 or pairs >= 4 * threads
    if (weight_bytes > input_bytes or tiles < threads) and pairs >= threads and even:
        return 1, threads
    if tiles < threads:
        return tiles, 1
    strips = max(strips, 4 * threads if tiles >= 16 * threads else threads)
    return min(tiles // threads, -(-strips // threads)) * threads, 1


@dataclass(frozen=True)
class _Call:
    """An accepted call, as the planners of the two kernels start from it."""

    input: np.ndarray
    weight: np.ndarray
    bias: np.ndarray  # (zeros without one)
    out: np.ndarray
    s: tuple[int, int]
    p: tuple[int, int]
    d: tuple[int, int]
    nhwc_in: bool
    g: np.ndarray  # the geometry argument, filled in by the planners
    args: tuple[np.ndarray, ...]  # (input, scalars, residual, target, out) flat, for the kernels
    macs: int

    def threads(self, least: int) -> int:
        """The threads this call's parallel jobs are planned for, or 1 where it stays serial
        (less work than ``least``, or numba with one thread only)."""
        return variants.planned_threads() if self.macs >= least and variants.can_thread() else 1


# The activations the kernels apply in their stores, by name (channels_last_conv_step).
ACTIVATIONS = {"silu": SILU, "hardswish": HARDSWISH}


def channels_last_conv_step(
    input: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: Any,
    out: Any,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    residual: Any = None,
    activation: str | None = None,
) -> tuple[Any, tuple[Any, ...]] | None:
    """``(function, args)``: ``function(*args)`` writes
    ``clamp(conv2d(input, weight, bias, stride, padding, dilation, groups) + residual, low,
    high)`` into ``out``, then ``activation`` of it ("silu": times the XNNPACK sigmoid of
    itself; "hardswish": as XNNPACK's node, each step rounded to float32); or None where
    this module does not apply (see the module's docstring)."""
    call = _accepted(
        input, weight, bias, stride, padding, dilation, groups, out, low, high, residual
    )
    if call is not None and activation is not None:
        # (in the kernels' stores: a float32 channels-last output they write themselves;
        # SiLU where vectors have the delegate's AVX-512F sigmoid)
        flag = ACTIVATIONS.get(activation)
        if flag == SILU and not (xnnpack_math.SILU_VECTORS and simd.lanes(np.float32) == 16):
            flag = None
        if flag is None or call.input.dtype != np.float32 or call.g[_TO_PLANES] != 0:
            return None
        call.g[_ACTIVATION] = flag
    if call is None:
        return None
    return _depthwise_call(call) if groups != 1 else _dense_call(call)


def _accepted(  # noqa: C901 - one test a condition of the module's docstring
    input: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: Any,
    out: Any,
    low: Any,
    high: Any,
    residual: Any,
) -> _Call | None:
    """The call with its geometry's common fields laid out, or None where the module does
    not apply."""
    from pyexecutorch.kernels.conv.conv import signature_or_none  # noqa: PLC0415

    arrays = (input, weight, out)
    if not all(isinstance(a, np.ndarray) for a in arrays) or input.ndim != 4 or out.ndim != 4:
        return None
    dt = input.dtype
    if dt not in FLOATS or weight.dtype != dt or out.dtype != dt or weight.flags.writeable:
        return None
    if bias is not None and not (
        isinstance(bias, np.ndarray) and bias.dtype == dt and not bias.flags.writeable
    ):
        return None
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups <= 0:
        return None
    groups = int(groups)
    if not (isinstance(low, numbers.Real) and isinstance(high, numbers.Real)):
        return None
    low, high = float(low), float(high)
    if math.isnan(low) or math.isnan(high) or not out.flags.writeable:
        return None
    nhwc_in, nhwc_out = channels_last(input), channels_last(out)
    if not (nhwc_in or input.flags.c_contiguous) or not (nhwc_out or out.flags.c_contiguous):
        return None
    if not (nhwc_in or nhwc_out):
        return None  # both NCHW: the existing steps
    sig = signature_or_none(input, weight, bias, stride, padding, dilation, False, (0, 0), groups)
    if sig is None:
        return None
    s, p, d, shape, _ = sig
    if tuple(shape) != out.shape or out.size == 0 or input.size == 0 or weight.size == 0:
        return None
    if np.shares_memory(input, out):
        return None
    if residual is not None:
        if not (
            isinstance(residual, np.ndarray)
            and residual.dtype == dt
            and residual.shape == out.shape
            and (channels_last(residual) if nhwc_out else residual.flags.c_contiguous)
        ):
            return None
        same = _data(residual) == _data(out) and residual.strides == out.strides
        if not same and np.shares_memory(residual, out):
            return None
    n, c_in, h, w = input.shape
    c_out, cg, kh, kw = weight.shape
    oh, ow = out.shape[2:]
    depthwise = groups == c_in == c_out and cg == 1 and groups > 1
    if groups != 1 and not depthwise:
        return None
    x_flat = _flat(input, nhwc_in)
    out_flat = _flat(out, nhwc_out)
    # What the kernels write: out itself, or a channels-last buffer copied to NCHW out.
    target = out_flat if nhwc_out else _zeros(out.size, dt)
    res_flat = out_flat if residual is None else _flat(residual, nhwc_out)
    b = np.zeros(c_out, dt) if bias is None else np.asarray(bias)
    g = np.zeros(_GEOMETRY_SIZE, np.int64)
    g[_N], g[_H], g[_W], g[_CIN], g[_X_NHWC] = n, h, w, c_in, nhwc_in
    g[_OH], g[_OW], g[_COUT], g[_KH], g[_KW] = oh, ow, c_out, kh, kw
    g[_SH], g[_SW], g[_PH], g[_PW], g[_DH], g[_DW] = *s, *p, *d
    g[_HAS_RESIDUAL], g[_TO_PLANES], g[_PIXELS_PER_VECTOR] = residual is not None, not nhwc_out, 1
    scalars = np.array([low, high, -math.inf, math.inf], dt)
    args = (x_flat, scalars, res_flat, target, out_flat)
    macs = out.size * cg * kh * kw
    return _Call(input, weight, b, out, tuple(s), tuple(p), tuple(d), nhwc_in, g, args, macs)


def _depthwise_call(call: _Call) -> tuple[Any, tuple[Any, ...]]:
    """The depthwise kernel's variant, memory layout and jobs for ``call``."""
    g, d, dt = call.g, call.d, call.input.dtype
    n, c_in, h, w = call.input.shape
    kh, kw = call.weight.shape[2:]
    oh, ow = call.out.shape[2:]
    (sh, sw), (ph, pw), s = call.s, call.p, call.s
    hp, wp = h + 2 * ph, w + 2 * pw
    nhwc_in, lanes = call.nhwc_in, simd.lanes(dt)
    x_flat, scalars, res_flat, target, out_flat = call.args
    # (a few channels at stride 1: several pixels a vector)
    few = (kh, kw) == (3, 3) and sw == 1 and c_in < lanes and lanes % c_in == 0
    per_vector = lanes // c_in if few else 1
    g[_PIXELS_PER_VECTOR] = per_vector
    uneven = ph > 0 or pw > 0 or c_in % lanes != 0
    # (a 3x3 filter reads large images uncopied, through masked loads at the borders)
    limit = COPY_PIXELS_3X3_STRIDE_1 if s == (1, 1) else COPY_PIXELS_3X3
    small = (kh, kw) != (3, 3) or h * w <= limit
    g[_COPY] = 2 if not nhwc_in else int(few or (uneven and small))
    vectors = -(-c_in * per_vector // lanes)
    # Filters other than 3x3 on small images, mostly over padding, or at most 3
    # pixels wide (the 4-pixel groups would compute repeats): only their taps
    # inside the image (3x3 keeps its unrolled forms).
    inside = geometry.taps_inside(h, oh, kh, sh, ph, d[0]) * geometry.taps_inside(
        w, ow, kw, sw, pw, d[1]
    )
    if (kh, kw) != (3, 3) and (inside < CLIPPED_SHARE * kh * kw * oh * ow or ow < 4):
        g[_COPY] = 2 if not nhwc_in else 0
        g[_PIXEL_MAJOR] = 2
    # On a copied image with several channel vectors, pixel by pixel over all vectors
    # rather than vector by vector with the weights held, whose setup costs as much as
    # ten pixels (us, one thread: 240 channels at 2x2 0.65 -> 0.40, 96 at 6x6 1.40 ->
    # 1.18, 48 at 16x16 5.3 -> 4.4; one vector of 16 at 32x32 5.0 -> 6.7, so not then).
    if g[_PIXEL_MAJOR] != 2:
        g[_PIXEL_MAJOR] = (kh, kw) == (3, 3) and g[_COPY] != 0 and per_vector == 1 and vectors > 1
    # Whole channel vectors, at least TILED_VECTORS, dilation 1, stride 1 or 2: in
    # place, pixel by pixel over the vectors, 4 pixels at a time (us, one thread: 512
    # channels at 14x14 45 -> 29, 256 at 28x28 79 -> 52, 64 at 112x112 stride 2 208 ->
    # 139; one vector of 16 at 112x112 49 -> 61, so not then).
    if (
        (kh, kw) == (3, 3)
        and nhwc_in
        and tuple(d) == (1, 1)
        and sw in (1, 2)
        and per_vector == 1
        and c_in % lanes == 0
        and vectors >= TILED_VECTORS
    ):
        g[_COPY], g[_PIXEL_MAJOR] = 0, 3
    g[_XS_IMAGE], g[_XS_ROW], g[_XS_COL], g[_XS_CHAN] = _strides(True, c_in, hp, wp)
    # (room after the padded image for a last vector's lanes past its channels)
    buffer = _zeros(n * hp * wp * c_in + lanes, dt) if g[_COPY] else x_flat
    wd, bd = _depthwise_weights(call.weight, call.bias, lanes, per_vector)
    # Bands of output rows whose input rows fit in L2 (each channel vector's job strides
    # over its lanes of every pixel of the band); one job a band serially, in parallel
    # the vectors split into groups, at least four jobs a thread.
    band_rows = max(1, BAND_BYTES // (w * c_in * dt.itemsize * sh))
    g[_BANDS] = bands = min(oh, -(-oh // band_rows))
    g[_GROUPS] = 1
    if g[_PIXEL_MAJOR] == 3:  # (tiles over groups of vectors whose reads stay in L1)
        columns = 3 * (3 * sw + 3) + 9  # a tile's input columns of its 3 rows, and weights
        per_group = max(1, TILE_BYTES // (columns * lanes * dt.itemsize))
        g[_GROUPS] = -(-vectors // per_group)
    args = (x_flat, wd, bd, g, scalars, res_flat, target, out_flat, buffer)
    threads = call.threads(DEPTHWISE_PARALLEL_MACS)
    if threads == 1:
        return DEPTHWISE[0], args
    gp = g.copy()
    jobs = 4 * threads
    gp[_GROUPS] = groups = max(g[_GROUPS], min(vectors, -(-jobs // (n * bands))))
    gp[_BANDS] = min(oh, max(bands, -(-jobs // (n * groups))))
    return nhwc_depthwise_at_threads, (*args, gp)


def _dense_call(call: _Call) -> tuple[Any, tuple[Any, ...]]:
    """The dense kernel's variant, runs, packed weights and jobs for ``call``."""
    g, d, dt, weight, b = call.g, call.d, call.input.dtype, call.weight, call.bias
    n, c_in, h, w = call.input.shape
    c_out, _, kh, kw = weight.shape
    oh, ow = call.out.shape[2:]
    (sh, sw), (ph, pw) = call.s, call.p
    hp, wp = h + 2 * ph, w + 2 * pw
    nhwc_in, lanes = call.nhwc_in, simd.lanes(dt)
    x_flat, scalars, res_flat, target, out_flat = call.args

    def packed(units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # outputs in half a vector, runs of contiguous elements: paired
        g[_PAIRED] = c_out <= lanes // 2 and g[_RUN_STEP] == 1
        if g[_PAIRED]:
            return _pack_paired(units, b, lanes, int(g[_RUN_LEN]))
        return _pack_vectors(units, lanes), _padded(b, lanes)

    # An NCHW input of a few channels and a filter wider than one (a stem over the model's
    # input) is read from an NHWC copy: runs of (kw, c_in) contiguous, a few per window.
    stem = not nhwc_in and c_in <= 4 and kw > 1 and d[1] == 1
    g[_COPY] = 2 if stem else int(ph > 0 or pw > 0)
    g[_XS_IMAGE], g[_XS_ROW], g[_XS_COL], g[_XS_CHAN] = _strides(nhwc_in or stem, c_in, hp, wp)
    buffer = _zeros(n * c_in * hp * wp, dt) if g[_COPY] else x_flat
    units, runs = _dense_plan(weight, g, lanes)
    wm, bm = packed(units)
    windows = _window_starts(oh, ow, sh * int(g[_XS_ROW]), sw * int(g[_XS_COL]))
    sizes = (c_in * h * w * dt.itemsize, weight.nbytes, oh * ow, c_out, lanes)
    threads = call.threads(PARALLEL_MACS)
    gp = g.copy()  # (the parallel variant's: no bands, which would share the buffer)
    gp[_STRIPS], gp[_GROUPS] = _dense_jobs(threads, *sizes)
    g[_STRIPS], g[_GROUPS] = _dense_jobs(1, *sizes)
    # A copied input larger than L1 is copied band by band, each band of output pixels
    # (whole tiles) copying the input rows it reads just before (serially only).
    row_bytes = int(g[_XS_ROW]) * dt.itemsize * (c_in if not (nhwc_in or stem) else 1)
    band = max(1, (BAND_COPY_BYTES // row_bytes - kh) // sh)
    if g[_COPY] and band < oh:
        g[_BANDED], g[_STRIPS] = 1, -(-oh * ow // max(8, band * ow // 8 * 8))
    args = (x_flat, wm, bm, runs, windows, g, scalars, res_flat, target, out_flat, buffer)
    if threads == 1:
        return DENSE[0], args
    return nhwc_dense_at_threads, (*args, gp)
