"""Matrix products: mm, bmm, addmm, linear.

Float32/float64 products go straight to BLAS through ``np.matmul(..., out=)``
writing into the planned output. ``linear`` multiplies by the transposed
weight view ``weight.T``, which numpy hands to BLAS as a transpose flag (no
copy). float16 runs in float32 (as torch does on CPU) and rounds once;
integer and complex products use numpy's own loops (integers wrap like torch's).
"""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.checks import scalar
from pyexecutorch.kernels.common import fit, view_as
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.kernels.scratch import derived, scratch
from pyexecutorch.schema.scalar_type import F16, F32

_BLAS = frozenset((np.dtype(np.float32), np.dtype(np.float64)))


def _compute_dtype(op: str, *arrays: np.ndarray) -> np.dtype:
    dt = arrays[0].dtype
    for a in arrays[1:]:
        if a.dtype != dt:
            raise KernelError(
                f"{op}: operands must have the same dtype, got "
                + ", ".join(str(x.dtype) for x in arrays)
            )
    if dt == np.bool_ or dt.kind not in "iufc":
        raise KernelError(f"{op}: dtype {dt} is not supported (need a numeric non-bool dtype)")
    return F32 if dt == F16 else dt


def _as_compute(a: np.ndarray, cdt: np.dtype) -> np.ndarray:
    if a.dtype == cdt:
        return a
    return derived(("as", cdt.char), (a,), lambda: a.astype(cdt))


def _matmul_into(a: np.ndarray, b: np.ndarray, o: np.ndarray, cdt: np.dtype) -> None:
    """``o[...] = a @ b`` computed in ``cdt``."""
    if o.dtype == cdt:
        np.matmul(a, b, out=o)
    else:
        tmp = scratch("mm-cast", o.shape, cdt)
        np.matmul(a, b, out=tmp)
        np.copyto(o, tmp, casting="unsafe")


def mm_shape(self: np.ndarray, mat2: np.ndarray) -> tuple[int, int]:
    """mm's result shape, or KernelError: the argument check (see linalg.checks)."""
    if self.ndim != 2 or mat2.ndim != 2:
        raise KernelError(
            f"mm: self and mat2 must be 2-D, got shapes {self.shape} and {mat2.shape}"
        )
    if self.shape[1] != mat2.shape[0]:
        raise KernelError(
            f"mm: self of shape {self.shape} and mat2 of shape {mat2.shape} cannot be "
            f"multiplied ({self.shape[1]} != {mat2.shape[0]})"
        )
    return self.shape[0], mat2.shape[1]


@kernel("aten::mm.out")
def mm(self, mat2, out):
    o = fit(out, mm_shape(self, mat2))
    if self.dtype in _BLAS and self.dtype == mat2.dtype == o.dtype:
        np.matmul(self, mat2, out=o)
        return o
    cdt = _compute_dtype("mm", self, mat2)
    _matmul_into(_as_compute(self, cdt), _as_compute(mat2, cdt), o, cdt)
    return o


def bmm_shape(self: np.ndarray, mat2: np.ndarray) -> tuple[int, int, int]:
    """bmm's result shape, or KernelError: the argument check (see linalg.checks)."""
    if self.ndim != 3 or mat2.ndim != 3:
        raise KernelError(
            f"bmm: self and mat2 must be 3-D, got shapes {self.shape} and {mat2.shape}"
        )
    if self.shape[0] != mat2.shape[0] or self.shape[2] != mat2.shape[1]:
        raise KernelError(
            f"bmm: self of shape {self.shape} and mat2 of shape {mat2.shape} cannot be "
            "multiplied (need (b, n, m) and (b, m, p))"
        )
    return self.shape[0], self.shape[1], mat2.shape[2]


@kernel("aten::bmm.out")
def bmm(self, mat2, out):
    o = fit(out, bmm_shape(self, mat2))
    if self.dtype in _BLAS and self.dtype == mat2.dtype == o.dtype:
        np.matmul(self, mat2, out=o)
        return o
    cdt = _compute_dtype("bmm", self, mat2)
    _matmul_into(_as_compute(self, cdt), _as_compute(mat2, cdt), o, cdt)
    return o


def _scalar_for(value, cdt: np.dtype, name: str, op: str):
    """A Scalar argument as a value of the computation's kind (ints truncate, like torch)."""
    if cdt.kind in "iu":
        return int(value)  # torch casts the scalar to the integer type (truncation)
    if isinstance(value, complex) and cdt.kind != "c":
        raise KernelError(f"{op}: complex {name} {value} needs a complex input")
    return value


