"""Pooling, resampling and constant-padding fast paths (fast_pool.py): bit-identical to
their general kernels and equal to torch eager (NaN, inf and signed zeros included)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.kernels import get_kernel
from pyexecutorch.kernels.pool import fast as fast_pool
from pyexecutorch.kernels.registry import get_specializer

RNG = np.random.default_rng(0)

# (the runtime silences floating-point warnings; these tests call kernels directly)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _data(shape, dtype, special):
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        return RNG.integers(-20, 21, shape).astype(dtype)
    x = RNG.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    if special == "nan":
        flat[RNG.integers(0, x.size, max(1, x.size // 6))] = np.nan
    elif special == "inf":
        flat[RNG.integers(0, x.size, max(1, x.size // 6))] = np.inf
        flat[RNG.integers(0, x.size, max(1, x.size // 6))] = -np.inf
    elif special == "zeros":  # signed zeros and ties
        x = np.where(x > 0, dtype.type(-0.0), np.round(x)).astype(dtype)
    return x


def _identical(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)  # NaN equal to NaN
    if a.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(a), np.signbit(b))


def _close_to_torch(a, expected, rtol, atol):
    np.testing.assert_allclose(a, expected, rtol=rtol, atol=atol, equal_nan=True)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(expected))
    if a.dtype.kind == "f":
        zero = expected == 0  # torch's sums start from +0
        np.testing.assert_array_equal(np.signbit(a[zero]), np.signbit(expected[zero]))


def _run_twice(fast, general, make_args, expected_of):
    """The fast path on a new input array (as a caller's input is): equal to the general
    kernel on the same arguments; returns the result and torch's."""
    args = make_args()
    got = fast(*args)
    want = general(*[a.copy() if isinstance(a, np.ndarray) else a for a in args[:-1]], None)
    return got, want, expected_of(args[0])


SPECIALS = ["plain", "nan", "inf", "zeros"]

# ---------------------------------------------------------------------------
# avg_pool2d

AVG = "aten::avg_pool2d.out"
AVG_CASES = [
    # shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    ((2, 3, 8, 8), (3, 3), (2, 2), (1, 1), False, True, None),
    ((2, 3, 8, 8), (2, 2), (2, 2), (0, 0), False, True, None),  # windows
    ((3, 9, 7), (2, 3), (2, 2), (1, 0), True, False, None),
    ((1, 2, 7, 6), (3, 2), (1, 3), (1, 1), True, True, 5),
    ((1, 2, 6, 6), (3, 3), (3, 3), (0, 0), False, True, 4),  # windows + override
    ((2, 1, 5, 5), (1, 1), (2, 1), (0, 0), False, True, None),
    ((1, 2, 7, 7), (4, 2), (2, 1), (2, 1), True, False, None),
]


@pytest.mark.parametrize("special", SPECIALS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", AVG_CASES, ids=[str(i) for i in range(len(AVG_CASES))])
def test_avg_pool2d(case, dtype, special):
    shape, k, s, p, ceil, cip, div = case
    params = (k, s, p, ceil, cip, div)
    x = _data(shape, dtype, special)
    expected = torch.ops.aten.avg_pool2d(torch.from_numpy(x), *params).numpy()
    out = np.zeros(expected.shape, dtype)
    fast = get_specializer(AVG)(x, *params, out)
    assert fast is not None
    x2 = _data(shape, dtype, special)
    got = fast(x2, *params, out)
    assert got is out
    _identical(got, get_kernel(AVG).fn(x2.copy(), *params, np.zeros_like(out)))
    _close_to_torch(
        got, torch.ops.aten.avg_pool2d(torch.from_numpy(x2), *params).numpy(), 1e-5, 1e-6
    )


def test_avg_pool2d_declines():
    spec = get_specializer(AVG)
    x = np.zeros((1, 2, 6, 6), np.float16)
    assert (
        spec(x, (2, 2), (2, 2), (0, 0), False, True, None, np.zeros((1, 2, 3, 3), x.dtype)) is None
    )
    xi = np.zeros((1, 2, 6, 6), np.int64)
    assert (
        spec(xi, (2, 2), (2, 2), (0, 0), False, True, None, np.zeros((1, 2, 3, 3), xi.dtype))
        is None
    )
    xf = np.zeros((1, 2, 6, 6), np.float32)
    assert (
        spec(xf, (2, 2), (2, 2), (0, 0), False, True, 0, np.zeros((1, 2, 3, 3), xf.dtype)) is None
    )
    assert (
        spec(xf, (2, 2), (2, 2), (0, 0), False, True, None, np.zeros((1, 2, 3, 4), xf.dtype))
        is None
    )
    assert (
        spec(xf, (2, 2), (2, 2), (2, 2), False, True, None, np.zeros((1, 2, 5, 5), xf.dtype))
        is None
    )


# ---------------------------------------------------------------------------
# max pooling, values only (for fast.py's specializer)

MAX_CASES = [
    # shape, kernel, stride, padding, dilation, ceil_mode
    ((2, 3, 8, 8), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((2, 3, 8, 8), (3, 3), (1, 1), (1, 1), (1, 1), False),
    ((1, 4, 9, 10), (3, 3), (2, 2), (1, 1), (1, 1), True),
    ((3, 7, 6), (2, 3), (2, 1), (1, 0), (2, 2), False),
    ((1, 2, 9, 9), (3, 2), (3, 2), (0, 1), (1, 2), True),
    ((2, 1, 5, 5), (1, 1), (2, 2), (0, 0), (1, 1), False),
    ((1, 1, 1, 7), (1, 4), (1, 3), (0, 2), (1, 1), True),
    # unpadded, so the row pass runs over the flattened input itself
    ((1, 2, 7, 9), (2, 3), (1, 2), (0, 0), (2, 1), False),
    ((2, 2, 10, 12), (3, 3), (3, 3), (0, 0), (1, 2), False),
    ((1, 3, 6, 5), (3, 1), (1, 1), (0, 0), (1, 1), False),
    ((3, 4, 4), (2, 4), (2, 1), (0, 0), (1, 1), False),
]


MAX_DATA = [(dt, sp) for dt in ("float32", "float64") for sp in SPECIALS] + [
    (dt, "plain") for dt in ("int64", "int32", "uint8")
]


@pytest.mark.parametrize("dtype,special", MAX_DATA)
@pytest.mark.parametrize("case", MAX_CASES, ids=[str(i) for i in range(len(MAX_CASES))])
def test_max_pool_values(case, dtype, special):
    shape, k, s, p, d, ceil = case
    params = (k, s, p, d, ceil)
    x = _data(shape, dtype, special)
    ev, _ = torch.ops.aten.max_pool2d_with_indices(torch.from_numpy(x), *params)
    out = np.zeros(ev.shape, dtype)
    idx = np.full(ev.shape, -5, np.int64)
    fast = fast_pool.max_pool_values(x, *params, out, idx, unused_outputs=frozenset({1}))
    assert fast is not None
    for x_run in (x, _data(shape, dtype, special), _data(shape, dtype, special).T.copy().T):
        expected, _ = torch.ops.aten.max_pool2d_with_indices(torch.from_numpy(x_run), *params)
        got, got_idx = fast(x_run, *params, out, idx)
        assert got is out and got_idx is idx
        _identical(got, expected.numpy())  # first of equal maxima, as torch: -0.0 vs 0.0
    assert (idx == -5).all()  # indices nobody reads are left alone


@pytest.mark.parametrize("case", [MAX_CASES[0], MAX_CASES[1], MAX_CASES[8]])
@pytest.mark.parametrize("order", ["C", "F"])
def test_max_pool_values_read_the_loaded_input_at_each_call(case, order):
    # Views bound at load read the planned input's memory: values written into it
    # between calls are seen, whatever the input's layout.
    shape, k, s, p, d, ceil = case
    params = (k, s, p, d, ceil)
    x = np.asarray(_data(shape, "float32", "plain"), order=order)
    out = np.zeros(torch.ops.aten.max_pool2d_with_indices(torch.from_numpy(x), *params)[0].shape)
    out, idx = out.astype(np.float32), np.zeros(out.shape, np.int64)
    fast = fast_pool.max_pool_values(x, *params, out, idx, unused_outputs=frozenset({1}))
    for special in ("plain", "zeros", "nan"):
        x[...] = _data(shape, "float32", special)
        expected, _ = torch.ops.aten.max_pool2d_with_indices(torch.from_numpy(x.copy()), *params)
        _identical(fast(x, *params, out, idx)[0], expected.numpy())


def test_max_pool_values_declines_when_indices_are_read():
    x = np.zeros((1, 1, 4, 4), np.float32)
    args = (x, (2, 2), (2, 2), (0, 0), (1, 1), False)
    outs = (np.zeros((1, 1, 2, 2), np.float32), np.zeros((1, 1, 2, 2), np.int64))
    assert fast_pool.max_pool_values(*args, *outs) is None
    assert fast_pool.max_pool_values(*args, *outs, unused_outputs=frozenset({0})) is None
    bad = (np.zeros((1, 1, 3, 3), np.float32), outs[1])
    assert fast_pool.max_pool_values(*args, *bad, unused_outputs=frozenset({1})) is None
    xb = np.zeros((1, 1, 4, 4), np.bool_)
    outb = (np.zeros((1, 1, 2, 2), np.bool_), outs[1])
    assert fast_pool.max_pool_values(xb, *args[1:], *outb, unused_outputs=frozenset({1})) is None


def test_max_pool_values_another_out_runs_the_general_kernel():
    x = _data((1, 2, 6, 6), "float32", "plain")
    params = ((3, 3), (2, 2), (1, 1), (1, 1), False)
    out, idx = np.zeros((1, 2, 3, 3), np.float32), np.zeros((1, 2, 3, 3), np.int64)
    fast = fast_pool.max_pool_values(x, *params, out, idx, unused_outputs=frozenset({1}))
    other = np.zeros((1, 2, 3, 3), np.float32), np.zeros((1, 2, 3, 3), np.int64)
    got, got_idx = fast(x, *params, *other)
    ev, ei = torch.ops.aten.max_pool2d_with_indices(torch.from_numpy(x), *params)
    np.testing.assert_array_equal(got, ev.numpy())
    np.testing.assert_array_equal(got_idx, ei.numpy())


# ---------------------------------------------------------------------------
# _adaptive_avg_pool2d

ADAPTIVE = "aten::_adaptive_avg_pool2d.out"


@pytest.mark.parametrize("special", SPECIALS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "shape,size",
    [
        ((2, 3, 8, 8), (2, 2)),
        ((2, 3, 8, 8), (1, 1)),
        ((3, 6, 9), (3, 3)),
        ((2, 3, 8, 8), (8, 8)),
        ((1, 2, 7, 10), (3, 4)),  # uneven, overlapping windows
        ((1, 2, 5, 3), (9, 2)),  # more outputs than inputs
    ],
)
def test_adaptive_avg_pool2d(shape, size, dtype, special):
    x = _data(shape, dtype, special)
    out = np.zeros(shape[:-2] + size, dtype)
    fast = get_specializer(ADAPTIVE)(x, size, out)
    assert fast is not None
    x2 = _data(shape, dtype, special)
    got = fast(x2, size, out)
    assert got is out
    _identical(got, get_kernel(ADAPTIVE).fn(x2.copy(), size, np.zeros_like(out)))
    expected = torch.ops.aten._adaptive_avg_pool2d(torch.from_numpy(x2), list(size)).numpy()
    _close_to_torch(got, expected, 1e-5, 1e-6)


def test_adaptive_avg_pool2d_declines():
    spec = get_specializer(ADAPTIVE)
    assert (
        spec(np.zeros((1, 2, 4, 4), np.float16), (2, 2), np.zeros((1, 2, 2, 2), np.float16)) is None
    )
    assert (
        spec(np.zeros((1, 2, 4, 4), np.float32), (2, 2), np.zeros((1, 2, 2, 3), np.float32)) is None
    )
    assert spec(np.zeros((2, 4, 4), np.float32), (0, 2), np.zeros((2, 0, 2), np.float32)) is None


# ---------------------------------------------------------------------------
# upsampling

NEAREST = "aten::upsample_nearest2d.vec_out"
BILINEAR = "aten::upsample_bilinear2d.vec_out"
RESIZES = [
    # shape, output_size, scale_factors
    ((1, 4, 5, 5), None, (2.0, 2.0)),
    ((2, 3, 4, 6), (12, 18), None),
    ((1, 4, 5, 5), (7, 9), None),
    ((2, 2, 6, 5), (3, 4), None),
    ((1, 3, 4, 5), None, (1.5, 0.7)),
    ((1, 2, 3, 10), (9, 20), None),
    ((1, 2, 4, 4), (4, 4), None),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "uint8"])
@pytest.mark.parametrize("case", RESIZES, ids=[str(i) for i in range(len(RESIZES))])
def test_upsample_nearest2d(case, dtype):
    shape, size, scales = case
    x = _data(shape, dtype, "nan" if dtype != "uint8" else "plain")
    expected = torch.ops.aten.upsample_nearest2d.vec(torch.from_numpy(x), size, scales).numpy()
    out = np.zeros(expected.shape, dtype)
    fast = get_specializer(NEAREST)(x, size, scales, out)
    assert fast is not None
    x2 = _data(shape, dtype, "plain")
    got = fast(x2, size, scales, out)
    assert got is out
    _identical(
        got, torch.ops.aten.upsample_nearest2d.vec(torch.from_numpy(x2), size, scales).numpy()
    )
    _identical(got, get_kernel(NEAREST).fn(x2.copy(), size, scales, np.zeros_like(out)))


@pytest.mark.parametrize("gather4", [True, False])
@pytest.mark.parametrize("special", SPECIALS)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", RESIZES, ids=[str(i) for i in range(len(RESIZES))])
def test_upsample_bilinear2d(monkeypatch, case, dtype, align_corners, special, gather4):
    monkeypatch.setattr(fast_pool, "_SMALL_RESIZE", 1 << 30 if gather4 else 0)
    shape, size, scales = case
    x = _data(shape, dtype, special)
    expected = torch.ops.aten.upsample_bilinear2d.vec(
        torch.from_numpy(x), size, align_corners, scales
    ).numpy()
    out = np.zeros(expected.shape, dtype)
    fast = get_specializer(BILINEAR)(x, size, align_corners, scales, out)
    assert fast is not None
    x2 = _data(shape, dtype, special)
    got = fast(x2, size, align_corners, scales, out)
    assert got is out
    _identical(
        got, get_kernel(BILINEAR).fn(x2.copy(), size, align_corners, scales, np.zeros_like(out))
    )
    expected = torch.ops.aten.upsample_bilinear2d.vec(
        torch.from_numpy(x2), size, align_corners, scales
    ).numpy()
    tol = (1e-5, 1e-6) if dtype == "float32" else (1e-12, 1e-12)
    # (inf next to an output whose weight on it is ~1e-8: torch keeps the inf, not NaN)
    _close_to_torch(got, expected, *tol)


def test_upsample_declines():
    x = np.zeros((1, 2, 3, 3), np.float16)
    out = np.zeros((1, 2, 6, 6), np.float16)
    assert get_specializer(BILINEAR)(x, (6, 6), False, None, out) is None
    xf = x.astype(np.float32)
    assert (
        get_specializer(BILINEAR)(xf, (6, 6), False, None, np.zeros((1, 2, 6, 5), np.float32))
        is None
    )
    assert get_specializer(NEAREST)(xf, (6, 6), (2.0, 2.0), out.astype(np.float32)) is None
    assert get_specializer(NEAREST)(xf[0], (6, 6), None, out[0].astype(np.float32)) is None


def test_resamplers_with_another_out_run_the_general_kernel():
    x = _data((1, 2, 3, 3), "float32", "plain")
    out = np.zeros((1, 2, 6, 6), np.float32)
    other = np.zeros((1, 2, 6, 6), np.float32)
    for name, args in [(NEAREST, (x, (6, 6), None)), (BILINEAR, (x, (6, 6), True, None))]:
        fast = get_specializer(name)(*args, out)
        got = fast(*args, other)
        assert got is other or np.shares_memory(got, other)
        np.testing.assert_array_equal(got, get_kernel(name).fn(*args, np.zeros_like(out)))


# ---------------------------------------------------------------------------
# constant_pad_nd

PAD = "aten::constant_pad_nd.out"


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "bool"])
@pytest.mark.parametrize(
    "shape,pad,value",
    [
        ((1, 4, 5, 5), (1, 2, 0, 1), 0.5),
        ((2, 3, 4), (2, 0), -1.0),
        ((2, 3, 4), (-1, 2, 1, -1), 3.0),  # crop and pad
        ((2, 3, 4), (-1, -2), 0.0),  # crop only
        ((2, 3, 4), (0, 0, 0, 0, 1, 1), 0.0),
        ((2, 2), (-2, 3), 7.0),  # nothing of the input survives
    ],
)
def test_constant_pad_nd(shape, pad, value, dtype):
    dt = np.dtype(dtype)
    if dt.kind in "ub" and value < 0 or dt == np.bool_ and value not in (0.0, 1.0):
        value = 1.0
    if dt.kind in "iub" and value != int(value):
        value = 2.0
    x = _data(shape, dt, "zeros") if dt != np.bool_ else RNG.random(shape) < 0.5
    expected = torch.ops.aten.constant_pad_nd(torch.from_numpy(x), list(pad), value).numpy()
    out = np.zeros(expected.shape, dt)
    fast = get_specializer(PAD)(x, pad, value, out)
    assert fast is not None
    x2 = _data(shape, dt, "zeros") if dt != np.bool_ else RNG.random(shape) < 0.5
    got = fast(x2, pad, value, out)
    assert got is out
    want = torch.ops.aten.constant_pad_nd(torch.from_numpy(x2), list(pad), value).numpy()
    _identical(got, want)
    _identical(got, get_kernel(PAD).fn(x2.copy(), pad, value, np.zeros_like(out)))


def test_constant_pad_nd_declines():
    spec = get_specializer(PAD)
    x = np.zeros((2, 3), np.uint8)
    assert spec(x, (1, 1), -300, np.zeros((2, 5), np.uint8)) is None  # the kernel raises
    assert spec(x, (1, 1), 0, np.zeros((2, 4), np.uint8)) is None
    assert spec(x, (1, 1), 0, np.zeros((2, 5), np.int64)) is None
