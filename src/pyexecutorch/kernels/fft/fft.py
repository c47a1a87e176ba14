"""Real-to-complex and complex-to-real FFTs (numpy's pocketfft, single precision kept)."""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.common import fit, normalize_dim
from pyexecutorch.kernels.registry import KernelError, kernel

# torch's fft_norm_mode: 0 = none, 1 = 1/sqrt(n), 2 = 1/n, applied to the
# transform at hand. numpy names its modes after the direction that is scaled.
_FORWARD_NORM = {0: "backward", 1: "ortho", 2: "forward"}
_INVERSE_NORM = {0: "forward", 1: "ortho", 2: "backward"}


def _dims(op: str, dim, ndim: int) -> tuple[int, ...]:
    dims = tuple(normalize_dim(int(d), ndim) for d in dim)
    if not dims:
        raise KernelError(f"{op}: dim must name at least one dimension")
    if len(set(dims)) != len(dims):
        raise KernelError(f"{op}: dim {list(dim)} has repeated dimensions")
    return dims


def _norm(op: str, normalization: int, table: dict[int, str]) -> str:
    if normalization not in table:
        raise KernelError(f"{op}: normalization must be 0, 1 or 2, got {normalization}")
    return table[normalization]


@kernel("aten::_fft_r2c.out")
def fft_r2c(self, dim, normalization, onesided, out):
    op = "_fft_r2c"
    if self.dtype not in (np.float32, np.float64):
        raise KernelError(f"{op}: input must be float32 or float64, got {self.dtype}")
    dims = _dims(op, dim, self.ndim)
    norm = _norm(op, normalization, _FORWARD_NORM)
    shape = list(self.shape)
    if onesided:
        shape[dims[-1]] = shape[dims[-1]] // 2 + 1
    o = fit(out, tuple(shape))
    if o.size == 0:
        return o
    if any(self.shape[d] == 0 for d in dims):
        raise KernelError(f"{op}: cannot transform an empty dimension of shape {self.shape}")
    if onesided:
        r = np.fft.rfftn(self, axes=dims, norm=norm)
    else:
        r = np.fft.fftn(self, axes=dims, norm=norm)
    np.copyto(o, r, casting="unsafe")
    return o


@kernel("aten::_fft_c2r.out")
def fft_c2r(self, dim, normalization, last_dim_size, out):
    op = "_fft_c2r"
    if self.dtype not in (np.complex64, np.complex128):
        raise KernelError(f"{op}: input must be complex64 or complex128, got {self.dtype}")
    dims = _dims(op, dim, self.ndim)
    norm = _norm(op, normalization, _INVERSE_NORM)
    if last_dim_size <= 0:
        raise KernelError(f"{op}: last_dim_size must be positive, got {last_dim_size}")
    shape = list(self.shape)
    shape[dims[-1]] = int(last_dim_size)
    o = fit(out, tuple(shape))
    if o.size == 0:
        return o
    if any(self.shape[d] == 0 for d in dims):
        raise KernelError(f"{op}: cannot transform an empty dimension of shape {self.shape}")
    s = [shape[d] for d in dims]
    r = np.fft.irfftn(self, s=s, axes=dims, norm=norm)
    np.copyto(o, r, casting="unsafe")
    return o
