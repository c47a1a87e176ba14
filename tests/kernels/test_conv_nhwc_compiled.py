"""The channels-last convolution steps (kernels/conv/compiled_nhwc.py) equal torch eager and
the reference numpy kernel (+ residual, clamped), on every layout combination they take,
and decline what they do not take."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pyexecutorch.kernels import get_kernel

numba = pytest.importorskip("numba", reason="the compiled forms need numba (the jit extra)")

from pyexecutorch.jit import simd  # noqa: E402
from pyexecutorch.jit.arrays import channels_last  # noqa: E402
from pyexecutorch.kernels.conv import compiled_nhwc  # noqa: E402
from pyexecutorch.kernels.conv.compiled_nhwc import channels_last_conv_step  # noqa: E402
from pyexecutorch.runtime import whole_method  # noqa: E402

REFERENCE = get_kernel("aten::convolution.out").fn
INF = math.inf

# (batch, in channels, out channels, height, width, (kh, kw), stride, padding, dilation, groups)
# where groups "dw" is depthwise (groups == channels).
CASES = [
    # 1x1 at stride 1 (channel tails, one pixel, tail tiles)
    (1, 8, 48, 5, 7, (1, 1), 1, 0, 1, 1),
    (2, 17, 24, 3, 3, (1, 1), 1, 0, 1, 1),
    (1, 1, 3, 1, 1, (1, 1), 1, 0, 1, 1),
    (1, 96, 16, 4, 4, (1, 1), 1, 0, 1, 1),
    (1, 240, 7, 2, 2, (1, 1), 1, 0, 1, 1),
    (1, 3, 144, 6, 5, (1, 1), 1, 0, 1, 1),
    (1, 48, 240, 1, 1, (1, 1), 1, 0, 1, 1),
    (1, 48, 8, 4, 4, (1, 1), 1, 0, 1, 1),  # outputs in half a vector: paired tiles
    (1, 16, 3, 5, 5, (1, 1), 1, 0, 1, 1),
    # other dense ones
    (1, 16, 24, 7, 7, (1, 1), 2, 0, 1, 1),  # a strided projection
    (1, 3, 8, 32, 32, (3, 3), 2, 1, 1, 1),  # a MobileNet stem
    (2, 7, 17, 9, 8, (3, 3), 1, 1, 1, 1),
    (1, 16, 16, 10, 10, (3, 3), 1, 2, 2, 1),  # dilated
    (1, 8, 8, 3, 3, (3, 3), 1, 3, 1, 1),  # padding wider than the image
    (1, 24, 48, 8, 8, (3, 3), 2, 0, 1, 1),
    (1, 8, 16, 6, 6, (5, 5), 1, 2, 1, 1),
    (1, 3, 8, 32, 32, (7, 7), 2, 3, 1, 1),  # a ResNet stem
    (2, 3, 17, 9, 9, (7, 7), 2, 3, 1, 1),
    (1, 8, 8, 5, 6, (1, 3), 1, (0, 1), 1, 1),
    (1, 16, 24, 6, 5, (3, 1), 1, (1, 0), 1, 1),
    (1, 1, 1, 4, 4, (3, 3), 1, 1, 1, 1),  # one channel (groups 1 == channels)
    (1, 8, 8, 6, 5, (3, 3), 1, 1, 1, 1),  # paired, even runs
    (2, 5, 4, 7, 7, (3, 3), 2, 1, 1, 1),  # paired, odd runs
    # copies larger than L1: bands of output pixels copying their input rows first
    (1, 24, 40, 12, 12, (3, 3), 1, 1, 1, 1),
    (2, 16, 24, 20, 20, (3, 3), 1, 1, 1, 1),
    (1, 3, 8, 96, 96, (3, 3), 2, 1, 1, 1),  # a stem over a larger image
    # depthwise 3x3: copied (small images) and masked borders (large ones), stride 1 and 2
    (1, 8, 8, 32, 32, (3, 3), 1, 1, 1, "dw"),  # a few channels: pixels share a vector
    (1, 48, 48, 32, 32, (3, 3), 2, 1, 1, "dw"),
    (2, 24, 24, 16, 16, (3, 3), 1, 1, 1, "dw"),
    (1, 40, 40, 20, 18, (3, 3), 1, 1, 1, "dw"),  # read in place, masked borders, stride 1
    (1, 17, 17, 12, 11, (3, 3), 2, 1, 1, "dw"),
    (1, 96, 96, 4, 4, (3, 3), 1, 1, 1, "dw"),
    (1, 144, 144, 4, 4, (3, 3), 2, 1, 1, "dw"),
    (1, 240, 240, 2, 2, (3, 3), 1, 1, 1, "dw"),
    (1, 3, 3, 1, 1, (3, 3), 1, 1, 1, "dw"),
    (1, 16, 16, 3, 3, (3, 3), 1, 3, 1, "dw"),  # padding wider than the image
    (1, 7, 7, 9, 10, (3, 3), 1, 2, 2, "dw"),  # dilated
    (1, 48, 48, 10, 10, (3, 3), 1, 0, 1, "dw"),  # no padding: read in place
    # depthwise, other sizes
    (1, 48, 48, 8, 8, (5, 5), 1, 2, 1, "dw"),
    (1, 96, 96, 8, 8, (5, 5), 2, 2, 1, "dw"),
    (2, 17, 17, 7, 7, (5, 5), 1, 2, 1, "dw"),
    (1, 144, 144, 4, 4, (5, 5), 1, 2, 1, "dw"),
    (1, 7, 7, 5, 5, (5, 5), 1, 3, 2, "dw"),
    (1, 8, 8, 9, 9, (7, 7), 1, 3, 1, "dw"),
    (1, 16, 16, 6, 7, (1, 3), 2, (0, 1), 1, "dw"),
    (1, 32, 32, 9, 9, (5, 5), 1, 0, 1, "dw"),  # no padding, whole vectors: read in place
    # depthwise on small images, only the taps inside: blocks of four vectors, single ones,
    # a channel tail; batches, strides, dilation, one pixel
    (1, 288, 288, 2, 2, (5, 5), 1, 2, 1, "dw"),
    (2, 72, 72, 2, 3, (5, 5), 1, 2, 1, "dw"),
    (1, 40, 40, 3, 3, (5, 5), 2, 2, 1, "dw"),
    (1, 20, 20, 1, 1, (7, 7), 1, 3, 1, "dw"),
    (1, 64, 64, 3, 9, (5, 5), 1, (2, 1), (1, 2), "dw"),
]
LAYOUTS = [(True, True), (False, True), (True, False)]  # (input channels-last, out channels-last)
RESIDUALS = [None, "separate", "alias"]
CLAMPS = [(0.0, 6.0), (0.0, INF), (-INF, INF)]


def _id(case) -> str:  # noqa: ANN001
    n, c, oc, h, w, k, s, p, d, g = case
    return f"n{n}-{c}to{oc}-{h}x{w}-k{k[0]}x{k[1]}-s{s}-p{p}-d{d}-g{g}"


def _read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False  # as program constants reach kernels
    return a


def _channels_last(a: np.ndarray) -> np.ndarray:
    """``a`` (N, C, H, W) with NHWC memory, as the compiled tier stores it."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _pair(v) -> tuple[int, int]:  # noqa: ANN001
    return (v, v) if isinstance(v, int) else tuple(v)


