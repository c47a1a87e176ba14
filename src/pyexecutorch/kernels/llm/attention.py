"""Attention over a KV cache: ``llama::custom_sdpa``, ``sdpa_with_kv_cache``, ``custom_quantized_sdpa``.

Query, key and value are ``[batch, seq, heads, head_dim]`` (``custom_quantized_sdpa``
with ``is_seq_at_dim_2`` takes ``[batch, heads, seq, head_dim]``); key and value
are whole caches. Without a mask the query's ``seq`` tokens sit at positions
``start_pos...`` and attend to cache positions ``[0, start_pos + seq)``, with
``is_causal`` hiding, for query row ``i``, the positions after ``start_pos + i``.
With a float mask ``[seq, cache_len]`` they attend to the whole cache and the
mask is added to the scaled scores instead. Query head ``h`` reads kv head
``h // (q_heads // kv_heads)`` (grouped-query attention).

Numerics follow the official kernel: float32 attention without a mask (up to 512
keys) is its arithmetic operation for operation (:mod:`.official_order`); otherwise
scores, softmax and the weighted sum run in float32; for float16/bfloat16 inputs the
unnormalized softmax weights are rounded to the input dtype before they multiply the
values, and the sum is divided out at the end. An int8 query, key and value (``custom_quantized_sdpa``)
carry per-token scales and zero points: ``q @ k.T`` is the exact integer product
of the zero-point-shifted values times both scales, the values are dequantized,
and the output is float32. ``drpout_p`` is ignored, as officially.
"""

from __future__ import annotations

import math

import numpy as np

from pyexecutorch.kernels.checks import argument_check
from pyexecutorch.kernels.common import fit
from pyexecutorch.kernels.llm import official_order
from pyexecutorch.kernels.llm.cache import check_cache_value, check_start_pos, write_cache
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.schema.scalar_type import F32, F64

_I8 = np.dtype(np.int8)
# By dtype name: bfloat16's dtype is ml_dtypes', imported only where a program has one.
_REDUCED = ("float16", "bfloat16")
_FLOATS = ("float32", *_REDUCED)

QParams = tuple[np.ndarray, np.ndarray]  # (zero_points, scales), one pair per token


def _check_qkv(op: str, q: np.ndarray, k: np.ndarray, v: np.ndarray, allow_int8: bool) -> None:
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.ndim != 4:
            raise KernelError(f"{op}: {name} must be a 4-D tensor, got shape {t.shape}")
    allowed = (*_FLOATS, "int8") if allow_int8 else _FLOATS
    if q.dtype.name not in allowed:
        names = "float32, float16, bfloat16" + (" or int8" if allow_int8 else "")
        raise KernelError(f"{op}: query must be {names}, got {q.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise KernelError(
            f"{op}: key and value must have the query's dtype {q.dtype}, got {k.dtype} and {v.dtype}"
        )
    if k.shape != v.shape:
        raise KernelError(
            f"{op}: key and value must have the same shape, got {k.shape} and {v.shape}"
        )
    if q.shape[3] != k.shape[3]:
        raise KernelError(
            f"{op}: query, key and value must have the same head size, got {q.shape[3]} and {k.shape[3]}"
        )
    if q.shape[0] != k.shape[0]:
        raise KernelError(
            f"{op}: query and key must have the same batch size, got {q.shape} and {k.shape}"
        )


def _check_heads(op: str, q_heads: int, kv_heads: int) -> None:
    if kv_heads == 0 or kv_heads > q_heads or q_heads % kv_heads:
        raise KernelError(
            f"{op}: the number of query heads ({q_heads}) must be a multiple of the number "
            f"of key/value heads ({kv_heads})"
        )


def _check_qparams(op: str, name: str, t: np.ndarray, zero_points, scales) -> QParams:
    if zero_points is None or scales is None:
        raise KernelError(f"{op}: an int8 {name} needs its scales and zero points")
    want = t.shape[:3] + (1,)
    if scales.dtype != F32 or scales.shape != want:
        raise KernelError(
            f"{op}: {name} scales must be float32 {want}, got {scales.dtype} {scales.shape}"
        )
    if zero_points.dtype != _I8 or zero_points.shape != want:
        raise KernelError(
            f"{op}: {name} zero points must be int8 {want}, got {zero_points.dtype} {zero_points.shape}"
        )
    return zero_points, scales


