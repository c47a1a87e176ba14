"""Compiled (numba) forms of matrix products: mm, bmm, addmm.

A BLAS call through numpy costs about a microsecond before it multiplies
anything, and ``addmm`` adds the bias in a second call; on the matrices of
tiny models (a few thousand multiply-adds) that is most of the time. Below
:data:`MAX_MACS` multiply-adds a product is one loop here: each output row
accumulates ``a[i, k] * b[k, :]`` over ``k`` (the inner loop runs along
contiguous rows, which the compiler vectorizes without reordering any sum),
then adds the bias, as the numpy kernel does. Larger products stay on BLAS.
Inside a whole compiled method, larger products up to :data:`WHOLE_BLAS_MAX_MACS`
are one compiled call of BLAS (numpy's own library, see
:mod:`pyexecutorch.jit.blas`) and the bias loop, a step like the
others, so that transformer blocks compile whole. Where compiled code can only reach
scipy's BLAS (1.1-2x slower on small products), only products up to 2**18
multiply-adds are steps.
A float16 ``addmm`` with constant weights and bias (a linear layer) sums in
float32 over weights converted once at load and rounds each output once, as
the numpy kernel computes it (:mod:`pyexecutorch.jit.half`).
Imported only by the compiled tier; ``linalg.py`` stays the reference.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
from numba import njit, prange

from pyexecutorch.jit.arrays import FLOATS, contiguous
from pyexecutorch.jit.blas import NUMPY_BLAS, SPLIT_PRODUCT, get_blas_threads, set_blas_threads
from pyexecutorch.jit.deferral import form_entry_point
from pyexecutorch.jit.half import HALF_TO_FLOAT, half_bits
from pyexecutorch.jit.variants import can_thread, choose, pick, serial_and_parallel, threads_reader
from pyexecutorch.kernels.linalg.compiled_gemv import product, row_product, serial_product
from pyexecutorch.kernels.linalg.linalg import addmm as reference_addmm
from pyexecutorch.kernels.registry import compiled_form, fast_path_of, offer

_HALF = np.dtype(np.float16)

# Above this many multiply-adds one BLAS call costs less than the loop below
# (measured on float32, one thread; see the report of issue 14).
MAX_MACS = 1 << 10
# Inside a whole compiled method a BLAS call would also cost its instruction's
# Python call: the loop serves up to this many (forms called with ``whole=True``).
WHOLE_MAX_MACS = 1 << 13


def _matmul(a, b, bias, out, has_bias):  # noqa: ANN001, ANN201
    """out (batch, n, p) = a (batch, n, k) @ b (batch, k, p) [+ bias (n, p)]."""
    batch, n, k = a.shape
    p = b.shape[2]
    for row in prange(batch * n):  # noqa: B020 - prange is range when serial
        g = row // n
        i = row - g * n
        acc = out[g, i]  # accumulated in the output's dtype, as BLAS does
        acc[:] = 0
        for kk in range(k):
            av = a[g, i, kk]
            for j in range(p):
                acc[j] += av * b[g, kk, j]
        if has_bias:
            for j in range(p):
                acc[j] += bias[i, j]
    return out


MATMUL = serial_and_parallel(_matmul, "small_matmul")

# A BLAS for compiled code: numpy's own, else numba's np.dot through scipy's.
HAS_BLAS = NUMPY_BLAS or importlib.util.find_spec("scipy") is not None
# Up to this many multiply-adds a product inside a whole method is a BLAS step: on
# scipy's slower BLAS the difference costs at most a few microseconds, less than the
# instruction calls saved; on numpy's own there is no difference.
WHOLE_BLAS_MAX_MACS = 1 << 62 if NUMPY_BLAS else 1 << 18


# One-row products from this many multiply-adds split their columns over the threads in
# force at each call, a gemv each: one gemv streams the weight on one thread (OpenBLAS's
# own threads stay off, see compiled_gemv), and a decoded token's products are
# memory-bound streams that gain from a second core's (XNNPACK splits its fully connected
# output columns over its threads too). At one thread the same function makes one gemv
# call, no parallel region.
SPLIT_GEMV_MACS = 1 << 16


def _blas_matmul(a, b, bias, out, has_bias, blocks=1):  # noqa: ANN001, ANN201
    """out (batch, n, p) = a @ b [+ bias (1 or n, p)]: one BLAS product per batch (gemv
    for one row or column); a row's columns split into ``blocks`` gemv calls (run over the
    threads by the parallel compilation: see :func:`blas_form`)."""
    p = b.shape[2]
    per = ((p + blocks - 1) // blocks + 15) // 16 * 16  # (whole cache lines of float32)
    if blocks > 1 and get_blas_threads() > 1:
        set_blas_threads(1)  # here, for the process: the split's threads must not set it
    for g in range(a.shape[0]):
        o = out[g]
        if blocks > 1:
            for c in prange(blocks):  # noqa: B020 - prange is range when serial
                j0, j1 = c * per, min(p, (c + 1) * per)
                if j0 < j1:
                    serial_product(a[g], b[g][:, j0:j1], o[:, j0:j1])
        else:
            product(a[g], b[g], o)
        if has_bias:
            _add_bias(o, bias)
    return out


@njit(cache=True, error_model="numpy", inline="always")
def _add_bias(o, bias):  # noqa: ANN001, ANN202
    """o (n, p) += bias (1 or n, p)."""
    rows = bias.shape[0]
    for i in range(o.shape[0]):
        add = bias[i] if rows > 1 else bias[0]
        row = o[i]
        for j in range(row.shape[0]):
            row[j] += add[j]


@njit(cache=True, parallel=True, error_model="numpy")
def _blas_batches(a, b, bias, out, has_bias):  # noqa: ANN001, ANN202
    """:func:`_blas_matmul` with the batch's products shared out over the threads in force,
    each one serial BLAS call, as one thread computes it (a ViT's attention: 6 heads of
    197 x 64 @ 64 x 197, each split in two took longer at two threads than at one)."""
    if get_blas_threads() > 1:
        set_blas_threads(1)  # for the process: see blas_matmul
    for g in prange(a.shape[0]):
        o = out[g]
        serial_product(a[g], b[g], o)
        if has_bias:
            _add_bias(o, bias)
    return out


BLAS_MATMUL = serial_and_parallel(_blas_matmul, "blas_matmul")
blas_matmul = BLAS_MATMUL[0]
_THREADS = threads_reader()
_BLAS_PARALLEL = BLAS_MATMUL[1]


@njit(cache=True, error_model="numpy")
def blas_matmul_one_row(a, b, bias, out, has_bias, blocks=1):  # noqa: ANN001, ANN201
    """:func:`_blas_matmul` of one row (``n`` = 1) in one block, as :func:`blas_form` chooses
    it at load: one gemv per batch, the same calls as the general form's, which also
    compiles the gemm of several rows and its split over the threads (a CNN's classifier
    compiled in 0.5 s of CPU here against 2.5 there; ``blocks`` is not read)."""
    for g in range(a.shape[0]):
        o = out[g]
        row_product(a[g], b[g], o)
        if has_bias:
            add = bias[0]  # (one row: the bias's first row, as the general form reads it)
            row = o[0]
            for j in range(row.shape[0]):
                row[j] += add[j]
    return out


@njit(cache=True, error_model="numpy")
def blas_matmul_at_threads(a, b, bias, out, has_bias, most):  # noqa: ANN001, ANN201
    """:func:`_blas_matmul` with its columns in as many blocks as threads in force now (at
    most ``most``): one block, one gemv and no parallel region, at one thread."""
    threads = _THREADS()
    blocks = min(threads, most) if threads > 1 else 1
    return _BLAS_PARALLEL(a, b, bias, out, has_bias, blocks)


@njit(cache=True, error_model="numpy")
def blas_batches_at_threads(a, b, bias, out, has_bias, blocks=1):  # noqa: ANN001, ANN201
    """:func:`_blas_matmul` of several products: one product a thread at a time where the
    threads in force share the batch evenly (or it has 4 products a thread or more), else
    the serial form, whose large products split over the threads (``blocks`` unread)."""
    threads = _THREADS()
    batch = a.shape[0]
    if threads > 1 and (batch % threads == 0 or batch >= 4 * threads):
        return _blas_batches(a, b, bias, out, has_bias)
    return blas_matmul(a, b, bias, out, has_bias)


def blas_form(n: int, k: int, p: int, batch: int = 1) -> tuple[Any, int]:
    """(the dispatcher, its last argument) for products (n, k) @ (k, p): for one row of
    enough work where numba can run several threads, :func:`blas_matmul_at_threads` and
    the most blocks its columns split into (whole cache lines each); else the serial
    :data:`BLAS_MATMUL` and one block (for one row :func:`blas_matmul_one_row`, which
    compiles only the gemv). Only widths a multiple of 16 split: OpenBLAS's
    gemv sums the columns of such a width as it sums them in slices of 16, bit for bit
    (measured on widths 96 to 32000); a width of 1000 it sums otherwise in places."""
    if n != 1:
        if batch > 1 and batch * n * k * p >= SPLIT_PRODUCT and can_thread():
            return blas_batches_at_threads, 1
        return BLAS_MATMUL[0], 1
    if k * p < SPLIT_GEMV_MACS or p % 16 or p < 32 or not can_thread():
        return blas_matmul_one_row, 1
    return blas_matmul_at_threads, p // 16


@njit(cache=True, error_model="numpy")
def half_linear(a, b, bias, out, acc):  # noqa: ANN001, ANN201
    """out (n, p) = a (n, k) @ b (k, p) + bias (n, p): ``a``, ``out`` float16 bits, ``b``
    and ``bias`` float32; each row summed in float32 (``acc``), then rounded once."""
    n, k = a.shape
    p = b.shape[1]
    for i in range(n):
        acc[:] = 0
        for kk in range(k):
            av = HALF_TO_FLOAT[a[i, kk]]
            for j in range(p):
                acc[j] += av * b[kk, j]
        for j in range(p):
            out[i, j] = half_bits(acc[j] + bias[i, j])
    return out


def _half_addmm(bias: Any, a: Any, b: Any, out: Any) -> Any:
    """The compiled float16 ``addmm`` on constant ``b`` and ``bias``, or None."""
    for x in (a, b, out, bias):
        if not isinstance(x, np.ndarray) or x.dtype != _HALF:
            return None
    if not (a.ndim == b.ndim == out.ndim == 2 and a.flags.c_contiguous and out.flags.c_contiguous):
        return None
    n, k = a.shape
    p = b.shape[1]
    if b.shape[0] != k or out.shape != (n, p) or out.size == 0 or k == 0:
        return None
    # the numpy kernel's float32 conversions cost far more than a BLAS call: the loop
    # serves standalone too up to the whole-method size
    if n * k * p > WHOLE_MAX_MACS or not out.flags.writeable:
        return None
    if b.flags.writeable or bias.flags.writeable or np.shares_memory(out, a):
        return None  # weights that can change are left to numpy
    try:
        full = np.ascontiguousarray(np.broadcast_to(bias, out.shape), np.float32)
    except ValueError:
        return None
    load = (a.view(np.uint16), np.ascontiguousarray(b, np.float32), full, out.view(np.uint16))
    load += (np.empty(p, np.float32),)
    kern = form_entry_point(half_linear, load)
    bias0, a0, b0, out0 = bias, a, b, out

    def addmm(bias, a, b, beta, alpha, out):  # noqa: ANN001, ANN202
        if bias is not bias0 or a is not a0 or b is not b0 or out is not out0:
            return reference_addmm(bias, a, b, beta, alpha, out)
        kern(*load)
        return out

    return offer(addmm, step=(half_linear, load), fills_outputs=True)


def _array(a: Any, dtype: np.dtype, ndim: int, strided: bool = False) -> bool:
    # C-contiguous: views made at load are views, never stale copies (a 2-D array of
    # any strides has one too: a[None])
    return (
        isinstance(a, np.ndarray)
        and a.dtype == dtype
        and a.ndim == ndim
        and (a.flags.c_contiguous or strided)
    )


def _product(a: Any, b: Any, out: Any, ndim: int) -> tuple | None:
    """``(batch, n, k, p)`` of a float product ``a @ b`` into planned ``out``, or None."""
    if not isinstance(a, np.ndarray) or a.dtype not in FLOATS:
        return None
    dt = a.dtype
    if not (_array(a, dt, ndim, ndim == 2) and _array(b, dt, ndim) and _array(out, dt, ndim)):
        return None
    if ndim == 3 and a.shape[0] != b.shape[0]:
        return None
    if a.shape[-1] != b.shape[-2] or out.shape != a.shape[:-1] + b.shape[-1:]:
        return None
    if not out.flags.c_contiguous or np.shares_memory(out, a) or np.shares_memory(out, b):
        return None
    batch = a.shape[0] if ndim == 3 else 1
    n, k, p = a.shape[-2], a.shape[-1], b.shape[-1]
    if out.size == 0 or k == 0:
        return None
    return batch, n, k, p


def _loop_or_blas(a: np.ndarray, dims: tuple, whole: bool) -> str | None:
    """ "loop" (the loop above), "blas" (:func:`blas_matmul`) or None (numpy's fast path)."""
    batch, n, k, p = dims
    if batch * n * k * p <= (WHOLE_MAX_MACS if whole else MAX_MACS):
        return "loop"
    if not (HAS_BLAS and whole and a.flags.c_contiguous):  # (BLAS takes C-contiguous ones)
        return None
    return "blas" if batch * n * k * p <= WHOLE_BLAS_MAX_MACS else None


def _bind(
    a0: np.ndarray, b0: np.ndarray, o0: np.ndarray, dims: tuple, bias: np.ndarray | None, how: str
):  # noqa: ANN202
    """``run(a, b, out)`` calling the loop or BLAS on 3-D views made at load for the
    planned arrays (``bias``: (n, p) for the loop, (1 or n, p) for BLAS)."""
    batch, n, k, p = dims
    sa, sb, so = (batch, n, k), (batch, k, p), (batch, n, p)
    av = a0[None] if a0.ndim == 2 else contiguous(a0, sa)
    bv, ov = contiguous(b0, sb), o0.reshape(so)
    has_bias = bias is not None
    bias = np.zeros((1, 1), a0.dtype) if bias is None else bias
    load = (av, bv, bias, ov, has_bias)
    if how == "loop":
        dispatcher = choose(MATMUL, batch * n * k * p)
        kern = pick(MATMUL, batch * n * k * p, load)
    else:
        dispatcher, blocks = blas_form(n, k, p, batch)
        load += (blocks,)
        kern = form_entry_point(dispatcher, load)
    extra = load[5:]  # (BLAS's gemv blocks)

    def run(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
        kern(
            av if a is a0 else contiguous(a, sa),
            bv if b is b0 else contiguous(b, sb),
            bias,
            ov if out is o0 else out.reshape(so),
            has_bias,
            *extra,
        )
        return out

    return offer(run, step=(dispatcher, load), fills_outputs=True)  # (on the planned arrays)


@compiled_form("aten::mm.out")
def _mm_form(a: Any, b: Any, out: Any, *, whole: bool = False) -> Any:
    """A float32/float64 2-D product: small ones a loop; in a whole method, BLAS; or None."""
    dims = _product(a, b, out, 2)
    how = None if dims is None else _loop_or_blas(a, dims, whole)
    return None if how is None else _bind(a, b, out, dims, None, how)


@compiled_form("aten::bmm.out")
def _bmm_form(a: Any, b: Any, out: Any, *, whole: bool = False) -> Any:
    """A float32/float64 batched product: small ones a loop; in a whole method, BLAS; or None."""
    dims = _product(a, b, out, 3)
    how = None if dims is None else _loop_or_blas(a, dims, whole)
    return None if how is None else _bind(a, b, out, dims, None, how)


@compiled_form("aten::addmm.out")
def _addmm_form(
    bias: Any, a: Any, b: Any, beta: Any, alpha: Any, out: Any, *, whole: bool = False
) -> Any:
    """``bias + a @ b`` for a float product and a constant bias: small ones a loop; in a
    whole method, BLAS and the bias loop; or None."""
    if beta != 1 or alpha != 1 or isinstance(beta, bool) or isinstance(alpha, bool):
        return None
    if isinstance(a, np.ndarray) and a.dtype == _HALF:
        return _half_addmm(bias, a, b, out)
    dims = _product(a, b, out, 2)
    if dims is None or not isinstance(bias, np.ndarray) or bias.dtype != a.dtype:
        return None
    if bias.flags.writeable or np.shares_memory(out, bias):
        return None  # a bias that can change is left to numpy
    how = _loop_or_blas(a, dims, whole)
    if how is None:
        return None
    if how == "blas" and bias.shape in ((out.shape[1],), (1, out.shape[1])):
        full = np.ascontiguousarray(bias.reshape(1, -1))  # one row, added to every row
    else:
        try:
            full = np.ascontiguousarray(np.broadcast_to(bias, out.shape))
        except ValueError:
            return None
    run = _bind(a, b, out, dims, full, how)
    bias0 = bias

    def addmm(bias, a, b, beta, alpha, out):  # noqa: ANN001, ANN202
        if bias is not bias0:
            np.add(np.matmul(a, b, out=out), bias, out=out)
            return out
        return run(a, b, out)

    return offer(addmm, step=fast_path_of(run).step, fills_outputs=True)