def addmm_shape(self: np.ndarray, mat1: np.ndarray, mat2: np.ndarray) -> tuple[int, int]:
    """addmm's result shape, or KernelError: the argument check (see linalg.checks)."""
    op = "addmm"
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise KernelError(
            f"{op}: mat1 and mat2 must be 2-D, got shapes {mat1.shape} and {mat2.shape}"
        )
    if mat1.shape[1] != mat2.shape[0]:
        raise KernelError(
            f"{op}: mat1 of shape {mat1.shape} and mat2 of shape {mat2.shape} cannot be "
            f"multiplied ({mat1.shape[1]} != {mat2.shape[0]})"
        )
    shape = (mat1.shape[0], mat2.shape[1])
    ss = self.shape
    if ss != shape and not (
        len(ss) <= 2
        and all(a in (1, b) for a, b in zip(reversed(ss), reversed(shape), strict=False))
    ):
        raise KernelError(
            f"{op}: self of shape {ss} does not broadcast to the product's shape {shape}"
        )
    return shape


@kernel("aten::addmm.out")
def addmm(self, mat1, mat2, beta, alpha, out):
    op = "addmm"
    shape = addmm_shape(self, mat1, mat2)
    o = fit(out, shape)
    cdt = _compute_dtype(op, self, mat1, mat2)
    beta = _scalar_for(scalar(beta, op, "beta"), cdt, "beta", op)
    alpha = _scalar_for(scalar(alpha, op, "alpha"), cdt, "alpha", op)
    t = o if o.dtype == cdt else scratch("addmm-cast", shape, cdt)
    if alpha == 0:
        # As in BLAS, a zero alpha skips the product (inf/NaN there do not leak).
        t[...] = 0
    else:
        np.matmul(_as_compute(mat1, cdt), _as_compute(mat2, cdt), out=t)
        if alpha != 1:
            np.multiply(t, alpha, out=t, casting="unsafe")
    if beta != 0:
        s = self if self.dtype == cdt else self.astype(cdt)
        if beta == 1:
            np.add(t, s, out=t)
        else:
            np.add(t, np.multiply(s, beta, casting="unsafe", dtype=cdt), out=t)
    if t is not o:
        np.copyto(o, t, casting="unsafe")
    return o


@kernel("aten::linear.out")
def linear(input, weight, bias, out):
    op = "linear"
    if weight.ndim != 2:
        raise KernelError(
            f"{op}: weight must be 2-D (out_features, in_features), got {weight.shape}"
        )
    if input.ndim == 0:
        raise KernelError(f"{op}: input must have at least 1 dim, got a 0-dim tensor")
    n_out, n_in = weight.shape
    if input.shape[-1] != n_in:
        raise KernelError(
            f"{op}: input's last dim {input.shape[-1]} must equal weight's in_features {n_in} "
            f"(input {input.shape}, weight {weight.shape})"
        )
    if bias is not None and bias.shape not in ((n_out,), (), (1,)):
        raise KernelError(f"{op}: bias must have shape ({n_out},), got {bias.shape}")
    lead = input.shape[:-1]
    shape = (*lead, n_out)
    o = fit(out, shape)
    m = 1
    for v in lead:
        m *= v
    dt = input.dtype
    if dt in _BLAS and weight.dtype == dt and o.dtype == dt and (bias is None or bias.dtype == dt):
        cdt = dt
        x = input
        w = weight
    else:
        arrays = (input, weight) if bias is None else (input, weight, bias)
        cdt = _compute_dtype(op, *arrays)
        x = input if input.dtype == cdt else input.astype(cdt)
        w = _as_compute(weight, cdt)
    x2 = x if x.ndim == 2 else x.reshape(m, n_in)
    if o.dtype != cdt:
        o2 = None
    elif o.ndim == 2:
        o2 = o
    elif o.flags.c_contiguous:
        o2 = o.reshape(m, n_out)
    else:
        o2 = view_as(o, (m, n_out))
    t = o2 if o2 is not None else scratch("linear-out", (m, n_out), cdt)
    np.matmul(x2, w.T, out=t)
    if bias is not None:
        b = bias if bias.dtype == cdt else _as_compute(bias, cdt)
        np.add(t, b, out=t)
    if t is not o2:
        np.copyto(o, t.reshape(shape), casting="unsafe")
    return o
