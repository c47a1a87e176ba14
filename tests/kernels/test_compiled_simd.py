"""The explicit vectors of compiled kernels (jit/simd.py): each intrinsic
against numpy, lane by lane, special values included."""

from __future__ import annotations

import ctypes
import mmap
import sys

import numpy as np
import pytest

numba = pytest.importorskip("numba", reason="the compiled forms need numba (the jit extra)")

from pyexecutorch.jit import simd  # noqa: E402
from pyexecutorch.jit.math_functions import exp_f32  # noqa: E402

DTYPES = [np.float32, np.float64]


@numba.njit
def _copy(a, out, i, j):  # noqa: ANN001, ANN202
    simd.store(out, j, simd.load(a, i))


@numba.njit
def _copy_first(a, out, i, n):  # noqa: ANN001, ANN202
    simd.store_first(out, i, simd.load_first(a, i, n), n)


@numba.njit
def _loaded_first(a, out, n):  # noqa: ANN001, ANN202
    simd.store(out, 0, simd.load_first(a, 0, n))


@numba.njit
def _arith(a, b, c, out):  # noqa: ANN001, ANN202
    x, y, z = simd.load(a, 0), simd.load(b, 0), simd.load(c, 0)
    lanes = simd.lanes_of(a)
    simd.store(out, 0, simd.fma(x, y, z))
    simd.store(out, lanes, simd.add(x, y))
    simd.store(out, 2 * lanes, simd.mul(x, y))
    simd.store(out, 3 * lanes, simd.splat(a[1]))


@numba.njit
def _clamp(a, out, lo, hi):  # noqa: ANN001, ANN202
    simd.store(out, 0, simd.clamp(simd.load(a, 0), simd.splat(lo), simd.splat(hi)))


@numba.njit
def _total(a):  # noqa: ANN001, ANN202
    return simd.total(simd.load(a, 0))


@numba.njit
def _lanes(a):  # noqa: ANN001, ANN202
    return simd.lanes_of(a)


@numba.njit(inline="always")
def _move_first(src, dst, i, n):  # noqa: ANN001, ANN202 - an inlined helper given pointers
    if n >= simd.lanes_of(src):
        simd.store(dst, i, simd.load(src, i))
    else:
        simd.store_first(dst, i, simd.load_first(src, i, n), n)


@numba.njit
def _through_pointers(a, out, i, n):  # noqa: ANN001, ANN202
    src, dst = simd.pointer(a), simd.pointer(out)
    _move_first(src, dst, i, n)
    dst[0] = src[1] + src[2]  # element reads and writes


@pytest.mark.parametrize("dtype", DTYPES)
def test_lanes_fill_one_vector_register(dtype):
    lanes = simd.lanes(dtype)
    assert lanes * np.dtype(dtype).itemsize == simd.VECTOR_BYTES
    assert simd.VECTOR_BYTES in (32, 64)
    assert _lanes(np.zeros(1, dtype)) == lanes


@pytest.mark.parametrize("dtype", DTYPES)
def test_load_and_store_move_one_vector_at_any_offset(dtype):
    lanes = simd.lanes(dtype)
    a = np.arange(3 * lanes, dtype=dtype)
    out = np.full(3 * lanes, -1, dtype)
    _copy(a, out, 3, lanes + 1)  # unaligned on both sides
    expected = np.full(3 * lanes, -1, dtype)
    expected[lanes + 1 : 2 * lanes + 1] = a[3 : 3 + lanes]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_masked_forms_touch_only_the_first_lanes(dtype, n):
    lanes = simd.lanes(dtype)
    n = min(n, lanes - 1)  # (0 <= n < L: four float64 lanes with AVX2)
    a = np.arange(1, 2 * lanes + 1, dtype=dtype)
    out = np.full(2 * lanes, -7, dtype)
    _copy_first(a, out, 2, n)
    expected = np.full(2 * lanes, -7, dtype)
    expected[2 : 2 + n] = a[2 : 2 + n]
    np.testing.assert_array_equal(out, expected)
    loaded = np.full(lanes, -7, dtype)
    _loaded_first(a, loaded, n)
    np.testing.assert_array_equal(loaded, np.where(np.arange(lanes) < n, a[:lanes], 0))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect through libc")
@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_forms_at_the_end_of_memory_touch_nothing_past_it(dtype):
    # the array's last elements sit just before a page that may not be read or written:
    # a full-width access there would crash the process
    page = mmap.PAGESIZE
    region = mmap.mmap(-1, 2 * page)
    libc = ctypes.CDLL(None, use_errno=True)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    assert libc.mprotect(ctypes.c_void_p(base + page), ctypes.c_size_t(page), 0) == 0
    try:
        items = page // np.dtype(dtype).itemsize
        a = np.frombuffer(region, dtype, count=items)
        a[-3:] = [1, 2, 3]
        out = np.full(simd.lanes(dtype), -1, dtype)
        _loaded_first(a[-3:], out, 3)
        np.testing.assert_array_equal(out, np.r_[1, 2, 3, np.zeros(len(out) - 3)].astype(dtype))
        _copy_first(out, a[-3:], 0, 3)  # stores the same three values back, nothing past them
        np.testing.assert_array_equal(a[-3:], [1, 2, 3])
        del a
    finally:
        libc.mprotect(ctypes.c_void_p(base + page), ctypes.c_size_t(page), 3)
        region.close()


