"""Compiled-tier forms and steps for integer and bool programs, and the copies that convert.

Integer and bool sums and ``any`` (forms, alone and as whole-method steps), dim-order
copies and ``_to_copy`` with their casts, ``repeat``, and a lone logical operator of
bool tensors, argmax, argmin and topk: each against its numpy kernel (bit for bit)
and torch eager. The suite models they unblock (int_arith, bool_ops, elementwise,
argmax_topk) compile whole and compute what the numpy tier and eager compute.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("numba", reason="the compiled forms need numba (the jit extra)")

from pyexecutorch.jit import generated  # noqa: E402
from pyexecutorch.kernels import get_kernel  # noqa: E402
from pyexecutorch.kernels.registry import fast_path_of, get_compiled_form  # noqa: E402
from pyexecutorch.runtime import tiers  # noqa: E402
from pyexecutorch.runtime.fusion import single_op_call  # noqa: E402
from pyexecutorch.runtime.whole_method import elementwise_step  # noqa: E402

tiers.enabled(True)  # imports every family's compiled forms


def _values(shape, dtype, seed=0):  # noqa: ANN001, ANN202
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) > 0.6
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(shape).astype(dtype)
        x.reshape(-1)[:3] = (np.nan, 0.0, -0.0)
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def _step(form, outs):  # noqa: ANN001, ANN202
    """Run a form's whole-method step, its outputs poisoned first."""
    for o in outs:
        o[...] = 1
    function, arguments = fast_path_of(form).step[:2]
    function(*arguments)


# ---------------------------------------------------------------------------
# Sums and any


# (input shape, dims)
REDUCTIONS = [((3, 4, 5), [0]), ((3, 4, 5), [1, 2]), ((3, 4, 5), [-1]), ((6,), None)]


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("case", REDUCTIONS, ids=[str(c) for c in REDUCTIONS])
def test_integer_sums_wrap_as_the_kernel_and_torch(case, dtype):
    shape, dims = case
    x = _values(shape, dtype)
    want = torch.sum(torch.from_numpy(x), dim=dims).numpy()  # integers and bools: int64
    args = (x, dims, False, None)
    reference = get_kernel("aten::sum.IntList_out").fn(*args, np.zeros(want.shape, np.int64))
    out = np.zeros(want.shape, np.int64)
    form = get_compiled_form("aten::sum.IntList_out")(*args, out)
    assert form is not None and fast_path_of(form).fills_outputs
    _step(form, [out])
    np.testing.assert_array_equal(out, reference)
    np.testing.assert_array_equal(out, want)
    other = _values(shape, dtype, seed=1)  # not the planned array: the same loop, copied in
    np.testing.assert_array_equal(
        form(other, *args[1:], out), torch.sum(torch.from_numpy(other), dim=dims).numpy()
    )


@pytest.mark.parametrize("dtype", [np.bool_, np.float32, np.int64, np.uint8])
def test_any_forms_match_the_kernels_and_torch(dtype):
    x = _values((4, 5, 6), dtype)
    x[1] = 0  # a row of zeros
    x[2, :, :-1] = 0  # rows (over the last axis) whose only nonzero is the last element
    if dtype == np.float32:
        x[3, 1] = [0, 0, np.nan, 0, 0, 0]  # NaN is nonzero
    t = torch.from_numpy(x)
    cases = [
        ("aten::any.out", (x, 1, False), torch.any(t, dim=1)),
        ("aten::any.out", (x, -1, True), torch.any(t, dim=-1, keepdim=True)),
        ("aten::any.dims_out", (x, [0, 1], False), torch.any(t, dim=(0, 1))),
        ("aten::any.all_out", (x,), torch.any(t)),
    ]
    for name, args, want in cases:
        want = want.numpy()
        reference = get_kernel(name).fn(*args, np.zeros(want.shape, bool))
        out = np.zeros(want.shape, bool)
        form = get_compiled_form(name)(*args, out)
        assert form is not None, name
        _step(form, [out])
        np.testing.assert_array_equal(out, reference, err_msg=name)
        np.testing.assert_array_equal(out, want, err_msg=name)


def test_reductions_decline_what_they_cannot_bind():
    x = _values((3, 4), np.int32)
    sum_form = get_compiled_form("aten::sum.IntList_out")
    assert sum_form(x, [0], False, None, np.zeros(4, np.float32)) is None  # to a float
    assert sum_form(x, [0, 1, 0], False, None, np.zeros((), np.int64)) is None  # repeated dim
    assert sum_form(x[:, ::2], [0], False, None, np.zeros(2, np.int64)) is None  # strided
    any_dims = get_compiled_form("aten::any.dims_out")
    assert any_dims(x, [], False, np.zeros((3, 4), bool)) is None  # reduces nothing
    half = x.astype(np.float16)
    assert get_compiled_form("aten::any.out")(half, 0, False, np.zeros(4, bool)) is None


