"""The ``llama::`` KV-cache operators, torch side: schemas, eager CPU kernels, fake kernels.

A model that calls ``torch.ops.llama.update_cache`` and ``torch.ops.llama.custom_sdpa``
runs eagerly and exports with ``torch.export`` once this module is imported; the
exporter turns the calls into ``llama::update_cache.out`` and ``llama::custom_sdpa.out``,
which both runtimes have kernels for (ours in :mod:`pyexecutorch.kernels.llm`). Layouts
and semantics are those kernels' (``[batch, seq, heads, head_dim]`` caches, see
:mod:`pyexecutorch.kernels.llm.attention`); the schemas are the official ones, so one
program serves both runtimes.

Coexistence with the official package, which defines the same operators from a
shared library:

- imported after it, each operator that already exists is used as it is;
- imported before it, our definitions would make its library abort the process
  when it loads (a C++ registration of a name defined twice). So a finder on
  ``sys.meta_path`` watches for the official module that loads that library and
  withdraws our definitions just before it runs; its operators, with the same
  schemas, then serve our exporter too. (Programs already traced with our
  definitions must be traced again after that.)
"""

from __future__ import annotations

import importlib.abc
import math
import sys
from typing import Any

import torch

NAMESPACE = "llama"

# The official schemas, "name.overload" -> what follows the name.
SCHEMAS: dict[str, str] = {
    "update_cache": "(Tensor value, Tensor(a!) cache, SymInt start_pos) -> Tensor",
    "update_cache.out": (
        "(Tensor value, Tensor(a!) cache, SymInt start_pos, *, Tensor(b!) out) -> Tensor(b!)"
    ),
    "update_cache_with_indices": (
        "(Tensor value, Tensor(a!) cache, SymInt start_pos, Tensor indices) -> Tensor"
    ),
    "update_cache_with_indices.out": (
        "(Tensor value, Tensor(a!) cache, SymInt start_pos, Tensor indices, *, "
        "Tensor(b!) out) -> Tensor(b!)"
    ),
    "custom_sdpa": (
        "(Tensor query, Tensor key, Tensor value, SymInt start_pos, Tensor? attn_mask=None, "
        "float drpout_p=0.0, bool is_causal=False, float? scale=None) -> Tensor"
    ),
    "custom_sdpa.out": (
        "(Tensor query, Tensor key, Tensor value, SymInt start_pos, Tensor? attn_mask=None, "
        "float drpout_p=0.0, bool is_causal=False, float? scale=None, *, Tensor(a!) out) "
        "-> Tensor(a!)"
    ),
}

# The official module whose import loads the official definitions of these names.
OFFICIAL_MODULE = "executorch.extension.llm.custom_ops.custom_ops"

_library: torch.library.Library | None = None


# --------------------------------------------------------------------------------------
# Checks shared by the eager and fake kernels (torch._check also bounds symbolic ints)


def _check_cache(op: str, value: torch.Tensor, cache: torch.Tensor) -> None:
    torch._check(
        value.dim() == 4 and cache.dim() == 4,
        lambda: (
            f"{op}: value and cache must be 4-D [batch, seq, heads, head_dim], "
            f"got {tuple(value.shape)} and {tuple(cache.shape)}"
        ),
    )
    torch._check(
        value.dtype == cache.dtype,
        lambda: f"{op}: value and cache must have one dtype, got {value.dtype} and {cache.dtype}",
    )
    for dim in (0, 2, 3):
        torch._check(
            value.size(dim) == cache.size(dim),
            lambda dim=dim: (
                f"{op}: value and cache differ at dim {dim}: "
                f"{tuple(value.shape)} and {tuple(cache.shape)}"
            ),
        )


def _check_span(op: str, start_pos: Any, seq: Any, length: int) -> None:
    """Positions ``[start_pos, start_pos + seq)`` lie in ``[0, length)``."""
    torch._check(start_pos >= 0, lambda: f"{op}: start_pos {start_pos} must be >= 0")
    torch._check(
        start_pos + seq <= length,
        lambda: f"{op}: start_pos + seq_len = {start_pos} + {seq} must be <= {length}",
    )


