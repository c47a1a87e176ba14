"""The window arithmetic of kernels/conv/geometry.py against enumeration: every answer is
counted position by position over small axes (all strides, paddings, dilations, taps)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pyexecutorch.kernels.conv import geometry

_AXES = list(
    itertools.product(range(1, 8), range(1, 4), range(1, 4), range(1, 4), range(0, 4))
)  # size, k, stride, dilation, pad


def _reads(size: int, stride: int, pad: int, dilation: int, o: int, t: int) -> bool:
    return 0 <= o * stride - pad + t * dilation < size


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_out_size_counts_the_windows(ceil_mode: bool) -> None:
    for size, k, s, d, p in _AXES:
        for after in (p, p + 1):
            if ceil_mode and (after != p or 2 * p > geometry.extent(k, d)):
                continue  # (pooling's ceil mode: symmetric padding within half a window)
            got = geometry.out_size(size, k, s, d, p, after, ceil_mode)
            span = geometry.extent(k, d)
            # Whole windows inside the padded axis; with ceil_mode (torch's rounding) also a
            # last one reaching up to stride - 1 past it that starts before the trailing
            # padding.
            reach = size + p + after + (s - 1 if ceil_mode else 0)
            starts = [o * s for o in range(64) if o * s + span <= reach]
            if ceil_mode:
                starts = [a for a in starts if a < size + p]
            got = max(got, 0)
            assert got == len(starts), (size, k, s, d, p, after, ceil_mode)


def test_taps_inside_the_image() -> None:
    for size, k, s, d, p in _AXES:
        n_out = geometry.out_size(size, k, s, d, p, p)
        if n_out <= 0:
            continue
        total = 0
        for t in range(k):
            lo, hi = geometry.outputs_reading(size, n_out, s, p, d, t)
            inside = [o for o in range(n_out) if _reads(size, s, p, d, o, t)]
            assert list(range(lo, hi)) == inside
            total += len(inside)
        assert geometry.taps_inside(size, n_out, k, s, p, d) == total
        each = [sum(_reads(size, s, p, d, o, t) for t in range(k)) for o in range(n_out)]
        assert geometry.taps_each(size, n_out, k, s, p, d) == each
        reading = [t for t in range(k) if any(_reads(size, s, p, d, o, t) for o in range(n_out))]
        expected = (reading[0], reading[-1]) if reading else None
        assert geometry.taps_reading(size, k, s, p, d, n_out) == expected
        for o in range(n_out):
            lo, hi = geometry.span_inside(o * s - p, d, k, size)
            assert list(range(lo, hi)) == [t for t in range(k) if _reads(size, s, p, d, o, t)]
        for o0 in range(n_out):
            for o1 in range(o0 + 1, n_out + 1):
                rows = {
                    o * s - p + t * d
                    for o in range(o0, o1)
                    for t in range(k)
                    if _reads(size, s, p, d, o, t)
                }
                r0, r1 = geometry.rows_read(o0, o1, size, k, s, p, d)
                # every input read, and nothing outside the image or the windows' span
                assert set(range(r0, r1)) >= rows
                assert 0 <= r0 <= r1 <= size
                if r0 < r1:
                    assert o0 * s - p <= r0 and r1 <= (o1 - 1) * s - p + geometry.extent(k, d)


def test_transposed_windows_land_inside_the_output() -> None:
    for size, k, s, d, p in _AXES:
        for extra in range(max(s, d)):
            n_out = geometry.transposed_out_size(size, k, s, d, p, p, extra)
            full = (size - 1) * s + geometry.extent(k, d) + extra
            assert n_out == full - 2 * p
            for t in range(k):
                lo, hi = geometry.inputs_landing(size, n_out, s, p, d, t)
                assert list(range(lo, hi)) == [
                    i for i in range(size) if 0 <= i * s - p + t * d < n_out
                ]


def test_tap_phase_splits_positions_by_stride() -> None:
    for k, s, d, p in itertools.product(range(1, 6), range(1, 4), range(1, 4), range(3)):
        for t in range(k):
            phase, shift = geometry.tap_phase(t, s, d, p)
            assert 0 <= phase < s
            for o in range(5):  # output o reads position (o + shift) * s + phase
                assert o * s + t * d - p == (o + shift) * s + phase


def test_span_inside_agrees_with_numpy() -> None:
    rng = np.random.default_rng(0)
    for start, step, count, size in rng.integers([-40, 1, 0, 0], [40, 7, 30, 40], (500, 4)):
        pos = start + step * np.arange(count)
        idx = np.flatnonzero((pos >= 0) & (pos < size))
        lo, hi = geometry.span_inside(int(start), int(step), int(count), int(size))
        assert list(range(lo, hi)) == idx.tolist()
