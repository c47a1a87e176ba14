"""Matrix products inside compiled code, on numpy's own BLAS (the compiled tier only).

numba's ``np.dot`` calls BLAS through scipy's bindings, and scipy ships an OpenBLAS
of its own: on the small products of tiny models it multiplies 1.5-2x slower than
the one numpy ships (measured here: 8x27 @ 27x1024 22.6 us against numpy's 16.5).
So compiled code calls numpy's library itself, by symbol: numpy's wheels bundle an
ILP64 OpenBLAS whose CBLAS entry points are named ``scipy_cblas_<x>gemm64_``, which
LLVM resolves once the library is loaded into the process (numpy has loaded it
already; this makes its symbols visible to compiled code). Calls by symbol name keep
the callers cacheable on disk. The thread setting reaches it as it reaches numpy.

Threads: a product under ``SERIAL_PRODUCT`` multiply-adds runs on one thread
whatever the setting. OpenBLAS would split a CNN's products (its own limit is far
lower) and its workers then spin for a long while after each call, on the cores that
compiled loops' parallel regions want next: at two threads, a parallel loop and a
BLAS call of a small convolution, alternated, took 60+ ms a pair on this 2-core
machine (each alone: well under a millisecond), against about 1 ms with the product
on one thread. The library's thread count is set around such a call (cheap: a store).

Where numpy's library is not found (another build of numpy), :func:`gemm` is
numba's ``np.dot``, which needs scipy.
"""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np
from numba import types
from numba.extending import overload

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
# Products with fewer multiply-adds (m*n*k) run on one BLAS thread (see above).
SERIAL_PRODUCT = 1 << 22


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
    gets the BLAS call below."""
    np.dot(a, b, out)


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
    _set_threads = types.ExternalFunction(
        f"{_own}set_num_threads{_suffix}", types.void(types.int32)
    )
    _get_threads = types.ExternalFunction(f"{_own}get_num_threads{_suffix}", types.int32())

    @overload(gemm)
    def _gemm_overload(a, b, out):  # noqa: ANN001, ANN202
        call = _GEMM.get(getattr(a, "dtype", None))
        if call is None:
            return None
        real = np.float32 if a.dtype == types.float32 else np.float64

        def impl(a, b, out):  # noqa: ANN001, ANN202
            m, k = a.shape
            n = b.shape[1]
            size = a.itemsize
            threads = _get_threads()
            serial = threads > 1 and m * n * k < SERIAL_PRODUCT
            if serial:
                _set_threads(1)
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
            if serial:
                _set_threads(threads)

        return impl

else:

    @overload(gemm)
    def _gemm_overload(a, b, out):  # noqa: ANN001, ANN202
        def impl(a, b, out):  # noqa: ANN001, ANN202
            np.dot(a, b, out)

        return impl
