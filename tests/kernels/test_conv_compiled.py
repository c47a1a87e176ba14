"""The compiled convolutions equal the reference numpy kernel and torch eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.kernels import get_kernel
from pyexecutorch.kernels.registry import fast_path_of

pytest.importorskip("numba", reason="the compiled forms need numba (the jit extra)")

from pyexecutorch.kernels.conv import compiled  # noqa: E402
from pyexecutorch.kernels.conv.compiled_pointwise import POINTWISE_DIRECT  # noqa: E402
from pyexecutorch.kernels.registry import get_compiled_form  # noqa: E402

REFERENCE = get_kernel("aten::convolution.out").fn
COMPILED = get_compiled_form("aten::convolution.out")

# (batch, channels, height, width, kernel, stride, padding, dilation, bias)
CASES = [
    (1, 8, 9, 9, 3, 1, 1, 1, True),
    (1, 16, 8, 8, 5, 1, 2, 1, True),  # late-CNN: many channels, a small image
    (2, 6, 10, 7, 5, 2, 2, 1, True),
    (1, 4, 8, 8, 3, 1, 2, 2, False),  # dilated
    (1, 3, 3, 3, 3, 1, 4, 1, True),  # padding larger than the image
    (1, 5, 11, 6, 3, 3, 0, 1, True),  # stride larger than the overlap
    (1, 7, 6, 6, 1, 1, 0, 1, True),
    (1, 12, 16, 16, 3, 1, 1, 1, True),  # the largest image it takes (MAX_PIXELS)
    (1, 12, 16, 16, 3, 2, 1, 1, False),
]


def _read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False  # as program constants reach kernels
    return a


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_depthwise_matches_reference_and_torch(case, dtype):
    n, c, h, w, k, s, p, d, has_bias = case
    rng = np.random.default_rng(sum(case))
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    x[0, 0, 0, :2] = (-0.0, np.inf)  # non-finite inputs propagate as in the reference
    weight = _read_only(rng.standard_normal((c, 1, k, k)).astype(dtype))
    bias = _read_only(rng.standard_normal(c).astype(dtype)) if has_bias else None
    args = (x, weight, bias, (s, s), (p, p), (d, d), False, (0, 0), c)
    want = torch.nn.functional.conv2d(
        torch.from_numpy(x),
        torch.from_numpy(weight.copy()),
        None if bias is None else torch.from_numpy(bias.copy()),
        s,
        p,
        d,
        c,
    ).numpy()
    reference = REFERENCE(*args, np.zeros(want.shape, dtype))
    fast = COMPILED(*args, np.full(want.shape, np.nan, dtype))
    assert fast is not None and fast.fn in (compiled.depthwise2d, compiled.depthwise2d_parallel)
    got = fast(*args, np.full(want.shape, np.nan, dtype))
    assert got is not None
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    np.testing.assert_allclose(got, reference, **tol)
    np.testing.assert_allclose(got, want, **tol)


def test_parallel_form_matches_the_serial_one():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 12, 7, 7)).astype(np.float32)
    wt = rng.standard_normal((3, 3, 12)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    outs = []
    for fn in (compiled.depthwise2d, compiled.depthwise2d_parallel):
        xt, ot = np.empty((2, 7, 7, 12), np.float32), np.empty((2, 4, 4, 12), np.float32)
        outs.append(fn(x, wt, b, xt, ot, np.empty((2, 12, 4, 4), np.float32), 2, 2, 1, 1, 1, 1))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_large_images_non_depthwise_and_transposed_are_left_to_numpy():
    side = int(compiled.MAX_PIXELS**0.5) + 1
    big_image = np.zeros((1, 4, side, side), np.float32)
    depthwise = _read_only(np.zeros((4, 1, 3, 3), np.float32))
    args = ((1, 1), (1, 1), (1, 1), False, (0, 0), 4, np.zeros((1, 4, side, side), np.float32))
    assert COMPILED(big_image, depthwise, None, *args) is None
    x = np.zeros((1, 4, 5, 5), np.float32)
    grouped = np.zeros((4, 2, 3, 3), np.float32)  # groups=2: two channels per filter
    out = np.zeros((1, 4, 3, 3), np.float32)
    assert COMPILED(x, grouped, None, (1, 1), (0, 0), (1, 1), False, (0, 0), 2, out) is None
    big = np.zeros((1, 4, 7, 7), np.float32)
    assert COMPILED(x, depthwise, None, (1, 1), (0, 0), (1, 1), True, (0, 0), 4, big) is None


def test_large_weights_make_one_product_and_match_torch():
    """Column chunks grow to the weights' size: a late-CNN 3x3 (weights far above the
    cache-sized chunk) multiplies its weights once, not once per output row."""
    from pyexecutorch.kernels.conv import fast  # noqa: PLC0415

    assert fast._chunks(row_bytes=8641 * 8 * 4, weight_bytes=256 * 8641 * 4, g=1, oh=8) == (1, 8)
    assert fast._chunks(row_bytes=1 << 18, weight_bytes=1 << 10, g=1, oh=8) == (1, 2)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 160, 6, 6)).astype(np.float32)
    weight = _read_only(rng.standard_normal((128, 160, 3, 3)).astype(np.float32))
    bias = _read_only(rng.standard_normal(128).astype(np.float32))
    assert weight.nbytes > fast._CHUNK_BYTES
    args = (x, weight, bias, (1, 1), (1, 1), (1, 1), False, (0, 0), 1)
    out = np.zeros((1, 128, 6, 6), np.float32)
    conv = fast._convolution(*args, out)
    assert conv is not None
    conv(*args, out)
    want = torch.nn.functional.conv2d(
        torch.from_numpy(x), torch.from_numpy(weight.copy()), torch.from_numpy(bias.copy()), 1, 1
    ).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out, REFERENCE(*args, np.zeros_like(out)), rtol=1e-4, atol=1e-4)


# Convolution steps of whole-method functions (conv_step): every float 2-D / 1-D forward
# convolution with constant weights. (batch, channels, out channels, height, width,
# kernel, stride, padding, dilation, groups, bias)
STEP_CASES = [
    (1, 3, 8, 13, 12, 3, 2, 1, 1, 1, True),  # a strided stem: columns + BLAS
    (2, 6, 9, 7, 9, 3, 1, 1, 2, 3, False),  # grouped and dilated
    (1, 8, 16, 9, 9, 1, 1, 0, 1, 1, True),  # pointwise, 8 input channels: direct loops
    (2, 8, 12, 6, 5, 1, 1, 0, 1, 4, False),  # grouped pointwise, 2 a group
    (1, 9, 7, 5, 6, 1, 1, 0, 1, 1, True),  # pointwise, 9 input channels: BLAS on the input
    (1, 1, 5, 7, 3, 1, 1, 0, 1, 1, False),  # one input channel
    (2, 3, 4, 1, 1, 1, 1, 0, 1, 1, True),  # three, a 1x1 image
    (1, 10, 6, 3, 5, 1, 1, 0, 1, 2, True),  # five a group: a pass of four, then one
    (1, 16, 6, 23, 23, 1, 1, 0, 1, 2, True),  # 529 pixels: tiles of 256, the last partial
    (2, 8, 9, 5, 7, 1, 1, 0, 1, 1, False),  # eight input channels: one pass
    (1, 8, 16, 9, 9, 1, 2, 0, 1, 1, True),  # strided 1x1 (a ResNet downsample)
    (1, 5, 5, 12, 13, 3, 2, 1, 1, 5, True),  # depthwise over planes, stride 2
    (1, 5, 5, 12, 13, 3, 2, 2, 2, 5, True),  # ... dilated
    (2, 4, 4, 11, 12, 5, 2, 2, 1, 4, True),  # 5x5 depthwise
    (1, 4, 4, 10, 12, 3, 3, 0, 1, 4, False),  # stride 3, no padding
    (1, 6, 6, 7, 7, 3, 1, 1, 1, 6, True),  # a small image: channels-last
    (1, 3, 3, 3, 3, 3, 1, 4, 1, 3, True),  # padding wider than the image
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", STEP_CASES, ids=[str(c) for c in STEP_CASES])
def test_conv_steps_match_reference_and_torch(case, dtype):
    n, c, oc, h, w, k, s, p, d, g, has_bias = case
    rng = np.random.default_rng(sum(case))
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    x.reshape(-1)[:2] = (-0.0, np.inf)  # non-finite inputs propagate as in the reference
    weight = _read_only(rng.standard_normal((oc, c // g, k, k)).astype(dtype))
    bias = _read_only(rng.standard_normal(oc).astype(dtype)) if has_bias else None
    args = (x, weight, bias, (s, s), (p, p), (d, d), False, (0, 0), g)
    want = torch.nn.functional.conv2d(
        torch.from_numpy(x),
        torch.from_numpy(weight.copy()),
        None if bias is None else torch.from_numpy(bias.copy()),
        s,
        p,
        d,
        g,
    ).numpy()
    reference = REFERENCE(*args, np.zeros(want.shape, dtype))
    out = np.full(want.shape, np.nan, dtype)
    step = COMPILED(*args, out, whole=True)
    assert step is not None and fast_path_of(step).fills_outputs
    fn, step_args = fast_path_of(step).step
    fn(*step_args)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    np.testing.assert_allclose(out, reference, **tol)
    np.testing.assert_allclose(out, want, **tol)
    # called as the kernel: on its planned arrays, the step; on others, the reference
    x2 = rng.standard_normal(x.shape).astype(dtype)
    np.copyto(x, x2)
    assert step(*args, out) is out
    other = np.zeros_like(out)
    assert step(x2.copy(), *args[1:], other) is other
    np.testing.assert_allclose(out, other, **tol)


def test_conv_step_1d_matches_torch():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 17)).astype(np.float32)
    weight = _read_only(rng.standard_normal((4, 3, 3)).astype(np.float32))
    bias = _read_only(rng.standard_normal(4).astype(np.float32))
    want = torch.nn.functional.conv1d(
        torch.from_numpy(x),
        torch.from_numpy(weight.copy()),
        torch.from_numpy(bias.copy()),
        2,
        1,
        2,
        2,
    ).numpy()
    out = np.zeros(want.shape, np.float32)
    step = COMPILED(x, weight, bias, [2], [1], [2], False, [0], 2, out, whole=True)
    fast_path_of(step).step[0](*fast_path_of(step).step[1])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_conv_steps_decline_what_they_cannot_bind():
    x = np.zeros((1, 4, 6, 6), np.float32)
    weight = _read_only(np.ones((4, 4, 1, 1), np.float32))
    args = ((1, 1), (0, 0), (1, 1), False, (0, 0), 1)
    # an output over its own input (the reference reads it whole first; a step would not)
    assert COMPILED(x, weight, None, *args, x, whole=True) is None
    # weights that may change between runs are not packed at load
    assert COMPILED(x, weight.copy(), None, *args, np.zeros_like(x), whole=True) is None
    # float16 (transposed convolutions: tests/kernels/test_resample_compiled.py)
    half = x.astype(np.float16)
    w16 = _read_only(np.ones((4, 4, 1, 1), np.float16))
    assert COMPILED(half, w16, None, *args, np.zeros_like(half), whole=True) is None


def test_parallel_depthwise_planes_match_the_serial_one():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 6, 12, 11)).astype(np.float32)
    w = rng.standard_normal((6, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    outs = []
    for fn in compiled.DEPTHWISE:
        pad = compiled._padded(12, 12, 11, (2, 2), (1, 1), np.dtype(np.float32))
        out = np.empty((2, 6, 6, 6), np.float32)
        outs.append(fn(x, w, b, pad, out, 2, 2, 1, 1, 1, 1))
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize(("in_channels", "direct"), [(1, True), (8, True), (9, False), (48, False)])
def test_pointwise_steps_loop_over_few_input_channels(in_channels, direct):
    x = np.zeros((1, in_channels, 6, 6), np.float32)
    weight = _read_only(np.ones((4, in_channels, 1, 1), np.float32))
    args = ((1, 1), (0, 0), (1, 1), False, (0, 0), 1)
    step = COMPILED(x, weight, None, *args, np.zeros((1, 4, 6, 6), np.float32), whole=True)
    fn = fast_path_of(step).step[0]
    assert (fn in POINTWISE_DIRECT) is direct
    assert (fn is compiled.pointwise_conv) is not direct


def test_parallel_pointwise_loops_match_the_serial_one():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 7, 600)).astype(np.float32)
    wm = rng.standard_normal((3, 5, 7)).astype(np.float32)
    b = rng.standard_normal(15).astype(np.float32)
    outs = [fn(x, wm, b, np.empty((2, 3, 5, 600), np.float32)) for fn in POINTWISE_DIRECT]
    np.testing.assert_array_equal(outs[0], outs[1])
    want = np.einsum("gok,ngkp->ngop", wm, x) + b.reshape(3, 5, 1)
    np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-5)


def test_without_blas_only_loop_steps_are_offered(monkeypatch):
    # numba's np.dot needs scipy: without it products stay on numpy
    monkeypatch.setattr(compiled, "HAS_BLAS", False)
    x = np.zeros((1, 16, 6, 6), np.float32)
    args = ((1, 1), (0, 0), (1, 1), False, (0, 0))
    pointwise = _read_only(np.ones((4, 16, 1, 1), np.float32))
    out = np.zeros((1, 4, 6, 6), np.float32)
    assert COMPILED(x, pointwise, None, *args, 1, out, whole=True) is None
    x = np.zeros((1, 4, 6, 6), np.float32)
    few = _read_only(np.ones((4, 4, 1, 1), np.float32))
    step = COMPILED(x, few, None, *args, 1, out, whole=True)
    assert step is not None and fast_path_of(step).step[0] in POINTWISE_DIRECT
    depthwise = _read_only(np.ones((4, 1, 1, 1), np.float32))
    step = COMPILED(x, depthwise, None, *args, 4, np.zeros_like(x), whole=True)
    assert step is not None and fast_path_of(step).step[0] in compiled.DEPTHWISE + (
        compiled.depthwise2d,
    )


# Depthwise steps through each of their two loops, whatever the shape rule would pick:
# (batch, channels, height, width, kernel, stride, padding, dilation)
DEPTHWISE_CASES = [
    (1, 5, 12, 13, 3, 2, 1, 1),  # stride 2, odd width
    (2, 6, 9, 10, 3, 2, 2, 2),  # batch 2, dilated, padding 2
    (1, 4, 11, 12, 5, 2, 2, 1),  # 5x5, stride 2
    (2, 3, 7, 8, 5, 1, 3, 1),  # 5x5, padding wider than the filter's reach
    (1, 33, 6, 5, 3, 1, 1, 1),  # more channels than a vector, a small image
    (1, 3, 3, 3, 3, 1, 4, 1),  # padding wider than the image
    (1, 4, 10, 12, 3, 3, 0, 1),  # stride 3, no padding
]


@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=[str(c) for c in DEPTHWISE_CASES])
def test_depthwise_steps_match_reference_and_torch_on_both_loops(
    case, dtype, channels_last, monkeypatch
):
    n, c, h, w, k, s, p, d = case
    monkeypatch.setattr(compiled, "_channels_last", lambda *shape: channels_last)
    rng = np.random.default_rng(sum(case))
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    x[0, 0, 1, :2] = (-0.0, np.inf)
    weight = _read_only(rng.standard_normal((c, 1, k, k)).astype(dtype))
    bias = _read_only(rng.standard_normal(c).astype(dtype))
    args = (x, weight, bias, (s, s), (p, p), (d, d), False, (0, 0), c)
    want = torch.nn.functional.conv2d(
        torch.from_numpy(x),
        torch.from_numpy(weight.copy()),
        torch.from_numpy(bias.copy()),
        s,
        p,
        d,
        c,
    ).numpy()
    out = np.full(want.shape, np.nan, dtype)
    fn, step_args = fast_path_of(COMPILED(*args, out, whole=True)).step
    assert fn.__name__.startswith("depthwise2d" if channels_last else "depthwise_planes")
    fn(*step_args)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    np.testing.assert_allclose(out, REFERENCE(*args, np.zeros(want.shape, dtype)), **tol)
    np.testing.assert_allclose(out, want, **tol)


@pytest.mark.parametrize(
    ("out_h", "out_w", "k", "rows"),
    [
        (4, 4, 5, False),  # EfficientNet's late 5x5: a few pixels, many channels
        (6, 6, 3, False),
        (7, 7, 3, True),  # MobileNetV1's 14x14 stride 2
        (8, 8, 5, False),
        (8, 8, 3, True),
        (16, 16, 5, True),
        (56, 56, 3, True),  # MobileNetV1's 112x112 stride 2
    ],
)
def test_depthwise_loop_rule(out_h, out_w, k, rows):
    assert compiled._channels_last(out_h, out_w, k, k) is not rows