def _by_kv_head(t: np.ndarray, kv_heads: int) -> np.ndarray:
    """``[B, S, H, X]`` -> ``[B, kv_heads, (H // kv_heads) * S, X]``, query heads grouped."""
    b, s, h, x = t.shape
    grouped = t.transpose(0, 2, 1, 3).reshape(b, kv_heads, h // kv_heads, s, x)
    return grouped.reshape(b, kv_heads, (h // kv_heads) * s, x)


def _scores(q, k, n: int, kv_heads: int, qparams) -> np.ndarray:
    """``q @ k[:, :n].T`` per kv head: ``[B, kv_heads, reps * S, n]`` float32."""
    keys = k[:, :n].transpose(0, 2, 3, 1)  # [B, kv_heads, D, n]
    if qparams is None:
        return np.matmul(
            _by_kv_head(q, kv_heads).astype(F32, copy=False), keys.astype(F32, copy=False)
        )
    (qz, qs), (kz, ks) = qparams
    # Zero-point-shifted int8 products summed over a head are integers below
    # 2**53: float64 gives the exact integer product, like the int8 kernel.
    qi = _by_kv_head(q, kv_heads).astype(F64) - _by_kv_head(qz, kv_heads)
    ki = keys.astype(F64) - kz[:, :n].transpose(0, 2, 3, 1)
    raw = np.matmul(qi, ki).astype(F32)
    raw *= _by_kv_head(qs, kv_heads)
    raw *= ks[:, :n].transpose(0, 2, 3, 1)
    return raw


def keys_attended(op: str, q: np.ndarray, k: np.ndarray, start_pos: int, attn_mask) -> int:
    """How many cache positions ``q`` (``[B, S, H, D]``) attends to; checks heads and mask."""
    s, q_heads = q.shape[1], q.shape[2]
    length, kv_heads = k.shape[1], k.shape[2]
    _check_heads(op, q_heads, kv_heads)
    if attn_mask is None:
        if start_pos < 0 or start_pos + s > length:
            raise KernelError(
                f"{op}: start_pos + seq_len = {start_pos} + {s} must be in [seq_len, {length}], "
                f"the key/value length at the sequence dim"
            )
        return start_pos + s
    if attn_mask.ndim != 2 or attn_mask.dtype != F32:
        raise KernelError(
            f"{op}: attn_mask must be a 2-D float32 tensor, got {attn_mask.dtype} {attn_mask.shape}"
        )
    if attn_mask.shape != (s, length):
        raise KernelError(
            f"{op}: attn_mask must have shape (seq_len, cache_len) = {(s, length)}, "
            f"got {attn_mask.shape}"
        )
    return length


def attend(
    op: str,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    start_pos: int,
    attn_mask: np.ndarray | None,
    is_causal: bool,
    scale: float | None,
    qparams: tuple[QParams, QParams, QParams] | None = None,
) -> np.ndarray:
    """Attention of ``q`` over caches ``k``, ``v`` (all ``[B, S, H, D]`` views).

    Returns ``[B, S, Hq, D]`` in float32 (the caller casts to its output dtype).
    The caller checks dtypes and shapes (:func:`_check_qkv`); positions, heads
    and the mask are checked here (:func:`keys_attended`).
    """
    n = keys_attended(op, q, k, start_pos, attn_mask)
    b, s, q_heads, d = q.shape
    kv_heads = k.shape[2]
    reps = q_heads // kv_heads
    if n == 0:
        # Nothing to attend to: the official kernel divides zero by a zero sum.
        return np.full((b, s, q_heads, d), np.nan, F32)
    factor = F32.type(scale if scale is not None else 1.0 / math.sqrt(d))
    if (
        qparams is None
        and attn_mask is None
        and q.dtype == F32
        and n <= official_order.KEY_BLOCK
        and official_order.available()
    ):
        # float32 without a mask: bit for bit the official kernel's arithmetic
        return official_order.attend(q, k, v, start_pos, is_causal, factor)
    scores = _scores(q, k, n, kv_heads, qparams and qparams[:2])
    scores *= factor
    rows = scores.reshape(b, kv_heads, reps, s, n)
    if attn_mask is not None:
        rows += attn_mask
    elif is_causal and s > 1:  # (one query at start_pos attends to all n = start_pos + 1)
        future = np.arange(n) > (start_pos + np.arange(s))[:, None]
        rows[..., future] = -np.inf
    with np.errstate(invalid="ignore", divide="ignore"):
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        total = scores.sum(axis=-1, keepdims=True, dtype=F32)
        if q.dtype.name in _REDUCED:
            # The official kernel multiplies values by weights in the input dtype.
            scores = scores.astype(q.dtype).astype(F32)
        # [B, kv_heads, n, D]: a view of a float32 cache (no copy of the cache per step)
        values = v[:, :n].transpose(0, 2, 1, 3).astype(F32, copy=False)
        if qparams is not None:
            vz, vs = (p[:, :n].transpose(0, 2, 1, 3) for p in qparams[2])
            values -= vz
            values *= vs
        out = np.matmul(scores, values)
        out *= np.reciprocal(total)
    return out.reshape(b, kv_heads * reps, s, d).transpose(0, 2, 1, 3)


def _store(out: np.ndarray, result: np.ndarray) -> np.ndarray:
    dst = fit(out, result.shape)
    dst[...] = result
    return dst


def _check_mask_and_causal(op: str, attn_mask, is_causal: bool) -> None:
    if attn_mask is not None and is_causal:
        raise KernelError(f"{op}: attn_mask and is_causal cannot be set at the same time")


@argument_check("llama::custom_sdpa.out")
def custom_sdpa_arguments(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    start_pos: int,
    attn_mask: np.ndarray | None,
    drpout_p: float,
    is_causal: bool,
    scale: float | None,
) -> list[tuple[int, ...]]:
    """The family's argument check (kernels.checks) of ``custom_sdpa``, for every tier: its
    output has the query's shape."""
    op = "custom_sdpa"
    _check_mask_and_causal(op, attn_mask, is_causal)
    _check_qkv(op, query, key, value, allow_int8=False)
    keys_attended(op, query, key, int(start_pos), attn_mask)
    return [tuple(query.shape)]


@kernel("llama::custom_sdpa.out")
def custom_sdpa_out(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    start_pos: int,
    attn_mask: np.ndarray | None,
    drpout_p: float,
    is_causal: bool,
    scale: float | None,
    out: np.ndarray,
) -> np.ndarray:
    """Attention of ``query`` over the caches ``key`` and ``value``."""
    op = "custom_sdpa"
    custom_sdpa_arguments(query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale)
    result = attend(op, query, key, value, int(start_pos), attn_mask, is_causal, scale)
    return _store(out, result)


@kernel("llama::sdpa_with_kv_cache.out")
def sdpa_with_kv_cache_out(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    key_cache: np.ndarray,
    value_cache: np.ndarray,
    start_pos: int,
    seq_len: int,
    attn_mask: np.ndarray | None,
    drpout_p: float,
    is_causal: bool,
    scale: float | None,
    out: np.ndarray,
) -> np.ndarray:
    """Write ``key``/``value`` into the caches at ``start_pos``, then attend over them."""
    op = "sdpa_with_kv_cache"
    start_pos = int(start_pos)
    _check_mask_and_causal(op, attn_mask, is_causal)
    _check_qkv(op, query, key_cache, value_cache, allow_int8=False)
    check_cache_value(op, "key", key, key_cache)
    check_cache_value(op, "value", value, value_cache)
    check_start_pos(op, start_pos, int(seq_len), key_cache.shape[1])
    # Check everything attention needs before the caches change.
    keys_attended(op, query, key_cache, start_pos, attn_mask)
    write_cache(op, "key", key, key_cache, start_pos)
    write_cache(op, "value", value, value_cache, start_pos)
    result = attend(op, query, key_cache, value_cache, start_pos, attn_mask, is_causal, scale)
    return _store(out, result)


@kernel("llama::custom_quantized_sdpa.out")
def custom_quantized_sdpa_out(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    start_pos: int,
    attn_mask: np.ndarray | None,
    drpout_p: float,
    is_causal: bool,
    scale: float | None,
    q_zero_points: np.ndarray | None,
    q_scales: np.ndarray | None,
    k_zero_points: np.ndarray | None,
    k_scales: np.ndarray | None,
    v_zero_points: np.ndarray | None,
    v_scales: np.ndarray | None,
    is_seq_at_dim_2: bool,
    out: np.ndarray,
) -> np.ndarray:
    """``custom_sdpa`` on int8 tensors with per-token scales and zero points.

    Float tensors are attended like ``custom_sdpa`` (the quantization
    parameters are then unused). With ``is_seq_at_dim_2`` every tensor,
    parameters included, is ``[batch, heads, seq, ...]``.
    """
    op = "custom_quantized_sdpa"
    _check_mask_and_causal(op, attn_mask, is_causal)
    _check_qkv(op, query, key, value, allow_int8=True)
    qparams = None
    if query.dtype == _I8:
        qparams = (
            _check_qparams(op, "query", query, q_zero_points, q_scales),
            _check_qparams(op, "key", key, k_zero_points, k_scales),
            _check_qparams(op, "value", value, v_zero_points, v_scales),
        )
    if is_seq_at_dim_2:
        # Attend on [B, S, H, D] views of the [B, H, S, D] tensors.
        query, key, value = (t.transpose(0, 2, 1, 3) for t in (query, key, value))
        if qparams is not None:
            qparams = tuple(tuple(p.transpose(0, 2, 1, 3) for p in pair) for pair in qparams)
    result = attend(op, query, key, value, int(start_pos), attn_mask, is_causal, scale, qparams)
    if is_seq_at_dim_2:
        result = result.transpose(0, 2, 1, 3)
    return _store(out, result)