def _problem(case, dtype):  # noqa: ANN001, ANN202
    """(input, weight, bias, geometry, groups, a residual) of a case, scaled so that sums
    stay near 1; the input holds NaN, infinities and -0.0 at a few places."""
    n, c, oc, h, w, k, s, p, d, g = case
    groups = c if g == "dw" else g
    rng = np.random.default_rng(sum(_pair(p)) + 7 * c + oc + h * w)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    x.reshape(-1)[[0, x.size // 2, -1]] = (-0.0, np.inf, -np.inf)
    if x.size > 8:
        x.reshape(-1)[x.size // 3] = np.nan
    fan_in = (c // groups) * k[0] * k[1]
    weight = (rng.standard_normal((oc, c // groups, *k)) / np.sqrt(fan_in)).astype(dtype)
    bias = rng.standard_normal(oc).astype(dtype)
    geometry = (_pair(s), _pair(p), _pair(d))
    out_shape = torch.nn.functional.conv2d(
        torch.from_numpy(x), torch.from_numpy(weight), None, *geometry, groups
    ).shape
    residual = rng.standard_normal(tuple(out_shape)).astype(dtype)
    return x, _read_only(weight), _read_only(bias), geometry, groups, residual


def _expected(x, weight, bias, geometry, groups, residual, clamp):  # noqa: ANN001, ANN202
    """(torch eager, the reference kernel) of clamp(conv2d + residual)."""
    s, p, d = geometry
    t = torch.nn.functional.conv2d(
        torch.from_numpy(x),
        torch.from_numpy(weight.copy()),
        torch.from_numpy(bias.copy()),
        s,
        p,
        d,
        groups,
    )
    if residual is not None:
        t = t + torch.from_numpy(residual)
    want = torch.clamp(t, *clamp).numpy()
    ref = np.zeros(want.shape, x.dtype)
    REFERENCE(x, weight, bias, s, p, d, False, (0, 0), groups, ref)
    if residual is not None:
        ref = ref + residual
    return want, np.minimum(np.maximum(ref, clamp[0]), clamp[1])


def _run(case, dtype, layout, residual_kind, clamp):  # noqa: ANN001, ANN202
    x, weight, bias, geometry, groups, residual = _problem(case, dtype)
    x_last, out_last = layout
    xin = _channels_last(x) if x_last else x.copy()
    out = np.full(residual.shape, np.nan, dtype)
    if out_last:
        out = _channels_last(out)
    res = None
    if residual_kind == "alias":  # the skip tensor's own buffer
        out[...] = residual
        res = out
    elif residual_kind == "separate":
        res = _channels_last(residual) if out_last else residual.copy()
    step = channels_last_conv_step(
        xin, weight, bias, *geometry, groups, out, low=clamp[0], high=clamp[1], residual=res
    )
    assert step is not None
    fn, args = step
    fn(*args)
    want, ref = _expected(
        x, weight, bias, geometry, groups, residual if residual_kind else None, clamp
    )
    return out, want, ref, (fn, args)


def _tolerance(dtype) -> dict:  # noqa: ANN001
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_every_layout_matches_torch_and_the_reference(case, dtype):
    # each case through the three layout combinations; residual and clamp kinds rotate
    # over the cases (every combination of them is in the test below)
    index = CASES.index(case)
    for k, layout in enumerate(LAYOUTS):
        residual_kind = RESIDUALS[(index + k) % 3]
        clamp = CLAMPS[(index + 2 * k) % 3]
        out, want, ref, _ = _run(case, dtype, layout, residual_kind, clamp)
        np.testing.assert_allclose(out, want, **_tolerance(dtype))
        np.testing.assert_allclose(out, ref, **_tolerance(dtype))


@pytest.mark.parametrize("residual_kind", RESIDUALS)
@pytest.mark.parametrize("clamp", CLAMPS, ids=["relu6", "relu", "none"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=["nhwc-nhwc", "nchw-nhwc", "nhwc-nchw"])
@pytest.mark.parametrize(
    "case",
    [
        (1, 17, 24, 5, 6, (1, 1), 1, 0, 1, 1),
        (2, 8, 17, 7, 6, (3, 3), 2, 1, 1, 1),
        (1, 24, 24, 12, 12, (3, 3), 1, 1, 1, "dw"),
        (2, 17, 17, 6, 6, (5, 5), 1, 2, 1, "dw"),
    ],
    ids=["pointwise", "dense", "depthwise3x3", "depthwise5x5"],
)
def test_every_residual_and_clamp_on_every_layout(case, layout, clamp, residual_kind):
    out, want, ref, _ = _run(case, np.float32, layout, residual_kind, clamp)
    np.testing.assert_allclose(out, want, **_tolerance(np.float32))
    np.testing.assert_allclose(out, ref, **_tolerance(np.float32))


def test_clamp_keeps_nan_and_clamps_infinities_as_torch():
    case = (1, 8, 16, 4, 4, (3, 3), 1, 1, 1, 1)
    out, want, _, _ = _run(case, np.float32, (True, True), None, (0.0, 6.0))
    assert np.isnan(out).any() and np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    assert np.nanmax(out) == 6.0 and np.nanmin(out) == 0.0  # the infinities clamped


@pytest.mark.parametrize("kernel", ["pointwise", "dense", "by_channels", "depthwise"])
def test_parallel_forms_match_the_serial_ones(kernel, monkeypatch):
    """Above the parallel threshold the step runs the parallel variant on the threads in
    force at each call, whatever the count was at load: its jobs as planned for several
    threads, or for one (bands and all); both give the same bits."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba runs one thread here: every step is serial")
    case = {
        "pointwise": (2, 24, 40, 9, 7, (1, 1), 1, 0, 1, 1),
        "dense": (2, 8, 24, 9, 7, (3, 3), 1, 1, 1, 1),
        # weights outweighing the input: jobs split the output vectors (an odd last one,
        # with a channel tail, in the last group)
        "by_channels": (2, 64, 72, 5, 5, (3, 3), 1, 1, 1, 1),
        "depthwise": (2, 40, 40, 9, 7, (3, 3), 1, 1, 1, "dw"),
    }[kernel]
    monkeypatch.setattr(compiled_nhwc, "PARALLEL_MACS", 0)
    monkeypatch.setattr(compiled_nhwc, "DEPTHWISE_PARALLEL_MACS", 0)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)  # planned at one thread, run at two below
        out, want, _, (fn, args) = _run(case, np.float32, (True, True), "separate", (0.0, 6.0))
        serial = out.copy()
        depthwise = kernel == "depthwise"
        assert fn is (
            compiled_nhwc.nhwc_depthwise_at_threads
            if depthwise
            else compiled_nhwc.nhwc_dense_at_threads
        )
        g, gp = (args[3] if depthwise else args[5]), args[-1]
        if kernel == "by_channels":  # (planned for every thread numba may run)
            threads = numba.config.NUMBA_NUM_THREADS
            assert gp[compiled_nhwc._STRIPS] == 1 and gp[compiled_nhwc._GROUPS] % threads == 0
            assert (g[compiled_nhwc._STRIPS], g[compiled_nhwc._GROUPS]) != (1, threads)
        np.testing.assert_allclose(serial, want, **_tolerance(np.float32))
        numba.set_num_threads(2)
        out[...] = np.nan
        fn(*args)
        np.testing.assert_array_equal(out, serial)
    finally:
        numba.set_num_threads(before)


@pytest.mark.parametrize("stride", [1, 2])
def test_banded_copies_take_each_calls_input(stride):
    """Serial strips of a padded input copy only the rows the strip before has not (their
    bands end mid-row here): over calls with new inputs, every output is the new one's."""
    case = (1, 32, 48, 21, 20, (3, 3), stride, 1, 1, 1)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        x, weight, bias, geometry, groups, _ = _problem(case, np.float32)
        xin = _channels_last(x)
        out = _channels_last(np.zeros(_expected(x, weight, bias, geometry, groups, None,
                                                (-np.inf, np.inf))[0].shape, np.float32))  # fmt: skip
        fn, args = channels_last_conv_step(xin, weight, bias, *geometry, groups, out)
        g = args[5]
        band_pixels = -(-out.shape[2] * out.shape[3] // g[compiled_nhwc._STRIPS])
        assert g[compiled_nhwc._BANDED] == 1 and band_pixels % out.shape[3] != 0
        rng = np.random.default_rng(7)
        for _ in range(3):
            xin[...] = rng.standard_normal(x.shape).astype(np.float32)
            out[...] = np.nan
            fn(*args)
            want, _ = _expected(np.ascontiguousarray(xin), weight, bias, geometry, groups,
                                None, (-np.inf, np.inf))  # fmt: skip
            np.testing.assert_allclose(out, want, **_tolerance(np.float32))
    finally:
        numba.set_num_threads(before)


def test_steps_are_importable_cached_dispatchers_over_arrays_and_scalars():
    pointwise = next(c for c in CASES if c[5] == (1, 1))
    dense = next(c for c in CASES if c[5] == (3, 3) and c[9] == 1)
    depthwise = next(c for c in CASES if c[9] == "dw")
    for case in (pointwise, dense, depthwise):
        _, _, _, (fn, args) = _run(case, np.float32, (True, True), None, (0.0, 6.0))
        assert whole_method._module_name(fn) is not None  # how a whole method names it
        assert fn._cache.__class__.__name__ != "NullCache"  # cache=True
        assert all(isinstance(a, (np.ndarray, int, float, bool)) for a in args)
        assert all(a.ndim == 1 and a.flags.c_contiguous for a in args if isinstance(a, np.ndarray))


def test_weights_are_packed_at_load():
    case = (1, 8, 24, 5, 5, (3, 3), 1, 1, 1, 1)
    x, weight, bias, geometry, groups, residual = _problem(case, np.float32)
    out = _channels_last(np.zeros(residual.shape, np.float32))
    x = _channels_last(x)  # (the input the step reads, which its arguments view)
    fn, args = channels_last_conv_step(x, weight, bias, *geometry, groups, out)
    assert not any(a is weight or a is bias for a in args)
    for a in args:  # the kernel reads its own aligned copies
        if (
            isinstance(a, np.ndarray)
            and a.dtype == np.float32
            and a.size % simd.lanes(a.dtype) == 0
        ):
            assert a.ctypes.data % 64 == 0 or np.shares_memory(a, x) or np.shares_memory(a, out)


def _step(x, weight, out, groups=1, **kw):  # noqa: ANN001, ANN003, ANN202
    return channels_last_conv_step(x, weight, None, (1, 1), (1, 1), (1, 1), groups, out, **kw)


def test_declines_what_it_does_not_take():
    f32 = np.float32
    x = _channels_last(np.zeros((1, 4, 6, 6), f32))
    out = _channels_last(np.zeros((1, 4, 6, 6), f32))
    w = _read_only(np.ones((4, 4, 3, 3), f32))
    assert _step(x, w, out) is not None
    # both NCHW: the existing steps
    assert _step(np.zeros((1, 4, 6, 6), f32), w, np.zeros((1, 4, 6, 6), f32)) is None
    # grouped, and a channel multiplier
    assert _step(x, _read_only(np.ones((4, 2, 3, 3), f32)), out, groups=2) is None
    out8 = _channels_last(np.zeros((1, 8, 6, 6), f32))
    assert _step(x, _read_only(np.ones((8, 1, 3, 3), f32)), out8, groups=4) is None
    # float16, mixed dtypes
    half = _channels_last(np.zeros((1, 4, 6, 6), np.float16))
    assert _step(half, _read_only(w.astype(np.float16)), half.copy()) is None
    assert _step(x, _read_only(w.astype(np.float64)), out) is None
    # weights or bias that may change between runs
    assert _step(x, w.copy(), out) is None
    b = np.zeros(4, f32)
    assert channels_last_conv_step(x, w, b, (1, 1), (1, 1), (1, 1), 1, out) is None
    # other ranks, a wrong output shape, another layout
    assert _step(x[0], w, out[0]) is None
    assert _step(x, w, _channels_last(np.zeros((1, 4, 5, 6), f32))) is None
    assert _step(x.transpose(0, 1, 3, 2), w, out) is None
    # a NaN bound, or none a number
    assert _step(x, w, out, low=math.nan) is None
    assert _step(x, w, out, high="6") is None
    # (numpy scalars are numbers too)
    assert _step(x, w, out, groups=np.int64(1), low=np.float32(0), high=np.float64(6)) is not None


def test_declines_overlapping_arrays_but_takes_the_residual_in_outs_place():
    f32 = np.float32
    w = _read_only(np.ones((4, 4, 3, 3), f32))
    memory = np.zeros((1, 6, 6, 8), f32)
    x, out = memory[..., :4].transpose(0, 3, 1, 2), memory[..., 4:].transpose(0, 3, 1, 2)
    assert not channels_last(x) and _step(x, w, out) is None  # interleaved: neither layout
    big = _channels_last(np.zeros((2, 4, 6, 6), f32))
    assert _step(big[:1], w, big[1:]) is not None  # one buffer, no overlap
    assert _step(big, w, big) is None  # the output over its own input
    out = _channels_last(np.zeros((1, 4, 6, 6), f32))
    x = _channels_last(np.zeros((1, 4, 6, 6), f32))
    assert _step(x, w, out, residual=out) is not None  # the same memory: taken
    assert _step(x, w, out, residual=x) is not None  # the input as the residual: only read
    shifted = np.zeros(out.size + 1, f32)
    out2 = shifted[:-1].reshape(1, 6, 6, 4).transpose(0, 3, 1, 2)
    res2 = shifted[1:].reshape(1, 6, 6, 4).transpose(0, 3, 1, 2)
    assert _step(x, w, out2, residual=res2) is None  # partly over out
    assert _step(x, w, out, residual=np.zeros((1, 4, 6, 6), f32)) is None  # NCHW residual
    assert _step(x, w, out, residual=out[:, :, :, :]) is not None


def _paths() -> list[tuple[str, tuple, tuple[bool, bool], str]]:
    """(path, case, layout, what its geometry shows) for each form the step picks, sized
    by this machine's lanes (a half vector of outputs is 8 with AVX-512, 4 with AVX2)."""
    half = simd.lanes(np.float32) // 2
    nhwc, stem = (True, True), (False, True)
    return [
        ("paired pixel pairs", (1, 16, half, 9, 7, (1, 1), 1, 0, 1, 1), nhwc, "pairs"),
        ("paired tail tile", (1, 24, half - 1, 3, 5, (3, 3), 1, 1, 1, 1), nhwc, "paired"),
        ("one pixel", (1, 48, 5 * half, 1, 1, (1, 1), 1, 0, 1, 1), nhwc, "one"),
        # 49 pixels: 6 tiles of 8, then a 4-pixel tile for the last one (a pair and an odd
        # last vector of outputs)
        ("4-pixel tail", (1, 16, 6 * half, 7, 7, (3, 3), 1, 1, 1, 1), nhwc, "tail4"),
        ("tiny image", (1, 40, 3 * half + 1, 2, 2, (1, 1), 1, 0, 1, 1), nhwc, "tiny"),
        ("stem NHWC copy", (2, 3, 3 * half, 20, 18, (3, 3), 2, 1, 1, 1), stem, "stem"),
        ("banded copy", (1, 3, half, 96, 96, (3, 3), 2, 1, 1, 1), stem, "banded"),
        ("clipped depthwise", (1, 288, 288, 2, 2, (5, 5), 1, 2, 1, "dw"), nhwc, "clipped"),
        # 3x3 depthwise: a vector in place row by row, weights held; whole vectors tiled
        # (stride 1 and 2, windows at every border); a channel tail copied, pixel by pixel
        ("depthwise rows", (1, 2 * half, 2 * half, 20, 18, (3, 3), 1, 1, 1, "dw"), nhwc, "rows"),
        ("depthwise tiled", (2, 6 * half, 6 * half, 9, 11, (3, 3), 1, 1, 1, "dw"), nhwc, "tiled"),
        ("tiled stride 2", (1, 4 * half, 4 * half, 12, 13, (3, 3), 2, 1, 1, "dw"), nhwc, "tiled"),
        ("tiled unpadded", (1, 4 * half, 4 * half, 7, 10, (3, 3), 2, 0, 1, "dw"), nhwc, "tiled"),
        # many channels: the tiles over groups of vectors (TILE_BYTES), stride 1 and 2
        ("tiled groups", (1, 32 * half, 32 * half, 9, 10, (3, 3), 1, 1, 1, "dw"), nhwc, "groups"),
        ("groups stride 2", (2, 24 * half, 24 * half, 7, 9, (3, 3), 2, 1, 1, "dw"), nhwc, "groups"),
        ("depthwise copied", (1, 5 * half, 5 * half, 6, 6, (3, 3), 1, 1, 1, "dw"), nhwc, "copied"),
    ]


@pytest.mark.parametrize("path", _paths(), ids=[p[0] for p in _paths()])
def test_each_path_is_taken_and_matches_torch(path):
    _, case, layout, shows = path
    m = compiled_nhwc
    for residual_kind in RESIDUALS:
        out, want, ref, (fn, args) = _run(case, np.float32, layout, residual_kind, (0.0, 6.0))
        np.testing.assert_allclose(out, want, **_tolerance(np.float32))
        np.testing.assert_allclose(out, ref, **_tolerance(np.float32))
    g = next(
        a
        for a in args
        if isinstance(a, np.ndarray) and a.dtype == np.int64 and a.size == m._GEOMETRY_SIZE
    )
    pixels, c_out = g[m._OH] * g[m._OW], g[m._COUT]
    depthwise = (*m.DEPTHWISE, m.nhwc_depthwise_at_threads)  # (large ones: at two threads)
    taken = {
        "pairs": g[m._PAIRED] and 2 * c_out == simd.lanes(np.float32),
        "paired": g[m._PAIRED] and pixels % 8 != 0,
        "one": not g[m._PAIRED] and pixels == 1,
        "tiny": not g[m._PAIRED] and 1 < pixels <= 4,
        "tail4": not g[m._PAIRED] and pixels > 8 and 1 <= pixels % 8 <= 4,
        "stem": g[m._COPY] == 2 and fn in m.DENSE,
        "banded": g[m._BANDED] == 1,
        "clipped": g[m._PIXEL_MAJOR] == 2 and fn in m.DEPTHWISE,
        "rows": g[m._PIXEL_MAJOR] == 0 and g[m._COPY] == 0 and fn in m.DEPTHWISE,
        "tiled": g[m._PIXEL_MAJOR] == 3 and g[m._COPY] == 0 and fn in m.DEPTHWISE,
        "groups": g[m._PIXEL_MAJOR] == 3 and g[m._GROUPS] == 2 and fn in depthwise,
        "copied": g[m._PIXEL_MAJOR] == 1 and g[m._COPY] == 1 and fn in m.DEPTHWISE,
    }[shows]
    assert taken
