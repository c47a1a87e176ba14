"""Products inside compiled code that are matrix-vector ones, on numpy's own BLAS.

A transformer decoding one token multiplies one row by each weight. OpenBLAS's
``sgemm`` with one row still packs the whole weight before multiplying, where
``sgemv`` streams it once: measured here, (1, 256) @ (256, 1024) took 185 us
through ``cblas_sgemm`` against 40 us through ``sgemv`` (numpy's own matmul picks
gemv for such shapes). :func:`product` calls gemv for one row (``a``) or one
column (``b``) and :func:`pyexecutorch.jit.blas.gemm` otherwise. It is
called by symbol, as ``gemm`` is, so its callers stay cacheable. Without numpy's
library it is numba's ``np.dot``, as ``gemm`` is. gemv runs on one OpenBLAS thread
whatever the setting, for the reason ``gemm`` does (one pool, numba's, spins): like
``gemm``, it leaves the library at one thread for the process.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from pyexecutorch.jit import blas
from pyexecutorch.jit.blas import NUMPY_BLAS, gemm

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def product(a, b, out):  # noqa: ANN001, ANN201
    """out = a @ b for 2-D float32/float64 arrays whose rows are contiguous and whose
    inner size is not 0; compiled code gets the BLAS calls below."""
    np.dot(a, b, out)


def serial_product(a, b, out):  # noqa: ANN001, ANN201
    """:func:`product` for a caller that has set the library to one thread already (the
    threads of a ``prange`` splitting a product): the library's thread count is one
    process-wide setting, which threads setting and restoring it around their own calls
    would race on (one thread's gemv then ran on the library's threads too)."""
    np.dot(a, b, out)


def row_product(a, b, out):  # noqa: ANN001, ANN201
    """:func:`product` of one row (``a`` (1, k)), chosen at load: compiled code gets the
    gemv call alone, whose compilation is a fraction of :func:`product`'s (that one also
    compiles the gemm of several rows and its split over the threads: about 2 of a CNN's
    cold load's seconds of CPU, for its one classifier row)."""
    np.dot(a, b, out)


if NUMPY_BLAS:
    _i32, _i64, _ptr = types.int32, types.int64, types.voidptr

    def _external(letter: str, real: types.Type) -> types.ExternalFunction:
        # cblas_?gemv(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy), ILP64
        signature = types.void(
            _i32, _i32, _i64, _i64, real, _ptr, _i64, _ptr, _i64, real, _ptr, _i64
        )
        return types.ExternalFunction(f"{blas.CBLAS_PREFIX}{letter}gemv64_", signature)

    get_blas_threads = blas.get_blas_threads
    set_blas_threads = blas.set_blas_threads
    _GEMV = {
        types.float32: _external("s", types.float32),
        types.float64: _external("d", types.float64),
    }

    def _gemv_impl(a, b, pin):  # noqa: ANN001, ANN202
        """The implementation of :func:`product` (``pin``: it sets the library to one
        thread) or :func:`serial_product` for these types, or None."""
        call = _GEMV.get(getattr(a, "dtype", None))
        if call is None:
            return None
        real = np.float32 if a.dtype == types.float32 else np.float64
        whole = gemm if pin else blas.serial_gemm

        def impl(a, b, out):  # noqa: ANN001, ANN202
            m, k = a.shape
            n = b.shape[1]
            size = a.itemsize
            if m != 1 and n != 1:
                whole(a, b, out)
                return
            if pin and get_blas_threads() > 1:
                set_blas_threads(1)  # for the process, as jit.blas's gemm does
            if m == 1:  # out[0] = b^T a[0]: b read as its (k, n) rows
                ldb = max(b.strides[0] // size, 1)
                one, zero = real(1.0), real(0.0)
                call(_ROW_MAJOR, _TRANS, k, n, one, b.ctypes, ldb, a.ctypes, 1, zero, out.ctypes, 1)
            elif n == 1:  # out[:, 0] = a b[:, 0]: b's and out's column strided by their rows
                lda = max(a.strides[0] // size, 1)
                inc_b = max(b.strides[0] // size, 1)
                inc_out = max(out.strides[0] // size, 1)
                one, zero = real(1.0), real(0.0)
                call(
                    _ROW_MAJOR,
                    _NO_TRANS,
                    m,
                    k,
                    one,
                    a.ctypes,
                    lda,
                    b.ctypes,
                    inc_b,
                    zero,
                    out.ctypes,
                    inc_out,
                )

        return impl

    @overload(product)
    def _product_overload(a, b, out):  # noqa: ANN001, ANN202
        return _gemv_impl(a, b, True)

    @overload(row_product)
    def _row_product_overload(a, b, out):  # noqa: ANN001, ANN202
        call = _GEMV.get(getattr(a, "dtype", None))
        if call is None:
            return None
        real = np.float32 if a.dtype == types.float32 else np.float64

        def impl(a, b, out):  # noqa: ANN001, ANN202
            # product's one-row branch: out[0] = b^T a[0], b read as its (k, n) rows
            if get_blas_threads() > 1:
                set_blas_threads(1)  # for the process, as product does
            k = a.shape[1]
            n = b.shape[1]
            ldb = max(b.strides[0] // a.itemsize, 1)
            one, zero = real(1.0), real(0.0)
            call(_ROW_MAJOR, _TRANS, k, n, one, b.ctypes, ldb, a.ctypes, 1, zero, out.ctypes, 1)

        return impl

    @overload(serial_product)
    def _serial_product_overload(a, b, out):  # noqa: ANN001, ANN202
        return _gemv_impl(a, b, False)

else:

    def _dot_overload(a, b, out):  # noqa: ANN001, ANN202
        def impl(a, b, out):  # noqa: ANN001, ANN202
            np.dot(a, b, out)

        return impl

    overload(product)(_dot_overload)
    overload(serial_product)(_dot_overload)
    overload(row_product)(_dot_overload)
