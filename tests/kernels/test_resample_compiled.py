"""The compiled tier's whole-method steps of transposed convolution, upsampling and padding.

Each step (the call a form offers with ``whole=True``) runs on its planned arrays and is
compared with the numpy kernel (the same values: the same arithmetic in the same order)
and with torch eager: transposed convolutions over strides, padding, dilation, output
padding, groups and 1-D; nearest and bilinear resizes by sizes and by scale factors,
up and down, with align_corners both ways; constant padding wider than the input and
negative (cropping), of floats, integers and bools. What a step cannot bind is declined.
The conv_transpose_upsample suite model then compiles into one whole method.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("numba", reason="the compiled forms need numba (the jit extra)")

from pyexecutorch.kernels import get_kernel  # noqa: E402
from pyexecutorch.kernels.registry import fast_path_of, get_compiled_form  # noqa: E402
from pyexecutorch.runtime import tiers  # noqa: E402

tiers.enabled(True)  # imports every family's compiled forms

F32, F64 = np.float32, np.float64
CONV = "aten::convolution.out"
NEAREST = "aten::upsample_nearest2d.vec_out"
BILINEAR = "aten::upsample_bilinear2d.vec_out"
PAD = "aten::constant_pad_nd.out"


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False  # a constant of the program, as the runtime binds weights
    return a


def _randn(shape, dtype, seed=0):  # noqa: ANN001, ANN202
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _run_step(name: str, args: tuple, out: np.ndarray) -> np.ndarray:
    """The form's whole-method step run on ``args`` and ``out`` (poisoned first)."""
    form = get_compiled_form(name)(*args, out, whole=True)
    assert form is not None, f"{name} offered no step"
    out[...] = 7 if out.dtype.kind != "b" else True
    function, arguments = fast_path_of(form).step[:2]
    function(*arguments)
    return out.copy()


def _reference(name: str, args: tuple, shape: tuple, dtype) -> np.ndarray:  # noqa: ANN001
    return get_kernel(name).fn(*args, np.zeros(shape, dtype)).copy()


# ---------------------------------------------------------------------------
# Transposed convolution

