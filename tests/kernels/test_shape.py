"""View-copy, indexing, joining/splitting and rearrangement kernels against torch eager."""

from __future__ import annotations

import math
import timeit

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from pyexecutorch.kernels import KernelError

from ._shape_testutil import (
    DTYPES,
    LAYOUTS,
    OUT_KINDS,
    SETTINGS,
    call,
    data,
    layout,
    np_dtype,
    planned,
    same,
    shapes,
)

dtypes = st.sampled_from(DTYPES)
layouts = st.sampled_from(LAYOUTS)
out_kinds = st.sampled_from(OUT_KINDS)
seeds = st.integers(0, 2**32 - 1)


def _input(seed, shape, dtype, kind):
    a = data(np.random.default_rng(seed), shape, dtype, nan=True)
    return layout(a, kind), torch.from_numpy(a.copy())


def _run(name, expected, out_kind, *args):
    out = planned(expected.shape, np_dtype(expected.dtype), out_kind)
    got = call(name, *args, out)
    same(got, expected)
    return got


# --------------------------------------------------------------------------
# Pure views
# --------------------------------------------------------------------------


@SETTINGS
@given(shapes(), dtypes, layouts, out_kinds, seeds, st.data())
def test_view_copy(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    n = math.prod(shape)
    options = [(n,), shape[::-1], (1, *shape), (*shape, 1)]
    if n:
        options += [(-1,), (1, -1), shape[:1] + (-1,) if shape else (-1,)]
    size = d.draw(st.sampled_from(options))
    _run("aten::view_copy.out", torch.ops.aten.view_copy(t, size), out_kind, x, size)


@SETTINGS
@given(shapes(), dtypes, layouts, out_kinds, seeds, st.data())
def test_permute_copy(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    dims = d.draw(st.permutations(range(len(shape))))
    dims = [p - len(shape) if d.draw(st.booleans()) else p for p in dims]
    _run("aten::permute_copy.out", torch.ops.aten.permute_copy(t, dims), out_kind, x, dims)


@SETTINGS
@given(shapes(), dtypes, layouts, out_kinds, seeds, st.data())
def test_transpose_t_copy(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    r = max(len(shape), 1)
    a, b = d.draw(st.integers(-r, r - 1)), d.draw(st.integers(-r, r - 1))
    _run("aten::transpose_copy.int_out", torch.ops.aten.transpose_copy(t, a, b), out_kind, x, a, b)
    if len(shape) <= 2:
        _run("aten::t_copy.out", torch.ops.aten.t_copy(t), out_kind, x)


@SETTINGS
@given(shapes(max_side=3), dtypes, layouts, out_kinds, seeds, st.data())
def test_expand_copy(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    lead = d.draw(st.lists(st.integers(0, 3), max_size=2))
    size = list(lead)
    for s in shape:
        if s == 1:
            size.append(d.draw(st.sampled_from([-1, 0, 1, 3])))
        else:
            size.append(d.draw(st.sampled_from([-1, s])))
    implicit = d.draw(st.booleans())
    expected = torch.ops.aten.expand_copy(t, size)
    _run("aten::expand_copy.out", expected, out_kind, x, tuple(size), implicit)


@SETTINGS
@given(shapes(max_side=2), dtypes, layouts, out_kinds, seeds, st.data())
def test_squeeze_unsqueeze(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    r = max(len(shape), 1)
    dim = d.draw(st.integers(-r, r - 1))
    _run("aten::squeeze_copy.dim_out", torch.ops.aten.squeeze_copy(t, dim), out_kind, x, dim)
    dims = d.draw(st.lists(st.integers(0, r - 1), unique=True))
    exp = torch.ops.aten.squeeze_copy(t, dims)
    _run("aten::squeeze_copy.dims_out", exp, out_kind, x, tuple(dims))
    u = d.draw(st.integers(-len(shape) - 1, len(shape)))
    _run("aten::unsqueeze_copy.out", torch.ops.aten.unsqueeze_copy(t, u), out_kind, x, u)


def test_alias_detach_lift_fresh():
    x = np.arange(12, dtype=np.float32).reshape(3, 4).T
    for name in ("aten::alias_copy.out", "aten::detach_copy.out", "aten::lift_fresh_copy.out"):
        out = planned((4, 3), np.float32)
        got = call(name, x, out)
        assert got is out
        np.testing.assert_array_equal(got, x)


# --------------------------------------------------------------------------
# Indexing along one dimension
# --------------------------------------------------------------------------

_bounds = st.one_of(st.none(), st.integers(-6, 6), st.sampled_from([2**63 - 1, -(2**63)]))


@SETTINGS
@given(shapes(min_dims=1), dtypes, layouts, out_kinds, seeds, st.data())
def test_slice_copy(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    dim = d.draw(st.integers(-len(shape), len(shape) - 1))
    start, end, step = d.draw(_bounds), d.draw(_bounds), d.draw(st.integers(1, 3))
    expected = torch.ops.aten.slice_copy(t, dim, start, end, step)
    _run("aten::slice_copy.Tensor_out", expected, out_kind, x, dim, start, end, step)


@SETTINGS
@given(shapes(min_dims=1, min_side=1), dtypes, layouts, out_kinds, seeds, st.data())
def test_select_narrow_copy(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    dim = d.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[dim]
    index = d.draw(st.integers(-n, n - 1))
    exp = torch.ops.aten.select_copy(t, dim, index)
    _run("aten::select_copy.int_out", exp, out_kind, x, dim, index)
    start = d.draw(st.integers(-n, n))
    length = d.draw(st.integers(0, n - (start % n if start < 0 else start)))
    exp = torch.ops.aten.narrow_copy(t, dim, start, length)
    _run("aten::narrow_copy.out", exp, out_kind, x, dim, start, length)


def test_index_errors():
    x = np.zeros((2, 3), np.float32)
    out = np.empty(0, np.float32)
    with pytest.raises(KernelError, match="out of range"):
        call("aten::select_copy.int_out", x, 1, 3, out)
    with pytest.raises(KernelError, match="dimension 2 is out of range|dim 2 is out of range"):
        call("aten::select_copy.int_out", x, 2, 0, out)
    with pytest.raises(KernelError, match="0-dim"):
        call("aten::select_copy.int_out", np.float32(1.0).reshape(()), 0, 0, out)
    with pytest.raises(KernelError, match="step must be positive"):
        call("aten::slice_copy.Tensor_out", x, 0, None, None, 0, out)
    with pytest.raises(KernelError, match="exceeds dimension size"):
        call("aten::narrow_copy.out", x, 1, 2, 2, out)
    with pytest.raises(KernelError, match="start 4 is out of bounds"):
        call("aten::narrow_copy.out", x, 1, 4, 0, out)


# --------------------------------------------------------------------------
# Joining and splitting
# --------------------------------------------------------------------------


@SETTINGS
@given(
    shapes(min_dims=1, max_dims=3),
    st.lists(dtypes, min_size=1, max_size=4),
    out_kinds,
    seeds,
    st.data(),
)
def test_cat(shape, dts, out_kind, seed, d):
    rng = np.random.default_rng(seed)
    dim = d.draw(st.integers(-len(shape), len(shape) - 1))
    xs, ts = [], []
    for dt in dts:
        if d.draw(st.integers(0, 4)) == 0:
            s = (0,)  # torch's legacy skipped empty tensor
        else:
            s = list(shape)
            s[dim] = d.draw(st.integers(0, 3))
        a = data(rng, tuple(s), dt, nan=True)
        xs.append(layout(a, d.draw(layouts)))
        ts.append(torch.from_numpy(a.copy()))
    expected = torch.cat(ts, dim)
    _run("aten::cat.out", expected, out_kind, xs, dim)


def test_cat_legacy_and_errors():
    a = np.ones((2, 3), np.float32)
    empty = np.zeros((0,), np.float32)
    got = call("aten::cat.out", [empty, a, empty], 1, np.empty((2, 3), np.float32))
    np.testing.assert_array_equal(got, a)
    got = call("aten::cat.out", [empty, empty], 0, np.empty((0,), np.float32))
    assert got.shape == (0,)
    out = np.empty(0, np.float32)
    with pytest.raises(KernelError, match="zero-dimensional tensor"):
        call("aten::cat.out", [np.float32(1).reshape(()), a], 0, out)
    with pytest.raises(KernelError, match="same number of dimensions"):
        call("aten::cat.out", [a, np.ones((2, 3, 1), np.float32)], 0, out)
    with pytest.raises(KernelError, match="must match except in dimension 0"):
        call("aten::cat.out", [a, np.ones((2, 4), np.float32)], 0, out)
    with pytest.raises(KernelError, match="non-empty list"):
        call("aten::cat.out", [], 0, out)
    with pytest.raises(KernelError, match="does not fit"):
        call("aten::cat.out", [a, a], 0, np.empty((2, 3), np.float32))


@SETTINGS
@given(shapes(max_dims=3), dtypes, st.integers(1, 4), out_kinds, seeds, st.data())
def test_stack(shape, dtype, count, out_kind, seed, d):
    rng = np.random.default_rng(seed)
    arrays = [data(rng, shape, dtype) for _ in range(count)]
    xs = [layout(a, d.draw(layouts)) for a in arrays]
    if d.draw(st.booleans()):
        xs[0] = xs[0].astype(np.int16)  # mixed input dtypes: cast into out
        arrays[0] = arrays[0].astype(np.int16).astype(dtype)
    dim = d.draw(st.integers(-len(shape) - 1, len(shape)))
    expected = torch.stack([torch.from_numpy(a.copy()) for a in arrays], dim)
    _run("aten::stack.out", expected, out_kind, xs, dim)


@SETTINGS
@given(shapes(min_dims=1, max_side=6), dtypes, layouts, seeds, st.data())
def test_split_unbind(shape, dtype, kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    dim = d.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[dim]
    split_size = d.draw(st.integers(1, 4)) if n else d.draw(st.integers(0, 2))
    expected = torch.split(t, split_size, dim)
    outs = [planned(e.shape, dtype, d.draw(st.sampled_from(OUT_KINDS))) for e in expected]
    got = call("aten::split_copy.Tensor_out", x, split_size, dim, outs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        same(g, e)
    cuts = sorted(d.draw(st.lists(st.integers(0, n), max_size=3)))
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
    expected = torch.split(t, sizes, dim)
    outs = [planned(e.shape, dtype) for e in expected]
    got = call("aten::split_with_sizes_copy.out", x, sizes, dim, outs)
    for g, e in zip(got, expected, strict=True):
        same(g, e)
    expected = torch.unbind(t, dim)
    outs = [planned(e.shape, dtype, "unplanned") for e in expected]
    got = call("aten::unbind_copy.int_out", x, dim, outs)
    assert len(got) == n
    for g, e in zip(got, expected, strict=True):
        same(g, e)


def test_split_errors():
    x = np.zeros((5, 2), np.float32)
    outs = [np.empty(0, np.float32)] * 2
    with pytest.raises(KernelError, match="splits into 3 tensors"):
        call("aten::split_copy.Tensor_out", x, 2, 0, outs)
    with pytest.raises(KernelError, match="split_size can only be 0"):
        call("aten::split_copy.Tensor_out", x, 0, 0, outs)
    with pytest.raises(KernelError, match="must sum to the dimension size 5"):
        call("aten::split_with_sizes_copy.out", x, [2, 2], 0, outs)
    with pytest.raises(KernelError, match="has size 2 but 5 outputs"):
        call("aten::unbind_copy.int_out", x, 1, [np.empty(0, np.float32)] * 5)


# --------------------------------------------------------------------------
# Rearrangements
# --------------------------------------------------------------------------


@SETTINGS
@given(shapes(), dtypes, layouts, out_kinds, seeds, st.data())
def test_flip_roll(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    r = max(len(shape), 1)
    dims = d.draw(st.lists(st.integers(0, r - 1), unique=True))
    dims = [p - r if d.draw(st.booleans()) else p for p in dims]
    _run("aten::flip.out", torch.flip(t, dims), out_kind, x, dims)
    if d.draw(st.booleans()) or not dims or not shape:
        shifts = [d.draw(st.integers(-7, 7))]
        dims = []
    else:
        shifts = [d.draw(st.integers(-7, 7)) for _ in dims]
    expected = torch.roll(t, shifts, dims)
    _run("aten::roll.out", expected, out_kind, x, tuple(shifts), tuple(dims))


@SETTINGS
@given(shapes(max_dims=3, max_side=3), dtypes, layouts, out_kinds, seeds, st.data())
def test_repeat(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    repeats = d.draw(st.lists(st.integers(0, 3), min_size=len(shape), max_size=len(shape) + 2))
    _run("aten::repeat.out", t.repeat(repeats), out_kind, x, tuple(repeats))


@SETTINGS
@given(
    st.lists(st.integers(0, 4), max_size=6), st.sampled_from([np.int32, np.int64]), st.booleans()
)
def test_repeat_interleave(repeats, dtype, give_size):
    r = np.array(repeats, dtype=dtype)
    t = torch.from_numpy(r.copy())
    size = int(r.sum()) if give_size else None
    expected = torch.ops.aten.repeat_interleave.Tensor(t, output_size=size)
    _run("aten::repeat_interleave.Tensor_out", expected, "c", r, size)


def test_repeat_errors():
    x = np.zeros((2, 3), np.float32)
    out = np.empty(0, np.float32)
    with pytest.raises(KernelError, match="cannot be smaller"):
        call("aten::repeat.out", x, (2,), out)
    with pytest.raises(KernelError, match="non-negative"):
        call("aten::repeat.out", x, (1, -1), out)
    reps = np.array([1, -1], np.int64)
    with pytest.raises(KernelError, match="cannot be negative"):
        call("aten::repeat_interleave.Tensor_out", reps, None, np.empty(0, np.int64))
    reps = np.array([1, 2], np.int64)
    with pytest.raises(KernelError, match="must equal repeats.sum"):
        call("aten::repeat_interleave.Tensor_out", reps, 4, np.empty(0, np.int64))
    with pytest.raises(KernelError, match="int32 or int64"):
        call("aten::repeat_interleave.Tensor_out", reps.astype(np.float32), None, out)


@SETTINGS
@given(
    st.integers(0, 2),
    st.integers(1, 3),
    st.integers(0, 2),
    st.integers(0, 3),
    st.integers(0, 3),
    dtypes,
    layouts,
    out_kinds,
    seeds,
)
def test_pixel_shuffle(nbatch, r, c, h, w, dtype, kind, out_kind, seed):
    batch = (2,) * nbatch
    # Eager torch returns empty inputs unchanged; the shapes a program plans
    # (and the kernels produce) are the meta functions'.
    for name, fn, shape in [
        ("aten::pixel_shuffle.out", torch.pixel_shuffle, (*batch, c * r * r, h, w)),
        ("aten::pixel_unshuffle.out", torch.pixel_unshuffle, (*batch, c, h * r, w * r)),
    ]:
        x, t = _input(seed, shape, dtype, kind)
        if t.numel():
            expected = fn(t, r)
        else:
            expected = torch.empty(fn(t.to("meta"), r).shape, dtype=t.dtype)
        _run(name, expected, out_kind, x, r)


def test_pixel_shuffle_errors():
    out = np.empty(0, np.float32)
    with pytest.raises(KernelError, match="divisible by the square"):
        call("aten::pixel_shuffle.out", np.zeros((1, 3, 2, 2), np.float32), 2, out)
    with pytest.raises(KernelError, match="at least 3 dimensions"):
        call("aten::pixel_shuffle.out", np.zeros((4, 2), np.float32), 2, out)
    with pytest.raises(KernelError, match="divisible by downscale_factor"):
        call("aten::pixel_unshuffle.out", np.zeros((1, 1, 3, 2), np.float32), 2, out)


@SETTINGS
@given(shapes(min_dims=2), dtypes, layouts, out_kinds, seeds, st.integers(-4, 4))
def test_tril(shape, dtype, kind, out_kind, seed, diagonal):
    x, t = _input(seed, shape, dtype, kind)
    _run("aten::tril.out", torch.tril(t, diagonal), out_kind, x, diagonal)


@SETTINGS
@given(shapes(min_dims=2), dtypes, layouts, out_kinds, seeds, st.data())
def test_diagonal_copy(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    n = len(shape)
    a, b = d.draw(
        st.lists(st.integers(-n, n - 1), min_size=2, max_size=2).filter(
            lambda p: p[0] % n != p[1] % n
        )
    )
    offset = d.draw(st.integers(-5, 5))
    expected = torch.ops.aten.diagonal_copy(t, offset, a, b)
    _run("aten::diagonal_copy.out", expected, out_kind, x, offset, a, b)


@SETTINGS
@given(shapes(), dtypes, layouts, out_kinds, seeds, st.data())
def test_unfold_copy(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    r = max(len(shape), 1)
    dim = d.draw(st.integers(-r, r - 1))
    n = shape[dim] if shape else 1
    size = d.draw(st.integers(0 if shape else 1, n)) if n else 0
    step = d.draw(st.integers(1, 3))
    expected = torch.ops.aten.unfold_copy(t, dim, size, step)
    _run("aten::unfold_copy.out", expected, out_kind, x, dim, size, step)


@SETTINGS
@given(shapes(min_side=1), dtypes, layouts, out_kinds, seeds, st.data())
def test_as_strided_copy(shape, dtype, kind, out_kind, seed, d):
    x, t = _input(seed, shape, dtype, kind)
    numel = math.prod(shape)
    size = d.draw(shapes(max_dims=3, max_side=3))
    stride = tuple(d.draw(st.integers(0, 3)) for _ in size)
    offset = d.draw(st.one_of(st.none(), st.integers(0, 3)))
    last = (offset or 0) + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    assume(math.prod(size) == 0 or last < numel)
    expected = torch.as_strided(t, size, stride, offset)
    _run("aten::as_strided_copy.out", expected, out_kind, x, size, stride, offset)


def test_as_strided_errors():
    x = np.arange(6, dtype=np.float32)
    out = np.empty(0, np.float32)
    with pytest.raises(KernelError, match="beyond the input's 6 elements"):
        call("aten::as_strided_copy.out", x, (2, 3), (3, 2), None, out)
    with pytest.raises(KernelError, match="negative strides"):
        call("aten::as_strided_copy.out", x, (2,), (-1,), 3, out)
    with pytest.raises(KernelError, match="same length"):
        call("aten::as_strided_copy.out", x, (2,), (1, 1), None, out)


@SETTINGS
@given(shapes(), st.sampled_from([np.complex64, np.complex128]), layouts, out_kinds, seeds)
def test_view_as_real_copy(shape, dtype, kind, out_kind, seed):
    x, t = _input(seed, shape, dtype, kind)
    _run("aten::view_as_real_copy.out", torch.view_as_real(t), out_kind, x)


def test_rearrange_errors():
    x = np.zeros((2, 3), np.float32)
    out = np.empty(0, np.float32)
    with pytest.raises(KernelError, match="at least 2 dimensions"):
        call("aten::tril.out", np.zeros(3, np.float32), 0, out)
    with pytest.raises(KernelError, match="cannot be identical"):
        call("aten::diagonal_copy.out", x, 0, 1, -1, out)
    with pytest.raises(KernelError, match="maximum size for tensor at dimension 1 is 3"):
        call("aten::unfold_copy.out", x, 1, 4, 1, out)
    with pytest.raises(KernelError, match="step is 0"):
        call("aten::unfold_copy.out", x, 1, 2, 0, out)
    with pytest.raises(KernelError, match="only supported for complex"):
        call("aten::view_as_real_copy.out", x, out)
    with pytest.raises(KernelError, match="more than once"):
        call("aten::flip.out", x, [0, -2], out)
    with pytest.raises(KernelError, match="same length"):
        call("aten::roll.out", x, (1, 2), (0,), out)
    with pytest.raises(KernelError, match="repeat a dimension"):
        call("aten::permute_copy.out", x, (0, 0), out)
    with pytest.raises(KernelError, match="invalid for input of size 6"):
        call("aten::view_copy.out", x, (4, -1), out)
    with pytest.raises(KernelError, match="only one dimension can be inferred"):
        call("aten::view_copy.out", x, (-1, -1), out)
    with pytest.raises(KernelError, match="can only be expanded from size 1"):
        call("aten::expand_copy.out", x, (2, 4), False, out)
    with pytest.raises(KernelError, match="fewer dimensions"):
        call("aten::expand_copy.out", x, (3,), False, out)
    with pytest.raises(KernelError, match="t\\(\\) expects"):
        call("aten::t_copy.out", np.zeros((1, 1, 1), np.float32), out)
    with pytest.raises(KernelError, match="out of range for unsqueeze"):
        call("aten::unsqueeze_copy.out", x, 3, out)


def test_copy_speed():
    """The hot view copies cost about one numpy assignment."""
    x = np.ones((4, 64), np.float32)
    out = np.empty((64, 4), np.float32)
    fn = call.__globals__["get_kernel"]("aten::permute_copy.out").fn
    per_call = min(timeit.repeat(lambda: fn(x, (1, 0), out), number=2000, repeat=3)) / 2000
    assert per_call < 20e-6, per_call
