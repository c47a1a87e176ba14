"""Copy and conversion kernels: clone, copy, dtype casts, dim-order copies.

A non-default dim order is presented to kernels as a strided view of the
logical shape, so a dim-order change is an ordinary element copy into the
planned output. Casts follow torch: float to int truncates toward zero, to
bool is ``!= 0``, complex to real keeps the real part.
"""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.common import fit
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.kernels.shape.shape import assign, infer_size


def _broadcast_to_self(self: np.ndarray, src: np.ndarray, op: str) -> None:
    if src.shape == self.shape:
        return
    try:
        shape = np.broadcast_shapes(self.shape, src.shape)
    except ValueError:
        shape = None
    if shape != self.shape:
        raise KernelError(
            f"{op}: src of shape {list(src.shape)} cannot be broadcast to self's shape "
            f"{list(self.shape)}"
        )


def _check_dim_order(dim_order, ndim: int, op: str) -> None:
    if dim_order is not None and sorted(dim_order) != list(range(ndim)):
        raise KernelError(
            f"{op}: dim_order {list(dim_order)} is not a permutation of the {ndim} dimensions"
        )


@kernel("aten::clone.out")
def clone(self, memory_format, out):
    out = fit(out, self.shape)
    assign(out, self)
    return out


@kernel("aten::_to_copy.out")
def to_copy(self, non_blocking, memory_format, out):
    out = fit(out, self.shape)
    assign(out, self)
    return out


@kernel("et_copy::_h2d_copy.out", "et_copy::_d2h_copy.out")
def device_copy(self, out):
    out = fit(out, self.shape)
    assign(out, self)
    return out


@kernel("dim_order_ops::_to_dim_order_copy.out", "dim_order_ops::_clone_dim_order.out")
def to_dim_order_copy(self, non_blocking, dim_order, out):
    _check_dim_order(dim_order, self.ndim, "_to_dim_order_copy")
    out = fit(out, self.shape)
    assign(out, self)
    return out


@kernel("aten::copy.out")
def copy(self, src, non_blocking, out):
    _broadcast_to_self(self, src, "copy")
    out = fit(out, self.shape)
    assign(out, src)
    return out


@kernel("aten::copy_", n_outs=0)
def copy_(self, src, non_blocking):
    _broadcast_to_self(self, src, "copy_")
    if not self.flags.writeable:
        raise KernelError("copy_: self is read-only (a constant cannot be written in place)")
    assign(self, src)


@kernel("executorch_prim::et_view.default")
def et_view(self, size, out):
    """The runtime's non-copying view: ``self`` reshaped, sharing its memory.

    ``out`` is not written; the returned array replaces it. A strided input
    whose reshape needs a copy (not produced by the official emitter, which
    only views contiguous tensors) yields a copy.
    """
    if self.dtype != out.dtype:
        raise KernelError(f"et_view: self has dtype {self.dtype} but out has dtype {out.dtype}")
    return self.reshape(infer_size(size, self.size))


@kernel("executorch_prim::et_copy_index.tensor", n_outs=0)
def et_copy_index(copy_to, copy_from, index):
    """Copy ``copy_from`` into ``copy_to[index]`` (the emitter's map loops).

    ``copy_to`` has one more dimension than ``copy_from``. When its leading
    dimension is shorter than ``index + 1`` it is grown with :func:`fit`
    (possible when its storage has room, or when it is unplanned); the
    returned array is ``copy_to`` at its new shape, for the runtime to store
    back into the ``copy_to`` value.
    """
    if copy_to.ndim != copy_from.ndim + 1:
        raise KernelError(
            f"et_copy_index: copy_to (rank {copy_to.ndim}) must have exactly one more "
            f"dimension than copy_from (rank {copy_from.ndim})"
        )
    if copy_to.dtype != copy_from.dtype:
        raise KernelError(
            f"et_copy_index: copy_to has dtype {copy_to.dtype} but copy_from has dtype "
            f"{copy_from.dtype}"
        )
    if index < 0:
        raise KernelError(f"et_copy_index: index must be non-negative, got {index}")
    if copy_to.shape[1:] != copy_from.shape:
        raise KernelError(
            f"et_copy_index: copy_to of shape {list(copy_to.shape)} cannot hold copy_from of "
            f"shape {list(copy_from.shape)} along its leading dimension"
        )
    if copy_to.shape[0] <= index:
        copy_to = fit(copy_to, (index + 1,) + copy_from.shape)
    copy_to[index] = copy_from
    return copy_to
