"""Load-time fast paths compute exactly what their general kernels compute."""

from __future__ import annotations

import numpy as np
import pytest

from pyexecutorch.kernels import get_kernel
from pyexecutorch.kernels.registry import get_specializer

RNG = np.random.default_rng(0)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _out(shape, dtype=np.float32):
    return np.zeros(shape, dtype)


# (operator, argument builder) — the last argument is the output (or list of outputs).
CASES = [
    ("aten::add.out", lambda: [f32(4, 8), f32(8), 1, _out((4, 8))]),
    ("aten::sub.out", lambda: [f32(4, 8), f32(4, 8), 1, _out((4, 8))]),
    ("aten::mul.out", lambda: [f32(2, 3, 4), f32(1, 3, 1), _out((2, 3, 4))]),
    ("aten::div.out", lambda: [f32(5, 6), f32(5, 6), _out((5, 6))]),
    (
        "aten::add.out",
        lambda: [
            RNG.integers(-9, 9, (3, 4)),
            RNG.integers(-9, 9, (3, 4)),
            1,
            _out((3, 4), np.int64),
        ],
    ),
    ("aten::maximum.out", lambda: [f32(3, 4), f32(3, 4), _out((3, 4))]),
    ("aten::add.Scalar_out", lambda: [f32(3, 4), 0.1, 1, _out((3, 4))]),
    ("aten::mul.Scalar_out", lambda: [f32(3, 4), 3, _out((3, 4))]),
    ("aten::div.Scalar_out", lambda: [f32(3, 4), 7.0, _out((3, 4))]),
    ("aten::relu.out", lambda: [np.array([-1.0, np.nan, 2.0, -0.0], np.float32), _out((4,))]),
    ("aten::sigmoid.out", lambda: [f32(6, 7) * 20, _out((6, 7))]),
    ("aten::tanh.out", lambda: [f32(6, 7), _out((6, 7))]),
    ("aten::exp.out", lambda: [f32(6, 7), _out((6, 7))]),
    ("aten::neg.out", lambda: [f32(6, 7), _out((6, 7))]),
    ("aten::sqrt.out", lambda: [np.abs(f32(6, 7)), _out((6, 7))]),
    ("aten::clone.out", lambda: [f32(2, 3), None, _out((2, 3))]),
    ("dim_order_ops::_clone_dim_order.out", lambda: [f32(2, 3), False, None, _out((2, 3))]),
    (
        "dim_order_ops::_to_dim_order_copy.out",
        lambda: [RNG.integers(-9, 9, (2, 3)), False, None, _out((2, 3))],
    ),
    (
        "dim_order_ops::_to_dim_order_copy.out",
        lambda: [f32(2, 3).astype(np.float64) * 1e30, False, None, _out((2, 3))],
    ),
    (
        "dim_order_ops::_to_dim_order_copy.out",
        lambda: [RNG.integers(0, 2, (4,)).astype(bool), False, None, _out((4,), np.int64)],
    ),
    ("aten::remainder.Tensor_out", lambda: [f32(3, 4) * 5, f32(4), _out((3, 4))]),
    (
        "aten::remainder.Tensor_out",
        lambda: [
            RNG.integers(-9, 9, (3, 4)),
            RNG.integers(1, 5, (3, 4)) * [1, -1, 1, -1],
            _out((3, 4), np.int64),
        ],
    ),
    ("aten::remainder.Scalar_out", lambda: [RNG.integers(-9, 9, (5,)), -3, _out((5,), np.int64)]),
    ("aten::remainder.Scalar_out", lambda: [f32(5) * 4, 0.75, _out((5,))]),
    ("aten::fmod.Tensor_out", lambda: [f32(3, 4) * 5, f32(3, 4), _out((3, 4))]),
    ("aten::fmod.Scalar_out", lambda: [RNG.integers(-9, 9, (5,)), 4, _out((5,), np.int64)]),
    (
        "aten::div.out_mode",
        lambda: [
            RNG.integers(-50, 50, (3, 4)),
            RNG.integers(1, 7, (3, 4)) * [1, -1, 1, -1],
            "trunc",
            _out((3, 4), np.int64),
        ],
    ),
    (
        "aten::div.out_mode",
        lambda: [
            RNG.integers(-50, 50, (3, 4)),
            RNG.integers(1, 7, (4,)) * [1, -1, 1, -1],
            "floor",
            _out((3, 4), np.int64),
        ],
    ),
    ("aten::repeat.out", lambda: [f32(2, 3), (2, 1, 3), _out((2, 2, 9))]),
    ("aten::permute_copy.out", lambda: [f32(2, 3, 4), (2, 0, 1), _out((4, 2, 3))]),
    ("aten::view_copy.out", lambda: [f32(2, 3, 4), (6, 4), _out((6, 4))]),
    ("aten::expand_copy.out", lambda: [f32(1, 4), (3, 4), False, _out((3, 4))]),
    ("aten::mm.out", lambda: [f32(3, 5), f32(5, 2), _out((3, 2))]),
    ("aten::bmm.out", lambda: [f32(2, 3, 5), f32(2, 5, 2), _out((2, 3, 2))]),
    ("aten::addmm.out", lambda: [f32(2), f32(3, 5), f32(5, 2), 1, 1, _out((3, 2))]),
    ("aten::slice_copy.Tensor_out", lambda: [f32(4, 9), 1, 2, 100, 3, _out((4, 3))]),
    ("aten::slice_copy.Tensor_out", lambda: [f32(4, 9), -1, -5, None, 1, _out((4, 5))]),
    ("aten::select_copy.int_out", lambda: [f32(4, 9), 0, -1, _out((9,))]),
    ("aten::squeeze_copy.dims_out", lambda: [f32(1, 4, 1), (0, 2), _out((4,))]),
    ("aten::unsqueeze_copy.out", lambda: [f32(4, 3), 1, _out((4, 1, 3))]),
    (
        "aten::split_with_sizes_copy.out",
        lambda: [f32(2, 7), (3, 4), 1, [_out((2, 3)), _out((2, 4))]],
    ),
    (
        "aten::split_copy.Tensor_out",
        lambda: [f32(5, 2), 2, 0, [_out((2, 2)), _out((2, 2)), _out((1, 2))]],
    ),
    ("aten::cat.out", lambda: [[f32(2, 3), f32(2, 1)], 1, _out((2, 4))]),
]


