"""Load-time fast paths for the hottest kernels.

When an instruction's tensors have static shapes and its other arguments are
constants, these specializers pick, once at load, the bare numpy call that
computes the same result for those dtypes and shapes, skipping the general
kernel's promotion and shape checks on every call. Anything they do not
recognise keeps the general kernel (they return ``None``). Floating-point
warnings are silenced once per method run by the runtime, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pyexecutorch.kernels.common import broadcast_shape, fit
from pyexecutorch.kernels.elementwise.fast import bound
from pyexecutorch.kernels.registry import Const, Inline, offer, specializer

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_EXACT_INTS = (np.dtype(np.int32), np.dtype(np.int64))


def _same_dtype(*arrays: Any, kinds: tuple[np.dtype, ...] = _FLOATS) -> bool:
    first = arrays[0].dtype
    return first in kinds and all(isinstance(a, np.ndarray) and a.dtype == first for a in arrays)


def _broadcasts_to(out: np.ndarray, *arrays: np.ndarray) -> bool:
    """Whether ``arrays`` broadcast exactly to ``out``'s shape."""
    try:
        return np.broadcast_shapes(out.shape, *(a.shape for a in arrays)) == out.shape
    except ValueError:
        return False


def _resizing(compute: Callable[..., Any], shape_of: Callable[..., tuple[int, ...]]):  # noqa: ANN202
    """A fast path for dynamic-bound tensors: ``compute`` writes out viewed at the run's shape.

    ``compute`` takes the kernel's arguments with that view as the output;
    ``shape_of`` gives the output shape from the arguments.
    """

    # Views of the planned output by (its id, shape): a dynamic dim takes few
    # sizes, and a view costs more than the small kernels it feeds. Each entry
    # keeps its array alive, so an id is never reused while cached.
    views: dict[tuple[int, tuple[int, ...]], tuple[np.ndarray, np.ndarray]] = {}
    if isinstance(compute, Inline):
        compute = compute.function

    def run(*args: Any) -> np.ndarray:
        out = args[-1]
        shape = shape_of(*args)
        key = (id(out), shape)
        cached = views.get(key)
        if cached is None:
            if len(views) >= _MAX_CACHED_VIEWS:
                views.clear()
            cached = views[key] = (out, fit(out, shape))
        view = cached[1]
        compute(*args[:-1], view)
        return view

    return run


_MAX_CACHED_VIEWS = 256


def _binary_shape(a: np.ndarray, b: np.ndarray, *rest: Any) -> tuple[int, ...]:
    return broadcast_shape(a.shape, b.shape)


def _unary_shape(a: np.ndarray, *rest: Any) -> tuple[int, ...]:
    return a.shape


def _binary(ufunc: np.ufunc, kinds: tuple[np.dtype, ...], keyword_out: bool = False):  # noqa: ANN202
    def specialize(a: Any, b: Any, *rest: Any, dynamic: bool = False) -> Any:
        out = rest[-1]
        alpha = rest[0] if len(rest) == 2 else 1
        if alpha != 1 or isinstance(alpha, bool):
            return None
        if not (
            isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and isinstance(out, np.ndarray)
        ):
            return None
        if not _same_dtype(a, b, out, kinds=kinds) or not _broadcasts_to(out, a, b):
            return None
        fast = Inline(ufunc, (0, 1, -1), keyword_out=keyword_out)
        return _resizing(fast, _binary_shape) if dynamic else fast

    return specialize


def _binary_scalar(ufunc: np.ufunc):  # noqa: ANN202
    def specialize(a: Any, b: Any, *rest: Any, dynamic: bool = False) -> Any:
        out = rest[-1]
        alpha = rest[0] if len(rest) == 2 else 1
        if alpha != 1 or isinstance(alpha, bool) or isinstance(b, bool):
            return None
        if not (isinstance(a, np.ndarray) and isinstance(out, np.ndarray)):
            return None
        if not isinstance(b, (int, float)) or not _same_dtype(a, out) or a.shape != out.shape:
            return None
        # A Python scalar takes the float tensor's dtype, in torch and in numpy.
        # A 0-d array of the tensor's dtype: what a Python scalar becomes in
        # torch and numpy alike, and numpy's cheapest operand to broadcast.
        fast = Inline(ufunc, (0, Const(np.array(b, dtype=a.dtype)), -1))
        return _resizing(fast, _unary_shape) if dynamic else fast

    return specialize


