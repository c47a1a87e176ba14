"""Load-time fast paths for reductions: sum, prod, amax/amin, max/min.dim,
argmax/argmin, any, cumsum and topk.

Each specializer resolves at load what the general kernel in
:mod:`pyexecutorch.kernels.reduce.reduce` works out on every call (axes, result
shape, accumulator dtype, error cases) and keeps only the numpy call that
does the work, with the same arguments the general kernel passes so that the
results are bit for bit the same. Anything unusual (complex numbers,
float16 outside sum and prod, empty inputs, 0-dim inputs, outputs of another
dtype than the computation's) keeps the general kernel.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from pyexecutorch.kernels.reduce.reduce import _dims, _plan, _promoted
from pyexecutorch.kernels.registry import Const, Inline, KernelError, specializer
from pyexecutorch.schema.scalar_type import F16, F32

_I64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)


def _arrays(*values: Any) -> bool:
    return all(isinstance(v, np.ndarray) for v in values)


def _axes_for(
    a: np.ndarray, dims: tuple[int, ...] | None, keepdim: Any, out: np.ndarray, empty_is_all: bool
) -> tuple[int, ...] | None:
    """The reduced axes when ``out`` has exactly the result shape, else ``None``."""
    if not isinstance(keepdim, bool):
        return None
    try:
        axes, shape, _ = _plan(a.shape, dims, keepdim, empty_is_all)
    except KernelError:
        return None  # the general kernel raises the error
    return axes if shape == out.shape else None


def _acc(a: np.ndarray, dtype: Any, name: str) -> np.dtype | None:
    """The computation dtype of sum/prod/cumsum, or ``None`` for a dtype code the general kernel refuses."""
    try:
        return _promoted(a, dtype, name)
    except KernelError:
        return None


def _accumulating(
    ufunc: np.ufunc,
    a: np.ndarray,
    axes: tuple[int, ...],
    keepdim: bool,
    acc: np.dtype | None,
    out: np.ndarray,
) -> Any:
    """``ufunc.reduce`` in ``acc`` into ``out``, as :func:`reduce._ufunc_reduce` does it."""
    if acc is None or a.dtype.kind not in "biuf" or acc.kind not in "biuf":
        return None
    if acc == F16 or a.dtype == F16:
        # float16 accumulates in float32 and is rounded once (reduce._source).
        if a.dtype != F16 or acc != F16 or out.dtype != F16:
            return None
        scratch = np.empty(out.shape, F32)
        reduce = ufunc.reduce

        def half(a: np.ndarray, *rest: Any) -> np.ndarray:
            out = rest[-1]
            reduce(a, axes, F32, scratch, keepdim)
            np.copyto(out, scratch, casting="unsafe")
            return out

        return half
    if out.dtype != acc:
        return None
    return Inline(
        ufunc.reduce, (0, Const(axes), Const(None if acc == a.dtype else acc), -1, Const(keepdim))
    )


@specializer("aten::sum.IntList_out")
def _sum(a: Any, dim: Any, keepdim: Any, dtype: Any, out: Any) -> Any:
    if not _arrays(a, out):
        return None
    axes = _axes_for(a, _dims(dim), keepdim, out, True)
    if axes is None:
        return None
    return _accumulating(np.add, a, axes, keepdim, _acc(a, dtype, "sum"), out)


@specializer("aten::prod.out")
def _prod_all(a: Any, dtype: Any, out: Any) -> Any:
    if not _arrays(a, out):
        return None
    axes = _axes_for(a, None, False, out, True)
    if axes is None:
        return None
    return _accumulating(np.multiply, a, axes, False, _acc(a, dtype, "prod"), out)


@specializer("aten::prod.int_out")
def _prod(a: Any, dim: Any, keepdim: Any, dtype: Any, out: Any) -> Any:
    if not _arrays(a, out) or not isinstance(dim, int):
        return None
    axes = _axes_for(a, (dim,), keepdim, out, True)
    if axes is None:
        return None
    return _accumulating(np.multiply, a, axes, keepdim, _acc(a, dtype, "prod"), out)


def _extreme(ufunc: np.ufunc):  # noqa: ANN202
    def specialize(a: Any, dim: Any, keepdim: Any, out: Any) -> Any:
        # An empty input either raises or gives an empty result: the general kernel's business.
        if not _arrays(a, out) or a.dtype.kind not in "biuf" or a.size == 0:
            return None
        axes = _axes_for(a, _dims(dim), keepdim, out, True)
        if axes is None or out.dtype != a.dtype:
            return None
        return Inline(ufunc.reduce, (0, Const(axes), Const(None), -1, Const(keepdim)))

    return specialize


_amax = specializer("aten::amax.out")(_extreme(np.maximum))
_amin = specializer("aten::amin.out")(_extreme(np.minimum))


@specializer("aten::max.unary_out")
def _max_all(a: Any, out: Any) -> Any:
    return _amax(a, None, False, out)


@specializer("aten::min.unary_out")
def _min_all(a: Any, out: Any) -> Any:
    return _amin(a, None, False, out)


def _single_axis(a: Any, dim: Any, keepdim: Any, *outs: Any) -> int | None:
    """The axis of a one-dim reduction of a non-empty ``a`` into ``outs``, or ``None``."""
    if not _arrays(a, *outs) or not isinstance(dim, int) or a.ndim == 0 or a.size == 0:
        return None
    if a.dtype.kind not in "biuf":
        return None
    axes = _axes_for(a, (dim,), keepdim, outs[0], True)
    if axes is None or any(o.shape != outs[0].shape for o in outs):
        return None
    return axes[0]


def _arg(method: str):  # noqa: ANN202
    def specialize(a: Any, dim: Any, keepdim: Any, out: Any) -> Any:
        if not _arrays(a, out) or a.dtype == _BOOL or out.dtype != _I64:
            return None
        if dim is None:
            if a.ndim == 0 or a.size == 0 or not isinstance(keepdim, bool):
                return None
            if out.shape != ((1,) * a.ndim if keepdim else ()):
                return None
            axis = None
        else:
            axis = _single_axis(a, dim, keepdim, out)
            if axis is None:
                return None
        # The ndarray method itself: np.argmax adds a Python wrapper around it.
        fn = getattr(np.ndarray, method)
        if keepdim:
            fn = partial(fn, keepdims=True)
        return Inline(fn, (0, Const(axis), -1))

    return specialize


specializer("aten::argmax.out")(_arg("argmax"))
specializer("aten::argmin.out")(_arg("argmin"))


def _extreme_dim(ufunc: np.ufunc, method: str):  # noqa: ANN202
    def specialize(
        a: Any,
        dim: Any,
        keepdim: Any,
        values: Any,
        indices: Any,
        *,
        unused_outputs: frozenset[int] = frozenset(),
    ) -> Any:
        axis = _single_axis(a, dim, keepdim, values, indices)
        if axis is None or values.dtype != a.dtype or indices.dtype != _I64:
            return None
        axes = (axis,)
        reduce = ufunc.reduce
        arg = getattr(np.ndarray, method)
        if keepdim:
            arg = partial(arg, keepdims=True)
        want_values = 0 not in unused_outputs
        want_indices = 1 not in unused_outputs

        def run(
            a: np.ndarray, dim: Any, keepdim: Any, values: np.ndarray, indices: np.ndarray
        ) -> tuple[np.ndarray, np.ndarray]:
            if want_values:
                reduce(a, axes, None, values, keepdim)
            if want_indices:
                arg(a, axis, indices)
            return values, indices

        return run

    return specialize


specializer("aten::max.dim_max")(_extreme_dim(np.maximum, "argmax"))
specializer("aten::min.dim_min")(_extreme_dim(np.minimum, "argmin"))


def _any(a: Any, dims: tuple[int, ...] | None, keepdim: Any, out: Any, empty_is_all: bool) -> Any:
    if not _arrays(a, out) or a.dtype.kind not in "biuf" or out.dtype != _BOOL:
        return None
    axes = _axes_for(a, dims, keepdim, out, empty_is_all)
    if axes is None:
        return None
    return Inline(np.logical_or.reduce, (0, Const(axes), Const(None), -1, Const(keepdim)))


@specializer("aten::any.all_out")
def _any_all(a: Any, out: Any) -> Any:
    return _any(a, None, False, out, True)


@specializer("aten::any.dims_out")
def _any_dims(a: Any, dim: Any, keepdim: Any, out: Any) -> Any:
    return _any(a, _dims(dim), keepdim, out, False)


@specializer("aten::any.out")
def _any_dim(a: Any, dim: Any, keepdim: Any, out: Any) -> Any:
    if not isinstance(dim, int):
        return None
    return _any(a, (dim,), keepdim, out, True)


@specializer("aten::cumsum.out")
def _cumsum(a: Any, dim: Any, dtype: Any, out: Any) -> Any:
    if not _arrays(a, out) or not isinstance(dim, int) or a.ndim == 0 or a.shape != out.shape:
        return None
    if not -a.ndim <= dim < a.ndim or a.dtype.kind not in "biuf":
        return None
    acc = _acc(a, dtype, "cumsum")
    if acc is None or acc.kind not in "biuf" or out.dtype != acc or F16 in (a.dtype, acc):
        return None
    # ndarray.cumsum is add.accumulate; calling the ufunc skips a layer.
    return Inline(
        np.add.accumulate, (0, Const(dim % a.ndim), Const(None if acc == a.dtype else acc), -1)
    )


def flat_offsets(shape: tuple[int, ...], axis: int, sub: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """Flat C-order offsets into an array of ``shape`` for a block of shape ``sub``.

    Returns ``(base, stride)``: element ``i`` of the block sits at
    ``base[i] + j * stride`` where ``j`` is its coordinate along ``axis``
    (``base`` has the coordinate along ``axis`` set to 0).
    """
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    base = np.zeros(sub, dtype=_I64)
    for d, g in enumerate(np.indices(sub, sparse=True)):
        if d != axis:
            base += g * strides[d]
    return base, strides[axis]


@specializer("aten::topk.values")
def _topk(a: Any, k: Any, dim: Any, largest: Any, sorted: Any, values: Any, indices: Any) -> Any:
    """Top ``k`` by a stable argsort, as the general kernel does, without its copies."""
    if not _arrays(a, values, indices) or a.dtype.kind not in "iuf" or a.ndim == 0:
        return None
    if not isinstance(dim, int) or not -a.ndim <= dim < a.ndim or not isinstance(largest, bool):
        return None
    axis = dim % a.ndim
    n = a.shape[axis]
    if not isinstance(k, int) or not 0 < k <= n or a.size == 0:
        return None
    shape = a.shape[:axis] + (k,) + a.shape[axis + 1 :]
    if values.shape != shape or indices.shape != shape:
        return None
    if values.dtype != a.dtype or indices.dtype != _I64:
        return None
    base, stride = flat_offsets(a.shape, axis, shape)
    # Flat positions, in the stable ascending order of the row, of the k picked
    # entries: the first k, or for ``largest`` the last k read backwards.
    j = np.arange(k, dtype=_I64).reshape((k,) + (1,) * (a.ndim - axis - 1))
    pick = base + ((n - 1 - j) if largest else j) * stride
    flat = np.empty(shape, _I64)
    # 0-d arrays: numpy's ufuncs take them faster than scalars.
    stride0 = np.array(stride, _I64)
    top0 = np.array(n - 1, _I64)
    argsort, take = np.ndarray.argsort, np.ndarray.take
    add, multiply, subtract = np.add, np.multiply, np.subtract
    # Descending with ties in ascending index order and NaN first is a stable
    # ascending sort of the reversed row, read backwards (as the general kernel).
    flip = (slice(None),) * axis + (slice(None, None, -1),) if largest else ()

    def topk(a, k, dim, largest, sorted, values, indices):  # noqa: ANN001, ANN202
        take(argsort(a[flip], axis, "stable"), pick, None, indices, "clip")
        if flip:
            subtract(top0, indices, indices)  # position in the reversed row -> in the row
        if stride == 1:
            add(indices, base, flat)
        else:
            multiply(indices, stride0, flat)
            add(flat, base, flat)
        take(a, flat, None, values, "clip")  # flat is in range by construction
        return values, indices

    return topk