# ---------------------------------------------------------------------------
# Copies that convert, repeat

CASTS = [
    (np.int32, np.int64),
    (np.int64, np.int32),  # wraps
    (np.bool_, np.float32),
    (np.uint8, np.float64),
    (np.int64, np.float32),  # rounds to nearest
    (np.float64, np.float32),
    (np.float32, np.float64),
    (np.bool_, np.bool_),
]


@pytest.mark.parametrize("cast", CASTS, ids=[f"{a.__name__}-{b.__name__}" for a, b in CASTS])
def test_dim_order_and_to_copy_steps_cast_as_the_kernel_and_torch(cast):
    src, dst = (np.dtype(d) for d in cast)
    x = _values((3, 5), src)
    if src.kind == "f" and dst.itemsize < src.itemsize:
        x.reshape(-1)[3:6] = (1e300, -1e-300, 1.0 + 2.0**-30)  # overflow, underflow, rounding
    want = torch.from_numpy(x).to(torch.from_numpy(np.zeros(0, dst)).dtype).numpy()
    for name, args in (
        ("dim_order_ops::_to_dim_order_copy.out", (x, False, [0, 1])),
        ("aten::_to_copy.out", (x, False, None)),
    ):
        reference = get_kernel(name).fn(*args, np.zeros(x.shape, dst))
        out = np.zeros(x.shape, dst)
        _step(get_compiled_form(name)(*args, out, whole=True), [out])
        np.testing.assert_array_equal(out, reference, err_msg=name)
        np.testing.assert_array_equal(out, want, err_msg=name)


def test_dim_order_copy_step_of_a_permuted_view():
    x = _values((2, 3, 4), np.float32)
    source = x.transpose(2, 0, 1)  # a view the runtime made at load
    out = np.zeros(source.shape, np.float32)
    form = get_compiled_form("dim_order_ops::_clone_dim_order.out")
    _step(form(source, False, None, out, whole=True), [out])
    np.testing.assert_array_equal(out, torch.from_numpy(x).permute(2, 0, 1).contiguous().numpy())


def test_copy_steps_decline_casts_numba_converts_otherwise():
    x = _values((3, 5), np.float32)
    form = get_compiled_form("aten::_to_copy.out")
    assert form(x, False, None, np.zeros((3, 5), np.int32), whole=True) is None  # truncation
    assert form(x, False, None, np.zeros((3, 5), bool), whole=True) is None  # != 0
    assert form(x, False, None, np.zeros((3, 5), np.float16), whole=True) is None
    assert form(x, False, None, np.zeros((3, 5), np.float64)) is None  # alone: numpy's
    dim_order = get_compiled_form("dim_order_ops::_to_dim_order_copy.out")
    assert dim_order(x, False, [0, 0], np.zeros((3, 5), np.float32), whole=True) is None


@pytest.mark.parametrize(
    "case", [((1, 3, 4), (2, 1, 2)), ((2, 3), (3, 2, 2)), ((4,), (1,)), ((2, 1, 3), (1, 5, 1))]
)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_repeat_step_matches_the_kernel_and_torch(case, dtype):
    shape, repeats = case
    x = _values(shape, dtype)
    want = torch.from_numpy(x).repeat(*repeats).numpy()
    reference = get_kernel("aten::repeat.out").fn(x, list(repeats), np.zeros(want.shape, dtype))
    out = np.zeros(want.shape, dtype)
    _step(get_compiled_form("aten::repeat.out")(x, list(repeats), out, whole=True), [out])
    np.testing.assert_array_equal(out, reference)
    np.testing.assert_array_equal(out, want)
    form = get_compiled_form("aten::repeat.out")
    assert form(x, [1] * (x.ndim - 1), out, whole=True) is None  # fewer repeats than dims
    assert form(x, list(repeats), out) is None  # alone: numpy's fast path


# ---------------------------------------------------------------------------
# A lone logical operator of bool tensors


def test_lone_logical_not_of_bools_is_a_one_operator_loop():
    p = _values((3, 4), np.bool_)
    out = np.zeros((3, 4), bool)
    assert single_op_call("aten::logical_not.out", [p], out) is not None
    step = elementwise_step("aten::logical_not.out", [p], out)
    generated.dispatcher_of(step.function)(*step.args)
    np.testing.assert_array_equal(out, torch.logical_not(torch.from_numpy(p)).numpy())
    # an int tensor is no bool tensor: its logical_not keeps the kernel
    ints = p.astype(np.int32)
    assert single_op_call("aten::logical_not.out", [ints], out) is None


# ---------------------------------------------------------------------------
# The suite models