specializer("aten::add.out")(_binary(np.add, _FLOATS + _EXACT_INTS))
specializer("aten::sub.out")(_binary(np.subtract, _FLOATS + _EXACT_INTS))
specializer("aten::mul.out")(_binary(np.multiply, _FLOATS + _EXACT_INTS))
specializer("aten::div.out")(_binary(np.true_divide, _FLOATS))
specializer("aten::maximum.out")(_binary(np.maximum, _FLOATS, keyword_out=True))
specializer("aten::minimum.out")(_binary(np.minimum, _FLOATS, keyword_out=True))
specializer("aten::add.Scalar_out")(_binary_scalar(np.add))
specializer("aten::sub.Scalar_out")(_binary_scalar(np.subtract))
specializer("aten::mul.Scalar_out")(_binary_scalar(np.multiply))
specializer("aten::div.Scalar_out")(_binary_scalar(np.true_divide))


def _unary(fn):  # noqa: ANN001, ANN202
    def specialize(a: Any, out: Any, dynamic: bool = False) -> Any:
        if (
            isinstance(a, np.ndarray)
            and isinstance(out, np.ndarray)
            and _same_dtype(a, out)
            and a.shape == out.shape
        ):
            return _resizing(fn, _unary_shape) if dynamic else fn
        return None

    return specialize


@specializer("aten::sigmoid.out")
def _sigmoid(a: Any, out: Any, dynamic: bool = False) -> Any:
    if not isinstance(a, np.ndarray):
        return None
    one = np.ones((), dtype=a.dtype)  # a 0-d operand is numpy's cheapest

    def sigmoid(a: np.ndarray, out: np.ndarray) -> np.ndarray:
        # 1 / (1 + exp(-x)), torch's formula, in four passes over out
        np.negative(a, out=out)
        np.exp(out, out=out)
        np.add(out, one, out=out)
        return np.reciprocal(out, out=out)

    return _unary(sigmoid)(a, out, dynamic)


@specializer("aten::relu.out")
def _relu(a: Any, out: Any, dynamic: bool = False) -> Any:
    # maximum keeps NaN as torch's relu does, and with the tensor second it
    # keeps -0.0 too. The zero has the tensor's dtype and, for a static shape,
    # its shape too where that is faster (numpy's maximum has no SIMD loop for
    # a broadcast scalar).
    if not isinstance(a, np.ndarray):
        return None
    zero = Const(np.zeros((), dtype=a.dtype) if dynamic else bound(0, a))
    return _unary(Inline(np.maximum, (zero, 0, -1), keyword_out=True))(a, out, dynamic)


specializer("aten::tanh.out")(_unary(Inline(np.tanh, (0, -1))))
specializer("aten::exp.out")(_unary(Inline(np.exp, (0, -1))))
specializer("aten::neg.out")(_unary(Inline(np.negative, (0, -1))))
specializer("aten::sqrt.out")(_unary(Inline(np.sqrt, (0, -1))))


def _copy_from(view_of_input, loaded: np.ndarray):  # noqa: ANN001, ANN202
    """A kernel body copying a load-time-chosen view of the input into out.

    The input is usually the planned array it was at load (``loaded``), whose
    view is then taken once, here; any other array gets its view per call.
    """
    view = view_of_input(loaded)

    def run(a: np.ndarray, *rest: Any) -> np.ndarray:
        out = rest[-1]
        np.copyto(out, view if a is loaded else view_of_input(a))
        return out

    # The runtime may bind the view itself when the input's memory stays intact
    # while the copy is read (pyexecutorch.runtime.views).
    return offer(run, view_of_input=view_of_input, fills_outputs=True)  # out stays planned


_COPY = Inline(np.copyto, (-1, 0))
_CAST = Inline(np.copyto, (-1, 0, Const("unsafe")))


def _copy_like(a: Any, out: Any) -> bool:
    return isinstance(a, np.ndarray) and isinstance(out, np.ndarray) and a.dtype == out.dtype


@specializer("aten::clone.out")
def _clone(a: Any, memory_format: Any, out: Any) -> Any:
    if _copy_like(a, out) and a.shape == out.shape:
        return _COPY
    return None


@specializer("dim_order_ops::_clone_dim_order.out", "dim_order_ops::_to_dim_order_copy.out")
def _clone_dim_order(a: Any, non_blocking: Any, dim_order: Any, out: Any) -> Any:
    if _copy_like(a, out) and a.shape == out.shape:
        return _COPY
    if (
        isinstance(a, np.ndarray)
        and isinstance(out, np.ndarray)
        and a.shape == out.shape
        and a.dtype.kind in "biuf"
        and out.dtype.kind in "iuf"
        and np.can_cast(a.dtype, out.dtype, "same_kind")
    ):
        # Widening, int to float and float to narrower float round as torch
        # does; casts to bool or from float to int keep the general kernel.
        return _CAST
    return None


