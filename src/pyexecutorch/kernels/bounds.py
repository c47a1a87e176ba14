"""What a kernel may allocate when its output's size comes from a value.

``arange``, ``full``/``zeros``/``ones``/``empty``/``rand``, ``repeat``, ``expand``,
``repeat_interleave``, ``index``, padding and upsampling compute their output's
shape from argument values (a scalar, a size list, repeat counts, indices, pad
widths, scale factors) that a corrupt or hostile program controls. Such a kernel
checks that shape, with :func:`bounded_fit`, before it allocates or computes
anything: against the planned output it writes into, and, for an output memory
planning left unplanned (the kernel allocates it), against
:data:`MAX_UNPLANNED_BYTES`. Either way the error is a ``KernelError`` naming the
operator, the shape and the bound, raised before any memory is touched.
"""

from __future__ import annotations

import math

import numpy as np

from pyexecutorch.kernels.common import fit
from pyexecutorch.kernels.registry import KernelError

# The most bytes one unplanned output may take (4 GiB): programs plan their tensors, and
# an unplanned (dynamic-unbound) output this large comes from a corrupt size argument.
MAX_UNPLANNED_BYTES = 4 << 30

_limit = [MAX_UNPLANNED_BYTES]


def set_max_unplanned_bytes(n: int) -> None:
    """Set the most bytes one unplanned kernel output may take (process-wide)."""
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ValueError(f"max unplanned bytes must be a positive int, got {n!r}")
    _limit[0] = n


def max_unplanned_bytes() -> int:
    return _limit[0]


def check_output_size(out: np.ndarray, shape: tuple[int, ...], op: str) -> None:
    """``KernelError`` unless an output of ``shape`` fits ``out`` (the planned output), or,
    when ``out`` is unplanned (empty), takes at most :func:`max_unplanned_bytes`."""
    n = math.prod(shape)  # Python ints: no overflow, whatever the sizes
    if n <= out.size:
        return
    if out.size == 0:
        need = n * out.dtype.itemsize
        if need > _limit[0]:
            raise KernelError(
                f"{op}: an output of shape {list(shape)} would take {need} bytes, more than "
                f"the {_limit[0]} an unplanned output may (kernels.bounds.MAX_UNPLANNED_BYTES)"
            )
        return
    raise KernelError(
        f"{op}: an output of shape {list(shape)} ({n} elements) does not fit the planned "
        f"output of shape {list(out.shape)} ({out.size} elements)"
    )


def bounded_fit(out: np.ndarray, shape: tuple[int, ...], op: str) -> np.ndarray:
    """:func:`~pyexecutorch.kernels.common.fit`, after :func:`check_output_size`."""
    if out.shape != shape:
        check_output_size(out, shape, op)
    return fit(out, shape)
