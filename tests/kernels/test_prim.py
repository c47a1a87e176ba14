"""Scalar (executorch_prim) kernels and the tensor-to-scalar queries, against
Python's (torch SymInt/SymFloat) semantics and the official runtime's choices."""

from __future__ import annotations

import math
import operator
import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyexecutorch.kernels import KernelError, get_kernel

SETTINGS = settings(max_examples=int(os.environ.get("PYET_EXAMPLES", 40)), deadline=None)

ints = st.integers(-(2**40), 2**40) | st.sampled_from([0, 1, -1, 2, -2, 7, -7])
floats = st.floats(-1e6, 1e6) | st.sampled_from([0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5])
numbers = ints | floats | st.booleans()
LAST = object()  # the previous value of the output slot, which kernels ignore


def call(name, *args):
    return get_kernel(name).fn(*args, LAST)


def same(got, expected):
    assert type(got) is type(expected), (got, expected)
    if isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == expected


@pytest.mark.parametrize(
    "op, fn",
    [
        ("add", operator.add),
        ("sub", operator.sub),
        ("mul", operator.mul),
        ("eq", operator.eq),
        ("gt", operator.gt),
        ("ge", operator.ge),
        ("lt", operator.lt),
        ("le", operator.le),
        ("sym_max", max),
        ("sym_min", min),
    ],
)
@SETTINGS
@given(a=numbers, b=numbers)
def test_binary_like_python(op, fn, a, b):
    same(call(f"executorch_prim::{op}.Scalar", a, b), fn(a, b))


def test_symint_helpers_agree_with_torch():
    for a, b in [(3, 7), (-2, 5), (2.5, 1), (4, 4.0)]:
        assert call("executorch_prim::sym_max.Scalar", a, b) == torch.sym_max(a, b)
        assert call("executorch_prim::sym_min.Scalar", a, b) == torch.sym_min(a, b)
    for v in [0, 3, -2, 2.7, -2.7]:
        assert call("executorch_prim::sym_int.Scalar", v) == torch.sym_int(v)
        assert call("executorch_prim::sym_float.Scalar", v) == torch.sym_float(v)
    for v in [True, False, 0, 1]:
        assert call("executorch_prim::sym_not.Scalar", v) == torch.sym_not(v)
    assert call("executorch_prim::sym_ite.Scalar", True, 4, 5) == torch.sym_ite(True, 4, 5)
    assert call("executorch_prim::sym_ite.Scalar", False, 4, 5.5) == 5.5


def _official_floor_div_by_zero(a: float) -> float:
    # the official runtime's floordiv on doubles gives +-inf (by the dividend's sign) for b == 0
    return -math.inf if math.copysign(1.0, a) < 0 else math.inf