@pytest.mark.parametrize("name,build", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_fast_path_equals_kernel(name, build):
    args = build()
    fast = get_specializer(name)(*args)
    assert fast is not None, f"{name}: the fast path declined a case it should take"
    general_args = [
        [o.copy() for o in a]
        if isinstance(a, list) and a and isinstance(a[0], np.ndarray) and a is args[-1]
        else a
        for a in args
    ]
    general_args[-1] = (
        [o.copy() for o in args[-1]] if isinstance(args[-1], list) else args[-1].copy()
    )
    expected = get_kernel(name).fn(*general_args)
    with np.errstate(all="ignore"):
        got = fast(*args)
    for g, e in zip(
        got if isinstance(got, list) else [got],
        expected if isinstance(expected, list) else [expected],
        strict=True,
    ):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=2e-7, atol=0, equal_nan=True)
        if g.dtype.kind == "f":  # signed zeros as the general kernel has them
            np.testing.assert_array_equal(np.signbit(g), np.signbit(e))


def test_fast_paths_decline_what_they_do_not_cover():
    # mixed dtypes, alpha != 1, a dynamic-looking shape mismatch: the general kernel keeps them
    assert (
        get_specializer("aten::add.out")(f32(3), np.zeros(3, np.float64), 1, _out((3,), np.float64))
        is None
    )
    assert get_specializer("aten::add.out")(f32(3), f32(3), 2, _out((3,))) is None
    # float to int truncates and anything to bool tests != 0: the general kernel's rules
    to_copy = get_specializer("dim_order_ops::_to_dim_order_copy.out")
    assert to_copy(f32(3), False, None, _out((3,), np.int32)) is None
    assert to_copy(f32(3), False, None, _out((3,), np.bool_)) is None
    assert get_specializer("aten::mm.out")(f32(3, 5), f32(5, 2), _out((3, 3))) is None
    bias = _out((3, 2))
    assert get_specializer("aten::addmm.out")(bias, f32(3, 5), f32(5, 2), 1, 1, bias) is None