@pytest.mark.parametrize("dtype", DTYPES)
def test_arithmetic_matches_numpy_lane_by_lane(dtype):
    lanes = simd.lanes(dtype)
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(lanes).astype(dtype) for _ in range(3))
    a[0], b[1], c[2] = np.nan, np.inf, -0.0
    out = np.empty(4 * lanes, dtype)
    _arith(a, b, c, out)
    # fmuladd may round once (fused) or twice: within one rounding of the exact value
    exact = a.astype(np.float64) * b + c if dtype == np.float32 else a * b + c
    np.testing.assert_allclose(out[:lanes], exact, rtol=2 * np.finfo(dtype).eps, equal_nan=True)
    np.testing.assert_array_equal(out[lanes : 2 * lanes], a + b)
    np.testing.assert_array_equal(out[2 * lanes : 3 * lanes], a * b)
    np.testing.assert_array_equal(out[3 * lanes :], np.full(lanes, a[1]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_clamp_is_torch_clamp_nan_and_signed_zero_kept(dtype):
    import torch

    lanes = simd.lanes(dtype)
    values = [np.nan, -np.inf, np.inf, -0.0, 0.0, -1.5, 7.0, 3.0]
    a = np.array((values * lanes)[:lanes], dtype)
    out = np.empty(lanes, dtype)
    for lo, hi in [(0.0, 6.0), (-np.inf, np.inf), (-1.0, 1.0), (0.0, np.inf)]:
        _clamp(a, out, dtype(lo), dtype(hi))
        expected = torch.clamp(torch.from_numpy(a), lo, hi).numpy()
        np.testing.assert_array_equal(out, expected)
        assert (np.signbit(out) == np.signbit(expected)).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_total_sums_the_lanes(dtype):
    lanes = simd.lanes(dtype)
    a = np.arange(lanes, dtype=dtype) * dtype(0.5)
    assert _total(a) == a.sum()
    a[3] = np.nan
    assert np.isnan(_total(a))


@numba.njit
def _divide(a, b, out):  # noqa: ANN001, ANN202
    simd.store(out, 0, simd.div(simd.load(a, 0), simd.load(b, 0)))


@numba.njit
def _running_max(taps, out):  # noqa: ANN001, ANN202
    best = simd.load(taps[0], 0)
    for t in range(1, taps.shape[0]):
        best = simd.running_max(best, simd.load(taps[t], 0))
    simd.store(out, 0, best)


@pytest.mark.parametrize("dtype", DTYPES)
def test_div_is_numpy_division(dtype):
    lanes = simd.lanes(dtype)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(lanes).astype(dtype) for _ in range(2))
    a[:4], b[:4] = [1.0, -0.0, np.inf, np.nan], [0.0, 3.0, -2.0, 1.0]
    out = np.empty(lanes, dtype)
    _divide(a, b, out)
    with np.errstate(divide="ignore"):
        expected = a / b
    np.testing.assert_array_equal(out, expected)
    assert (np.signbit(out) == np.signbit(expected)).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_running_max_keeps_the_first_of_equal_maxima_and_propagates_nan(dtype):
    import torch

    lanes = simd.lanes(dtype)
    rng = np.random.default_rng(2)
    # lanes of three taps each: signed-zero ties either way round, NaN first, middle or
    # last, -inf only, and random values
    columns = [
        (-0.0, 0.0, -1.0),
        (0.0, -0.0, -1.0),
        (np.nan, 5.0, 1.0),
        (1.0, np.nan, 7.0),
        (1.0, 2.0, np.nan),
        (-np.inf, -np.inf, -np.inf),
        (-1.0, -0.0, 0.0),
        (np.inf, np.nan, 1.0),
    ]
    columns += [tuple(rng.standard_normal(3)) for _ in range(lanes - len(columns))]
    taps = np.array(columns[:lanes], dtype).T.copy()
    out = np.empty(lanes, dtype)
    _running_max(taps, out)
    # torch's max pooling over each lane's three taps as one window of a 1x3 image
    window = torch.from_numpy(taps.T.copy()).reshape(lanes, 1, 1, 3)
    expected = torch.nn.functional.max_pool2d(window, (1, 3)).reshape(lanes).numpy()
    np.testing.assert_array_equal(out, expected)
    assert (np.signbit(out) == np.signbit(expected)).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 3, 100])
