"""The convolution fast path (fast_conv.py) against its general kernel and torch eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pyexecutorch.kernels.conv.fast as fc
from pyexecutorch.kernels import get_kernel
from pyexecutorch.kernels.registry import get_specializer

CONV = "aten::convolution.out"
RNG = np.random.default_rng(0)


def _torch_conv(x, w, b, s, p, d, groups, transposed):
    args = [torch.from_numpy(x.copy()), torch.from_numpy(w.copy())]
    args.append(None if b is None else torch.from_numpy(b.copy()))
    if transposed:
        f = F.conv_transpose1d if x.ndim == 3 else F.conv_transpose2d
        return f(*args, s, p, 0, groups, d).numpy()
    f = F.conv1d if x.ndim == 3 else F.conv2d
    return f(*args, s, p, d, groups).numpy()


def _case(n, c, size, oc, k, s, p, d, groups, bias, transposed=False, dtype=np.float32):
    nd = len(size)
    x = RNG.standard_normal((n, c, *size)).astype(dtype)
    wshape = (c, oc // groups, *k) if transposed else (oc, c // groups, *k)
    w = RNG.standard_normal(wshape).astype(dtype)
    b = RNG.standard_normal(oc).astype(dtype) if bias else None
    for a in (w, b):
        if a is not None:
            a.flags.writeable = False  # constants reach kernels read-only
    s, p, d = (list(v) if isinstance(v, tuple) else [v] * nd for v in (s, p, d))
    params = (s, p, d, transposed, [0] * nd, groups)
    return x, w, b, params


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


def _check(x, w, b, params, expect_plan=None):
    s, p, d, transposed, _, groups = params
    expected = _torch_conv(x, w, b, s, p, d, groups, transposed)
    out = np.full(expected.shape, 77, x.dtype)
    fast = get_specializer(CONV)(x, w, b, *params, out)
    assert fast is not None, "the fast path declined a case it covers"
    if expect_plan is not None:
        assert fast.__qualname__.startswith(expect_plan), fast.__qualname__
    # Calls with other input arrays of the same shape (as a caller's input is), one of
    # them laid out channels-last.
    other = RNG.standard_normal(x.shape).astype(x.dtype)
    order = (0, *range(2, x.ndim), 1)
    strided = np.ascontiguousarray(other.transpose(order)).transpose(np.argsort(order))
    for x_run in (x, other, strided):
        want = _torch_conv(x_run, w, b, s, p, d, groups, transposed)
        got = fast(x_run, w, b, *params, out)
        assert got is out
        np.testing.assert_allclose(got, want, **_tol(x.dtype))
        general = get_kernel(CONV).fn(x_run, w, b, *params, np.zeros_like(out))
        # Same products, summed in another order (columns laid out differently).
        rtol = 1e-5 if x.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, general, rtol=rtol, atol=rtol)


GEOMETRIES = [
    # n, c, size, oc, k, s, p, d, groups, bias
    (2, 4, (10,), 6, (3,), 1, 2, 2, 1, True),
    (2, 8, (12, 12), 8, (3, 3), 2, 1, 1, 1, True),
    (1, 8, (10, 10), 8, (3, 3), 2, 1, 1, 8, False),
    (2, 3, (12, 12), 8, (3, 3), 1, 1, 1, 1, False),
    (1, 16, (8, 8), 16, (3, 3), 1, 1, 1, 16, True),
    (1, 6, (11, 9), 12, (3, 2), 1, 2, 2, 3, True),
    (1, 32, (33, 31), 32, (3, 3), 2, 1, 1, 32, True),
    (2, 3, (40, 37), 8, (5, 3), 3, 2, 1, 1, True),
    (1, 4, (30, 30), 4, (2, 2), 2, 0, 1, 1, False),
    (1, 4, (9, 9), 4, (1, 1), 2, 0, 1, 1, True),
    (1, 64, (14, 14), 64, (3, 3), 1, 1, 1, 64, True),
    (1, 4, (300,), 8, (5,), 2, 2, 1, 1, True),
]


def _force(monkeypatch, layout):
    """Make the specializer pick ``layout`` wherever that layout applies."""
    big = 1 << 40
    small = layout == "_direct"
    monkeypatch.setattr(fc, "_DIRECT_MAX", big if small else 0)
    monkeypatch.setattr(fc, "_DIRECT_ROWS", big if small else 0)
    monkeypatch.setattr(fc, "_DIRECT_ROWS_STRIDED", big if small else 0)
    if layout == "_flat":
        monkeypatch.setattr(fc, "_wrapped", lambda *args: None)
    # every tap kept, so that the layout sees the geometry as given
    monkeypatch.setattr(fc, "_without_padding_taps", lambda *args: None)


@pytest.mark.parametrize("layout", ["_direct", "_wrapped", "_flat"])
@pytest.mark.parametrize("geom", GEOMETRIES, ids=[str(i) for i in range(len(GEOMETRIES))])
def test_forward_matches_torch_and_general(monkeypatch, geom, layout):
    _force(monkeypatch, layout)
    x, w, b, params = _case(*geom)
    _check(x, w, b, params, layout)


# Geometries where taps reach past the rows' ends (the wrapped layout's fix-up):
# paddings, dilations, strides and kernel widths that wrap by more than one column.
WRAPPING = [
    # n, c, size, oc, k, s, p, d, groups, bias
    (1, 3, (9, 7), 4, (5, 5), 1, 2, 1, 1, True),
    (2, 4, (8, 9), 6, (3, 3), 1, 2, 2, 2, True),
    (1, 4, (9, 7), 6, (5, 3), 2, 2, 1, 1, True),
    (1, 4, (13, 12), 4, (3, 3), 3, 1, 1, 4, True),
    (1, 4, (10, 9), 4, (3, 3), 2, 2, 2, 1, False),
    (1, 3, (7, 7), 4, (7, 7), 2, 3, 1, 1, True),
    (1, 2, (5, 5), 3, (3, 3), 1, 3, 1, 1, True),  # wider padding than the kernel reaches
    (1, 2, (4, 4), 3, (3, 3), 2, 2, 1, 1, True),
    (1, 2, (2, 2), 3, (3, 3), 2, 1, 1, 1, True),  # a stride phase with no pixel
    (1, 2, (6, 6), 3, (2, 2), 1, 1, 1, 1, True),  # even kernel: taps reach one side
    (2, 4, (10,), 6, (3,), 1, 1, 1, 1, True),
    (1, 4, (10,), 6, (5,), 2, 2, 1, 2, False),
    (1, 4, (1, 9), 4, (1, 3), 1, (0, 1), 1, 4, True),
    (1, 16, (40, 40), 16, (3, 3), 1, 1, 1, 16, True),
]


@pytest.mark.parametrize("geom", WRAPPING, ids=[str(i) for i in range(len(WRAPPING))])
def test_wrapped_layout(monkeypatch, geom):
    _force(monkeypatch, "_wrapped")
    x, w, b, params = _case(*geom)
    _check(x, w, b, params, "_wrapped")


def test_wrapped_declines_when_image_pixels_would_wrap():
    # Unpadded: the taps right of a row's last output read image pixels, not padding.
    x, w, b, params = _case(1, 3, (10, 10), 4, (3, 3), 1, 0, 1, 1, True)
    out = np.zeros((1, 4, 8, 8), np.float32)
    s, p, d = ((1, 1),) * 3
    assert fc._wrapped(x, w, b, s, (0, 0), d, 1, out, (10, 10), (3, 3), (8, 8)) is None
    assert get_specializer(CONV)(x, w, b, *params, out).__qualname__.startswith("_flat")


@pytest.mark.parametrize(
    "geom",
    [
        (1, 8, (5, 5), 16, (1, 1), 1, 0, 1, 1, True),
        (2, 6, (4, 3), 4, (1, 1), 1, 0, 1, 2, False),
        (2, 4, (7,), 6, (1,), 1, 0, 3, 1, True),
    ],
)
def test_pointwise(geom):
    x, w, b, params = _case(*geom)
    _check(x, w, b, params, "_pointwise")


def test_layout_choice():
    # Tiny copies: direct; padded: wrapped; unpadded and large: flat.
    spec = get_specializer(CONV)
    for geom, plan in [
        ((2, 4, (10,), 6, (3,), 1, 2, 2, 1, True), "_direct"),
        ((1, 8, (10, 10), 8, (3, 3), 2, 1, 1, 8, False), "_direct"),
        ((2, 8, (12, 12), 8, (3, 3), 2, 1, 1, 1, True), "_wrapped"),
        ((2, 3, (12, 12), 8, (3, 3), 1, 1, 1, 1, False), "_wrapped"),
        ((1, 32, (56, 56), 32, (3, 3), 2, 1, 1, 32, True), "_wrapped"),
        ((1, 8, (32, 32), 8, (3, 3), 1, 0, 1, 1, True), "_flat"),
    ]:
        x, w, b, params = _case(*geom)
        out = np.zeros(_torch_conv(x, w, b, *params[:3], params[5], False).shape, np.float32)
        assert spec(x, w, b, *params, out).__qualname__.startswith(plan)


@pytest.mark.parametrize("layout", ["_wrapped", "_flat"])
@pytest.mark.parametrize("chunk", [64, 4096, 1 << 16])
@pytest.mark.parametrize(
    "geom",
    [
        (1, 12, (17, 15), 12, (3, 3), 1, 1, 1, 12, True),  # depthwise: chunks of channels
        (2, 4, (17, 15), 6, (3, 3), 2, 1, 1, 2, True),  # grouped, strided: phases
        (1, 3, (23, 19), 5, (3, 3), 1, 2, 2, 1, False),  # one group: chunks of rows
    ],
)
def test_layouts_in_small_chunks(monkeypatch, geom, chunk, layout):
    _force(monkeypatch, layout)
    monkeypatch.setattr(fc, "_CHUNK_BYTES", chunk)
    x, w, b, params = _case(*geom)
    _check(x, w, b, params, layout)


@pytest.mark.parametrize("layout", ["_direct", "_wrapped", "_flat"])
def test_float64(monkeypatch, layout):
    _force(monkeypatch, layout)
    x, w, b, params = _case(2, 4, (9, 8), 6, (3, 3), 2, 1, 1, 2, True, dtype=np.float64)
    _check(x, w, b, params, layout)


@pytest.mark.parametrize(
    "geom",
    [
        (1, 4, (5, 5), 4, (2, 2), 2, 1, True),
        (2, 6, (3, 4), 9, (3, 1), (3, 1), 3, False),
        (2, 4, (7,), 6, (2,), 2, 2, True),
    ],
)
def test_transposed_without_overlap(geom):
    n, c, size, oc, k, s, groups, bias = geom
    nd = len(size)
    x, w, b, params = _case(n, c, size, oc, k, 1, 0, 1, groups, bias, transposed=True)
    stride = list(s) if isinstance(s, tuple) else [s] * nd
    params = (stride, *params[1:])
    _check(x, w, b, params, "_transposed")


@pytest.mark.parametrize("layout", ["_direct", "_wrapped", "_flat"])
@pytest.mark.parametrize("stride", [1, 2])
def test_special_values_match_torch(monkeypatch, layout, stride):
    # inf and NaN reach exactly the outputs whose windows hold them, also on the rows'
    # first and last pixels, which the wrapped layout's runs read past.
    _force(monkeypatch, layout)
    x, w, b, params = _case(1, 4, (9, 9), 4, (3, 3), stride, 1, 1, 4, True)
    x = x.copy()
    x[0, 1, 4, 4] = np.inf
    x[0, 2, 0, 0] = np.nan
    x[0, 0, 3, 8] = np.nan
    x[0, 3, 5, 0] = -np.inf
    x[0, 3, 6, 8] = np.inf
    expected = _torch_conv(x, w, b, *params[:3], params[5], False)
    out = np.zeros(expected.shape, np.float32)
    fast = get_specializer(CONV)(x, w, b, *params, out)
    assert fast.__qualname__.startswith(layout)
    for x_run in (x, x.copy()):  # the loaded input and another array
        got = fast(x_run, w, b, *params, out)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", ["_direct", "_wrapped", "_flat", "_pointwise"])
def test_the_loaded_input_is_read_at_each_call(monkeypatch, layout):
    # The calls bound at load read the planned input's memory: new values written into
    # it are seen, and a loaded input whose views would be copies is read per call.
    _force(monkeypatch, "_wrapped" if layout == "_pointwise" else layout)
    k = (1, 1) if layout == "_pointwise" else (3, 3)
    p = 0 if layout == "_pointwise" else 1
    for make in (np.ascontiguousarray, lambda a: np.asfortranarray(a)):
        x, w, b, params = _case(1, 4, (6, 7), 5, k, 1, p, 1, 1, True)
        x = make(x)
        out = np.zeros((1, 5, 6, 7), np.float32)
        fast = get_specializer(CONV)(x, w, b, *params, out)
        assert fast.__qualname__.startswith(layout)
        for _ in range(2):
            x[...] = RNG.standard_normal(x.shape)
            got = fast(x, w, b, *params, out)
            np.testing.assert_allclose(
                got, _torch_conv(x, w, b, *params[:3], 1, False), rtol=1e-4, atol=1e-4
            )


def test_weights_computed_at_run_time_are_repacked():
    x, w, b, params = _case(1, 3, (8, 8), 4, (3, 3), 1, 1, 1, 1, True)
    w, b = w.copy(), b.copy()  # writable: produced by an earlier instruction
    out = np.zeros((1, 4, 8, 8), np.float32)
    fast = get_specializer(CONV)(x, w, b, *params, out)
    fast(x, w, b, *params, out)
    w *= -2
    b += 1
    got = fast(x, w, b, *params, out)
    np.testing.assert_allclose(
        got, _torch_conv(x, w, b, *params[:3], 1, False), rtol=1e-4, atol=1e-4
    )


def test_another_out_runs_the_general_kernel():
    x, w, b, params = _case(1, 3, (8, 8), 4, (3, 3), 1, 1, 1, 1, True)
    out = np.zeros((1, 4, 8, 8), np.float32)
    fast = get_specializer(CONV)(x, w, b, *params, out)
    other = np.zeros(20 * 4 * 8 * 8, np.float32)  # a dynamic-bound planned output
    got = fast(x, w, b, *params, other)
    assert not np.shares_memory(got, out)
    np.testing.assert_allclose(
        got, _torch_conv(x, w, b, *params[:3], 1, False), rtol=1e-4, atol=1e-4
    )


def _declines(*args):
    return get_specializer(CONV)(*args) is None


def test_declines_what_it_does_not_cover():
    x, w, b, params = _case(1, 2, (6, 6), 2, (3, 3), 1, 1, 1, 1, True)
    out = np.zeros((1, 2, 6, 6), np.float32)
    assert _declines(x.astype(np.float16), w.astype(np.float16), None, *params, out)
    assert _declines(x, w, b, *params, np.zeros((1, 6, 6, 2), np.float32).transpose(0, 3, 1, 2))
    assert _declines(x, w, b, *params, np.zeros((1, 2, 5, 6), np.float32))  # wrong shape
    x3 = np.zeros((1, 2, 4, 4, 4), np.float32)
    w3 = np.zeros((2, 2, 3, 3, 3), np.float32)
    assert _declines(x3, w3, None, [1] * 3, [1] * 3, [1] * 3, False, [0] * 3, 1, np.zeros_like(x3))
    # Transposed convolutions whose taps overlap, or with padding, keep the general kernel.
    xt = np.zeros((1, 2, 4, 4), np.float32)
    wt = np.zeros((2, 3, 3, 3), np.float32)
    out_t = np.zeros((1, 3, 9, 9), np.float32)
    assert _declines(xt, wt, None, [2, 2], [0, 0], [1, 1], True, [0, 0], 1, out_t)
    wt2 = np.zeros((2, 3, 2, 2), np.float32)
    out_t2 = np.zeros((1, 3, 6, 6), np.float32)
    assert _declines(xt, wt2, None, [2, 2], [1, 1], [1, 1], True, [0, 0], 1, out_t2)
    # Arguments the general kernel rejects.
    assert _declines(x, w, b, [0, 0], [1, 1], [1, 1], False, [0, 0], 1, out)


@pytest.mark.parametrize(
    "size,k,p,d,plan",
    [
        ((8, 8), (3, 3), 12, 12, "_without_padding_taps"),  # DeepLab's ASPP at 8x8: a 1x1
        ((6, 6), (3, 3), 6, 6, "_without_padding_taps"),  # padding as wide as the image
        ((4, 10), (3, 3), 5, 5, "_without_padding_taps"),  # rows trimmed, columns kept
    ],
)
def test_taps_that_only_read_padding_are_dropped(size, k, p, d, plan):
    x, w, b, params = _case(1, 6, size, 5, k, 1, p, d, 1, True)
    _check(x, w, b, params, expect_plan=plan)
