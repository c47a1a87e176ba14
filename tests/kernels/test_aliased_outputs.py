"""Elementwise kernels and their fast paths are right when out is an input's memory.

Our memory planner lets an elementwise op write into a same-shaped input
that dies at the op (``exir/memory_planning.py``, ``_ELEMENTWISE_NAMES``), as
the official planner's contract allows for one-pass C++ kernels. A numpy
kernel that reads an input after its first write into ``out`` would then
compute garbage, so every such operator is checked here, general kernel and
load-time fast path, with ``out`` aliasing each same-typed input in turn.
"""

from __future__ import annotations

import numpy as np
import pytest

from pyexecutorch.kernels import get_kernel
from pyexecutorch.kernels.registry import get_specializer

RNG = np.random.default_rng(7)
SHAPE = (4, 6)


def floats() -> np.ndarray:
    x = RNG.standard_normal(SHAPE).astype(np.float32) * 2
    x[0, :3] = (0.0, -0.0, 0.5)
    return x


def positive() -> np.ndarray:
    return np.abs(floats()) + 0.25


def unit() -> np.ndarray:
    return np.clip(floats(), -0.9, 0.9)


def ints() -> np.ndarray:
    return RNG.integers(-20, 20, SHAPE)


def nonzero_ints() -> np.ndarray:
    x = ints()
    x[x == 0] = 3
    return x


def bools() -> np.ndarray:
    return RNG.integers(0, 2, SHAPE).astype(bool)


UNARY_FLOAT = """abs acos asin asinh atan atanh ceil cos cosh erf exp expm1 floor neg
reciprocal relu round rsqrt sigmoid sign sin sinh tan tanh trunc""".split()
DOMAIN = {"acos": unit, "asin": unit, "atanh": unit}
POSITIVE = "log log10 log1p log2 sqrt acosh".split()

# (operator, builder of the arguments before out)
CASES: list[tuple[str, object]] = [
    *[(f"aten::{n}.out", lambda n=n: [DOMAIN.get(n, floats)()]) for n in UNARY_FLOAT],
    *[(f"aten::{n}.out", lambda: [positive() + 1]) for n in POSITIVE],
    ("aten::bitwise_not.out", lambda: [ints()]),
    ("aten::logical_not.out", lambda: [bools()]),
    ("aten::add.out", lambda: [floats(), floats(), 2]),
    ("aten::sub.out", lambda: [floats(), floats(), 1]),
    ("aten::mul.out", lambda: [floats(), floats()]),
    ("aten::div.out", lambda: [floats(), positive()]),
    ("aten::div.out_mode", lambda: [floats(), positive(), "floor"]),
    ("aten::div.out_mode", lambda: [floats(), positive(), "trunc"]),
    ("aten::div.out_mode", lambda: [ints(), nonzero_ints(), "floor"]),
    ("aten::div.out_mode", lambda: [ints(), nonzero_ints(), "trunc"]),
    ("aten::maximum.out", lambda: [floats(), floats()]),
    ("aten::minimum.out", lambda: [floats(), floats()]),
    ("aten::atan2.out", lambda: [floats(), floats()]),
    ("aten::fmod.Tensor_out", lambda: [floats(), positive()]),
    ("aten::remainder.Tensor_out", lambda: [floats(), positive()]),
    ("aten::remainder.Tensor_out", lambda: [ints(), nonzero_ints()]),
    ("aten::pow.Tensor_Tensor_out", lambda: [positive(), floats()]),
    ("aten::bitwise_and.Tensor_out", lambda: [ints(), ints()]),
    ("aten::bitwise_or.Tensor_out", lambda: [ints(), ints()]),
    ("aten::bitwise_xor.Tensor_out", lambda: [ints(), ints()]),
    ("aten::logical_and.out", lambda: [bools(), bools()]),
    ("aten::logical_or.out", lambda: [bools(), bools()]),
    ("aten::logical_xor.out", lambda: [bools(), bools()]),
    ("aten::add.Scalar_out", lambda: [floats(), 1.5, 2]),
    ("aten::sub.Scalar_out", lambda: [floats(), 1.5, 1]),
    ("aten::rsub.Scalar_out", lambda: [floats(), 1.5, 2]),
    ("aten::mul.Scalar_out", lambda: [floats(), -3]),
    ("aten::div.Scalar_out", lambda: [floats(), 7.0]),
    ("aten::div.Scalar_mode_out", lambda: [floats(), 0.7, "floor"]),
    ("aten::fmod.Scalar_out", lambda: [floats(), 0.7]),
    ("aten::remainder.Scalar_out", lambda: [floats(), 0.7]),
    ("aten::remainder.Scalar_out", lambda: [ints(), -3]),
    ("aten::pow.Tensor_Scalar_out", lambda: [floats(), 2]),
    ("aten::pow.Tensor_Scalar_out", lambda: [floats(), 3]),
    ("aten::pow.Tensor_Scalar_out", lambda: [positive(), 0.5]),
    ("aten::pow.Tensor_Scalar_out", lambda: [positive(), -2]),
    ("aten::pow.Scalar_out", lambda: [2.0, floats()]),
    ("aten::bitwise_and.Scalar_out", lambda: [ints(), 6]),
    ("aten::bitwise_or.Scalar_out", lambda: [ints(), 6]),
    ("aten::bitwise_xor.Scalar_out", lambda: [ints(), 6]),
    ("aten::clamp.out", lambda: [floats(), -0.5, 0.75]),
    ("aten::clamp.out", lambda: [floats(), None, 0.0]),
    ("aten::clamp.Tensor_out", lambda: [floats(), floats() - 1, floats() + 1]),
    ("aten::hardtanh.out", lambda: [floats(), -1.0, 1.0]),
    ("aten::leaky_relu.out", lambda: [floats(), 0.1]),
    ("aten::elu.out", lambda: [floats(), 1.0, 1.0, 1.0]),
    ("aten::gelu.out", lambda: [floats(), "none"]),
    ("aten::gelu.out", lambda: [floats(), "tanh"]),
    ("aten::where.self_out", lambda: [bools(), floats(), floats()]),
    ("aten::masked_fill.Scalar_out", lambda: [floats(), bools(), 9.0]),
]