def test_pointers_stand_for_arrays(dtype, n):
    lanes = simd.lanes(dtype)
    a = np.arange(1, 3 * lanes + 1, dtype=dtype)
    out = np.full(3 * lanes, -1, dtype)
    _through_pointers(a, out, 5, n)
    expected = np.full(3 * lanes, -1, dtype)
    expected[5 : 5 + min(n, lanes)] = a[5 : 5 + min(n, lanes)]
    expected[0] = a[1] + a[2]
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(numba.TypingError):  # pointers of real numbers only
        numba.njit(lambda b: simd.pointer(b))(np.zeros(4, np.complex64))


@numba.njit
def _pairs(a, i, out):  # noqa: ANN001, ANN202
    v = simd.splat_pair(a, i)
    simd.store(out, 0, v)
    simd.store(out, simd.lanes_of(a), simd.fold_pairs(simd.load(a, 0)))
    p = simd.pointer(a)
    simd.store(out, 2 * simd.lanes_of(a), simd.splat_pair(p, i + 1))
    simd.store(out, 3 * simd.lanes_of(a), simd.splat_pair_first(p, i, 1))
    simd.store(out, 4 * simd.lanes_of(a), simd.splat_pair_first(a, i, 0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pair_broadcast_and_pair_sums(dtype):
    lanes = simd.lanes(dtype)
    a = np.arange(1, lanes + 3, dtype=dtype)
    a[3] = np.nan
    out = np.full(5 * lanes, -1, dtype)
    _pairs(a, 1, out)
    np.testing.assert_array_equal(out[:lanes], np.tile(a[1:3], lanes // 2))
    sums = a[0:lanes:2] + a[1:lanes:2]
    np.testing.assert_array_equal(out[lanes : 2 * lanes], np.tile(sums, 2))
    np.testing.assert_array_equal(out[2 * lanes : 3 * lanes], np.tile(a[2:4], lanes // 2))
    np.testing.assert_array_equal(out[3 * lanes : 4 * lanes], np.tile([a[1], 0], lanes // 2))
    np.testing.assert_array_equal(out[4 * lanes :], np.zeros(lanes))


@numba.njit
def _vector_exp(x, out):  # noqa: ANN001, ANN202
    lanes = simd.lanes_of(x)
    for i in range(0, x.size, lanes):
        simd.store(out, i, simd.exp(simd.load(x, i)))


@numba.njit
def _scalar_exp(x, out):  # noqa: ANN001, ANN202
    for i in range(x.size):
        out[i] = exp_f32(x[i])


def test_vector_exp_is_the_scalar_float32_exp_lane_by_lane():
    lanes = simd.lanes(np.float32)
    x = np.linspace(-120.0, 100.0, lanes * 4096, dtype=np.float32)
    x[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72, -87.5, -103.9]
    got, want = np.empty_like(x), np.empty_like(x)
    _vector_exp(x, got)
    _scalar_exp(x, want)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
    finite = np.isfinite(x) & (x > -80) & (x < 80)
    np.testing.assert_allclose(got[finite], np.exp(x[finite].astype(np.float64)), rtol=2.5e-7)


@numba.njit
def _sub_neg(a, b, out):  # noqa: ANN001, ANN202
    lanes = simd.lanes_of(a)
    simd.store(out, 0, simd.sub(simd.load(a, 0), simd.load(b, 0)))
    simd.store(out, lanes, simd.neg(simd.load(a, 0)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_sub_and_neg(dtype):
    lanes = simd.lanes(dtype)
    a = np.arange(lanes, dtype=dtype) - 3
    a[0], a[1] = 0.0, np.nan
    b = np.full(lanes, 0.5, dtype)
    out = np.empty(2 * lanes, dtype)
    _sub_neg(a, b, out)
    np.testing.assert_array_equal(out[:lanes], a - b)
    np.testing.assert_array_equal(out[lanes:], -a)
    assert np.signbit(out[lanes])  # -(0.0) is -0.0


@numba.njit
def _transpose(a, out, i, rows, j, cols):  # noqa: ANN001, ANN202
    simd.transpose_square(a, i, rows, out, j, cols)  # arrays
    simd.transpose_square(simd.pointer(out), j, cols, simd.pointer(a), i + 1, rows)  # pointers


@pytest.mark.parametrize("dtype", DTYPES)
def test_transpose_square_moves_a_block_transposed_and_nothing_else(dtype):
    lanes = simd.lanes(dtype)
    rows, cols = lanes + 3, 2 * lanes + 1  # (strides that are no multiple of the lanes)
    a = np.arange(1, lanes * rows + 8, dtype=dtype)
    out = np.full(lanes * cols + 8, -1, dtype)
    original = a.copy()
    _transpose(a, out, 2, rows, 5, cols)
    block = original[2 : 2 + lanes * rows].reshape(lanes, rows)[:, :lanes]
    expected = np.full_like(out, -1)
    expected[5 : 5 + lanes * cols].reshape(lanes, cols)[:, :lanes] = block.T
    np.testing.assert_array_equal(out, expected)
    # moved back transposed, one element on: the block itself there, the rest untouched
    back = original.copy()
    back[3 : 3 + lanes * rows].reshape(lanes, rows)[:, :lanes] = block
    np.testing.assert_array_equal(a, back)
