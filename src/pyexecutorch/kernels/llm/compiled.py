"""Compiled (numba) forms of the KV-cache operators: ``custom_sdpa`` and ``update_cache``.

Their start position is a scalar the program reads from its inputs at run time
(``item()`` of ``input_pos``), so these forms take it live (the ``live_scalars``
option): the arrays are checked and bound at load, the position per call, by the same
checks the reference kernels run (:mod:`.cache`, :mod:`.attention`).

Attention (float32, no mask) is one loop per query head over the filled prefix of its kv
head's cache (grouped-query heads read their kv head in place, nothing repeated), in the
official kernel's arithmetic, bit for bit as the numpy kernel computes it
(:mod:`.official_order`): the scores summed one product at a time over the head (eight
keys side by side), libm's ``expf`` and ``exp``, the weighted values one key at a time
(vectorized over the head), Eigen's other row panels apart. A decoded token (one query
row) is serial; a prefill splits its heads over the threads when it is large enough to
pay for a parallel region. Anything else (a mask, float16/bfloat16, int8) keeps the
reference.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit, prange

from pyexecutorch.jit.deferral import form_entry_point
from pyexecutorch.jit.math_functions import fma_f32
from pyexecutorch.jit.variants import can_thread, pick, serial_and_parallel
from pyexecutorch.kernels.llm.attention import _check_qkv, keys_attended
from pyexecutorch.kernels.llm.cache import check_cache_value, check_start_pos
from pyexecutorch.kernels.registry import KernelError, cell_step, compiled_form, offer

_F32 = np.dtype(np.float32)
# A prefill's attention splits over the threads from this many multiply-adds (scores and
# weighted sums: about 100 us on one thread); a decoded token's never does.
SPLIT_ATTENTION = 1 << 21


@njit(cache=True, error_model="numpy", inline="always")
def _special_sums(x, y, count, split, panel, out):  # noqa: ANN001, ANN202
    """Eigen's sums of ``x[r, :] * y[:]`` (``r`` in ``[0, count)``, float32 ``[R, K]`` and
    ``[K]``) for the rows its blocking does not sum one product at a time (see
    :func:`.official_order.products`): ``split`` marks the 4 rows from ``count - count % 8``
    summed in even and odd halves, ``panel`` a query column in a group of 4 (else the last
    ``count % 4`` rows are ``fmaf`` chains)."""
    depth = x.shape[1]
    r8, r4 = count - count % 8, count - count % 4
    if split:
        peeled = depth - depth % 8
        for r in range(r8, r8 + 4):
            even = np.float32(0.0)
            odd = np.float32(0.0)
            for k in range(0, peeled, 2):
                even = even + x[r, k] * y[k]
                odd = odd + x[r, k + 1] * y[k + 1]
            even = even + odd
            for k in range(peeled, depth):
                even = even + x[r, k] * y[k]
            out[r] = even
    quad = depth - depth % 4
    for r in range(r4, count):
        if panel:
            p0 = np.float32(0.0)
            p1 = np.float32(0.0)
            p2 = np.float32(0.0)
            p3 = np.float32(0.0)
            for k in range(0, quad, 4):
                p0 = p0 + x[r, k] * y[k]
                p1 = p1 + x[r, k + 1] * y[k + 1]
                p2 = p2 + x[r, k + 2] * y[k + 2]
                p3 = p3 + x[r, k + 3] * y[k + 3]
            total = (p0 + p1) + (p2 + p3)
            for k in range(quad, depth):
                total = total + x[r, k] * y[k]
        else:
            total = np.float32(0.0)
            for k in range(depth):
                total = fma_f32(x[r, k], y[k], total)
        out[r] = total


@njit(cache=True, error_model="numpy", inline="always")
def _key_sums(k, b, g, q, i, h, n, out):  # noqa: ANN001, ANN202
    """``out[j]`` = ``k[b, j, g] . q[b, i, h]`` for ``j < n``, summed one product at a time
    over the head (each product and sum rounded), eight keys' sums side by side."""
    d = q.shape[3]
    j = 0
    while j + 8 <= n:
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = np.float32(0.0)
        for t in range(d):
            qt = q[b, i, h, t]
            a0 = a0 + k[b, j, g, t] * qt
            a1 = a1 + k[b, j + 1, g, t] * qt
            a2 = a2 + k[b, j + 2, g, t] * qt
            a3 = a3 + k[b, j + 3, g, t] * qt
            a4 = a4 + k[b, j + 4, g, t] * qt
            a5 = a5 + k[b, j + 5, g, t] * qt
            a6 = a6 + k[b, j + 6, g, t] * qt
            a7 = a7 + k[b, j + 7, g, t] * qt
        out[j], out[j + 1], out[j + 2], out[j + 3] = a0, a1, a2, a3
        out[j + 4], out[j + 5], out[j + 6], out[j + 7] = a4, a5, a6, a7
        j += 8
    while j < n:
        a = np.float32(0.0)
        for t in range(d):
            a = a + k[b, j, g, t] * q[b, i, h, t]
        out[j] = a
        j += 1


