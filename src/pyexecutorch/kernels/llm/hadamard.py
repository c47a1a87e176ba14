"""``llama::fast_hadamard_transform``: the normalized Walsh-Hadamard transform of each last-dim row.

A row of length ``2**k`` gets the ``k`` butterfly stages ``(x, y) -> (x + y, x - y)``
and is scaled by ``1 / sqrt(2**k)``. A row of length ``28 * 2**k`` is read as a
``(28, 2**k)`` matrix: each of its 28 rows is transformed that way, then each
column is multiplied by a fixed (unnormalized) 28x28 Hadamard matrix. Every
butterfly and the scaling run in the tensor's own dtype (float16, float32 or
float64) and round there, as the official kernel does; the 28-term column sums
add their terms in order (see :func:`_mult_28` for float16).
"""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.common import fit
from pyexecutorch.kernels.registry import KernelError, kernel

_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _circulant(signs: str) -> np.ndarray:
    first = np.array([1 if c == "+" else -1 for c in signs], np.int8)
    return np.stack([np.roll(first, i) for i in range(len(first))])


def _williamson_28() -> np.ndarray:
    """The 28x28 Hadamard matrix of the official kernel, from its four 7x7 circulants.

    It has Williamson's form [[A, B, C, D], [-B, A, -D, C], [-C, D, A, -B],
    [-D, -C, B, A]]; only the first row of each circulant block is needed.
    """
    a, b, c, d = (_circulant(s) for s in ("+------", "++----+", "+-+--+-", "+--++--"))
    return np.block([[a, b, c, d], [-b, a, -d, c], [-c, d, a, -b], [-d, -c, b, a]])


_H28 = _williamson_28()


def _butterflies(x: np.ndarray, log2_n: int) -> np.ndarray:
    """The normalized transform of each last-dim row of ``x`` (length ``2**log2_n``)."""
    rows, n = x.shape
    for stage in range(log2_n):
        half = 1 << stage
        pairs = x.reshape(rows, n // (2 * half), 2, half)
        first, second = pairs[:, :, 0], pairs[:, :, 1]
        x = np.stack((first + second, first - second), axis=2).reshape(rows, n)
    if log2_n:
        t = x.dtype.type
        # 1 / 2**(k/2) computed as the official kernel does, in the tensor's dtype.
        root = t(1 << (log2_n // 2)) * (t(np.sqrt(2)) if log2_n % 2 else t(1))
        x = x * (t(1) / root)
    return x


def _mult_28(x: np.ndarray) -> np.ndarray:
    """Multiply each column of the ``(rows, 28, m)`` blocks by the 28x28 matrix.

    Each output is a left-to-right sum of 28 signed terms. In float16 the
    official sums follow C++ promotion on its half type: a sum that starts with
    ``+x[0]`` is promoted to float32 and rounds once, one that starts with
    ``-x[0]`` stays in float16 and rounds after every term.
    """
    wide = x.astype(np.promote_types(x.dtype, np.float32))
    out = np.empty_like(x)
    for r in range(28):
        terms = wide if _H28[r, 0] > 0 else x
        acc = terms[:, 0] if _H28[r, 0] > 0 else -terms[:, 0]
        for c in range(1, 28):
            acc = acc + terms[:, c] if _H28[r, c] > 0 else acc - terms[:, c]
        out[:, r] = acc
    return out


@kernel("llama::fast_hadamard_transform.out")
def fast_hadamard_transform_out(mat: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Hadamard-transform each row of ``mat`` along its last dim."""
    op = "fast_hadamard_transform"
    if mat.dtype not in _DTYPES:
        raise KernelError(f"{op}: mat must be float16, float32 or float64, got {mat.dtype}")
    if out.dtype != mat.dtype:
        raise KernelError(f"{op}: out must have mat's dtype {mat.dtype}, got {out.dtype}")
    dst = fit(out, mat.shape)
    if mat.ndim == 0 or mat.size == 0:
        dst[...] = mat
        return dst
    n = mat.shape[-1]
    by_28 = n % 28 == 0
    size = n // 28 if by_28 else n
    if size & (size - 1):
        raise KernelError(
            f"{op}: the last dim must be a power of 2 or 28 times a power of 2, got {n}"
        )
    log2_n = size.bit_length() - 1
    rows = mat.reshape(-1, size)  # with by_28, 28 consecutive rows form one block
    x = _butterflies(rows, log2_n)
    if by_28:
        x = _mult_28(x.reshape(-1, 28, size))
    dst[...] = x.reshape(mat.shape)
    return dst
