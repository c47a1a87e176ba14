"""The compiled dense convolutions (kernels/conv/compiled_dense.py), every kind of step,
equal the reference numpy kernel and torch eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.kernels import get_kernel
from pyexecutorch.kernels.registry import fast_path_of

pytest.importorskip("numba", reason="the compiled forms need numba (the jit extra)")

from pyexecutorch.kernels.conv import compiled, compiled_dense  # noqa: E402, F401 - registers
from pyexecutorch.kernels.registry import get_compiled_form  # noqa: E402

REFERENCE = get_kernel("aten::convolution.out").fn
COMPILED = get_compiled_form("aten::convolution.out")

# (batch, channels, out channels, height, width, (kh, kw), (sh, sw), (ph, pw), (dh, dw), groups)
CASES = [
    (1, 3, 8, 13, 12, (3, 3), (1, 1), (1, 1), (1, 1), 1),  # "same" 3x3
    (2, 4, 6, 11, 9, (3, 3), (2, 2), (1, 1), (1, 1), 1),  # strided, batch 2
    (1, 3, 5, 16, 15, (7, 7), (2, 2), (3, 3), (1, 1), 1),  # a ResNet stem, odd widths
    (1, 6, 9, 7, 9, (3, 3), (1, 1), (2, 2), (2, 2), 3),  # dilated, grouped
    (1, 4, 7, 9, 10, (3, 2), (1, 2), (0, 1), (1, 1), 1),  # no vertical padding, uneven
    (2, 4, 6, 3, 3, (3, 3), (1, 1), (4, 4), (1, 1), 2),  # padding wider than the image
    (1, 5, 3, 12, 13, (2, 2), (3, 3), (0, 0), (1, 1), 1),  # stride past the kernel
    (1, 16, 33, 2, 2, (3, 3), (1, 1), (1, 1), (1, 1), 1),  # late CNN: a tiny image
    (3, 6, 10, 8, 7, (1, 1), (2, 2), (0, 0), (1, 1), 2),  # a strided 1x1 projection
]


def _read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False  # as program constants reach kernels
    return a


def _case(case, dtype):  # noqa: ANN001, ANN202
    n, c, oc, h, w, k, s, p, d, g = case
    rng = np.random.default_rng(sum(case[:5]))
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    x[0, 0, 0, :2] = (-0.0, np.inf)  # an infinity at the image's left edge
    x[-1, -1, -1, -1] = -np.inf  # ... and one at its right edge
    weight = _read_only(rng.standard_normal((oc, c // g, *k)).astype(dtype))
    bias = _read_only(rng.standard_normal(oc).astype(dtype))
    args = (x, weight, bias, s, p, d, False, (0, 0), g)
    want = torch.nn.functional.conv2d(
        torch.from_numpy(x), torch.from_numpy(weight.copy()), torch.from_numpy(bias), s, p, d, g
    ).numpy()
    return args, want


def _tolerance(dtype) -> dict:  # noqa: ANN001
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


def _run(kind: str, args: tuple, want: np.ndarray, parallel: bool) -> np.ndarray:
    x, weight, bias, s, p, d, _, _, g = args
    n, c, h, w = x.shape
    out = np.full(want.shape, np.nan, x.dtype)
    x5 = x.reshape(n, g, c // g, h, w)
    o5 = out.reshape(n, g, want.shape[1] // g, *want.shape[2:])
    fn, step_args = compiled_dense.plan(kind, x5, weight, bias, o5, s, p, d, parallel)
    fn(*step_args)
    fn(*step_args)  # a second call sees the buffers the first one left
    return out


def _out_width(case) -> int:  # noqa: ANN001
    _, _, _, _, w, (_, kw), (_, sw), (_, pw), (_, dw), _ = case
    return (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1


# every kind on every case it takes (the wrapped layout: see the test after this one)
KIND_CASES = [
    (kind, case)
    for kind in compiled_dense.KINDS
    for case in CASES
    if kind != "wrapped" or compiled_dense.wraps(case[4], _out_width(case), case[6])
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("kind", "case"), KIND_CASES, ids=[f"{k}-{c}" for k, c in KIND_CASES])
def test_every_kind_matches_reference_and_torch(kind, case, dtype):
    args, want = _case(case, dtype)
    out = _run(kind, args, want, parallel=False)
    reference = REFERENCE(*args, np.zeros(want.shape, dtype))
    np.testing.assert_allclose(out, reference, **_tolerance(dtype))
    np.testing.assert_allclose(out, want, **_tolerance(dtype))


def test_wrapped_layout_takes_stride_one_across_and_outputs_as_wide_as_the_image():
    assert compiled_dense.wraps(13, 13, (2, 1))
    assert not compiled_dense.wraps(13, 11, (1, 1))  # unpadded: rows would be cut
    assert not compiled_dense.wraps(13, 7, (1, 2))


@pytest.mark.parametrize("kind", ["runs", "pixels"])
def test_parallel_loops_match_the_serial_ones(kind):
    args, want = _case(CASES[1], np.float32)
    serial = _run(kind, args, want, parallel=False)
    np.testing.assert_array_equal(_run(kind, args, want, parallel=True), serial)


@pytest.mark.parametrize(
    ("shape", "kind"),
    [
        (((1, 1, 3, 64, 64), (8, 3, 7, 7), (1, 1, 8, 32, 32), (2, 2), (3, 3)), "runs"),
        (((1, 1, 64, 2, 2), (64, 64, 3, 3), (1, 1, 64, 2, 2), (1, 1), (1, 1)), "gathered"),
        (((1, 1, 8, 15, 15), (32, 8, 3, 3), (1, 1, 32, 15, 15), (1, 1), (1, 1)), "wrapped"),
        (((1, 1, 16, 8, 8), (32, 16, 3, 3), (1, 1, 32, 4, 4), (2, 2), (1, 1)), "gathered"),
        (((1, 1, 32, 3, 3), (128, 32, 3, 3), (1, 1, 128, 3, 3), (1, 1), (1, 1)), "gathered"),
        (((1, 1, 16, 8, 8), (32, 16, 1, 1), (1, 1, 32, 4, 4), (2, 2), (0, 0)), "gathered"),
    ],
)
def test_the_cost_model_picks_the_loop_or_product_measured_fastest(shape, kind):
    # measured at one thread against each other and the numpy fast path (see the module)
    assert compiled_dense.choose_kind(*shape) == kind


def test_conv_step_runs_the_dense_step_and_the_reference_on_other_arrays():
    args, want = _case(CASES[3], np.float64)
    out = np.full(want.shape, np.nan)
    step = COMPILED(*args, out, whole=True)
    assert step is not None and fast_path_of(step).fills_outputs
    fn, step_args = fast_path_of(step).step
    assert fn in (
        *compiled_dense.RUNS,
        *compiled_dense.PIXELS,
        compiled_dense.dense_columns,
        compiled_dense.dense_wrapped,
        compiled_dense.dense_gathered,
    )
    fn(*step_args)
    np.testing.assert_allclose(out, want, **_tolerance(np.float64))
    other = np.zeros_like(out)
    x2 = args[0] * 2
    assert step(x2, *args[1:], other) is other
    np.testing.assert_allclose(other, REFERENCE(x2, *args[1:], np.zeros_like(out)), rtol=1e-12)


def test_loops_go_parallel_only_from_parallel_macs_at_two_threads():
    import numba  # noqa: PLC0415

    before = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        picked = []
        for c in (3, 64):  # 1.2M and 25M multiply-adds, both best as runs
            x = np.zeros((1, 1, c, 64, 64), np.float32)
            weight = np.zeros((8, c, 7, 7), np.float32)
            out = np.zeros((1, 1, 8, 32, 32), np.float32)
            macs = out.size * weight[0].size
            fn, _ = compiled_dense.dense_step(
                x, weight, np.zeros(8, np.float32), out, (2, 2), (3, 3), (1, 1)
            )
            picked.append((macs >= compiled_dense.PARALLEL_MACS, fn))
    finally:
        numba.set_num_threads(before)
    two_threads = numba.config.NUMBA_NUM_THREADS > 1  # else every loop stays serial
    assert picked == [(False, compiled_dense.RUNS[0]), (True, compiled_dense.RUNS[two_threads])]
