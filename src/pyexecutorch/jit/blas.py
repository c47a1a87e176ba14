"""Matrix products inside compiled code, on numpy's own BLAS (the compiled tier only).

numba's ``np.dot`` calls BLAS through scipy's bindings, and scipy ships an OpenBLAS
of its own: on the small products of tiny models it multiplies 1.5-2x slower than
the one numpy ships (measured here: 8x27 @ 27x1024 22.6 us against numpy's 16.5).
So compiled code calls numpy's library itself, by symbol: numpy's wheels bundle an
ILP64 OpenBLAS whose CBLAS entry points are named ``scipy_cblas_<x>gemm64_``, which
LLVM resolves once the library is loaded into the process (numpy has loaded it
already; this makes its symbols visible to compiled code). Calls by symbol name keep
the callers cacheable on disk. The thread setting reaches it as it reaches numpy.

Threads: compiled code multiplies on one pool, numba's. A product of ``SPLIT_PRODUCT``
multiply-adds or more, with more than one numba thread, is split into one block of
columns (or rows) per thread, each a serial BLAS call inside a ``prange``, and the first
compiled product sets OpenBLAS to one thread for the process (until the next
``set_threads``). Two pools that both spin after their work (OpenBLAS's workers,
numba's OpenMP team) fight for the cores: at two threads on this 2-core machine, a
depthwise ``prange`` loop and a threaded BLAS call alternated took 60+ ms a pair (each
alone: well under a millisecond), and mobilenet_like at 224x224 ran slower at two
threads than at one. The count is not restored after each call: raising it again wakes
OpenBLAS's workers, which then spin against numba's (an LLM's decode at two threads,
one product every few hundred microseconds: 30 ms of CPU a token, 7.5 with OpenBLAS
left at one thread; 6.5 at one thread).

Where numpy's library is not found (another build of numpy), :func:`gemm` is
numba's ``np.dot``, which needs scipy.
"""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from pyexecutorch.jit.numba_env import numba_module

# (library file patterns under numpy's folder, CBLAS symbol prefix, OpenBLAS's own
# functions' prefix and suffix): numpy 2's wheels
_CANDIDATES = (
    (
        ("../numpy.libs/libscipy_openblas64_*", ".dylibs/libscipy_openblas64_*"),
        "scipy_cblas_",
        ("scipy_openblas_", "64_"),
    ),
)
_ROW_MAJOR, _NO_TRANS = 101, 111
# Products from this many multiply-adds (m*n*k; about 50 us on one thread) are split
# across numba's threads; smaller ones run on the calling thread.
SPLIT_PRODUCT = 1 << 21
# A split block of columns is a multiple of this many (whole cache lines of float32).
_COLUMN_ALIGN = 16


def _numpy_blas() -> tuple[str, tuple[str, str]] | None:
    """The CBLAS symbol prefix and the OpenBLAS (prefix, suffix) of numpy's bundled ILP64
    OpenBLAS, loaded for LLVM, or None."""
    import llvmlite.binding as llvm  # noqa: PLC0415 - numba's own dependency

    root = os.path.dirname(np.__file__)
    for patterns, prefix, (own, suffix) in _CANDIDATES:
        for pattern in patterns:
            for path in sorted(glob.glob(os.path.join(root, pattern))):
                try:
                    lib = ctypes.CDLL(path)
                    names = (f"{prefix}sgemm64_", f"{own}set_num_threads{suffix}")
                    if not all(hasattr(lib, name) for name in names):
                        continue
                    llvm.load_library_permanently(path)
                except OSError:
                    continue
                return prefix, (own, suffix)
    return None


_FOUND = _numpy_blas()
NUMPY_BLAS = _FOUND is not None
# The CBLAS symbols' prefix (other BLAS entries, such as linalg's gemv, are named with it).
CBLAS_PREFIX = _FOUND[0] if _FOUND is not None else None


def gemm(a, b, out):  # noqa: ANN001, ANN201
    """out = a @ b for 2-D float32/float64 arrays whose rows are contiguous; compiled code
    gets the BLAS call below, split across numba's threads when it is large."""
    np.dot(a, b, out)