@specializer("aten::permute_copy.out")
def _permute(a: Any, dims: Any, out: Any) -> Any:
    if not _copy_like(a, out):
        return None
    axes = tuple(d % max(a.ndim, 1) for d in dims)
    if sorted(axes) != list(range(a.ndim)) or a.transpose(axes).shape != out.shape:
        return None
    return _copy_from(lambda a: a.transpose(axes), a)


@specializer("aten::view_copy.out")
def _view(a: Any, size: Any, out: Any) -> Any:
    if not _copy_like(a, out) or a.size != out.size:
        return None
    shape = out.shape
    return _copy_from(lambda a: a.reshape(shape), a)


@specializer("aten::expand_copy.out")
def _expand(a: Any, size: Any, implicit: Any, out: Any) -> Any:
    if not _copy_like(a, out) or not _broadcasts_to(out, a):
        return None
    return _COPY  # copyto broadcasts the input to out's shape


def _mm_shape(a: np.ndarray, b: np.ndarray, *rest: Any) -> tuple[int, ...]:
    return a.shape[:-1] + b.shape[-1:]


def _addmm_shape(bias: np.ndarray, a: np.ndarray, b: np.ndarray, *rest: Any) -> tuple[int, ...]:
    return (a.shape[0], b.shape[1])


@specializer("aten::repeat.out")
def _repeat(a: Any, repeats: Any, out: Any) -> Any:
    if not _copy_like(a, out) or len(repeats) < a.ndim or min(repeats, default=0) < 1:
        return None
    shape = (1,) * (len(repeats) - a.ndim) + a.shape
    if tuple(r * n for r, n in zip(repeats, shape, strict=True)) != out.shape:
        return None
    # Each output dim split into (repeats, size): the input broadcasts over it.
    split = tuple(x for pair in zip(repeats, shape, strict=True) for x in pair)
    spread = tuple(x for n in shape for x in (1, n))
    try:
        target = out.reshape(split, copy=False)
    except ValueError:
        return None
    loaded_out = out
    copy = _copy_from(lambda a: a.reshape(spread), a)

    def repeat(a: np.ndarray, repeats: Any, out: np.ndarray) -> np.ndarray:
        copy(a, target if out is loaded_out else out.reshape(split))
        return out

    return repeat


@specializer("aten::mm.out", "aten::bmm.out")
def _mm(a: Any, b: Any, out: Any, dynamic: bool = False) -> Any:
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or not _same_dtype(a, b, out):
        return None
    if (
        a.ndim != b.ndim
        or a.ndim not in (2, 3)
        or np.matmul(a[..., :0, :], b[..., :, :0]).ndim != out.ndim
    ):
        return None
    if a.shape[:-1] + b.shape[-1:] != out.shape:
        return None
    # np.dot's 2-D path costs half of matmul's on small matrices (same BLAS
    # call, same result); it wants a C-contiguous out of the exact dtype.
    if a.ndim == 2 and out.flags.c_contiguous:
        fast = Inline(np.dot, (0, 1, -1))
    else:
        fast = Inline(np.matmul, (0, 1, -1))
    return _resizing(fast, _mm_shape) if dynamic else fast


@specializer("aten::addmm.out")
def _addmm(
    bias: Any, a: Any, b: Any, beta: Any, alpha: Any, out: Any, dynamic: bool = False
) -> Any:
    if beta != 1 or alpha != 1 or isinstance(beta, bool) or isinstance(alpha, bool):
        return None
    if not (
        isinstance(bias, np.ndarray) and isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    ):
        return None
    if (
        not _same_dtype(bias, a, b, out)
        or a.ndim != 2
        or b.ndim != 2
        or (a.shape[0], b.shape[1]) != out.shape
    ):
        return None
    if not _broadcasts_to(out, bias) or np.shares_memory(out, bias):
        return None
    product = np.dot if out.flags.c_contiguous else np.matmul  # see _mm

    def addmm(
        bias: np.ndarray, a: np.ndarray, b: np.ndarray, beta: Any, alpha: Any, out: np.ndarray
    ) -> np.ndarray:
        product(a, b, out=out)
        np.add(out, bias, out)
        return out

    if dynamic:
        return _resizing(addmm, _addmm_shape)
    return offer(addmm, fills_outputs=True)  # out stays the planned array


