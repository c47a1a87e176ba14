"""The int8 dot products of ``kernels/quantized/compiled_int8_simd.py`` on the CPU at hand
(``vpdpbusd`` with VNNI; two ``pmaddwd`` on AVX2, ``pmaddubsw`` for 4-bit operands): exact
against numpy's int64 sums at the operands' extremes (where a saturating int16 step would
show), for byte operands and for the nibbles of packed 4-bit weights, and the static int8
product (``compiled_static.GEMM``) on extreme inputs and weights."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from numba import njit  # noqa: E402

from pyexecutorch.jit import simd  # noqa: E402
from pyexecutorch.kernels.quantized import compiled_int8_simd as iv  # noqa: E402
from pyexecutorch.kernels.quantized import compiled_static as qs  # noqa: E402

L = iv.LANES


@njit(cache=False)
def _dots(a, quads, out):  # noqa: ANN001, ANN202
    """out[i, :] = the L lane sums of u8(a[i]) * s8(splat quads[i]), accumulated twice."""
    ap = simd.pointer(a)
    for i in range(quads.size):
        acc = iv.isplat(np.int32(7))
        x = iv.splat_quad(quads[i])
        v = iv.load_bytes(ap, i * 4 * L)
        acc = iv.dot_u8s8(acc, v, x)
        acc = iv.dot_u8s8(acc, v, x)
        _store(out, i, acc)


@njit(cache=False)
def _nibble_dots(packed, quads, out):  # noqa: ANN001, ANN202
    """out[i] = lanes of low nibbles . quads[i, 0] + high nibbles . quads[i, 1]."""
    p = simd.pointer(packed)
    for i in range(quads.shape[0]):
        v = iv.load_bytes(p, i * 4 * L)
        acc = iv.dot_u8s8(iv.izeros(), iv.low_nibbles(v), iv.splat_quad(quads[i, 0]))
        acc = iv.dot_u8s8(acc, iv.high_nibbles(v), iv.splat_quad(quads[i, 1]))
        _store(out, i, acc)


@njit(cache=False)
def _store(out, i, acc):  # noqa: ANN001, ANN202
    f = iv.to_float(acc)  # (exact: the sums here stay under 2**24)
    fp = simd.pointer(out)
    simd.store(fp, i * L, f)


def _extremes(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n rows of 4 L unsigned bytes and n quads of signed bytes, at and near the ends."""
    a = rng.choice(np.array([0, 1, 127, 128, 254, 255], np.uint8), (n, 4 * L))
    b = rng.choice(np.array([-128, -127, -1, 0, 1, 126, 127], np.int8), (n, 4))
    a[0], b[0] = 255, -128  # every pair's sum -65280: saturates any int16 step
    a[1], b[1] = 255, 127
    return a, b


def test_byte_dot_products_exact_at_the_extremes():
    a, b = _extremes(np.random.default_rng(0), 64)
    out = np.zeros((64, L), np.float32)
    _dots(a.reshape(-1), b.view(np.int32).reshape(-1), out)
    lanes = a.reshape(64, L, 4).astype(np.int64) * b.astype(np.int64)[:, None, :]
    expected = 7 + 2 * lanes.sum(axis=2)
    np.testing.assert_array_equal(out, expected.astype(np.float32))
    assert out[0, 0] == 7 + 2 * 4 * 255 * -128


def test_nibble_dot_products_exact_at_the_extremes():
    rng = np.random.default_rng(1)
    n = 64
    packed = rng.choice(np.array([0, 0x0F, 0xF0, 0xFF, 0x8F, 0x78], np.uint8), (n, 4 * L))
    packed[0] = 0xFF
    quads = rng.choice(np.array([-128, -127, 0, 127], np.int8), (n, 2, 4))
    quads[0] = -128
    out = np.zeros((n, L), np.float32)
    _nibble_dots(packed.reshape(-1), quads.view(np.int32).reshape(n, 2), out)
    lanes = packed.reshape(n, L, 4).astype(np.int64)
    low, high = lanes & 15, lanes >> 4
    q = quads.astype(np.int64)
    expected = (low * q[:, None, 0, :]).sum(axis=2) + (high * q[:, None, 1, :]).sum(axis=2)
    np.testing.assert_array_equal(out, expected.astype(np.float32))
    assert out[0, 0] == 2 * 4 * 15 * -128


