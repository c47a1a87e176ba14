"""KV-cache writes: ``llama::update_cache`` and ``llama::update_cache_with_indices``.

A cache is ``[batch, max_seq, heads, head_dim]`` (sequence at dim 1); ``value``
holds ``[batch, seq, heads, head_dim]`` new entries. The kernels write into the
cache array they are given, which is the program's mutable buffer, so later
instructions and later calls see the new tokens. Their ``out`` is only a
placeholder (the official kernels leave it untouched and nobody reads it), so it
is returned as it came.
"""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.checks import argument_check
from pyexecutorch.kernels.registry import KernelError, kernel

_I64 = np.dtype(np.int64)


def check_cache_value(op: str, what: str, value: np.ndarray, cache: np.ndarray) -> None:
    """``value`` fits ``cache`` apart from the sequence length, with the same dtype."""
    if cache.ndim != 4 or value.ndim != 4:
        raise KernelError(
            f"{op}: {what} and its cache must be 4-D [batch, seq, heads, head_dim], "
            f"got {what} {value.shape} and cache {cache.shape}"
        )
    if value.dtype != cache.dtype:
        raise KernelError(
            f"{op}: {what} and its cache must have the same dtype, got {value.dtype} "
            f"and {cache.dtype}"
        )
    for dim, name in ((0, "batch size"), (2, "number of heads"), (3, "head dim")):
        if value.shape[dim] != cache.shape[dim]:
            raise KernelError(
                f"{op}: {what} and its cache must have the same {name} (dim {dim}), "
                f"got {value.shape} and cache {cache.shape}"
            )


def check_start_pos(op: str, start_pos: int, seq_len: int, cache_len: int) -> None:
    """New tokens ``[start_pos, start_pos + seq_len)`` lie inside a cache of ``cache_len``."""
    if start_pos < 0 or start_pos >= cache_len:
        raise KernelError(
            f"{op}: start_pos {start_pos} must be in [0, {cache_len}), the cache length at dim 1"
        )
    if start_pos + seq_len > cache_len:
        raise KernelError(
            f"{op}: start_pos + seq_len = {start_pos} + {seq_len} must be <= the cache "
            f"length {cache_len} at dim 1"
        )


def write_cache(op: str, what: str, value: np.ndarray, cache: np.ndarray, start_pos: int) -> None:
    """Copy ``value`` into ``cache[:, start_pos:start_pos + seq]`` in place."""
    check_cache_value(op, what, value, cache)
    seq = value.shape[1]
    check_start_pos(op, start_pos, seq, cache.shape[1])
    cache[:, start_pos : start_pos + seq] = value


@argument_check("llama::update_cache.out")
def update_cache_arguments(value: np.ndarray, cache: np.ndarray, start_pos: int) -> list[None]:
    """The family's argument check (kernels.checks) of ``update_cache``, for every tier. Its
    output is the ``out`` it is given, a placeholder the check cannot size."""
    check_cache_value("update_cache", "value", value, cache)
    check_start_pos("update_cache", int(start_pos), value.shape[1], cache.shape[1])
    return [None]


@kernel("llama::update_cache.out")
def update_cache_out(
    value: np.ndarray, cache: np.ndarray, start_pos: int, out: np.ndarray
) -> np.ndarray:
    """Write ``value`` into ``cache`` at sequence positions ``start_pos...``."""
    update_cache_arguments(value, cache, start_pos)
    write_cache("update_cache", "value", value, cache, int(start_pos))
    return out


@kernel("llama::update_cache_with_indices.out")
def update_cache_with_indices_out(
    value: np.ndarray, cache: np.ndarray, start_pos: int, indices: np.ndarray, out: np.ndarray
) -> np.ndarray:
    """Write token ``s`` of batch ``b`` to cache position ``indices[b, s]``.

    ``start_pos`` is ignored, as in the official kernel. When an index repeats
    within a batch line the last token wins (the official kernel copies in
    order).
    """
    op = "update_cache_with_indices"
    check_cache_value(op, "value", value, cache)
    if indices.ndim != 2 or indices.shape != value.shape[:2]:
        raise KernelError(
            f"{op}: indices must be 2-D [batch, seq] = {value.shape[:2]} like value, "
            f"got {indices.shape}"
        )
    if indices.dtype != _I64:
        raise KernelError(f"{op}: indices must be int64, got {indices.dtype}")
    length = cache.shape[1]
    if indices.size:
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= length:
            bad = lo if lo < 0 else hi
            raise KernelError(f"{op}: index {bad} out of bounds: not in [0, {length})")
    batch, seq = indices.shape
    rows = np.repeat(np.arange(batch), seq)
    cols = np.tile(np.arange(seq), batch)
    flat = rows * length + indices.reshape(-1)
    # numpy leaves the order of repeated fancy-index writes unspecified: keep only
    # the last write to each cache row so the result does not depend on it.
    _, first_from_end = np.unique(flat[::-1], return_index=True)
    keep = flat.size - 1 - first_from_end
    cache[rows[keep], indices.reshape(-1)[keep]] = value[rows[keep], cols[keep]]
    return out
