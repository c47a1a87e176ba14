"""Compiled (numba) forms of the KV-cache operators: ``custom_sdpa`` and ``update_cache``.

Their start position is a scalar the program reads from its inputs at run time
(``item()`` of ``input_pos``), so these forms take it live (the ``live_scalars``
option): the arrays are checked and bound at load, the position per call, by the same
checks the reference kernels run (:mod:`.cache`, :mod:`.attention`).

Attention (float32, no mask) is one loop per query head: the scores of one query row
against the filled prefix of its kv head's cache (grouped-query heads read their kv
head in place, nothing repeated), their softmax, and the weighted sum of the values,
in float32 as the reference computes them (dot products in SIMD lanes: sums in another
order than BLAS's, within a few float32 ulps). A decoded token (one query row) is
serial; a prefill splits its heads over the threads when it is large enough to pay for
a parallel region. The softmax's exponentials are taken a vector at a time
(``simd.exp``: within one ulp of the correctly rounded value, as numpy's). Anything else (a mask, float16/bfloat16, int8) keeps the reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

from pyexecutorch.jit import simd
from pyexecutorch.jit.deferral import form_entry_point
from pyexecutorch.jit.variants import can_thread, pick, serial_and_parallel
from pyexecutorch.kernels.llm.attention import _check_qkv, keys_attended
from pyexecutorch.kernels.llm.cache import check_cache_value, check_start_pos
from pyexecutorch.kernels.registry import KernelError, cell_step, compiled_form, offer

_F32 = np.dtype(np.float32)
# A prefill's attention splits over the threads from this many multiply-adds (scores and
# weighted sums: about 100 us on one thread); a decoded token's never does.
SPLIT_ATTENTION = 1 << 21


@njit(cache=True, error_model="numpy", inline="always")
def _dot(p, i, r, j, d, lanes):  # noqa: ANN001, ANN202
    """The float32 dot product of ``p[i : i + d]`` and ``r[j : j + d]`` (pointers)."""
    acc = simd.splat(np.float32(0.0))
    t = 0
    while t + lanes <= d:
        acc = simd.fma(simd.load(p, i + t), simd.load(r, j + t), acc)
        t += lanes
    if t < d:
        acc = simd.fma(simd.load_first(p, i + t, d - t), simd.load_first(r, j + t, d - t), acc)
    return simd.total(acc)


def _attend(q, k, v, start, causal, scale, out, scores, acc):  # noqa: ANN001, ANN202
    """``out`` (B, S, Hq, D) = attention of ``q`` (B, S, Hq, D) over the caches ``k``, ``v``
    (B, L, Hkv, D), all float32 and C-contiguous: query row ``i`` attends to positions
    ``[0, start + i]`` when ``causal``, else ``[0, start + S)``. ``scores`` (B * Hq, L) and
    ``acc`` (B * Hq, D) are scratch."""
    nb, ns, hq, d = q.shape
    length, hkv = k.shape[1], k.shape[2]
    reps = hq // hkv
    lanes = simd.lanes_of(q)
    qp, kp, vp, op = simd.pointer(q), simd.pointer(k), simd.pointer(v), simd.pointer(out)
    sp, ap = simd.pointer(scores), simd.pointer(acc)
    for bh in prange(nb * hq):
        b = bh // hq
        h = bh - b * hq
        g = h // reps
        srow = bh * length
        arow = bh * d
        for i in range(ns):
            n = start + i + 1 if causal else start + ns
            qoff = ((b * ns + i) * hq + h) * d
            best = np.float32(-np.inf)
            for j in range(n):
                s = _dot(qp, qoff, kp, ((b * length + j) * hkv + g) * d, d, lanes) * scale
                sp[srow + j] = s
                if s > best or s != s:  # (a NaN score makes the whole row NaN)
                    best = s
            # the softmax's exponentials, a vector of positions at a time
            top = simd.splat(best)
            sums = simd.splat(np.float32(0.0))
            j = 0
            while j + lanes <= n:
                e = simd.exp(simd.sub(simd.load(sp, srow + j), top))
                simd.store(sp, srow + j, e)
                sums = simd.add(sums, e)
                j += lanes
            if j < n:
                e = simd.exp(simd.sub(simd.load_first(sp, srow + j, n - j), top))
                simd.store_first(sp, srow + j, e, n - j)
                sums = simd.add(sums, simd.load_first(sp, srow + j, n - j))
            total = simd.total(sums)
            for t in range(d):
                ap[arow + t] = np.float32(0.0)
            for j in range(n):
                w = simd.splat(sp[srow + j])
                voff = ((b * length + j) * hkv + g) * d
                t = 0
                while t + lanes <= d:
                    summed = simd.fma(w, simd.load(vp, voff + t), simd.load(ap, arow + t))
                    simd.store(ap, arow + t, summed)
                    t += lanes
                while t < d:
                    ap[arow + t] += sp[srow + j] * vp[voff + t]
                    t += 1
            r = np.float32(1.0) / total if n > 0 else np.float32(np.nan)
            for t in range(d):
                op[qoff + t] = ap[arow + t] * r


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
