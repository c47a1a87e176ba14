"""The compiled forms of ``llama::update_cache`` and ``llama::custom_sdpa`` (kernels/llm/compiled.py).

Their start position is read from the inputs at run time (``item()`` of ``input_pos``):
the compiled forms read it per call, so a program's positions must follow every call on
both tiers (the trap of a position fixed at load, as the ``select_copy`` snapshot once
fixed it). Checked against torch eager (SDPA over a cache kept in Python), with grouped
query heads, a decode length and a prefill length, each run more than twice (the
compiled tier's static plan per length is built on the second call).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from pyexecutorch.exir import to_edge
from pyexecutorch.kernels.registry import KernelError, get_compiled_form
from pyexecutorch.runtime import Runtime
from pyexecutorch.runtime.errors import ExecutionError
from tests import official

HEADS, KV_HEADS, HEAD_DIM, CACHE = 4, 2, 24, 32  # head dim: one vector of lanes and a tail


class CacheAttention(torch.nn.Module):
    """Write ``k``, ``v`` into the caches at ``pos[0]``, then attend causally with ``q``."""

    def __init__(self) -> None:
        super().__init__()
        shape = (1, CACHE, KV_HEADS, HEAD_DIM)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def forward(self, q, k, v, pos):  # noqa: ANN001, ANN201
        p = pos[0].item()
        torch._check(p >= 0)
        torch._check(p + q.shape[1] <= CACHE)
        torch.ops.llama.update_cache(k, self.k_cache, p)
        torch.ops.llama.update_cache(v, self.v_cache, p)
        return torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, p, None, 0.0, True)


def _eager(k_cache, v_cache, q, pos):  # noqa: ANN001, ANN202
    """torch's SDPA over the filled prefix, kv heads repeated for their query heads."""
    n = pos + q.shape[1]
    reps = HEADS // KV_HEADS
    keys = torch.from_numpy(k_cache[:, :n]).transpose(1, 2).repeat_interleave(reps, dim=1)
    values = torch.from_numpy(v_cache[:, :n]).transpose(1, 2).repeat_interleave(reps, dim=1)
    rows = pos + torch.arange(q.shape[1])
    allowed = torch.arange(n)[None, :] <= rows[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(
        torch.from_numpy(q).transpose(1, 2), keys, values, attn_mask=allowed
    )
    return out.transpose(1, 2).numpy()


@pytest.fixture(scope="module")
def program() -> bytes:
    """Our export of CacheAttention, the official libraries of llama:: and quantized
    operators loaded first (the oracle's, installed with the tests), as another test file
    of this process may load them: our exporter's out-variant registrations
    (quantized_decomposed::choose_qparams.Tensor_out) made first abort the process when the
    official quantized library loads later."""
    official.silence_noise()
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401

    seq = torch.export.Dim("seq", min=1, max=CACHE - 1)
    shapes = [(1, 2, h, HEAD_DIM) for h in (HEADS, KV_HEADS, KV_HEADS)]
    ep = torch.export.export(
        CacheAttention(),
        (*(torch.zeros(s) for s in shapes), torch.tensor([0])),
        dynamic_shapes=({1: seq}, {1: seq}, {1: seq}, None),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_edge(ep).to_executorch().buffer


@pytest.mark.parametrize("jit", [False, True], ids=["numpy", "compiled"])
def test_positions_follow_each_call(program, jit):
    method = Runtime.get().load_program(program, jit=jit).load_method("forward")
    rng = np.random.default_rng(0)
    k_cache = np.zeros((1, CACHE, KV_HEADS, HEAD_DIM), np.float32)
    v_cache = np.zeros_like(k_cache)
    # a prefill of 5 then decoded tokens, then a second prefill over the same positions
    # and more decoding: each length three times or more, positions changing
    calls = [(5, 0), (1, 5), (1, 6), (1, 7), (5, 8), (1, 13), (5, 2), (1, 7), (1, 31)]
    for seq, pos in calls:
        q = rng.standard_normal((1, seq, HEADS, HEAD_DIM)).astype(np.float32)
        k, v = (rng.standard_normal((1, seq, KV_HEADS, HEAD_DIM)).astype(np.float32) for _ in "kv")
        (got,) = method.execute([q, k, v, np.array([pos])])
        k_cache[:, pos : pos + seq] = k
        v_cache[:, pos : pos + seq] = v
        want = _eager(k_cache, v_cache, q, pos)
        np.testing.assert_allclose(
            np.asarray(got), want, rtol=1e-5, atol=1e-6, err_msg=f"{seq=} {pos=}"
        )
    if jit:
        plan = method.plan
        assert {key[0][1] for key in plan.static_plans} == {1, 5}
        for static in plan.static_plans.values():
            kinds = {
                i.operator: i.kind for i in static.instructions if i.operator.startswith("llama")
            }
            assert kinds == {"llama::update_cache.out": "call", "llama::custom_sdpa.out": "call"}
            assert static.whole  # (the position in a cell its function reads per call)


@pytest.mark.parametrize("jit", [False, True], ids=["numpy", "compiled"])
def test_position_past_the_cache_raises(program, jit):
    method = Runtime.get().load_program(program, jit=jit).load_method("forward")
    q = np.ones((1, 1, HEADS, HEAD_DIM), np.float32)
    k = np.ones((1, 1, KV_HEADS, HEAD_DIM), np.float32)
    for pos in (0, 1, 2):
        method.execute([q, k, k, np.array([pos])])
    assert not jit or all(p.whole for p in method.plan.static_plans.values())
    with pytest.raises(ExecutionError, match=r"update_cache: start_pos 32 must be in \[0, 32\)"):
        method.execute([q, k, k, np.array([CACHE])])
    (got,) = method.execute([q, k, k, np.array([3])])  # and the method goes on
    np.testing.assert_allclose(np.asarray(got), np.ones((1, 1, HEADS, HEAD_DIM)), rtol=1e-6)


def test_forms_check_positions_as_the_kernels_do():
    """Called alone, each compiled form raises the reference kernel's error for a start
    position outside the cache, and computes what the reference computes inside it."""
    pytest.importorskip("numba")
    import pyexecutorch.kernels.llm.compiled  # noqa: F401 - registers the forms
    from pyexecutorch.kernels.llm.attention import custom_sdpa_out

    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 3, HEADS, HEAD_DIM)).astype(np.float32)
    keys = rng.standard_normal((1, CACHE, KV_HEADS, HEAD_DIM)).astype(np.float32)
    values = rng.standard_normal((1, CACHE, KV_HEADS, HEAD_DIM)).astype(np.float32)
    out = np.empty_like(q)
    sdpa = get_compiled_form("llama::custom_sdpa.out")(
        q, keys, values, 0, None, 0.0, True, None, out, live_scalars=frozenset({3})
    )
    want = np.empty_like(q)
    for pos in (0, 7, CACHE - 3):
        sdpa(q, keys, values, pos, None, 0.0, True, None, out)
        custom_sdpa_out(q, keys, values, pos, None, 0.0, True, None, want)
        np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-6)
    with pytest.raises(KernelError, match=r"start_pos \+ seq_len = 30 \+ 3 must be in"):
        sdpa(q, keys, values, CACHE - 2, None, 0.0, True, None, out)
    new = np.ascontiguousarray(q[:, :, :KV_HEADS])
    update = get_compiled_form("llama::update_cache.out")(
        new, keys, 0, out, live_scalars=frozenset({2})
    )
    for pos in (4, 0, CACHE - 3):
        new += 1.0
        update(new, keys, pos, out)
        np.testing.assert_array_equal(keys[:, pos : pos + 3], new)
    with pytest.raises(KernelError, match=r"update_cache: start_pos -1 must be in \[0, 32\)"):
        update(new, keys, -1, out)


def test_tensor_info_says_which_inputs_are_dynamic(program):
    """The runner reads a program's dynamic sequence length from ``TensorInfo.is_dynamic``."""
    meta = Runtime.get().load_program(program).metadata("forward")
    assert [meta.input_tensor_meta(i).is_dynamic() for i in range(4)] == [True, True, True, False]
    assert meta.input_tensor_meta(0).sizes() == (1, CACHE - 1, HEADS, HEAD_DIM)  # the bounds
