"""Compiled (numba) forms of the KV-cache operators: ``custom_sdpa`` and ``update_cache``.

Their start position is a scalar the program reads from its inputs at run time
(``item()`` of ``input_pos``), so these forms take it live (the ``live_scalars``
option): the arrays are checked and bound at load, the position per call, by the same
checks the reference kernels run (:mod:`.cache`, :mod:`.attention`).

Attention (float32, no mask) is one loop per kv head over the filled prefix of its cache
(its grouped-query heads read it in place, nothing repeated), in the official kernel's
arithmetic, bit for bit as the numpy kernel computes it (:mod:`.official_order`): each
score summed one product at a time over the head, libm's ``expf`` and ``exp``, each
weighted value one key at a time, Eigen's other row panels apart. Only the order of each
sum's terms is fixed, so independent sums run side by side in vectors: the kv head's
keys are transposed once per call (16x16 blocks in registers) and a vector of keys'
scores advances one head element at a time; the weighted values advance a vector of the
head per key; a causal row leaves out the keys it masks (see :func:`_attend`). A decoded
token (one query row) is serial; a prefill splits its kv heads over the threads when it
is large enough to pay for a parallel region. Anything else (a mask, float16/bfloat16,
int8) keeps the reference.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit, prange

from pyexecutorch.jit import simd
from pyexecutorch.jit.deferral import form_entry_point
from pyexecutorch.jit.math_functions import fma_f32
from pyexecutorch.jit.variants import can_thread, pick, serial_and_parallel
from pyexecutorch.kernels.llm.attention import _check_qkv, keys_attended
from pyexecutorch.kernels.llm.cache import check_cache_value, check_start_pos
from pyexecutorch.kernels.registry import KernelError, cell_step, compiled_form, offer

_F32 = np.dtype(np.float32)
_WIDEST_LANES = 16  # float32 lanes of the widest vectors (AVX-512): scratch rows round up to it
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
def _transpose_keys(k, b, g, n, kt, stride):  # noqa: ANN001, ANN202
    """``kt[t * stride + j]`` = ``k[b, j, g, t]`` for keys ``j < n`` (``kt`` flat): the
    keys side by side, so that their sums over the head run a vector of keys at a time."""
    lanes = simd.lanes_of(kt)
    length, hkv, d = k.shape[1], k.shape[2], k.shape[3]
    row = hkv * d
    base = (b * length * hkv + g) * d
    src = simd.pointer(k)
    dst = simd.pointer(kt)
    whole_keys, whole_dims = n - n % lanes, d - d % lanes
    for j in range(0, whole_keys, lanes):
        for t in range(0, whole_dims, lanes):
            simd.transpose_square(src, base + j * row + t, row, dst, t * stride + j, stride)
        for t in range(whole_dims, d):
            for r in range(j, j + lanes):
                dst[t * stride + r] = src[base + r * row + t]
    for j in range(whole_keys, n):
        for t in range(d):
            dst[t * stride + j] = src[base + j * row + t]


@njit(cache=True, error_model="numpy", inline="always")
def _key_sums(kt, stride, qp, at, d, padded, sp):  # noqa: ANN001, ANN202
    """``sp[j]`` = the head's sum of ``kt[t * stride + j] * qp[at + t]`` over ``t`` in order
    (each product and sum rounded, from +0.0) for ``j < padded`` (a multiple of the lanes):
    a vector of keys at a time, four side by side."""
    lanes = simd.lanes_of(kt)
    zero = simd.splat(np.float32(0.0))
    j = 0
    while j + 4 * lanes <= padded:
        a0 = a1 = a2 = a3 = zero
        for t in range(d):
            qt = simd.splat(qp[at + t])
            p = t * stride + j
            a0 = simd.add(a0, simd.mul(simd.load(kt, p), qt))
            a1 = simd.add(a1, simd.mul(simd.load(kt, p + lanes), qt))
            a2 = simd.add(a2, simd.mul(simd.load(kt, p + 2 * lanes), qt))
            a3 = simd.add(a3, simd.mul(simd.load(kt, p + 3 * lanes), qt))
        simd.store(sp, j, a0)
        simd.store(sp, j + lanes, a1)
        simd.store(sp, j + 2 * lanes, a2)
        simd.store(sp, j + 3 * lanes, a3)
        j += 4 * lanes
    while j < padded:
        a0 = zero
        for t in range(d):
            a0 = simd.add(a0, simd.mul(simd.load(kt, t * stride + j), simd.splat(qp[at + t])))
        simd.store(sp, j, a0)
        j += lanes


@njit(cache=True, error_model="numpy", inline="always")
def _value_sums(vp, at, step, keys, d, sp, ap):  # noqa: ANN001, ANN202
    """``ap[t]`` = the sum of ``vp[at + j * step + t] * sp[j]`` over keys ``j < keys`` in
    order (each product and sum rounded, from +0.0) for ``t < d``: four vectors of the
    head side by side (masked past ``d``)."""
    lanes = simd.lanes_of(sp)
    zero = simd.splat(np.float32(0.0))
    for t0 in range(0, d, 4 * lanes):
        n0 = d - t0
        n1, n2, n3 = max(n0 - lanes, 0), max(n0 - 2 * lanes, 0), max(n0 - 3 * lanes, 0)
        a0 = a1 = a2 = a3 = zero
        for j in range(keys):
            w = simd.splat(sp[j])
            p = at + j * step + t0
            a0 = simd.add(a0, simd.mul(simd.load_first(vp, p, n0), w))
            a1 = simd.add(a1, simd.mul(simd.load_first(vp, p + lanes, n1), w))
            a2 = simd.add(a2, simd.mul(simd.load_first(vp, p + 2 * lanes, n2), w))
            a3 = simd.add(a3, simd.mul(simd.load_first(vp, p + 3 * lanes, n3), w))
        simd.store_first(ap, t0, a0, n0)
        simd.store_first(ap, t0 + lanes, a1, n1)
        simd.store_first(ap, t0 + 2 * lanes, a2, n2)
        simd.store_first(ap, t0 + 3 * lanes, a3, n3)


@njit(cache=True, error_model="numpy", inline="always")
def _scaled_max(sp, upto, scale, spill):  # noqa: ANN001, ANN202
    """``sp[j] *= scale`` for ``j < upto`` and the largest (NaN if any is NaN); ``spill``
    holds a vector's lanes."""
    lanes = simd.lanes_of(sp)
    factor = simd.splat(scale)
    best = simd.splat(np.float32(-np.inf))
    for j in range(0, upto - upto % lanes, lanes):
        x = simd.mul(simd.load(sp, j), factor)
        simd.store(sp, j, x)
        best = simd.running_max(best, x)
    simd.store(spill, 0, best)
    top = np.float32(-np.inf)
    for t in range(lanes):  # (max is exact: any order gives the same value but a NaN's payload)
        x = spill[t]
        if x > top or x != x:
            top = x
    for j in range(upto - upto % lanes, upto):
        x = sp[j] * scale
        sp[j] = x
        if x > top or x != x:
            top = x
    return top


