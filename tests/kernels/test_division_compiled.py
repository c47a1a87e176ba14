"""The compiled tier's division and remainder forms (``kernels/elementwise/compiled.py``).

Floor and truncating division, floor_divide, remainder and fmod, by a tensor and by a
scalar, in float32, float64 and the integer dtypes: bit for bit the numpy kernel's
results (NaN, infinities and signed zeros of the floats, the wrapped minimum // -1 of
the integers) and torch eager's. An integer divisor of zero raises the kernel's error,
alone and inside a whole method; what the loop cannot bind is declined. The suite's
int_remainder model compiles whole.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("numba", reason="the compiled forms need numba (the jit extra)")

from pyexecutorch.kernels import KernelError, get_kernel  # noqa: E402
from pyexecutorch.kernels.registry import fast_path_of, get_compiled_form  # noqa: E402
from pyexecutorch.runtime import tiers  # noqa: E402

tiers.enabled(True)  # imports every family's compiled forms

# (kernel name, rounding mode or None, the torch function)
OPS = [
    ("aten::div.out_mode", "floor", lambda a, b: torch.div(a, b, rounding_mode="floor")),
    ("aten::div.out_mode", "trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    ("aten::floor_divide.out", None, torch.floor_divide),
    ("aten::remainder.Tensor_out", None, torch.remainder),
    ("aten::fmod.Tensor_out", None, torch.fmod),
]
SCALAR = {
    "aten::div.out_mode": "aten::div.Scalar_mode_out",
    "aten::floor_divide.out": None,
    "aten::remainder.Tensor_out": "aten::remainder.Scalar_out",
    "aten::fmod.Tensor_out": "aten::fmod.Scalar_out",
}
_EDGES = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e30, 88.0, -104.0, 2.5, -2.5, 3.5]
_EDGES += [0.5, -0.5, 1.0, -1.0, 7.3, -7.3, 1e-45, 3.0, 1e38, -3e38]


def _operands(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values, and random ones (integers: the extremes, -1 divisors)."""
    rng = np.random.default_rng(0)
    if np.dtype(dtype).kind == "f":
        edges = np.array(_EDGES, dtype)
        a, b = (g.reshape(-1) for g in np.meshgrid(edges, edges))
        a = np.concatenate([a, (rng.standard_normal(500) * 100).astype(dtype)])
        b = np.concatenate([b, (rng.standard_normal(500) * 3).astype(dtype)])
        return a, b
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, 600, endpoint=True)
    a = np.concatenate([a, [info.min, info.max, info.min, 0, -7, 7, 7]])
    b = rng.integers(-9 if info.min < 0 else 1, 10, 600)
    b = np.concatenate([b, [-1, -1, 1, 3, -2, 2, -7] if info.min < 0 else [1, 1, 1, 3, 2, 2, 7]])
    b[b == 0] = 5
    return a.astype(dtype), b.astype(dtype)


def _call(name: str, mode, a, b):  # noqa: ANN001, ANN202
    """(form's result through its whole-method step, the numpy kernel's result)."""
    args = (a, b, mode) if mode else (a, b)
    want = get_kernel(name).fn(*args, np.empty_like(a)).copy()
    out = np.full_like(a, 3)
    form = get_compiled_form(name)(*args, out)
    assert form is not None and fast_path_of(form).fills_outputs, name
    function, arguments, checked = fast_path_of(form).step
    assert checked
    assert function(*arguments)
    return out.copy(), want


def _comparable_with_torch(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where torch eager computes these operations (torch's truncating division of the
    integer minimum by -1 dies of SIGFPE; its float fmod and remainder go through the
    quotient, NaN where a finite one overflows, where the numpy kernel's fmod is exact)."""
    if a.dtype.kind != "f":
        return a != np.iinfo(a.dtype).min
    with np.errstate(all="ignore"):
        return ~(np.isfinite(a) & np.isfinite(b) & ~np.isfinite(a / b))


def _assert_identical(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=what)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=what)
    np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.int8, np.uint8])
@pytest.mark.parametrize("op", OPS, ids=[f"{n}-{m}" for n, m, _ in OPS])
def test_tensor_divisor_matches_numpy_kernel_and_torch(op, dtype):
    name, mode, torch_fn = op
    a, b = _operands(dtype)
    got, want = _call(name, mode, a, b)
    _assert_identical(got, want, name)
    safe = _comparable_with_torch(a, b)
    got, a, b = got[safe], a[safe], b[safe]
    eager = torch_fn(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    if got.dtype.kind == "f":  # torch's floats differ from numpy's in the last ulp at most
        np.testing.assert_allclose(got, eager, rtol=1e-6, atol=0, err_msg=name)
    else:
        np.testing.assert_array_equal(got, eager, err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int16, np.uint8])