@pytest.mark.parametrize("x_value, w_value", [(127, -128), (-128, -128), (127, 127)])
@pytest.mark.parametrize("rows_dtype", [np.int8, np.int16])
def test_static_gemm_exact_on_extreme_operands(x_value, w_value, rows_dtype):
    """Rows of one extreme value against extreme weights, the scale picking out exact
    int32 sums (y = acc * 2**-k stays below 127 only where acc is what it must be); rows
    as bytes (quads read as int32) and widened to uint16 (quads read as int64: the layout
    of ``WIDE_ROWS`` CPUs, whose weights are packed pair-major; either form runs on any)."""
    m, k, n = 9, 260, 2 * L + 3
    rng = np.random.default_rng(2)
    x = np.full((m, k), x_value, np.int8)
    x[::2, ::3] = -x_value - 1 if x_value < 0 else -x_value  # mixed signs in some rows
    w = np.full((n, k), w_value, np.int8)
    w[:, 1::2] = rng.integers(-128, 128, (n, k // 2), dtype=np.int8)
    bias = rng.integers(-5000, 5000, n).astype(np.int32)
    zx = -128 if x_value == 127 else 127
    rows = np.empty((m, -(-k // 4) * 4), rows_dtype)
    qs.im2col(x.reshape(1, m, 1, k), rows, m, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0)

    packed, folded = qs.pack_weights(w, bias, zx)
    acc = (x.astype(np.int64) - zx) @ w.astype(np.int64).T + bias
    scale = np.float32(2.0**-17)  # |acc| < 2**24: float32(acc) exact, y exact halves
    scales = qs.padded(np.full(n, scale, np.float32), folded.size, np.float32)
    for variant in qs.GEMM:
        out = np.zeros((m, n), np.int8)
        none = np.zeros(0, np.int64)  # (rows one after another: no bases, no taps)
        variant(rows.reshape(-1), packed, folded, scales, 0.0, -128.0, 127.0, out, qs.job_words(),
                none, none)  # fmt: skip
        expected = np.clip(np.rint(acc.astype(np.float32) * scale), -128, 127).astype(np.int8)
        np.testing.assert_array_equal(out, expected)
    assert np.abs(acc).max() > 2**22  # (the sums are large: past any int16 step)


@njit(cache=False)
def _word_products(a, b, start, out):  # noqa: ANN001, ANN202
    """out[i] = start[i] + a[i] * b[i] twice, by madd_words on b's low_words (L lanes at a time)."""
    ap, bp, sp = simd.pointer(a), simd.pointer(b), simd.pointer(start)
    for i in range(0, a.size, L):
        w = iv.low_words(iv.iload(bp, i))
        acc = iv.madd_words(iv.iload(sp, i), iv.iload(ap, i), w)
        _store(out, i // L, iv.madd_words(acc, iv.iload(ap, i), w))


def test_word_products_exact_at_the_extremes():
    # a depthwise tap: (x - zx) from -255 to 255 by an int8 weight, and the ends of int16
    # (the lane's high half, the sign extension of a negative value, must add nothing)
    rng = np.random.default_rng(2)
    n = 8 * L
    a = rng.choice(np.array([-32768, -32767, -255, -1, 0, 1, 255, 32767], np.int32), n)
    b = rng.choice(np.array([-128, -127, -1, 0, 1, 127, 255, -255], np.int32), n)
    a[:L], b[:L] = -255, -128
    start = rng.integers(-(1 << 15), 1 << 15, n).astype(np.int32)
    out = np.zeros((n // L, L), np.float32)
    _word_products(a, b, start, out)
    expected = start.astype(np.int64) + 2 * a.astype(np.int64) * b
    assert np.abs(expected).max() < 1 << 24  # (the float32 store is exact)
    np.testing.assert_array_equal(out.reshape(-1), expected.astype(np.float32))
    assert out[0, 0] == start[0] + 2 * 255 * 128