def _attend(q, k, v, start, causal, scale, out, scores, acc, keys_t):  # noqa: ANN001, ANN202
    """``out`` (B, S, Hq, D) = attention of ``q`` (B, S, Hq, D) over the caches ``k``, ``v``
    (B, L, Hkv, D), all float32 and C-contiguous, in the official kernel's arithmetic
    (:mod:`.official_order`, whose numpy form this is, query row by query row): row ``i``
    attends to positions ``[0, start + i]`` when ``causal``, else ``[0, start + S)``, of
    ``start + S <= 512``. Scratch per (batch, kv head): ``scores`` (B * Hkv, L rounded up
    to the lanes), ``acc`` (B * Hkv, D), ``keys_t`` (B * Hkv, D * L rounded up).

    A row's masked keys (past ``start + i``) are left out: their scores are never read,
    their exponentials (0.0) add nothing to a sum and their weights (0.0) nothing to a
    weighted value, unless that value is infinite or NaN (then 0 * value is NaN, which
    the official kernel gives): a (batch, kv head) whose new values are not all finite
    weighs every key."""
    nb, ns, hq, d = q.shape
    length, hkv = k.shape[1], k.shape[2]
    reps = hq // hkv
    n = start + ns
    lanes = simd.lanes_of(scores)
    # (a row more than the keys: rows a power of two apart would share the cache's sets)
    stride = (n + lanes - 1) // lanes * lanes + lanes
    block = 256 if ns >= 768 else (64 if ns >= 192 else 32)
    vector = 16 * (n // 16)
    r8 = n - n % 8
    qp = simd.pointer(q)
    vp = simd.pointer(v)
    step = hkv * d
    for bg in prange(nb * hkv):
        b = bg // hkv
        g = bg - b * hkv
        sp = scores[bg]
        ap = acc[bg]
        kt = keys_t[bg]
        _transpose_keys(k, b, g, n, kt, stride)
        keys = k[b, :n, g]  # (n, D) strided
        values = v[b, :n, g]
        v_at = (b * length * hkv + g) * d
        finite = True
        if causal and ns > 1:
            for j in range(start, n):
                for t in range(d):
                    x = vp[v_at + j * step + t]
                    if x - x != 0:  # (inf - inf and NaN - NaN are NaN)
                        finite = False
        lanes16 = np.zeros(16, np.float32)
        for h in range(g * reps, (g + 1) * reps):
            for i in range(ns):
                first = (i // block) * block
                size = min(block, ns - first)
                panel = i - first < size - size % 4
                last = start + i if causal else n - 1
                upto = last + 1
                q_at = ((b * ns + i) * hq + h) * d
                # the scores: one product at a time over the head, then Eigen's other rows
                _key_sums(kt, stride, qp, q_at, d, (upto + lanes - 1) // lanes * lanes, sp)
                if last >= r8:
                    _special_sums(keys, q[b, i, h], n, panel and n % 8 >= 4, panel, sp)
                best = _scaled_max(sp, upto, scale, lanes16)
                # exp: libm's expf in 16 lanes, then its double exp on the last keys
                for t in range(16):
                    lanes16[t] = np.float32(0.0)
                for j in range(min(upto, vector)):
                    e = math.exp(sp[j] - best)
                    sp[j] = e
                    lanes16[j % 16] = lanes16[j % 16] + e
                total = np.float32(0.0)
                for t in range(16):
                    total = total + lanes16[t]
                for j in range(vector, upto):
                    wide = math.exp(np.float64(sp[j] - best))
                    total = np.float32(np.float64(total) + wide)
                    sp[j] = np.float32(wide)
                for j in range(upto, n):
                    sp[j] = np.float32(0.0)
                # the weighted values: one product at a time over the keys, then Eigen's other rows
                _value_sums(vp, v_at, step, upto if finite else n, d, sp, ap)
                _special_sums(values.T, sp, d, panel and d % 8 >= 4, panel, ap)
                r = np.float32(1.0) / total
                for t in range(d):
                    out[b, i, h, t] = ap[t] * r


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
) -> tuple[bool, np.float32, np.ndarray, np.ndarray, np.ndarray, int] | None:
    """(causal, scale, the scratch of :func:`_attend`, the work deciding the parallel
    variant) of an attention the compiled loop computes, or None (the reference kernel
    runs)."""
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
    length, hkv = key.shape[1], key.shape[2]
    factor = np.float32(scale if scale is not None else 1.0 / np.sqrt(d))
    padded = -(-length // _WIDEST_LANES) * _WIDEST_LANES + _WIDEST_LANES
    # (zeros: the lanes past the keys read never hold stale NaNs or subnormals)
    scores = np.zeros((nb * hkv, padded), _F32)
    acc = np.zeros((nb * hkv, d), _F32)
    keys_t = np.zeros((nb * hkv, d * padded), _F32)
    work = nb * hq * ns * length * d
    split = work if ns > 1 and work >= SPLIT_ATTENTION else 0
    return bool(is_causal), factor, scores, acc, keys_t, split


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
    causal, factor, scores, acc, keys_t, work = setup
    ns, length = query.shape[1], key.shape[1]
    # (compiled, or read from the disk cache, at load; the parallel one only with threads)
    load = (query, key, value, 0, causal, factor, out, scores, acc, keys_t)
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
        kern(query, key, value, start, causal, factor, out, scores, acc, keys_t)
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
def attend_at(q, k, v, cell, causal, scale, out, scores, acc, keys_t):  # noqa: ANN001, ANN201
    """The attention at the start position in ``cell``; False (nothing written) where it
    is out of the cache, as the reference kernel raises."""
    start = cell[0]
    if start < 0 or start + q.shape[1] > k.shape[1]:
        return False
    _ATTEND_SERIAL(q, k, v, start, causal, scale, out, scores, acc, keys_t)
    return True


@njit(cache=True, error_model="numpy")
def attend_at_parallel(q, k, v, cell, causal, scale, out, scores, acc, keys_t):  # noqa: ANN001, ANN201
    """:func:`attend_at` with its heads split over the threads (a large prefill)."""
    start = cell[0]
    if start < 0 or start + q.shape[1] > k.shape[1]:
        return False
    _ATTEND_PARALLEL(q, k, v, start, causal, scale, out, scores, acc, keys_t)
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
    causal, factor, scores, acc, keys_t, work = setup
    function = attend_at_parallel if work and can_thread() else attend_at

    def refuse(query, key, value, start_pos, *rest):  # noqa: ANN001, ANN002, ANN202
        keys_attended("custom_sdpa", query, key, start_pos, None)  # the reference's error

    step = (query, key, value, start_pos, causal, factor, out, scores, acc, keys_t)
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
