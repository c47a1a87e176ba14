"""Float32 linear layers of one row (a decoded token), in XNNPACK's order of sums.

A transformer decoding a token multiplies one row by every weight: each weight element
is read once and used for one multiply-add, so the product runs at the speed the weight
streams in. Here the weight ``[k, n]`` (input rows, output columns: the layout the
compiled plans already keep for BLAS, so nothing more is held) streams :data:`ROWS` rows
at a time, each row read front to back: each output vector is loaded once for those
rows, gets their fused multiply-adds in input order, and is stored. On a Sapphire Rapids
core, over the weights of an LLM's four layers (59 MB), 6-7% less CPU than OpenBLAS's
gemv in alternation (one row at a time was slower than OpenBLAS; 8 and 16 rows alike).

Each output is its bias, then the products added in input order, each rounded once
(``fma``), then clamped: the order XNNPACK's float32 GEMM computes a fully connected
node in (``backends/xnnpack/nodes.py``, ``sequential_fma_product``), so the result is
the official delegate's bit for bit, where OpenBLAS's is not (denormals aside: the
delegate flushes them, as the numpy tier's product does not either).

At more than one thread the columns are jobs the threads take from a counter (a thread
the system deschedules delays the product by one job, not by a static half).
Imported only by the compiled tier.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pyexecutorch.jit import simd, variants

L = simd.lanes(np.float32)
# Weight rows streamed together (eight row streams, one output vector's load and store).
ROWS = 8
# Output columns a pass over the rows (8 KB of outputs, kept in L1 while the rows stream).
CHUNK = 2048
# Jobs a thread at more than one thread: each take is an atomic add on a shared line.
JOBS_PER_THREAD = 8
_THREADS = variants.threads_reader()
_take = variants.job_taker()


def fits(k: int, n: int) -> bool:
    """Whether a (1, k) @ (k, n) product runs here: whole vectors of outputs."""
    return k > 0 and n > 0 and n % L == 0


@njit(cache=True, error_model="numpy")
def _columns(x, w, bias, out, lo, hi, c0, c1):  # noqa: ANN001, ANN202
    """Outputs ``c0 .. c1`` (whole vectors): a pass of :data:`CHUNK` columns at a time."""
    k = x.shape[0]
    n = out.shape[0]
    xp = simd.pointer(x)
    wp = simd.pointer(w)
    bp = simd.pointer(bias)
    op = simd.pointer(out)
    low = simd.splat(np.float32(lo))
    high = simd.splat(np.float32(hi))
    for j0 in range(c0, c1, CHUNK):
        j1 = min(j0 + CHUNK, c1)
        for j in range(j0, j1, L):
            simd.store(op, j, simd.load(bp, j))
        i = 0
        while i + ROWS <= k:
            x0 = simd.splat(xp[i])
            x1 = simd.splat(xp[i + 1])
            x2 = simd.splat(xp[i + 2])
            x3 = simd.splat(xp[i + 3])
            x4 = simd.splat(xp[i + 4])
            x5 = simd.splat(xp[i + 5])
            x6 = simd.splat(xp[i + 6])
            x7 = simd.splat(xp[i + 7])
            r = i * n
            for j in range(j0, j1, L):
                acc = simd.load(op, j)
                acc = simd.fma(x0, simd.load(wp, r + j), acc)
                acc = simd.fma(x1, simd.load(wp, r + n + j), acc)
                acc = simd.fma(x2, simd.load(wp, r + 2 * n + j), acc)
                acc = simd.fma(x3, simd.load(wp, r + 3 * n + j), acc)
                acc = simd.fma(x4, simd.load(wp, r + 4 * n + j), acc)
                acc = simd.fma(x5, simd.load(wp, r + 5 * n + j), acc)
                acc = simd.fma(x6, simd.load(wp, r + 6 * n + j), acc)
                acc = simd.fma(x7, simd.load(wp, r + 7 * n + j), acc)
                simd.store(op, j, acc)
            i += ROWS
        while i < k:
            xi = simd.splat(xp[i])
            r = i * n
            for j in range(j0, j1, L):
                simd.store(op, j, simd.fma(xi, simd.load(wp, r + j), simd.load(op, j)))
            i += 1
        for j in range(j0, j1, L):
            simd.store(op, j, simd.clamp(simd.load(op, j), low, high))


@njit(cache=True, error_model="numpy")
def _split(vectors, jobs):  # noqa: ANN001, ANN202
    """(workers, vectors a job, jobs) on the threads in force, the counter reset."""
    threads = _THREADS()
    count = min(vectors, JOBS_PER_THREAD * threads) if threads > 1 else 1
    per = (vectors + count - 1) // count
    jobs[0] = 0
    return min(threads, count), per, (vectors + per - 1) // per


def one_row_linear(x, w, bias, out, lo, hi, jobs):  # noqa: ANN001, ANN201
    """``out (n,) = clamp(bias + x (k,) @ w (k, n), lo, hi)``, all float32 and C-contiguous
    (``n`` whole vectors): from the bias, the products added in input order, each rounded
    once. ``jobs`` (1,) int64: the threads' job counter."""
    vectors = out.shape[0] // L
    workers, per, count = _split(vectors, jobs)
    for _ in prange(workers):  # noqa: B020 - prange is range when serial
        job = _take(jobs)
        while job < count:
            v0 = job * per
            _columns(x, w, bias, out, lo, hi, v0 * L, min(v0 + per, vectors) * L)
            job = _take(jobs)
    return out


ONE_ROW_LINEAR = variants.serial_and_parallel(one_row_linear, "one_row_linear")
