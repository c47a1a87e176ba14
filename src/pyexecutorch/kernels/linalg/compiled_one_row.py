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

At more than one thread the columns are chunks that the calling thread and helper threads
take from one shared word (:mod:`.one_row_pool`: no parallel region, whose start and join
cost as much as a decoded token's linears saved). Imported only by the compiled tier.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit

from pyexecutorch.jit import simd, spin, variants
from pyexecutorch.kernels.linalg import one_row_pool as pool
from pyexecutorch.kernels.linalg.one_row_pool import (
    BIAS,
    BOUNDS,
    CHUNK_MASK,
    COUNT,
    DONE,
    DOZE_US,
    GEN_SHIFT,
    HELPERS,
    LOCK,
    NAP_US,
    OUT,
    PER,
    QUIT,
    SPIN_US,
    WORD,
    WORKERS,
    YIELD_US,
    K,
    N,
    W,
    X,
)

L = simd.lanes(np.float32)
# Weight rows streamed together (eight row streams, one output vector's load and store).
ROWS = 8
# Output columns a pass over the rows (8 KB of outputs, kept in L1 while the rows stream).
CHUNK = 2048
# Column chunks a thread at more than one thread (a thread late to a product leaves its
# chunks to the others); each chunk a contiguous run of columns, so the rows stream.
CHUNKS_PER_THREAD = 2
# Multiply-adds from which a product is shared with the helpers (~12 us of weights
# streamed at one thread; a hand-over costs ~1 us where the helper is polling).
SHARED_WORK = 1 << 16
# Spins of a caller waiting for the helpers' last chunks before it yields the CPU.
WAIT_SPINS = 2000
_THREADS = variants.threads_reader()


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


@njit(cache=True, error_model="numpy", inline="always")
def _bounds(mailbox):  # noqa: ANN001, ANN202
    """The float32 view of the mailbox's ``BOUNDS`` slot: the job's clamp (lo, hi)."""
    return mailbox[BOUNDS : BOUNDS + 1].view(np.float32)


@njit(cache=True, nogil=True, error_model="numpy")
def serve(mailbox, index, ticks_per_us):  # noqa: ANN001, ANN201
    """A helper thread's loop (see :mod:`.one_row_pool`): the chunks of each new job it can
    take, until ``QUIT``."""
    spin.fetch_add(mailbox, HELPERS, 1)
    last = spin.load(mailbox, WORD) >> GEN_SHIFT
    idle_since = spin.cycles()
    while spin.load(mailbox, QUIT) == 0:
        word = spin.load(mailbox, WORD)
        generation = word >> GEN_SHIFT
        if generation == last:
            waited = (spin.cycles() - idle_since) // ticks_per_us
            if waited < SPIN_US:
                spin.pause()
            elif waited < YIELD_US:
                spin.yield_cpu()
            elif waited < NAP_US:
                spin.sleep_us(50)
            else:
                spin.sleep_us(1000 if waited < DOZE_US else 10_000)
            continue
        last = generation
        if index + 1 < spin.load(mailbox, WORKERS):
            k = spin.load(mailbox, K)
            n = spin.load(mailbox, N)
            per = spin.load(mailbox, PER)
            count = spin.load(mailbox, COUNT)
            bounds = _bounds(mailbox)
            lo, hi = bounds[0], bounds[1]
            x = carray(spin.float32_at(spin.load(mailbox, X)), k)
            w = carray(spin.float32_at(spin.load(mailbox, W)), (k, n))
            bias = carray(spin.float32_at(spin.load(mailbox, BIAS)), n)
            out = carray(spin.float32_at(spin.load(mailbox, OUT)), n)
            vectors = n // L
            while (word >> GEN_SHIFT) == generation and (word & CHUNK_MASK) < count:
                seen = spin.compare_swap(mailbox, WORD, word, word + 1)
                if seen != word:  # another thread took it, or a newer job came
                    word = seen
                    continue
                v0 = (word & CHUNK_MASK) * per
                _columns(x, w, bias, out, lo, hi, v0 * L, min(v0 + per, vectors) * L)
                spin.fetch_add(mailbox, DONE, 1)
                word = spin.load(mailbox, WORD)
        idle_since = spin.cycles()
    spin.fetch_add(mailbox, HELPERS, -1)


@njit(cache=True, error_model="numpy")
def _cycles():  # noqa: ANN202
    return spin.cycles()


def mailbox():  # noqa: ANN201
    """The process's one-row mailbox (an int64 array every one-row step is given), its
    helper threads started at the first call: one fewer than numba's threads."""
    from pyexecutorch.jit import numba_env  # noqa: PLC0415

    numba = numba_env.numba_module()
    helpers = numba.config.NUMBA_NUM_THREADS - 1 if numba is not None else 0
    return pool.mailbox(serve, _cycles, helpers)


@njit(cache=True, error_model="numpy")
def _shared(x, w, bias, out, lo, hi, mailbox, workers):  # noqa: ANN001, ANN202
    """The product split into chunks the caller and ``workers - 1`` helpers take (the
    caller holds ``LOCK``)."""
    vectors = out.shape[0] // L
    count = min(vectors, CHUNKS_PER_THREAD * workers)
    per = (vectors + count - 1) // count
    count = (vectors + per - 1) // per
    spin.store(mailbox, X, x.ctypes.data)
    spin.store(mailbox, W, w.ctypes.data)
    spin.store(mailbox, BIAS, bias.ctypes.data)
    spin.store(mailbox, OUT, out.ctypes.data)
    spin.store(mailbox, K, x.shape[0])
    spin.store(mailbox, N, out.shape[0])
    spin.store(mailbox, PER, per)
    spin.store(mailbox, COUNT, count)
    spin.store(mailbox, WORKERS, workers)
    bounds = _bounds(mailbox)
    bounds[0] = lo
    bounds[1] = hi
    spin.store(mailbox, DONE, 0)
    generation = (spin.load(mailbox, WORD) >> GEN_SHIFT) + 1
    spin.store(mailbox, WORD, generation << GEN_SHIFT)  # publishes the job
    mine = 0
    chunk = spin.fetch_add(mailbox, WORD, 1) & CHUNK_MASK
    while chunk < count:
        v0 = chunk * per
        _columns(x, w, bias, out, lo, hi, v0 * L, min(v0 + per, vectors) * L)
        mine += 1
        chunk = spin.fetch_add(mailbox, WORD, 1) & CHUNK_MASK
    spins = 0
    while spin.load(mailbox, DONE) < count - mine:  # the helpers' chunks
        if spins < WAIT_SPINS:
            spin.pause()
            spins += 1
        else:
            spin.yield_cpu()


def one_row_linear(x, w, bias, out, lo, hi, mailbox):  # noqa: ANN001, ANN201
    """``out (n,) = clamp(bias + x (k,) @ w (k, n), lo, hi)``, all float32 and C-contiguous
    (``n`` whole vectors): from the bias, the products added in input order, each rounded
    once. ``mailbox``: :func:`mailbox`'s array (or any int64 array of
    :data:`~.one_row_pool.SLOTS` zeros: serially then), through which the helper threads
    take column chunks at more than one thread."""
    vectors = out.shape[0] // L
    workers = min(_THREADS(), spin.load(mailbox, HELPERS) + 1, vectors)
    if workers > 1 and spin.compare_swap(mailbox, LOCK, 0, 1) == 0:
        _shared(x, w, bias, out, lo, hi, mailbox, workers)
        spin.store(mailbox, LOCK, 0)
    else:
        _columns(x, w, bias, out, lo, hi, 0, out.shape[0])
    return out


def _serial(x, w, bias, out, lo, hi, mailbox):  # noqa: ANN001, ANN202
    """:func:`one_row_linear` on the calling thread alone (a product too small to share)."""
    _columns(x, w, bias, out, lo, hi, 0, out.shape[0])
    return out


ONE_ROW_LINEAR = (
    variants.njit_renamed(_serial, "one_row_linear", error_model="numpy"),
    variants.njit_renamed(one_row_linear, "one_row_linear_shared", error_model="numpy"),
)


def form(work: int):  # noqa: ANN201
    """The form of :data:`ONE_ROW_LINEAR` for a product of ``work`` multiply-adds: shared
    from :data:`SHARED_WORK` where numba has more than one thread, else serial."""
    return ONE_ROW_LINEAR[1] if work >= SHARED_WORK and variants.can_thread() else ONE_ROW_LINEAR[0]
