"""Helpers shared by kernels: output fitting, dtypes, broadcasting."""

from __future__ import annotations

import math
import weakref

import numpy as np

from pyexecutorch.kernels.registry import KernelError

# The planned arrays of static tensors (see keep_size), by id: a weak map, so that a
# method's arrays go with it.
_STATIC: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def keep_size(out: np.ndarray) -> None:
    """Mark ``out`` as a static tensor's planned array: :func:`fit` never resizes it."""
    _STATIC[id(out)] = out


def fit(out: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Return ``out`` viewed with ``shape``, the shape the kernel computed.

    ``out`` is the planned storage of the output: exactly ``shape`` for a
    static tensor (the fast path: one tuple compare; any other shape is an
    error, as on the compiled tier, which keeps a static tensor at its planned
    size), the upper-bound shape for a dynamic-bound tensor (a prefix of its
    contiguous memory is used), or a zero-size array for a tensor that memory
    planning left unplanned (a new array is allocated).
    """
    if out.shape == shape:
        return out
    if _STATIC.get(id(out)) is out:
        raise KernelError(
            f"a result of shape {tuple(shape)} does not fit the output, a static tensor "
            f"planned with shape {out.shape}"
        )
    n = math.prod(shape)
    if n <= out.size and out.flags.c_contiguous:
        return out.reshape(-1)[:n].reshape(shape)
    if out.size == 0:
        return np.empty(shape, dtype=out.dtype)
    raise KernelError(
        f"output of shape {tuple(shape)} ({n} elements) does not fit the planned "
        f"output of shape {out.shape} ({out.size} elements)"
    )


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast of two shapes, with a fast path for equal shapes."""
    if a == b:
        return a
    try:
        return np.broadcast_shapes(a, b)
    except ValueError:
        raise KernelError(f"shapes {a} and {b} cannot be broadcast together") from None


def view_as(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``a`` reshaped without copying, or ``None`` when that needs a copy."""
    if a.shape == shape:
        return a
    try:
        return np.reshape(a, shape, copy=False)
    except ValueError:
        return None


_FLOAT_COMPUTE = {
    np.dtype(np.float16): np.dtype(np.float32),
    np.dtype(np.float32): np.dtype(np.float32),
    np.dtype(np.float64): np.dtype(np.float64),
}


def float_compute_dtype(a: np.ndarray, what: str, op: str) -> np.dtype:
    """The dtype ``op`` computes in for a floating input (float16 runs in float32)."""
    cdt = _FLOAT_COMPUTE.get(a.dtype)
    if cdt is None:
        raise KernelError(f"{op}: {what} must be float16, float32 or float64, got {a.dtype}")
    return cdt


def normalize_dim(dim: int, ndim: int) -> int:
    """``dim`` as a non-negative axis of an ``ndim``-dimensional tensor (0-dim counts as 1)."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise KernelError(f"dimension {dim} is out of range for a tensor of rank {ndim}")
    return dim % n


# torch never warns about inf/nan arithmetic, so kernels run with numpy's
# floating-point warnings off. numpy >= 2 keeps that state in a context
# variable, which is ten times cheaper to switch than ``np.errstate``.
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _FP_STATE
    from numpy._core._ufunc_config import _make_extobj

    _FP_IGNORE = _make_extobj(all="ignore")

    def fp_warnings_off() -> object:
        """Turn numpy's floating-point warnings off; returns a token for :func:`fp_warnings_restore`."""
        return _FP_STATE.set(_FP_IGNORE)

    def fp_warnings_restore(token: object) -> None:
        _FP_STATE.reset(token)  # type: ignore[arg-type]

except (ImportError, AttributeError, TypeError):  # pragma: no cover - older numpy

    def fp_warnings_off() -> object:
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    def fp_warnings_restore(token: object) -> None:
        token.__exit__(None, None, None)  # type: ignore[attr-defined]


class quiet_fp:  # noqa: N801 - used like np.errstate
    """``with quiet_fp():`` runs a block with numpy's floating-point warnings off.

    The same effect as ``np.errstate(all="ignore")`` for about a tenth of its cost.
    """

    __slots__ = ("_token",)

    def __enter__(self) -> quiet_fp:
        self._token = fp_warnings_off()
        return self

    def __exit__(self, *exc: object) -> bool:
        fp_warnings_restore(self._token)
        return False