@pytest.mark.parametrize(
    "name", ["int_arith", "bool_ops", "elementwise", "argmax_topk", "shape_ops"]
)
def test_suite_models_compile_whole_and_match_numpy_tier_and_eager(name):
    from pyexecutorch.exir import to_edge  # noqa: PLC0415
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415
    from tests import (
        models,  # noqa: PLC0415 - the compiler suite (tests/models.py)
        official,  # noqa: PLC0415
    )

    case = models.get_case(name)
    pte = to_edge(models.export(case)).to_executorch().buffer
    whole = Runtime.get().load_program(pte, jit=True).load_method("forward")
    numpy_tier = Runtime.get().load_program(pte, jit=False).load_method("forward")
    assert whole.plan.whole_source is not None, whole.plan.sources[0]
    for inputs in case.all_inputs():
        got = [official.to_numpy(x) for x in whole.execute(list(inputs))]
        ref = [official.to_numpy(x) for x in numpy_tier.execute(list(inputs))]
        for g, r in zip(got, ref, strict=True):
            if g.dtype.kind in "biu":
                np.testing.assert_array_equal(g, r)
            else:
                np.testing.assert_allclose(g, r, rtol=4e-6, atol=1e-6)
        official.assert_close(case, got, official.eager_outputs(case, inputs), what=name)


# ---------------------------------------------------------------------------
# argmax, argmin, topk


def _ranked(shape, dtype, seed=0):  # noqa: ANN001, ANN202
    """Values with ties, NaN (floats) and signed zeros."""
    x = _values(shape, dtype, seed)
    if np.dtype(dtype).kind == "f":
        x = np.round(x * 2) / 2  # ties
        flat = x.reshape(-1)
        flat[5], flat[9], flat[17] = np.nan, -0.0, np.nan
    else:
        x = x % 5  # ties
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.uint8])
@pytest.mark.parametrize("dim", [0, 1, -1, None])
def test_argmax_and_argmin_match_the_kernels_and_torch(dim, dtype):
    x = _ranked((4, 6, 5), dtype)
    x[2] = np.nan if x.dtype.kind == "f" else 3  # a row that is all NaN (or all ties)
    for name, torch_fn in (("aten::argmax.out", torch.argmax), ("aten::argmin.out", torch.argmin)):
        for keepdim in (False, True):
            want = torch_fn(torch.from_numpy(x), dim=dim, keepdim=keepdim).numpy()
            reference = get_kernel(name).fn(x, dim, keepdim, np.zeros(want.shape, np.int64))
            out = np.zeros(want.shape, np.int64)
            form = get_compiled_form(name)(x, dim, keepdim, out)
            _step(form, [out])
            np.testing.assert_array_equal(out, reference, err_msg=f"{name} {dim} {keepdim}")
            if dtype not in (np.int32, np.uint8) or dim is not None:  # ties: torch's own pick
                np.testing.assert_array_equal(out, want, err_msg=f"{name} {dim} {keepdim}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8])
@pytest.mark.parametrize("case", [(3, -1, True), (2, 0, False), (6, 1, True), (1, 2, False)])
def test_topk_matches_the_kernel_and_torch_values(case, dtype):
    k, dim, largest = case
    x = _ranked((4, 6, 5), dtype)
    want_v, _ = torch.topk(torch.from_numpy(x), k, dim=dim, largest=largest)
    shape = tuple(want_v.shape)
    args = (x, k, dim, largest, True)
    ref_v, ref_i = get_kernel("aten::topk.values").fn(
        *args, np.zeros(shape, dtype), np.zeros(shape, np.int64)
    )
    values, indices = np.zeros(shape, dtype), np.zeros(shape, np.int64)
    form = get_compiled_form("aten::topk.values")(*args, values, indices)
    assert form is not None and fast_path_of(form).fills_outputs
    _step(form, [values, indices])
    np.testing.assert_array_equal(values, ref_v)
    np.testing.assert_array_equal(np.signbit(values), np.signbit(ref_v))
    np.testing.assert_array_equal(indices, ref_i)  # ties in ascending index, as the kernel
    np.testing.assert_array_equal(values, want_v.numpy())  # torch orders ties its own way
    picked = np.take_along_axis(x, indices, axis=dim)
    np.testing.assert_array_equal(picked, values)


def test_selection_forms_decline_what_they_cannot_bind():
    x = _ranked((4, 40), np.float32)
    topk = get_compiled_form("aten::topk.values")
    big = np.zeros((4, 20), np.float32), np.zeros((4, 20), np.int64)
    assert topk(x, 20, -1, True, True, *big) is None  # many: the sort
    assert topk(x.astype(bool), 2, -1, True, True, np.zeros((4, 2), bool), big[1][:, :2]) is None
    assert topk(x, 0, -1, True, True, big[0][:, :0], big[1][:, :0]) is None
    argmax = get_compiled_form("aten::argmax.out")
    assert argmax(x, 1, False, np.zeros(4, np.int32)) is None  # not int64
    assert argmax(x[:, ::2], 1, False, np.zeros(4, np.int64)) is None  # strided
    assert argmax(np.zeros((0, 3), np.float32), 1, False, np.zeros(0, np.int64)) is None
