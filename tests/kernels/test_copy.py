"""Copy and conversion kernels against torch eager: clone, copy, _to_copy, dim-order copies,
device copies, and the runtime's et_view / et_copy_index."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pyexecutorch.kernels import KernelError, get_kernel

from ._shape_testutil import (
    DTYPES,
    LAYOUTS,
    OUT_KINDS,
    SETTINGS,
    call,
    data,
    layout,
    planned,
    same,
    shapes,
)

dtypes = st.sampled_from(DTYPES)
layouts = st.sampled_from(LAYOUTS)
out_kinds = st.sampled_from(OUT_KINDS)
seeds = st.integers(0, 2**32 - 1)

TORCH_OF = {np.dtype(d): torch.from_numpy(np.zeros(1, d)).dtype for d in DTYPES}


def _input(seed, shape, dtype, kind, *, wide=False):
    rng = np.random.default_rng(seed)
    a = data(rng, shape, dtype, nan=False)
    if wide and np.dtype(dtype).kind == "f" and a.size:
        # Values that exercise truncation toward zero and to-bool: fractions,
        # negatives, zeros, in range of every integer type in DTYPES.
        a = np.asarray(rng.uniform(-127.9, 127.9, shape), dtype=dtype)
        a.reshape(-1)[0] = 0.0
        a.reshape(-1)[-1] = -0.0
    return layout(a, kind), torch.from_numpy(a.copy())


@SETTINGS
@given(shapes(), dtypes, dtypes, layouts, out_kinds, seeds)
def test_to_copy(shape, src_dtype, dst_dtype, kind, out_kind, seed):
    x, t = _input(seed, shape, src_dtype, kind, wide=True)
    if np.dtype(dst_dtype) == np.uint8 and np.dtype(src_dtype).kind == "f":
        x, t = np.abs(x), t.abs()  # negative float -> uint8 is undefined behaviour in C
    expected = t.to(TORCH_OF[np.dtype(dst_dtype)])
    for name, args in [
        ("aten::_to_copy.out", (x, False, None)),
        ("dim_order_ops::_to_dim_order_copy.out", (x, False, None)),
        ("dim_order_ops::_to_dim_order_copy.out", (x, False, tuple(range(len(shape))))),
    ]:
        out = planned(expected.shape, dst_dtype, out_kind)
        same(call(name, *args, out), expected)


def test_to_copy_special_values():
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 0.5, -2.7, 3.9], np.float32)
    t = torch.from_numpy(x.copy())
    for dt in (np.bool_, np.int32, np.int64, np.float16, np.float64):
        out = np.empty(x.shape, dt)
        got = call("aten::_to_copy.out", x, False, None, out)
        if dt in (np.int32, np.int64):  # nan/inf -> int is undefined; compare the rest
            np.testing.assert_array_equal(got[3:], t[3:].to(TORCH_OF[np.dtype(dt)]).numpy())
        else:
            same(got, t.to(TORCH_OF[np.dtype(dt)]))
    big = np.array([1e300, -1e300, 1e-300], np.float64)
    got = call("aten::_to_copy.out", big, False, None, np.empty(3, np.float32))
    same(got, torch.from_numpy(big).to(torch.float32))
    z = np.array([1 + 2j, 0j, 1j, -3.5 + 0j], np.complex64)
    zt = torch.from_numpy(z.copy())
    same(call("aten::_to_copy.out", z, False, None, np.empty(4, np.bool_)), zt.to(torch.bool))
    with pytest.warns(UserWarning):  # torch warns about the discarded imaginary part
        expected = zt.to(torch.float32)
    same(call("aten::_to_copy.out", z, False, None, np.empty(4, np.float32)), expected)


@SETTINGS
@given(shapes(), dtypes, layouts, out_kinds, seeds)
def test_clone_family(shape, dtype, kind, out_kind, seed):
    x, t = _input(seed, shape, dtype, kind)
    expected = t.clone()
    for name, args in [
        ("aten::clone.out", (x, None)),
        ("et_copy::_h2d_copy.out", (x,)),
        ("et_copy::_d2h_copy.out", (x,)),
        ("dim_order_ops::_clone_dim_order.out", (x, False, None)),
        ("aten::alias_copy.out", (x,)),
    ]:
        out = planned(expected.shape, dtype, out_kind)
        got = call(name, *args, out)
        same(got, expected)
        if out.size:
            assert got is out


def test_dim_order_copy_to_channels_last():
    """The out array presents the channels-last dim order as a strided NCHW view."""
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    storage = np.empty((2, 4, 5, 3), np.float32)  # NHWC memory
    out = storage.transpose(0, 3, 1, 2)  # logical NCHW
    got = call("dim_order_ops::_to_dim_order_copy.out", x, False, (0, 2, 3, 1), out)
    assert got is out
    np.testing.assert_array_equal(got, x)
    np.testing.assert_array_equal(storage, x.transpose(0, 2, 3, 1))
    with pytest.raises(KernelError, match="not a permutation"):
        call("dim_order_ops::_to_dim_order_copy.out", x, False, (0, 1, 1, 2), out)


@SETTINGS
@given(shapes(max_side=3), dtypes, dtypes, layouts, out_kinds, seeds, st.data())
def test_copy_out_and_inplace(shape, dtype, src_dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    # src broadcastable to self: drop leading dims and set some to 1.
    lead = d.draw(st.integers(0, len(shape)))
    src_shape = tuple(1 if d.draw(st.booleans()) else s for s in shape[lead:])
    y, u = _input(seed + 1, src_shape, src_dtype, d.draw(layouts), wide=True)
    if np.dtype(dtype) == np.uint8 and np.dtype(src_dtype).kind == "f":
        y, u = np.abs(y), u.abs()
    expected = torch.ops.aten.copy(t, u)
    out = planned(expected.shape, dtype, out_kind)
    same(call("aten::copy.out", x, y, False, out), expected)
    kernel = get_kernel("aten::copy_")
    assert kernel.n_outs == 0
    target = x.copy() if kind == "c" else layout(x.copy(), kind)
    assert kernel.fn(target, y, False) is None
    same(target, t.clone().copy_(u))


def test_copy_errors():
    x = np.zeros((3,), np.float32)
    frozen = np.zeros((3,), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(KernelError, match="read-only"):
        call("aten::copy_", frozen, x, False)
    with pytest.raises(KernelError, match=r"cannot be broadcast to self's shape \[3\]"):
        call("aten::copy_", x, np.ones((1, 3), np.float32), False)
    with pytest.raises(KernelError, match="cannot be broadcast"):
        call("aten::copy.out", x, np.ones((2,), np.float32), False, np.empty(3, np.float32))


def test_et_view():
    kernel = get_kernel("executorch_prim::et_view.default")
    assert kernel.n_outs == 1
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = np.full((6, 4), 9, np.float32)
    got = kernel.fn(x, (-1, 4), out)
    assert got.shape == (6, 4)
    assert np.shares_memory(got, x)
    np.testing.assert_array_equal(out, 9)  # out is left alone
    np.testing.assert_array_equal(got, torch.arange(24.0).view(-1, 4).numpy())
    got = kernel.fn(x, (24,), np.empty(24, np.float32))
    assert np.shares_memory(got, x) and got.shape == (24,)
    strided = x.transpose(2, 0, 1)  # a reshape of this needs a copy
    np.testing.assert_array_equal(kernel.fn(strided, (4, 6), out), strided.reshape(4, 6))
    with pytest.raises(KernelError, match="dtype"):
        kernel.fn(x, (24,), np.empty(24, np.int32))
    with pytest.raises(KernelError, match="invalid for input of size 24"):
        kernel.fn(x, (5, -1), out)
    with pytest.raises(KernelError, match="invalid for input of size 0"):
        kernel.fn(np.zeros((0, 3), np.float32), (0, -1), out)


def test_et_copy_index():
    kernel = get_kernel("executorch_prim::et_copy_index.tensor")
    assert kernel.n_outs == 0
    copy_to = np.zeros((3, 2, 2), np.float32)
    for i in range(3):
        piece = np.full((2, 2), i + 1, np.float32).T  # non-contiguous source
        got = kernel.fn(copy_to, piece, i)
        assert got is copy_to
    np.testing.assert_array_equal(copy_to[:, 0, 0], [1, 2, 3])
    # An unplanned copy_to grows to index + 1 rows.
    grown = kernel.fn(np.empty((0, 2), np.int64), np.array([4, 5]), 2)
    assert grown.shape == (3, 2)
    np.testing.assert_array_equal(grown[2], [4, 5])
    with pytest.raises(KernelError, match="does not fit"):
        kernel.fn(np.zeros((2, 2), np.float32), np.ones(2, np.float32), 2)
    with pytest.raises(KernelError, match="exactly one more dimension"):
        kernel.fn(copy_to, np.ones((3, 2, 2), np.float32), 0)
    with pytest.raises(KernelError, match="cannot hold copy_from"):
        kernel.fn(copy_to, np.ones((3, 2), np.float32), 0)
    with pytest.raises(KernelError, match="dtype"):
        kernel.fn(copy_to, np.ones((2, 2), np.int32), 0)
    with pytest.raises(KernelError, match="non-negative"):
        kernel.fn(copy_to, np.ones((2, 2), np.float32), -1)


@pytest.mark.parametrize(
    "name,extra", [("aten::clone.out", (None,)), ("aten::_to_copy.out", (False, None))]
)
def test_copy_speed(name, extra):
    """A same-dtype copy costs about one numpy assignment."""
    import timeit

    x = np.ones((4, 64), np.float32)
    out = np.empty((4, 64), np.float32)
    fn = get_kernel(name).fn
    per_call = min(timeit.repeat(lambda: fn(x, *extra, out), number=2000, repeat=3)) / 2000
    assert per_call < 10e-6, per_call