# (input shape, in/out channels, kernel, stride, padding, dilation, output_padding, groups, bias)
TRANSPOSED = [
    ((1, 4, 5, 5), 4, (2, 2), (2, 2), (0, 0), (1, 1), (0, 0), 1, True),  # the suite model's
    ((2, 3, 4, 6), 5, (3, 3), (1, 1), (1, 1), (1, 1), (0, 0), 1, False),  # overlapping taps
    ((1, 6, 5, 3), 4, (3, 2), (2, 3), (1, 0), (1, 1), (1, 2), 2, True),  # output padding
    ((1, 4, 3, 4), 6, (3, 3), (2, 1), (2, 1), (2, 3), (1, 0), 2, True),  # dilation
    ((1, 3, 3, 3), 2, (5, 5), (1, 1), (3, 3), (1, 1), (0, 0), 1, True),  # padding > image
    ((2, 4, 7), 6, (3,), (2,), (1,), (2,), (1,), 2, True),  # 1-D
]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("case", TRANSPOSED, ids=[str(c) for c in TRANSPOSED])
def test_transposed_convolution_step_matches_reference_and_torch(case, dtype):
    shape, oc, k, s, p, d, op, g, has_bias = case
    x = _randn(shape, dtype)
    weight = _read_only(_randn((shape[1], oc // g, *k), dtype, seed=1))
    bias = _read_only(_randn((oc,), dtype, seed=2)) if has_bias else None
    torch_fn = (
        torch.nn.functional.conv_transpose1d
        if len(k) == 1
        else (torch.nn.functional.conv_transpose2d)
    )
    want = torch_fn(
        torch.from_numpy(x),
        torch.from_numpy(weight.copy()),
        None if bias is None else torch.from_numpy(bias.copy()),
        s,
        p,
        op,
        g,
        d,
    ).numpy()
    args = (x, weight, bias, s, p, d, True, op, g)
    reference = _reference(CONV, args, want.shape, dtype)
    got = _run_step(CONV, args, np.zeros(want.shape, dtype))
    tolerance = 1e-5 if dtype == F32 else 1e-12
    np.testing.assert_allclose(got, reference, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def test_transposed_step_called_as_the_kernel_falls_back_on_other_arrays():
    x = _randn((1, 4, 5, 5), F32)
    weight = _read_only(_randn((4, 3, 2, 2), F32, seed=1))
    out = np.zeros((1, 3, 10, 10), F32)
    args = ((2, 2), (0, 0), (1, 1), True, (0, 0), 1)
    form = get_compiled_form(CONV)(x, weight, None, *args, out, whole=True)
    other = _randn((1, 4, 5, 5), F32, seed=3)
    got = form(other, weight, None, *args, np.zeros_like(out))
    want = torch.nn.functional.conv_transpose2d(
        torch.from_numpy(other), torch.from_numpy(weight.copy()), stride=2
    )
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


def test_transposed_steps_decline_what_they_cannot_bind():
    x = _randn((1, 4, 5, 5), F32)
    weight = _read_only(_randn((4, 4, 1, 1), F32))
    args = ((1, 1), (0, 0), (1, 1), True, (0, 0), 1)
    conv = get_compiled_form(CONV)
    # weights that may change between runs, an output over its input, float16
    assert conv(x, weight.copy(), None, *args, np.zeros_like(x), whole=True) is None
    assert conv(x, weight, None, *args, x, whole=True) is None
    half, w16 = x.astype(np.float16), _read_only(weight.astype(np.float16))
    assert conv(half, w16, None, *args, np.zeros_like(half), whole=True) is None
    # an output of the wrong shape, and 3-D convolutions
    assert conv(x, weight, None, *args, np.zeros((1, 4, 6, 6), F32), whole=True) is None
    x3, w3 = _randn((1, 4, 2, 2, 2), F32), _read_only(_randn((4, 4, 1, 1, 1), F32))
    args3 = ((1,) * 3, (0,) * 3, (1,) * 3, True, (0,) * 3, 1)
    assert conv(x3, w3, None, *args3, np.zeros_like(x3), whole=True) is None
    # alone (not in a whole method) a transposed convolution stays on numpy
    assert conv(x, weight, None, *args, np.zeros_like(x)) is None


# ---------------------------------------------------------------------------
# Upsampling

# (input shape, output_size, scale_factors)
RESIZES = [
    ((1, 4, 5, 5), None, (2.0, 2.0)),
    ((1, 4, 5, 5), (7, 9), None),
    ((2, 3, 6, 7), (3, 4), None),  # down
    ((1, 2, 5, 3), None, (1.7, 0.6)),  # odd scales: torch uses 1/scale, not in/out
    ((1, 2, 4, 4), (4, 4), None),  # same size
    ((1, 1, 1, 3), (5, 1), None),  # a single row and column
]


@pytest.mark.parametrize("dtype", [F32, F64, np.uint8, np.int32, np.bool_])
@pytest.mark.parametrize("case", RESIZES, ids=[str(c) for c in RESIZES])
def test_nearest_step_matches_reference_and_torch(case, dtype):
    shape, size, scales = case
    x = (_randn(shape, F32) * 50).astype(dtype)
    # torch resizes no int32 or bool: a gather, it picks the same pixels of their float64 values
    exact = np.dtype(dtype) in (np.dtype(F32), np.dtype(F64), np.dtype(np.uint8))
    source = torch.from_numpy(x if exact else x.astype(F64))
    want = torch.ops.aten.upsample_nearest2d.vec(source, size, scales).numpy().astype(dtype)
    args = (x, size, scales)
    got = _run_step(NEAREST, args, np.zeros(want.shape, dtype))
    np.testing.assert_array_equal(got, _reference(NEAREST, args, want.shape, dtype))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("case", RESIZES, ids=[str(c) for c in RESIZES])
def test_bilinear_step_matches_reference_and_torch(case, dtype, align_corners):
    shape, size, scales = case
    x = _randn(shape, dtype)
    want = torch.ops.aten.upsample_bilinear2d.vec(
        torch.from_numpy(x), size, align_corners, scales
    ).numpy()
    args = (x, size, align_corners, scales)
    got = _run_step(BILINEAR, args, np.zeros(want.shape, dtype))
    np.testing.assert_array_equal(got, _reference(BILINEAR, args, want.shape, dtype))
    tolerance = 1e-6 if dtype == F32 else 1e-14
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def test_upsample_steps_decline_what_they_cannot_bind():
    x = _randn((1, 2, 3, 3), F32)
    out = np.zeros((1, 2, 6, 6), F32)
    nearest, bilinear = get_compiled_form(NEAREST), get_compiled_form(BILINEAR)
    assert nearest(x, None, (2.0, 2.0), out) is None  # alone: numpy's fast path
    assert nearest(x, None, (2.0, 2.0), out.astype(F64), whole=True) is None  # dtypes differ
    assert nearest(x, (5, 5), None, out, whole=True) is None  # not the output's shape
    assert nearest(x, None, None, out, whole=True) is None  # neither size nor scales
    assert nearest(x, (3, 3), None, x, whole=True) is None  # in place
    half = x.astype(np.float16)
    assert bilinear(half, (6, 6), False, None, out.astype(np.float16), whole=True) is None
    ints = x.astype(np.int32)
    assert bilinear(ints, (6, 6), False, None, out.astype(np.int32), whole=True) is None


# ---------------------------------------------------------------------------
# Constant padding

# (input shape, pad)
PADS = [
    ((1, 4, 5, 5), (1, 2, 0, 1)),  # the suite model's
    ((2, 3, 4), (3, 3)),  # the last dimension only
    ((2, 3), (5, 6, 4, 2)),  # wider than the input
    ((2, 5, 6), (-1, -2, 1, -1)),  # cropping and padding
    ((3, 4, 5), (0, 0, 0, 0, 2, 1)),  # the first dimension
    ((3, 4), (-4, 1)),  # the last dimension cropped away: all fill
    ((2, 3, 4), (1, 1, -2, 3)),  # a middle dimension cropped and padded
    ((2, 3, 4), (0, 0, -3, 2)),  # a middle dimension cropped away: all fill
    ((7,), (2, -3)),
    ((2, 1, 3, 2), (1, 0, 0, 2, 1, 1, 0, 1)),  # all four dimensions
]


@pytest.mark.parametrize("dtype", [F32, F64, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("case", PADS, ids=[str(c) for c in PADS])
def test_constant_pad_step_matches_reference_and_torch(case, dtype):
    shape, pad = case
    x = (_randn(shape, F32) * 50).astype(dtype)
    value = {"f": -0.5, "i": -9, "u": 200, "b": True}[np.dtype(dtype).kind]
    want = torch.ops.aten.constant_pad_nd(torch.from_numpy(x), list(pad), value).numpy()
    args = (x, list(pad), value)
    got = _run_step(PAD, args, np.zeros(want.shape, dtype))
    np.testing.assert_array_equal(got, _reference(PAD, args, want.shape, dtype))
    np.testing.assert_array_equal(got, want)


def test_constant_pad_step_fills_nan_and_rounds_the_value_as_the_reference():
    x = _randn((2, 3), F32)
    for value in (float("nan"), float("-inf"), 0.1):
        want = torch.ops.aten.constant_pad_nd(torch.from_numpy(x), [1, 1, 1, 0], value).numpy()
        got = _run_step(PAD, (x, [1, 1, 1, 0], value), np.zeros(want.shape, F32))
        np.testing.assert_array_equal(got, want)


def test_constant_pad_steps_decline_what_they_cannot_bind():
    x = _randn((2, 3), F32)
    pad = get_compiled_form(PAD)
    assert pad(x, [1, 1], 0.0, np.zeros((2, 5), F32)) is None  # alone: numpy's fast path
    assert pad(x, [1, 1], 0.0, np.zeros((2, 6), F32), whole=True) is None  # wrong shape
    assert pad(x, [1], 0.0, np.zeros((2, 4), F32), whole=True) is None  # odd padding list
    assert pad(x, [1, 1, 1, 1, 1, 1], 0.0, np.zeros((2, 5), F32), whole=True) is None
    ints = x.astype(np.int8)
    assert pad(ints, [1, 1], 300, np.zeros((2, 5), np.int8), whole=True) is None  # overflow
    assert pad(x, [0, 0], 0.0, x, whole=True) is None  # in place


# ---------------------------------------------------------------------------
# The suite model


def test_conv_transpose_upsample_compiles_whole_and_matches_numpy_tier_and_eager():
    from pyexecutorch.exir import to_edge  # noqa: PLC0415
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415
    from tests import (
        models,  # noqa: PLC0415 - the compiler suite (tests/models.py)
        official,  # noqa: PLC0415
    )

    case = models.get_case("conv_transpose_upsample")
    pte = to_edge(models.export(case)).to_executorch().buffer
    whole = Runtime.get().load_program(pte, jit=True).load_method("forward")
    numpy_tier = Runtime.get().load_program(pte, jit=False).load_method("forward")
    source = whole.plan.whole_source
    assert source is not None, whole.plan.sources[0]
    for step in ("conv_transpose", "NEAREST", "BILINEAR", "PAD_ROWS", "compiled_dense:"):
        assert step in source, step
    for inputs in case.all_inputs():
        got = [official.to_numpy(x) for x in whole.execute(list(inputs))]
        ref = [official.to_numpy(x) for x in numpy_tier.execute(list(inputs))]
        for g, r in zip(got, ref, strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
        official.assert_close(case, got, official.eager_outputs(case, inputs), what=case.name)
