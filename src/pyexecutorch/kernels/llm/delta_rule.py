"""``llama::gated_delta_rule`` (and its deprecated name ``channelwise_gated_delta_rule``).

The linear-attention recurrence of gated DeltaNet layers, on float32 tensors
with heads at dim 1: query ``[B, Hq, T, K]``, key ``[B, H, T, K]``, value
``[B, H, T, V]``, an already exponentiated decay ``[B, H, T, K]`` (per key
channel) or ``[B, H, T]`` (one gate per token), beta ``[B, H, T]`` and a state
``[B, H, K, V]``. For each token ``t``::

    state = state * decay_t                       # rows scaled by the key channel gate
    delta = beta_t * (v_t - k_t @ state)
    state = state + outer(k_t, delta)
    out_t = q_t @ state                           # query head h reads state h // (Hq // H)

The kernel returns the outputs and the final state; ``initial_state`` is left
as it was. Prefill in the official kernel uses a chunked form of the same
recurrence, which rounds differently (agreeing to about 1e-4).
"""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.common import fit
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.schema.scalar_type import F32


def _check(op: str, query, key, value, decay, beta, state) -> None:
    named = {"query": query, "key": key, "value": value, "decay": decay, "beta": beta}
    named["initial_state"] = state
    for name, t in named.items():
        if t.dtype != F32:
            raise KernelError(f"{op}: {name} must be float32, got {t.dtype}")
    for name, t in (("query", query), ("key", key), ("value", value), ("initial_state", state)):
        if t.ndim != 4:
            raise KernelError(f"{op}: {name} must be a 4-D tensor, got shape {t.shape}")
    b, h, steps, k_dim = key.shape
    if query.shape[0] != b or query.shape[2:] != (steps, k_dim):
        raise KernelError(
            f"{op}: query and key must match in batch, sequence and head dim, "
            f"got {query.shape} and {key.shape}"
        )
    if h == 0 or query.shape[1] % h:
        raise KernelError(
            f"{op}: query heads ({query.shape[1]}) must be a multiple of key/value heads ({h})"
        )
    if value.shape[:3] != (b, h, steps):
        raise KernelError(
            f"{op}: key and value must match in batch, heads and sequence, got {key.shape} and {value.shape}"
        )
    if decay.shape not in ((b, h, steps, k_dim), (b, h, steps)):
        raise KernelError(
            f"{op}: decay must be [B, H, T, K] = {key.shape} (per channel) or "
            f"[B, H, T] = {key.shape[:3]} (per token), got {decay.shape}"
        )
    if beta.shape != (b, h, steps):
        raise KernelError(f"{op}: beta must be [B, H, T] = {key.shape[:3]}, got {beta.shape}")
    if state.shape != (b, h, k_dim, value.shape[3]):
        raise KernelError(
            f"{op}: initial_state must be [B, H, K, V] = {(b, h, k_dim, value.shape[3])}, "
            f"got {state.shape}"
        )


@kernel("llama::gated_delta_rule.out", "llama::channelwise_gated_delta_rule.out", n_outs=2)
def gated_delta_rule_out(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    decay: np.ndarray,
    beta: np.ndarray,
    initial_state: np.ndarray,
    out: np.ndarray,
    final_state_out: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Run the gated delta rule over all tokens; returns ``(out, final_state)``."""
    op = "gated_delta_rule"
    _check(op, query, key, value, decay, beta, initial_state)
    if np.shares_memory(initial_state, final_state_out):
        raise KernelError(f"{op}: final_state_out must not alias initial_state")
    b, hq, steps, k_dim = query.shape
    h, v_dim = key.shape[1], value.shape[3]
    result = fit(out, (b, hq, steps, v_dim))
    final = fit(final_state_out, initial_state.shape)
    state = initial_state.copy()
    gates = decay[..., None] if decay.ndim == 4 else decay[..., None, None]
    grouped_q = query.reshape(b, h, hq // h, steps, k_dim)
    # A recurrence: each token's state depends on the previous one, so tokens
    # run in order; every step is whole-array work over batch, heads and dims.
    for t in range(steps):
        state *= gates[:, :, t]
        k_t = key[:, :, t]
        predicted = np.matmul(k_t[:, :, None, :], state)[:, :, 0]
        delta = (value[:, :, t] - predicted) * beta[:, :, t, None]
        state += k_t[..., None] * delta[:, :, None, :]
        result[:, :, t] = np.matmul(grouped_q[:, :, :, t], state).reshape(b, hq, v_dim)
    final[...] = state
    return result, final