def _axis(dim: Any, ndim: int) -> int | None:
    if not isinstance(dim, int) or not -max(ndim, 1) <= dim < max(ndim, 1):
        return None
    return dim % max(ndim, 1)


@specializer("aten::slice_copy.Tensor_out")
def _slice(a: Any, dim: Any, start: Any, end: Any, step: Any, out: Any) -> Any:
    axis = _axis(dim, getattr(a, "ndim", 0))
    if (
        not _copy_like(a, out)
        or axis is None
        or a.ndim == 0
        or not isinstance(step, int)
        or step <= 0
    ):
        return None
    index = (slice(None),) * axis + (slice(start, end, step),)
    if a[index].shape != out.shape:
        return None
    return _copy_from(lambda a: a[index], a)


@specializer("aten::select_copy.int_out")
def _select(a: Any, dim: Any, index: Any, out: Any) -> Any:
    axis = _axis(dim, getattr(a, "ndim", 0))
    if not _copy_like(a, out) or axis is None or a.ndim == 0 or not isinstance(index, int):
        return None
    if not -a.shape[axis] <= index < a.shape[axis]:
        return None
    # The trailing Ellipsis keeps a selection from a 1-D input a 0-d view: a plain
    # a[(i,)] is a numpy scalar, a copy taken once at load that later calls repeat.
    key = (slice(None),) * axis + (index, Ellipsis)
    if a[key].shape != out.shape:
        return None
    return _copy_from(lambda a: a[key], a)


@specializer(
    "aten::squeeze_copy.dims_out", "aten::squeeze_copy.dim_out", "aten::unsqueeze_copy.out"
)
def _reshape_copy(a: Any, dims: Any, out: Any) -> Any:
    # Squeezing and unsqueezing keep the element order: a reshape to out's shape.
    if not _copy_like(a, out) or a.size != out.size:
        return None
    kept = [s for s in a.shape if s != 1]
    if kept != [s for s in out.shape if s != 1]:
        return None
    shape = out.shape
    return _copy_from(lambda a: a.reshape(shape), a)


@specializer("aten::split_with_sizes_copy.out", "aten::split_copy.Tensor_out")
def _split(a: Any, sizes: Any, dim: Any, outs: Any) -> Any:
    axis = _axis(dim, getattr(a, "ndim", 0))
    if not isinstance(a, np.ndarray) or axis is None or a.ndim == 0 or not isinstance(outs, list):
        return None
    if isinstance(sizes, int):
        if sizes <= 0:
            return None
        n = a.shape[axis]
        sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    if len(sizes) != len(outs) or sum(sizes) != a.shape[axis]:
        return None
    keys = []
    start = 0
    for size, o in zip(sizes, outs, strict=True):
        key = (slice(None),) * axis + (slice(start, start + size),)
        if not _copy_like(a, o) or a[key].shape != o.shape:
            return None
        keys.append(key)
        start += size
    pairs = tuple(zip(keys, range(len(keys)), strict=True))

    def split(a: np.ndarray, sizes: Any, dim: Any, outs: list[np.ndarray]) -> list[np.ndarray]:
        for key, i in pairs:
            np.copyto(outs[i], a[key])
        return outs

    # Outputs stay the planned arrays; each output is a copy of a view of the input:
    # (output position, its key into the input).
    return offer(split, pieces=tuple((i, key) for key, i in pairs), fills_outputs=True)


@specializer("aten::cat.out")
def _cat(tensors: Any, dim: Any, out: Any) -> Any:
    if not isinstance(out, np.ndarray) or not tensors:
        return None
    axis = _axis(dim, out.ndim)
    if axis is None or out.ndim == 0:
        return None
    keys = []
    start = 0
    for t in tensors:
        if not _copy_like(t, out) or t.ndim != out.ndim:
            return None
        key = (slice(None),) * axis + (slice(start, start + t.shape[axis]),)
        if out[key].shape != t.shape:
            return None
        keys.append(key)
        start += t.shape[axis]
    if start != out.shape[axis]:
        return None
    keys = tuple(keys)

    def cat(tensors: list[np.ndarray], dim: Any, out: np.ndarray) -> np.ndarray:
        for key, t in zip(keys, tensors, strict=True):
            out[key] = t
        return out

    # out stays the planned array; each input is copied into its key of out
    return offer(cat, pieces=tuple(enumerate(keys)), fills_outputs=True)