@pytest.mark.parametrize("op", [o for o in OPS if SCALAR[o[0]]], ids=lambda o: f"{o[0]}-{o[1]}")
def test_scalar_divisor_matches_numpy_kernel_and_torch(op, dtype):
    name, mode, torch_fn = op
    name = SCALAR[name]
    a, _ = _operands(dtype)
    kind = np.dtype(dtype).kind
    for divisor in {"f": (-3, 2.5, -0.75, 1e-3), "i": (-3, 7, -1), "u": (7, 1)}[kind]:
        got, want = _call(name, mode, a, divisor)
        _assert_identical(got, want, f"{name} by {divisor}")
        safe = _comparable_with_torch(a, np.full_like(a, divisor))
        eager = torch_fn(torch.from_numpy(a[safe]), divisor).numpy()
        np.testing.assert_allclose(got[safe], eager, rtol=1e-6, atol=0, err_msg=f"{name} {divisor}")


def test_integer_zero_divisor_raises_the_kernel_error_and_writes_nothing():
    a = np.arange(-3, 5, dtype=np.int64)
    b = np.array([1, 2, 3, 0, 5, 6, 7, 8], np.int64)
    for name, mode, _ in OPS:
        args = (a, b, mode) if mode else (a, b)
        out = np.full_like(a, 99)
        form = get_compiled_form(name)(*args, out)
        function, arguments, _ = fast_path_of(form).step
        assert not function(*arguments)
        assert (out == 99).all()  # the loop checked every divisor first
        with pytest.raises(KernelError, match=r"integer division by zero"):
            form(*args, out)


def test_other_arrays_go_to_the_reference():
    a, b = _operands(np.int32)
    out = np.zeros_like(a)
    form = get_compiled_form("aten::remainder.Tensor_out")(a, b, out)
    other = a[::-1].copy()
    got = form(other, b, out)
    np.testing.assert_array_equal(
        got, torch.remainder(torch.from_numpy(other), torch.from_numpy(b))
    )


def test_forms_decline_what_the_loop_cannot_bind():
    a = np.arange(1, 7, dtype=np.int32)
    div = get_compiled_form("aten::div.out_mode")
    scalar_div = get_compiled_form("aten::div.Scalar_mode_out")
    remainder = get_compiled_form("aten::remainder.Scalar_out")
    assert div(a, a, None, np.zeros(6, np.float32)) is None  # true division
    assert div(a, a.astype(np.int64), "floor", np.zeros(6, np.int64)) is None  # promotion
    assert div(a, a[:1], "floor", np.zeros_like(a)) is None  # broadcasting
    assert div(a.astype(np.float16), a.astype(np.float16), "floor", a.astype(np.float16)) is None
    assert scalar_div(a, 0, "floor", np.zeros_like(a)) is None  # raises at every call
    assert remainder(a, 2.5, np.zeros(6, np.float32)) is None  # an int tensor by a float
    assert remainder(a.astype(np.int8), 300, np.zeros(6, np.int8)) is None  # out of range
    assert remainder(a, True, np.zeros_like(a)) is None
    shifted = np.arange(8, dtype=np.int32)
    assert remainder(shifted[:6], 3, shifted[2:]) is None  # overlapping, not in place


def test_int_remainder_and_a_zero_divisor_in_a_whole_method():
    from pyexecutorch.exir import to_edge  # noqa: PLC0415
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415
    from tests import (
        models,  # noqa: PLC0415 - the compiler suite (tests/models.py)
        official,  # noqa: PLC0415
    )

    case = models.get_case("int_remainder")
    pte = to_edge(models.export(case)).to_executorch().buffer
    whole = Runtime.get().load_program(pte, jit=True).load_method("forward")
    assert whole.plan.whole_source is not None, whole.plan.sources[0]
    assert "divide_tensors" in whole.plan.whole_source
    for inputs in case.all_inputs():
        got = [official.to_numpy(x) for x in whole.execute(list(inputs))]
        official.assert_close(case, got, official.eager_outputs(case, inputs), what=case.name)
    a, b = (official.to_numpy(x).copy() for x in next(iter(case.all_inputs())))
    b.reshape(-1)[1] = 0
    from pyexecutorch.runtime.errors import ExecutionError  # noqa: PLC0415

    failed = r"instruction 0 \(aten::remainder.Tensor_out\): KernelError: integer division by zero"
    with pytest.raises(ExecutionError, match=failed):
        whole.execute([a, b])