def serial_gemm(a, b, out):  # noqa: ANN001, ANN201
    """:func:`gemm` on the calling thread only (the library's thread count untouched)."""
    np.dot(a, b, out)


@njit(cache=True, parallel=True, error_model="numpy")
def _split_gemm(a, b, out, parts):  # noqa: ANN001, ANN201
    """:func:`serial_gemm` of one block per thread: blocks of ``out``'s columns, or of its
    rows where it has fewer columns than rows."""
    m, n = out.shape
    if n >= m:
        width = -(-n // parts)
        width = -(-width // _COLUMN_ALIGN) * _COLUMN_ALIGN
        for p in prange(parts):
            j0 = min(p * width, n)
            j1 = min(j0 + width, n)
            if j0 < j1:
                serial_gemm(a, b[:, j0:j1], out[:, j0:j1])
    else:
        for p in prange(parts):
            i0 = m * p // parts
            i1 = m * (p + 1) // parts
            if i0 < i1:
                serial_gemm(a[i0:i1], b, out[i0:i1])


if NUMPY_BLAS:
    _i32, _i64, _ptr = types.int32, types.int64, types.voidptr

    def _external(letter: str, real: types.Type) -> types.ExternalFunction:
        signature = types.void(
            _i32, _i32, _i32, _i64, _i64, _i64, real, _ptr, _i64, _ptr, _i64, real, _ptr, _i64
        )
        return types.ExternalFunction(f"{CBLAS_PREFIX}{letter}gemm64_", signature)

    _GEMM = {
        types.float32: _external("s", types.float32),
        types.float64: _external("d", types.float64),
    }
    _own, _suffix = _FOUND[1]
    set_blas_threads = types.ExternalFunction(
        f"{_own}set_num_threads{_suffix}", types.void(types.int32)
    )
    get_blas_threads = types.ExternalFunction(f"{_own}get_num_threads{_suffix}", types.int32())
    # numba's own thread count, by the symbol its threading layer registers (numba's
    # jitted get_num_threads makes its callers uncacheable); registered when the layer
    # starts, which numba_module() makes sure of (with its OpenMP spin setting).
    numba_module()
    _numba_threads = types.ExternalFunction("get_num_threads", types.intp())

    @overload(serial_gemm)
    def _serial_gemm_overload(a, b, out):  # noqa: ANN001, ANN202
        call = _GEMM.get(getattr(a, "dtype", None))
        if call is None:
            return None
        real = np.float32 if a.dtype == types.float32 else np.float64

        def impl(a, b, out):  # noqa: ANN001, ANN202
            m, k = a.shape
            n = b.shape[1]
            size = a.itemsize
            call(
                _ROW_MAJOR,
                _NO_TRANS,
                _NO_TRANS,
                m,
                n,
                k,
                real(1.0),
                a.ctypes,
                max(a.strides[0] // size, 1),
                b.ctypes,
                max(b.strides[0] // size, 1),
                real(0.0),
                out.ctypes,
                max(out.strides[0] // size, 1),
            )

        return impl

    @overload(gemm)
    def _gemm_overload(a, b, out):  # noqa: ANN001, ANN202
        if getattr(a, "dtype", None) not in _GEMM:
            return None

        def impl(a, b, out):  # noqa: ANN001, ANN202
            if get_blas_threads() > 1:
                set_blas_threads(1)  # for the process: see the module docstring
            parts = _numba_threads()
            if parts > 1 and a.shape[0] * a.shape[1] * b.shape[1] >= SPLIT_PRODUCT:
                _split_gemm(a, b, out, parts)
            else:
                serial_gemm(a, b, out)

        return impl

else:

    def _dot_overload(a, b, out):  # noqa: ANN001, ANN202
        def impl(a, b, out):  # noqa: ANN001, ANN202
            np.dot(a, b, out)

        return impl

    overload(gemm)(_dot_overload)
    overload(serial_gemm)(_dot_overload)

    @njit(cache=True)
    def get_blas_threads() -> int:
        """(scipy's BLAS: its threads are not ours to set)"""
        return 1

    @njit(cache=True)
    def set_blas_threads(n: int) -> None:
        pass