@SETTINGS
@given(a=numbers, b=numbers)
def test_division_family(a, b):
    int_args = isinstance(a, int) and isinstance(b, int)
    for name in ("floordiv.Scalar", "floordiv.int", "mod.Scalar", "mod.int"):
        if b == 0 and int_args:
            with pytest.raises(KernelError, match="ZeroDivisionError"):
                call(f"executorch_prim::{name}", a, b)
            continue
        got = call(f"executorch_prim::{name}", a, b)
        if name.startswith("floordiv"):
            if int_args:
                same(got, a // b)  # floors, as Python and SymInt do
            elif b == 0:
                assert got == _official_floor_div_by_zero(float(a))
            else:
                # Python's float floor division (the official runtime's omits
                # Python's final rounding step and can return 219895048.99999997
                # for 83749 // 0.00038085896070203684)
                same(float(got), float(a // b))
        elif b != 0:
            same(got, a % b)  # the divisor's sign
    got = call("executorch_prim::truediv.Scalar", a, b)
    assert isinstance(got, float)
    if b != 0:
        assert got == a / b
    else:  # IEEE, as the official runtime divides doubles
        with np.errstate(all="ignore"):
            expected = float(np.float64(a) / np.float64(b))
        assert got == expected or (math.isnan(got) and math.isnan(expected))


def test_float_floordiv_is_whole():
    assert call("executorch_prim::floordiv.Scalar", 83749, 0.00038085896070203684) == 219895049.0


def test_division_signs():
    assert call("executorch_prim::floordiv.Scalar", -7, 2) == -4
    assert call("executorch_prim::floordiv.int", 7, -2) == -4
    assert call("executorch_prim::mod.Scalar", -7, 3) == 2
    assert call("executorch_prim::mod.int", 7, -3) == -2
    assert call("executorch_prim::floordiv.Scalar", -7.5, 2) == -4.0
    assert call("executorch_prim::floordiv.Scalar", 1.0, 0.0) == math.inf
    assert call("executorch_prim::floordiv.Scalar", -1.0, 0) == -math.inf
    assert call("executorch_prim::truediv.Scalar", 1, 0) == math.inf
    assert call("executorch_prim::truediv.Scalar", -1, 0) == -math.inf
    assert math.isnan(call("executorch_prim::truediv.Scalar", 0, 0))
    assert call("executorch_prim::truediv.Scalar", 7, 2) == 3.5


@SETTINGS
@given(v=ints | floats | st.booleans())
def test_rounding_to_int(v):
    for name, fn in [
        ("ceil", math.ceil),
        ("trunc", math.trunc),
        ("round", round),  # half to even
        ("sym_int", int),
    ]:
        same(call(f"executorch_prim::{name}.Scalar", v), int(fn(v)))
    same(call("executorch_prim::neg.Scalar", v), -v)
    same(call("executorch_prim::sym_float.Scalar", v), float(v))
    same(call("executorch_prim::sym_not.Scalar", v), not v)


def test_round_half_to_even():
    got = [call("executorch_prim::round.Scalar", v) for v in (0.5, 1.5, 2.5, -0.5, -1.5)]
    assert got == [0, 2, 2, 0, -2]


def test_errors():
    for name in ("ceil", "round", "trunc", "sym_int"):
        for v in (math.nan, math.inf):
            with pytest.raises(KernelError, match="no integer value"):
                call(f"executorch_prim::{name}.Scalar", v)
    with pytest.raises(KernelError, match="int, float or bool"):
        call("executorch_prim::add.Scalar", "1", 2)
    with pytest.raises(KernelError, match="int, float or bool"):
        call("executorch_prim::neg.Scalar", None)


@SETTINGS
@given(
    shape=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    data=st.data(),
)
def test_sizes(shape, data):
    x = np.zeros(shape, dtype=np.float32)
    if data.draw(st.booleans()):
        x = np.zeros(shape[::-1], dtype=np.float32).T  # a strided view
    t = torch.zeros(x.shape)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    got = call("aten::sym_size.int", x, dim)
    assert type(got) is int and got == torch.ops.aten.sym_size.int(t, dim)
    got = call("aten::sym_numel", x)
    assert type(got) is int and got == torch.ops.aten.sym_numel(t)


def test_sym_size_errors():
    with pytest.raises(KernelError, match="out of range"):
        call("aten::sym_size.int", np.zeros((2, 3)), 2)
    with pytest.raises(KernelError, match="out of range"):
        call("aten::sym_size.int", np.zeros(()), 0)


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_]
)
def test_local_scalar_dense(dtype):
    x = np.array([[3, 1], [2, 0]], dtype=dtype).T  # first element of a strided view
    expected = torch.ops.aten._local_scalar_dense(torch.from_numpy(np.ascontiguousarray(x)))
    got = call("aten::_local_scalar_dense", x)
    same(got, expected)
    got = call("aten::_local_scalar_dense", np.array(2.5, dtype=dtype))
    same(got, torch.ops.aten._local_scalar_dense(torch.tensor(2.5).to(torch.from_numpy(x).dtype)))


def test_local_scalar_dense_needs_an_element():
    with pytest.raises(KernelError, match="at least one element"):
        call("aten::_local_scalar_dense", np.zeros((0, 2), np.float32))