def _check_attention(op: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        torch._check(
            t.dim() == 4, lambda t=t, name=name: f"{op}: {name} must be 4-D, got {t.dim()}-D"
        )
    torch._check(
        key.shape == value.shape,
        lambda: (
            f"{op}: key and value must have one shape, got {tuple(key.shape)} and "
            f"{tuple(value.shape)}"
        ),
    )
    torch._check(
        query.size(2) % key.size(2) == 0,
        lambda: (
            f"{op}: query heads ({query.size(2)}) must be a multiple of kv heads ({key.size(2)})"
        ),
    )


# --------------------------------------------------------------------------------------
# Eager kernels (CompositeExplicitAutograd: CPU and the meta device alike)


def _update_cache(value: torch.Tensor, cache: torch.Tensor, start_pos: int) -> torch.Tensor:
    _check_cache("update_cache", value, cache)
    _check_span("update_cache", start_pos, value.size(1), cache.size(1))
    cache[:, start_pos : start_pos + value.size(1)].copy_(value)
    # The result is a placeholder nobody reads (the official operator's is one element).
    return value.new_zeros((1,))


def _update_cache_out(
    value: torch.Tensor, cache: torch.Tensor, start_pos: int, *, out: torch.Tensor
) -> torch.Tensor:
    _update_cache(value, cache, start_pos)
    return out


def _update_cache_with_indices(
    value: torch.Tensor, cache: torch.Tensor, start_pos: int, indices: torch.Tensor
) -> torch.Tensor:
    """Token ``s`` of batch ``b`` goes to cache row ``indices[b, s]``; ``start_pos`` unused."""
    _check_cache("update_cache_with_indices", value, cache)
    torch._check(
        indices.dim() == 2 and indices.shape == value.shape[:2],
        lambda: (
            "update_cache_with_indices: indices must be [batch, seq] "
            f"{tuple(value.shape[:2])}, got {tuple(indices.shape)}"
        ),
    )
    for b in range(value.size(0)):
        cache[b].index_copy_(0, indices[b], value[b])
    return value.new_zeros((1,))


def _update_cache_with_indices_out(
    value: torch.Tensor,
    cache: torch.Tensor,
    start_pos: int,
    indices: torch.Tensor,
    *,
    out: torch.Tensor,
) -> torch.Tensor:
    _update_cache_with_indices(value, cache, start_pos, indices)
    return out


def _custom_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    start_pos: int,
    attn_mask: torch.Tensor | None = None,
    drpout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention of ``query`` (at positions ``start_pos...``) over caches ``key``, ``value``.

    Without a mask the query attends to cache rows ``[0, start_pos + seq)``, causally
    when ``is_causal``; with a float mask ``[seq, cache_len]`` to the whole cache, the
    mask added to the scaled scores. Computed in float32, returned in the query's dtype.
    """
    _check_attention("custom_sdpa", query, key, value)
    torch._check(
        attn_mask is None or not is_causal,
        lambda: "custom_sdpa: attn_mask and is_causal cannot be set at the same time",
    )
    seq, heads, dim = query.size(1), query.size(2), query.size(3)
    if attn_mask is None:
        _check_span("custom_sdpa", start_pos, seq, key.size(1))
        n = start_pos + seq
    else:
        n = key.size(1)
    reps = heads // key.size(2)
    # [B, H, S, D] with each kv head repeated for its query heads (grouped-query attention).
    q = query.transpose(1, 2).float()
    k = key[:, :n].transpose(1, 2).float().repeat_interleave(reps, dim=1)
    v = value[:, :n].transpose(1, 2).float().repeat_interleave(reps, dim=1)
    factor = scale if scale is not None else 1.0 / math.sqrt(dim)
    scores = (q @ k.transpose(-2, -1)) * factor
    if attn_mask is not None:
        scores = scores + attn_mask.float()
    elif is_causal:
        rows = start_pos + torch.arange(seq, device=query.device)
        future = torch.arange(n, device=query.device)[None, :] > rows[:, None]
        scores = scores.masked_fill(future, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).to(query.dtype)


def _custom_sdpa_out(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    start_pos: int,
    attn_mask: torch.Tensor | None = None,
    drpout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    *,
    out: torch.Tensor,
) -> torch.Tensor:
    result = _custom_sdpa(query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale)
    out.resize_(result.shape).copy_(result)
    return out


# --------------------------------------------------------------------------------------
# Fake kernels: shapes only (export traces with these)


def _update_cache_fake(value: torch.Tensor, cache: torch.Tensor, start_pos: Any) -> torch.Tensor:
    _check_cache("update_cache", value, cache)
    _check_span("update_cache", start_pos, value.size(1), cache.size(1))
    return value.new_empty((1,))


def _update_cache_with_indices_fake(
    value: torch.Tensor, cache: torch.Tensor, start_pos: Any, indices: torch.Tensor
) -> torch.Tensor:
    _check_cache("update_cache_with_indices", value, cache)
    return value.new_empty((1,))


def _custom_sdpa_fake(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    start_pos: Any,
    attn_mask: torch.Tensor | None = None,
    drpout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    _check_attention("custom_sdpa", query, key, value)
    if attn_mask is None:
        _check_span("custom_sdpa", start_pos, query.size(1), key.size(1))
    return torch.empty_like(query)


# name -> (eager kernel, fake kernel or None: the eager one runs on fake tensors)
_KERNELS: dict[str, tuple[Any, Any]] = {
    "update_cache": (_update_cache, _update_cache_fake),
    "update_cache.out": (_update_cache_out, None),
    "update_cache_with_indices": (_update_cache_with_indices, _update_cache_with_indices_fake),
    "update_cache_with_indices.out": (_update_cache_with_indices_out, None),
    "custom_sdpa": (_custom_sdpa, _custom_sdpa_fake),
    "custom_sdpa.out": (_custom_sdpa_out, None),
}


# --------------------------------------------------------------------------------------
# Registration


def is_defined(name: str) -> bool:
    """Whether ``llama::name`` (``"custom_sdpa"`` or ``"custom_sdpa.out"``) exists."""
    op, _, overload = name.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"{NAMESPACE}::{op}", overload)
    except RuntimeError:
        return False
    return True


def define_ops() -> list[str]:
    """Define each operator of :data:`SCHEMAS` that nothing defined yet; returns their names.

    Idempotent: an operator that exists (ours or the official package's) is left as it is.
    """
    global _library
    missing = [name for name in SCHEMAS if not is_defined(name)]
    if not missing:
        return []
    if _library is None:
        _library = torch.library.Library(NAMESPACE, "FRAGMENT")  # noqa: TOR901
    for name in missing:
        base, _, overload = name.partition(".")
        _library.define(base + (f".{overload}" if overload else "") + SCHEMAS[name])
        eager, fake = _KERNELS[name]
        _library.impl(name, eager, "CompositeExplicitAutograd")
        if fake is not None:
            torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_library)
    if not any(isinstance(f, _YieldToOfficial) for f in sys.meta_path):
        sys.meta_path.insert(0, _YieldToOfficial())
    return missing


def withdraw_ops() -> None:
    """Remove the operators this module defined (the official library then defines its own)."""
    global _library
    if _library is not None:
        _library._destroy()
        _library = None


class _YieldToOfficial(importlib.abc.MetaPathFinder):
    """Withdraws our definitions just before the official custom-ops module is imported.

    That module loads a shared library that defines the same operators in C++ and
    aborts the process if any of them exists; it finds nothing, then, and defines
    them all (with the same schemas), which our exporter uses from then on.
    """

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == OFFICIAL_MODULE and _library is not None:
            withdraw_ops()
        return None  # the normal finders import it


define_ops()