def test_max_pool_values_only_when_indices_are_unused():
    spec = get_specializer("aten::max_pool2d_with_indices.out")
    x = f32(2, 3, 9, 10)
    x[0, 1, 4, 4] = np.nan
    args = [x, (3, 3), (2, 2), (1, 1), (1, 1), False]
    shape = (2, 3, 5, 5)
    # Indices that something reads keep the general kernel.
    assert spec(*args, _out(shape), _out(shape, np.int64), unused_outputs=frozenset()) is None
    fast = spec(*args, _out(shape), _out(shape, np.int64), unused_outputs=frozenset({1}))
    assert fast is not None
    got, _ = fast(*args, _out(shape), _out(shape, np.int64))
    expected, _ = get_kernel("aten::max_pool2d_with_indices.out").fn(
        *args, _out(shape), _out(shape, np.int64)
    )
    np.testing.assert_array_equal(got, expected)


COPY_CASES = [
    c
    for c in CASES
    if c[0].startswith(
        (
            "aten::permute",
            "aten::view",
            "aten::slice",
            "aten::select",
            "aten::squeeze",
            "aten::unsqueeze",
        )
    )
]


@pytest.mark.parametrize("name,build", COPY_CASES, ids=[n for n, _ in COPY_CASES])
def test_copy_fast_paths_read_an_input_other_than_the_loaded_one(name, build):
    # The view of the load-time array is taken once; another array of the same
    # shape (an input the caller passed) must be viewed afresh.
    args = build()
    fast = get_specializer(name)(*args)
    other = RNG.standard_normal(args[0].shape).astype(args[0].dtype)
    expected = get_kernel(name).fn(other, *args[1:-1], args[-1].copy())
    got = fast(other, *args[1:-1], args[-1])
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(
        fast(args[0], *args[1:-1], args[-1]), get_kernel(name).fn(*args[:-1], args[-1].copy())
    )


DYNAMIC_CASES = [
    # (operator, arguments at the upper bound, arguments of one run at smaller sizes)
    ("aten::add.out", [f32(8, 4), f32(4), 1, _out((8, 4))], [f32(3, 4), f32(4), 1]),
    ("aten::mul.Scalar_out", [f32(8, 4), 3.0, _out((8, 4))], [f32(2, 4), 3.0]),
    ("aten::relu.out", [f32(8, 4), _out((8, 4))], [f32(5, 4)]),
    ("aten::sigmoid.out", [f32(8, 4), _out((8, 4))], [f32(1, 4)]),
    ("aten::mm.out", [f32(8, 5), f32(5, 3), _out((8, 3))], [f32(2, 5), f32(5, 3)]),
    (
        "aten::addmm.out",
        [f32(3), f32(8, 5), f32(5, 3), 1, 1, _out((8, 3))],
        [f32(3), f32(6, 5), f32(5, 3), 1, 1],
    ),
]


@pytest.mark.parametrize(
    "name,bound_args,run_args", DYNAMIC_CASES, ids=[n for n, _, _ in DYNAMIC_CASES]
)
def test_dynamic_fast_paths_size_their_outputs_per_call(name, bound_args, run_args):
    fast = get_specializer(name)(*bound_args, dynamic=True)
    assert fast is not None
    out = bound_args[-1]
    got = fast(*run_args, out)
    expected = get_kernel(name).fn(*run_args, out.copy())
    assert got.shape == expected.shape
    assert np.shares_memory(got, out)  # written into the planned storage
    np.testing.assert_allclose(got, expected, rtol=2e-7, atol=0)


def test_integer_remainder_by_zero_raises_the_general_kernels_error():
    from pyexecutorch.kernels import KernelError

    a, b = RNG.integers(-9, 9, (4,)), np.array([1, 2, 0, 3])
    fast = get_specializer("aten::remainder.Tensor_out")(a, b, _out((4,), np.int64))
    with pytest.raises(KernelError, match="integer division by zero"):
        fast(a, b, _out((4,), np.int64))
    # a zero scalar divisor keeps the general kernel, which raises the same
    assert get_specializer("aten::remainder.Scalar_out")(a, 0, _out((4,), np.int64)) is None

    div = get_specializer("aten::div.out_mode")(a, b, "trunc", _out((4,), np.int64))
    with pytest.raises(KernelError, match="integer division by zero"):
        div(a, b, "trunc", _out((4,), np.int64))