def _alias_positions(args: list, expected: np.ndarray) -> list[int]:
    return [
        i
        for i, a in enumerate(args)
        if isinstance(a, np.ndarray) and a.shape == expected.shape and a.dtype == expected.dtype
    ]


@pytest.mark.parametrize("name,build", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_output_in_an_input_memory(name, build):
    kernel = get_kernel(name)
    assert kernel is not None, f"no kernel for {name}"
    args = build()
    with np.errstate(all="ignore"):
        expected = np.array(
            kernel.fn(
                *[a.copy() if isinstance(a, np.ndarray) else a for a in args],
                np.empty(SHAPE, _out_dtype(name, args)),
            )
        )
    positions = _alias_positions(args, expected)
    assert positions, f"{name}: no input has the output's shape and dtype"
    special = get_specializer(name)
    for i in positions:
        # General kernel: out is the input array itself.
        aliased = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        with np.errstate(all="ignore"):
            got = kernel.fn(*aliased, aliased[i])
        np.testing.assert_array_equal(got, expected, err_msg=f"{name}: kernel, out = input {i}")
        if special is None:
            continue
        # Fast path: chosen at load with out a distinct view of the input's memory,
        # as the runtime's planned arrays are.
        aliased = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        out = aliased[i].view()
        fast = special(*aliased, out)
        if fast is None:
            continue
        with np.errstate(all="ignore"):
            got = fast(*aliased, out)
        np.testing.assert_array_equal(got, expected, err_msg=f"{name}: fast path, out = input {i}")


def _out_dtype(name: str, args: list) -> np.dtype:
    # The dtype of the tensor operands (where's condition aside): torch's
    # result dtype for every case above.
    operands = args[1:] if name.startswith("aten::where") else args
    return next(a for a in operands if isinstance(a, np.ndarray)).dtype


@pytest.mark.parametrize("name,build", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_compiled_loop_with_output_in_an_input_memory(name, build):
    # The compiled tier's loop of the operator (its formula in
    # kernels/elementwise/formulas.py): the nested loop given out = the input
    # array, and the flat loop reading that input through out's parameter.
    pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")
    from pyexecutorch.runtime.fusion import single_op_call  # noqa: PLC0415

    args = build()
    out_dtype = _out_dtype(name, args)
    call = single_op_call(name, args, np.empty(SHAPE, out_dtype))
    if call is None:
        return  # no formula for these arguments: the numpy kernel runs
    with np.errstate(all="ignore"):
        expected = np.array(
            get_kernel(name).fn(
                *[a.copy() if isinstance(a, np.ndarray) else a for a in args],
                np.empty(SHAPE, out_dtype),
            )
        )
    tensors = [args[p] for p in call.inputs]
    for k, a in enumerate(tensors):
        if a.shape != SHAPE or a.dtype != out_dtype:
            continue
        aliased = [t.copy() for t in tensors]
        call.function(flat=False)(*aliased, aliased[k])
        _assert_loop_result(aliased[k], expected, f"{name}: nested loop, out = input {k}")
        flat = [t.copy().reshape(-1) for t in tensors]
        out = flat[k]
        call.function(flat=True, aliases={k: 0})(*(t for i, t in enumerate(flat) if i != k), out)
        _assert_loop_result(out.reshape(SHAPE), expected, f"{name}: flat loop, out = input {k}")


def _assert_loop_result(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    if expected.dtype.kind != "f":
        np.testing.assert_array_equal(got, expected, err_msg=what)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=what)
    zeros = expected == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(expected[zeros]), err_msg=what)
    np.testing.assert_allclose(got, expected, rtol=4e-6, atol=1e-6, err_msg=what)
