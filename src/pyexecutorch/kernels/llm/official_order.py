"""``custom_sdpa``'s float32 attention in the official kernel's order of operations.

The official kernel (``cpu_flash_attention`` of the llama custom-ops library) computes,
per batch, query head and block of query rows (32 rows below 192, 64 below 768, else 256)
against one block of keys (up to 512; longer attention keeps the reference kernel):

- the scores ``q @ k.T`` and the weighted values ``weights @ v`` through ``sgemm_``, which
  the official build links from its Eigen BLAS compiled for SSE2 (``products``);
- the scores times the float32 scale, the row's maximum, and ``exp(score - max)``: libm's
  ``expf`` on the first ``16 * (keys // 16)`` keys, summed in 16 float32 lanes then lane by
  lane, and libm's double ``exp`` on the rest, each added in double to the float32 sum;
- the weighted values times ``float32(1 / sum)``.

(A process that loads torch before this library's BLAS, as the official Python runtime
does, runs libtorch_cpu's MKL ``sgemm_`` instead, in another order: README, LLM programs.)
"""

from __future__ import annotations

import ctypes
from functools import cache

import numpy as np

from pyexecutorch.schema.scalar_type import F32, F64

KEY_BLOCK = 512  # the official kernel's key block (kv_split_size)
LANES = 16  # its exponentials' vector width (two 8-float vectors)


@cache
def _libm() -> ctypes.CDLL | None:
    """The C math library the official kernel calls (None where there is none to load)."""
    try:
        lib = ctypes.CDLL("libm.so.6")  # glibc's, without find_library's ldconfig run
    except OSError:
        from ctypes.util import find_library  # noqa: PLC0415 - other systems name it otherwise

        name = find_library("m")
        if name is None:
            return None
        lib = ctypes.CDLL(name)
    lib.expf.restype, lib.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    lib.exp.restype, lib.exp.argtypes = ctypes.c_double, [ctypes.c_double]
    lib.fmaf.restype, lib.fmaf.argtypes = ctypes.c_float, [ctypes.c_float] * 3
    return lib


def available() -> bool:
    """Whether libm's functions can be called (else the reference kernel attends)."""
    return _libm() is not None


def _elementwise(fn, dtype: np.dtype, *arrays: np.ndarray) -> np.ndarray:  # noqa: ANN001
    flat = [np.asarray(a).ravel().tolist() for a in np.broadcast_arrays(*arrays)]
    out = np.fromiter(map(fn, *flat), dtype=dtype, count=len(flat[0]))
    return out.reshape(np.broadcast_shapes(*(np.shape(a) for a in arrays)))


def _fmaf(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return _elementwise(_libm().fmaf, F32, a, b, c)


def _running(products: np.ndarray) -> np.ndarray:
    """The float32 sums, from +0.0, of ``products`` over their last axis, one at a time."""
    if products.shape[-1] == 0:
        return np.zeros(products.shape[:-1], F32)
    # (add.accumulate adds one at a time, add.reduce pairwise; + 0.0: a sum started from
    # +0.0 is never -0.0)
    return np.add.accumulate(products, axis=-1)[..., -1] + F32.type(0.0)


def products(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``rows @ cols.T`` (float32 ``[R, K]`` and ``[C, K]``) summed as Eigen's SSE2 gemm
    kernel sums it: over ``K`` one product at a time, each product and sum rounded
    (SSE2 has no fused multiply-add), except in two panels of its blocking. Rows go by 8,
    then 4 (the one-packet kernel, which sums even and odd ``k`` apart over ``K`` rounded
    down to 8 and adds the two before the rest), then one at a time (the last ``R % 4``:
    against columns in groups of 4, four interleaved sums of ``k`` mod 4 added pairwise
    before the last ``K % 4``; against the last ``C % 4`` columns, libm's ``fmaf``)."""
    nr, depth = rows.shape
    nc = cols.shape[0]
    prods = rows[:, None, :] * cols[None, :, :]  # [R, C, K], each rounded to float32
    out = _running(prods)
    c4, r8, r4 = nc - nc % 4, nr - nr % 8, nr - nr % 4
    if nr % 8 >= 4 and c4:
        block = prods[r8 : r8 + 4, :c4]
        peeled = depth - depth % 8
        total = _running(block[..., 0:peeled:2]) + _running(block[..., 1:peeled:2])
        for k in range(peeled, depth):
            total += block[..., k]
        out[r8 : r8 + 4, :c4] = total
    if r4 < nr and c4:
        block = prods[r4:, :c4]
        quad = depth - depth % 4
        part = [_running(block[..., t:quad:4]) for t in range(4)]
        total = (part[0] + part[1]) + (part[2] + part[3])
        for k in range(quad, depth):
            total += block[..., k]
        out[r4:, :c4] = total
    if r4 < nr and c4 < nc:
        r, c = rows[r4:, None, :], cols[None, c4:, :]
        fused = np.zeros((nr - r4, nc - c4), F32)
        for k in range(depth):
            fused = _fmaf(r[..., k], c[..., k], fused)
        out[r4:, c4:] = fused
    return out


def _softmax_weights(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``exp(score - row max)``, their sums) of ``[rows, keys]`` float32 scores (masked
    ones -inf), as the official kernel computes and sums them."""
    lib = _libm()
    rows, keys = scores.shape
    shifted = scores - scores.max(axis=1, keepdims=True)
    vector = LANES * (keys // LANES)
    weights = np.empty_like(shifted)
    weights[:, :vector] = _elementwise(lib.expf, F32, shifted[:, :vector])
    lanes = weights[:, :vector].reshape(rows, -1, LANES)
    lane_sums = np.zeros((rows, LANES), F32)
    for step in range(lanes.shape[1]):
        lane_sums += lanes[:, step]
    sums = np.zeros(rows, F32)
    for lane in range(LANES):
        sums += lane_sums[:, lane]
    for key in range(vector, keys):
        e = _elementwise(lib.exp, F64, shifted[:, key].astype(F64))
        sums = (sums.astype(F64) + e).astype(F32)
        weights[:, key] = e
    return weights, sums


def attend(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, start: int, causal: bool, scale: float
) -> np.ndarray:
    """Attention of float32 ``q`` ``[B, S, Hq, D]`` over caches ``k``, ``v`` ``[B, L, Hkv, D]``
    at positions ``start...``, ``n = start + S <= KEY_BLOCK`` keys: ``[B, S, Hq, D]``."""
    b, s, q_heads, d = q.shape
    reps = q_heads // k.shape[2]
    n = start + s
    factor = F32.type(scale)
    block = 256 if s >= 768 else 64 if s >= 192 else 32
    out = np.empty((b, s, q_heads, d), F32)
    for i in range(b):
        for h in range(q_heads):
            keys = k[i, :n, h // reps]
            values_t = np.ascontiguousarray(v[i, :n, h // reps].T)
            for first in range(0, s, block):
                rows = q[i, first : first + block, h]
                scores = products(keys, rows).T * factor
                if causal:
                    positions = start + first + np.arange(len(rows))
                    scores[np.arange(n) > positions[:, None]] = -np.inf
                weights, sums = _softmax_weights(scores)
                weighted = products(values_t, weights).T
                out[i, first : first + len(rows), h] = weighted * (F32.type(1) / sums)[:, None]
    return out