def _attend(q, k, v, start, causal, scale, out, scores, acc):  # noqa: ANN001, ANN202
    """``out`` (B, S, Hq, D) = attention of ``q`` (B, S, Hq, D) over the caches ``k``, ``v``
    (B, L, Hkv, D), all float32 and C-contiguous, in the official kernel's arithmetic
    (:mod:`.official_order`, whose numpy form this is, query row by query row): row ``i``
    attends to positions ``[0, start + i]`` when ``causal``, else ``[0, start + S)``, of
    ``start + S <= 512``. ``scores`` (B * Hq, L) and ``acc`` (B * Hq, D) are scratch."""
    nb, ns, hq, d = q.shape
    hkv = k.shape[2]
    reps = hq // hkv
    n = start + ns
    block = 256 if ns >= 768 else (64 if ns >= 192 else 32)
    vector = 16 * (n // 16)
    for bh in prange(nb * hq):
        b = bh // hq
        h = bh - b * hq
        g = h // reps
        srow = scores[bh]
        arow = acc[bh]
        keys = k[b, :n, g]  # (n, D) strided
        values = v[b, :n, g]
        lanes = np.zeros(16, np.float32)
        for i in range(ns):
            first = (i // block) * block
            size = min(block, ns - first)
            panel = i - first < size - size % 4
            qrow = q[b, i, h]
            # the scores: one product at a time over the head, then Eigen's other rows
            _key_sums(k, b, g, q, i, h, n, srow)
            _special_sums(keys, qrow, n, panel and n % 8 >= 4, panel, srow)
            last = start + i if causal else n - 1
            best = np.float32(-np.inf)
            for j in range(n):
                x = srow[j] * scale
                if j > last:
                    x = np.float32(-np.inf)
                srow[j] = x
                if x > best or x != x:  # (a NaN score makes the whole row NaN)
                    best = x
            # exp: libm's expf in 16 lanes, then its double exp on the last keys
            for t in range(16):
                lanes[t] = np.float32(0.0)
            for j in range(vector):
                e = math.exp(srow[j] - best)
                srow[j] = e
                lanes[j % 16] = lanes[j % 16] + e
            total = np.float32(0.0)
            for t in range(16):
                total = total + lanes[t]
            for j in range(vector, n):
                wide = math.exp(np.float64(srow[j] - best))
                total = np.float32(np.float64(total) + wide)
                srow[j] = np.float32(wide)
            # the weighted values: one product at a time over the keys, then Eigen's other rows
            for t in range(d):
                arow[t] = np.float32(0.0)
            for j in range(n):
                w = srow[j]
                for t in range(d):  # (v indexed whole: a unit stride the loop vectorizes)
                    arow[t] = arow[t] + v[b, j, g, t] * w
            _special_sums(values.T, srow, d, panel and d % 8 >= 4, panel, arow)
            r = np.float32(1.0) / total
            for t in range(d):
                out[b, i, h, t] = arow[t] * r


ATTEND = serial_and_parallel(_attend, "llm_attend")


@njit(cache=True, error_model="numpy")
def _write_cache(value, cache, start):  # noqa: ANN001, ANN202
    """``cache[:, start : start + S] = value`` (both C-contiguous, one dtype)."""
    nb, ns = value.shape[0], value.shape[1]
    row = value.shape[2] * value.shape[3]
    length = cache.shape[1]
    src = value.reshape(nb * ns * row)
    dst = cache.reshape(nb * length * row)
    for b in range(nb):
        base = (b * length + start) * row
        first = b * ns * row
        for t in range(ns * row):
            dst[base + t] = src[first + t]


def _dense(*arrays: Any) -> bool:
    return all(isinstance(a, np.ndarray) and a.flags.c_contiguous for a in arrays)


def _attention_setup(
    query: Any, key: Any, value: Any, attn_mask: Any, is_causal: Any, scale: Any, out: Any
) -> tuple[bool, np.float32, np.ndarray, np.ndarray, int] | None:
    """(causal, scale, scores and sums scratch, the work deciding the parallel variant) of
    an attention the compiled loop computes, or None (the reference kernel runs)."""
    op = "custom_sdpa"
    if attn_mask is not None or not _dense(query, key, value, out):
        return None
    try:
        _check_qkv(op, query, key, value, allow_int8=False)
        keys_attended(op, query, key, 0, None)  # heads (the position is checked per call)
    except KernelError:
        return None  # the reference kernel raises it per call
    if query.dtype != _F32 or out.dtype != _F32 or out.shape != query.shape:
        return None
    nb, ns, hq, d = query.shape
    length = key.shape[1]
    factor = np.float32(scale if scale is not None else 1.0 / np.sqrt(d))
    scores = np.empty((nb * hq, length), _F32)
    acc = np.empty((nb * hq, d), _F32)
    work = nb * hq * ns * length * d
    return bool(is_causal), factor, scores, acc, work if ns > 1 and work >= SPLIT_ATTENTION else 0


@compiled_form("llama::custom_sdpa.out")
def _custom_sdpa_form(
    query: Any,
    key: Any,
    value: Any,
    start_pos: Any,
    attn_mask: Any,
    drpout_p: Any,
    is_causal: Any,
    scale: Any,
    out: Any,
    *,
    live_scalars: frozenset[int] = frozenset(),
) -> Any:
    """Float32 attention without a mask over the caches, its start position read per call."""
    op = "custom_sdpa"
    setup = _attention_setup(query, key, value, attn_mask, is_causal, scale, out)
    if setup is None:
        return None
    causal, factor, scores, acc, work = setup
    ns, length = query.shape[1], key.shape[1]
    # (compiled, or read from the disk cache, at load; the parallel one only with threads)
    load = (query, key, value, 0, causal, factor, out, scores, acc)
    kern = pick(ATTEND, work, load)
    q0, k0, v0, o0 = query, key, value, out

    def custom_sdpa(query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale, out):  # noqa: ANN001, ANN202
        start = int(start_pos)
        if start < 0 or start + ns > length:
            keys_attended(op, query, key, start, None)  # raises the reference's error
        if not (
            (query is q0 or _fits(query, q0))
            and (key is k0 or _fits(key, k0))
            and (value is v0 or _fits(value, v0))
            and (out is o0 or _fits(out, o0))
        ):
            from pyexecutorch.kernels.llm.attention import custom_sdpa_out  # noqa: PLC0415

            return custom_sdpa_out(
                query, key, value, start, attn_mask, drpout_p, is_causal, scale, out
            )
        kern(query, key, value, start, causal, factor, out, scores, acc)
        return out

    return offer(custom_sdpa, fills_outputs=True)


def _fits(given: Any, loaded: np.ndarray) -> bool:
    """An array of the load-time one's dtype and shape, C-contiguous (else: the reference)."""
    return (
        isinstance(given, np.ndarray)
        and given.shape == loaded.shape
        and given.dtype == loaded.dtype
        and given.flags.c_contiguous
    )


@compiled_form("llama::update_cache.out")
def _update_cache_form(
    value: Any, cache: Any, start_pos: Any, out: Any, *, live_scalars: frozenset[int] = frozenset()
) -> Any:
    """The new tokens' copy into the cache, its start position read per call."""
    op = "update_cache"
    if not _dense(value, cache):
        return None
    try:
        check_cache_value(op, "value", value, cache)
    except KernelError:
        return None  # the reference kernel raises it per call
    ns, length = value.shape[1], cache.shape[1]
    value0, cache0 = value, cache
    write = form_entry_point(_write_cache, (value, cache, 0))

    def update_cache(value, cache, start_pos, out):  # noqa: ANN001, ANN202
        start = int(start_pos)
        if start < 0 or start + ns > length:
            check_start_pos(op, start, ns, length)  # raises the reference's error
        if not (
            (value is value0 or _fits(value, value0)) and (cache is cache0 or _fits(cache, cache0))
        ):
            from pyexecutorch.kernels.llm.cache import update_cache_out  # noqa: PLC0415

            return update_cache_out(value, cache, start, out)
        write(value, cache, start)
        return out

    return update_cache


# ------------------------------------------------------------------------------------
# Inside a method compiled whole, the start position lives in a cell (a 1-element int64
# array, see kernels/prim/compiled_cells.py), read per call by these steps.

_ATTEND_SERIAL, _ATTEND_PARALLEL = ATTEND


@njit(cache=True, error_model="numpy")
def attend_at(q, k, v, cell, causal, scale, out, scores, acc):  # noqa: ANN001, ANN201
    """The attention at the start position in ``cell``; False (nothing written) where it
    is out of the cache, as the reference kernel raises."""
    start = cell[0]
    if start < 0 or start + q.shape[1] > k.shape[1]:
        return False
    _ATTEND_SERIAL(q, k, v, start, causal, scale, out, scores, acc)
    return True


@njit(cache=True, error_model="numpy")
def attend_at_parallel(q, k, v, cell, causal, scale, out, scores, acc):  # noqa: ANN001, ANN201
    """:func:`attend_at` with its heads split over the threads (a large prefill)."""
    start = cell[0]
    if start < 0 or start + q.shape[1] > k.shape[1]:
        return False
    _ATTEND_PARALLEL(q, k, v, start, causal, scale, out, scores, acc)
    return True


@njit(cache=True, error_model="numpy")
def write_cache_at(value, cache, cell):  # noqa: ANN001, ANN201
    """``update_cache`` at the start position in ``cell``; False (nothing written) where the
    tokens do not fit in the cache, as the reference kernel raises."""
    start = cell[0]
    if start < 0 or start + value.shape[1] > cache.shape[1]:
        return False
    _write_cache(value, cache, start)
    return True


@cell_step("llama::custom_sdpa.out")
def _custom_sdpa_cells(
    query: Any,
    key: Any,
    value: Any,
    start_pos: Any,
    attn_mask: Any,
    drpout_p: Any,
    is_causal: Any,
    scale: Any,
    out: Any,
) -> Any:
    setup = _attention_setup(query, key, value, attn_mask, is_causal, scale, out)
    if setup is None or not isinstance(start_pos, np.ndarray):
        return None
    causal, factor, scores, acc, work = setup
    function = attend_at_parallel if work and can_thread() else attend_at

    def refuse(query, key, value, start_pos, *rest):  # noqa: ANN001, ANN002, ANN202
        keys_attended("custom_sdpa", query, key, start_pos, None)  # the reference's error

    step = (query, key, value, start_pos, causal, factor, out, scores, acc)
    return offer(refuse, step=(function, step, True))


@cell_step("llama::update_cache.out")
def _update_cache_cells(value: Any, cache: Any, start_pos: Any, out: Any) -> Any:
    if not _dense(value, cache) or not isinstance(start_pos, np.ndarray):
        return None
    try:
        check_cache_value("update_cache", "value", value, cache)
    except KernelError:
        return None  # the reference kernel raises it per call
    if value.dtype != cache.dtype or value.dtype.kind not in "biuf":
        return None

    def refuse(value, cache, start_pos, out):  # noqa: ANN001, ANN202
        check_start_pos("update_cache", start_pos, value.shape[1], cache.shape[1])

    return offer(refuse, step=(write_cache_at, (value, cache, start_pos), True))
