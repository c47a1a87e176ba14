"""The ``llama::`` custom-operator kernels against the official op library.

Each kernel is called through the registry on random inputs and compared with
``torch.ops.llama.*`` (the official ATen build of the same C++ kernels): KV-cache
writes (in place, over consecutive calls), attention over a cache (prefill and
decode, start positions, grouped-query heads, causal, masks, scales, float32 /
float16 / bfloat16, int8 with per-token parameters in both layouts), the gated
delta rule, the Hadamard transform, the fallback copy and ``preprocess::tile_crop``. Bad arguments raise
``KernelError``.
End to end, a small KV-cache attention module exported by the official exporter
runs in our runtime (numpy and compiled tiers) over several steps and matches
torch eager and the official runtime.

Loading the official op library also registers the ``llama::`` kernels in the
official runtime of this process.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from pyexecutorch.kernels import KernelError, get_kernel
from pyexecutorch.runtime import Runtime
from pyexecutorch.schema.pte import decode_pte
from tests import official

# The official meta function of update_cache still calls torch._check_is_size.
pytestmark = pytest.mark.filterwarnings("ignore:_check_is_size will be removed:FutureWarning")

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.fixture(scope="module")
def llama():
    official.silence_noise()
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 - registers the ops

    return torch.ops.llama


def to_np(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().copy().view(BF16)
    return t.numpy().copy()


def ours(name: str, *args):
    namespace = "preprocess" if name == "tile_crop" else "llama"
    return get_kernel(f"{namespace}::{name}.out").fn(*args)


def as_f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def assert_close(got: np.ndarray, want: torch.Tensor, dtype: torch.dtype) -> None:
    """float32: rtol 1e-5. float16/bfloat16: the official kernel rounds weights per
    512-key block, so a result may differ by about one unit in the last place."""
    w = to_np(want)
    assert got.shape == w.shape and got.dtype == w.dtype
    tol = {
        torch.float32: (1e-5, 2e-6),
        torch.float16: (2e-3, 2e-3),
        torch.bfloat16: (1.6e-2, 1.6e-2),
    }
    rtol, atol = tol[dtype]
    np.testing.assert_allclose(as_f64(got), as_f64(w), rtol=rtol, atol=atol)


def rand(*shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


# --------------------------------------------------------------------------------------
# update_cache / update_cache_with_indices

CACHE_DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int8,
    torch.int64,
]


def _values(shape, dtype):
    if dtype.is_floating_point:
        return rand(*shape, dtype=dtype)
    return torch.randint(-100, 100, shape, dtype=dtype)


@pytest.mark.parametrize("dtype", CACHE_DTYPES, ids=str)
@pytest.mark.parametrize("batch,heads,head_dim", [(1, 2, 4), (3, 1, 8)])
def test_update_cache_in_place_over_steps(llama, dtype, batch, heads, head_dim):
    torch.manual_seed(0)
    length = 9
    theirs = torch.zeros(batch, length, heads, head_dim, dtype=dtype)
    mine = to_np(theirs)
    out = np.full(1, 7.0, np.float32)
    pos = 0
    for seq in (3, 1, 1, 2, 1, 1):  # a prefill, then decode steps, to the cache's end
        value = _values((batch, seq, heads, head_dim), dtype)
        llama.update_cache(value, theirs, pos)
        result = ours("update_cache", to_np(value), mine, pos, out)
        assert result is out and out[0] == 7.0  # out is a placeholder nobody writes
        np.testing.assert_array_equal(mine.view(np.uint8), to_np(theirs).view(np.uint8))
        pos += seq
    assert pos == length


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bfloat16], ids=str)
def test_update_cache_with_indices(llama, dtype):
    torch.manual_seed(1)
    theirs = _values((2, 10, 3, 4), dtype)
    mine = to_np(theirs)
    for indices in ([[2, 5, 7], [9, 0, 4]], [[8, 5, 2], [1, 1, 3]], [[3, 5, 3], [6, 6, 6]]):
        idx = torch.tensor(indices)
        value = _values((2, 3, 3, 4), dtype)
        llama.update_cache_with_indices(value, theirs, 0, idx)
        ours("update_cache_with_indices", to_np(value), mine, 123, idx.numpy(), np.empty(1))
        np.testing.assert_array_equal(mine.view(np.uint8), to_np(theirs).view(np.uint8))


# --------------------------------------------------------------------------------------
# custom_sdpa / sdpa_with_kv_cache

# (batch, seq, q heads, kv heads, head_dim, cache length, start_pos)
SDPA_SHAPES = {
    "decode-0": (1, 1, 4, 4, 8, 10, 0),
    "decode-gqa": (2, 1, 8, 2, 16, 20, 7),
    "decode-last": (1, 1, 6, 3, 8, 12, 11),
    "prefill": (1, 5, 6, 3, 8, 12, 0),
    "prefill-offset": (2, 3, 4, 2, 8, 9, 6),
    "mqa-long": (1, 4, 4, 1, 32, 700, 600),
}


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
@pytest.mark.parametrize("scale", [None, 0.37], ids=["default-scale", "scale"])
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", list(SDPA_SHAPES))
def test_custom_sdpa(llama, shape, is_causal, scale, dtype):
    torch.manual_seed(2)
    b, s, hq, hkv, d, length, pos = SDPA_SHAPES[shape]
    dt = DTYPES[dtype]
    q, k, v = (
        rand(b, s, hq, d, dtype=dt),
        rand(b, length, hkv, d, dtype=dt),
        rand(b, length, hkv, d, dtype=dt),
    )
    want = llama.custom_sdpa(q, k, v, pos, None, 0.0, is_causal, scale)
    out = np.empty(q.shape, to_np(q).dtype)
    got = ours("custom_sdpa", to_np(q), to_np(k), to_np(v), pos, None, 0.0, is_causal, scale, out)
    assert got is out
    assert_close(got, want, dt)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_custom_sdpa_with_mask(llama, dtype):
    torch.manual_seed(3)
    dt = DTYPES[dtype]
    q, k, v = rand(2, 3, 4, 8, dtype=dt), rand(2, 11, 2, 8, dtype=dt), rand(2, 11, 2, 8, dtype=dt)
    # A float mask over the whole cache: start_pos no longer limits the keys.
    mask = torch.randn(3, 11)
    mask[:, 7:] = float("-inf")
    mask[1, 2] = float("-inf")
    want = llama.custom_sdpa(q, k, v, 2, mask, 0.0, False, None)
    got = ours(
        "custom_sdpa",
        to_np(q),
        to_np(k),
        to_np(v),
        2,
        mask.numpy(),
        0.0,
        False,
        None,
        np.empty(q.shape, to_np(q).dtype),
    )
    assert_close(got, want, dt)


def test_custom_sdpa_writes_a_dynamic_output_prefix(llama):
    torch.manual_seed(4)
    q, k, v = rand(1, 2, 4, 8), rand(1, 6, 2, 8), rand(1, 6, 2, 8)
    planned = np.full((1, 6, 4, 8), 5.0, np.float32)  # upper-bound storage of a dynamic output
    got = ours("custom_sdpa", to_np(q), to_np(k), to_np(v), 1, None, 0.0, True, None, planned)
    assert got.shape == (1, 2, 4, 8) and np.shares_memory(got, planned)
    assert_close(got, llama.custom_sdpa(q, k, v, 1, None, 0.0, True, None), torch.float32)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2)], ids=["mha", "gqa"])
def test_sdpa_with_kv_cache_over_steps(llama, hq, hkv, dtype):
    torch.manual_seed(5)
    dt = DTYPES[dtype]
    b, d, length = 2, 8, 10
    k_theirs, v_theirs = (
        torch.zeros(b, length, hkv, d, dtype=dt),
        torch.zeros(b, length, hkv, d, dtype=dt),
    )
    k_mine, v_mine = to_np(k_theirs), to_np(v_theirs)
    pos = 0
    for seq in (4, 1, 1, 3):
        q, k, v = (
            rand(b, seq, hq, d, dtype=dt),
            rand(b, seq, hkv, d, dtype=dt),
            rand(b, seq, hkv, d, dtype=dt),
        )
        want = llama.sdpa_with_kv_cache(
            q, k, v, k_theirs, v_theirs, pos, seq, None, 0.0, True, None
        )
        out = np.empty(q.shape, to_np(q).dtype)
        got = ours(
            "sdpa_with_kv_cache",
            to_np(q),
            to_np(k),
            to_np(v),
            k_mine,
            v_mine,
            pos,
            seq,
            None,
            0.0,
            True,
            None,
            out,
        )
        assert_close(got, want, dt)
        np.testing.assert_array_equal(k_mine.view(np.uint8), to_np(k_theirs).view(np.uint8))
        np.testing.assert_array_equal(v_mine.view(np.uint8), to_np(v_theirs).view(np.uint8))
        pos += seq


# --------------------------------------------------------------------------------------
# custom_quantized_sdpa


def _quantized(shape):
    """int8 values with per-token int8 zero points and float32 scales."""
    value = torch.randint(-128, 128, shape, dtype=torch.int8)
    zero_points = torch.randint(-8, 9, (*shape[:3], 1), dtype=torch.int8)
    scales = (torch.rand(*shape[:3], 1) * 0.015 + 0.005).to(torch.float32)
    return value, zero_points, scales


@pytest.mark.parametrize("seq_at_dim_2", [False, True], ids=["bshd", "bhsd"])
@pytest.mark.parametrize("masked", [False, True], ids=["causal", "mask"])
@pytest.mark.parametrize(
    "shape",
    [(1, 1, 4, 4, 16, 8, 0), (2, 1, 8, 2, 16, 12, 9), (1, 4, 4, 1, 32, 12, 3)],
    ids=["decode", "decode-gqa", "prefill-mqa"],
)
def test_custom_quantized_sdpa(llama, shape, masked, seq_at_dim_2):
    torch.manual_seed(6)
    b, s, hq, hkv, d, length, pos = shape

    def layout(sh):  # [B, S, H, X] -> the op's layout
        return (sh[0], sh[2], sh[1], sh[3]) if seq_at_dim_2 else sh

    q, qz, qs = _quantized(layout((b, s, hq, d)))
    k, kz, ks = _quantized(layout((b, length, hkv, d)))
    v, vz, vs = _quantized(layout((b, length, hkv, d)))
    mask = None
    if masked:
        mask = torch.where(torch.rand(s, length) < 0.3, float("-inf"), torch.randn(s, length))
        mask[:, 0] = 0.0
    args = (pos, mask, 0.0, not masked, None, qz, qs, kz, ks, vz, vs, seq_at_dim_2)
    want = llama.custom_quantized_sdpa(q, k, v, *args)
    assert want.dtype == torch.float32
    np_args = [to_np(a) if isinstance(a, torch.Tensor) else a for a in args]
    got = ours(
        "custom_quantized_sdpa",
        to_np(q),
        to_np(k),
        to_np(v),
        *np_args,
        np.empty(q.shape, np.float32),
    )
    np.testing.assert_allclose(got, to_np(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seq_at_dim_2", [False, True], ids=["bshd", "bhsd"])
def test_custom_quantized_sdpa_on_float_tensors(llama, seq_at_dim_2):
    torch.manual_seed(7)
    q, k, v = rand(1, 3, 4, 8), rand(1, 9, 2, 8), rand(1, 9, 2, 8)
    if seq_at_dim_2:
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    args = (4, None, 0.0, True, 0.5, None, None, None, None, None, None, seq_at_dim_2)
    want = llama.custom_quantized_sdpa(q, k, v, *args)
    got = ours(
        "custom_quantized_sdpa", to_np(q), to_np(k), to_np(v), *args, np.empty(q.shape, np.float32)
    )
    assert_close(got, want, torch.float32)


# --------------------------------------------------------------------------------------
# gated_delta_rule

# (batch, q heads, state heads, tokens, key dim, value dim, one decay per token)
DELTA_SHAPES = {
    "decode": (2, 3, 3, 1, 5, 6, False),
    "decode-grouped-scalar": (2, 6, 2, 1, 4, 3, True),
    "prefill": (2, 3, 3, 4, 5, 6, False),
    "prefill-grouped-scalar": (1, 4, 2, 7, 8, 8, True),
    "prefill-long": (1, 2, 2, 64, 16, 16, False),
}


@pytest.mark.parametrize("name", ["gated_delta_rule", "channelwise_gated_delta_rule"])
@pytest.mark.parametrize("shape", list(DELTA_SHAPES))
def test_gated_delta_rule(llama, shape, name):
    torch.manual_seed(10)
    b, hq, h, steps, k_dim, v_dim, per_token = DELTA_SHAPES[shape]
    q, k = rand(b, hq, steps, k_dim), rand(b, h, steps, k_dim)
    v, state = rand(b, h, steps, v_dim), rand(b, h, k_dim, v_dim)
    decay = torch.rand(b, h, steps) if per_token else torch.rand(b, h, steps, k_dim)
    beta = torch.sigmoid(torch.randn(b, h, steps))
    want_out, want_state = getattr(llama, name)(q, k, v, decay, beta, state)
    inputs = [to_np(t) for t in (q, k, v, decay, beta, state)]
    before = inputs[-1].copy()
    out, final = ours(
        name, *inputs, np.empty(want_out.shape, np.float32), np.empty(want_state.shape, np.float32)
    )
    np.testing.assert_array_equal(inputs[-1], before)  # initial_state is left alone
    # Decode runs the same recurrence as the official kernel; prefill there takes a
    # chunked form that rounds differently.
    rtol = 1e-5 if steps == 1 else 1e-4
    for got, want in ((out, want_out), (final, want_state)):
        want = to_np(want)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())


# --------------------------------------------------------------------------------------
# fast_hadamard_transform, fallback


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("n", [1, 2, 16, 128, 28, 56, 28 * 16])
def test_fast_hadamard_transform_is_bit_exact(llama, n, dtype):
    torch.manual_seed(8)
    mat = rand(3, 5, n, dtype=dtype)
    want = to_np(llama.fast_hadamard_transform(mat))
    got = ours("fast_hadamard_transform", to_np(mat), np.empty(mat.shape, want.dtype))
    np.testing.assert_array_equal(got, want)


def test_fast_hadamard_transform_of_a_vector_and_an_empty_tensor(llama):
    vec = rand(64)
    got = ours("fast_hadamard_transform", to_np(vec), np.empty(64, np.float32))
    np.testing.assert_array_equal(got, to_np(llama.fast_hadamard_transform(vec)))
    empty = ours(
        "fast_hadamard_transform", np.empty((0, 12), np.float32), np.empty((0, 12), np.float32)
    )
    assert empty.shape == (0, 12)


def test_fallback_copies(llama):
    x = rand(2, 3)
    got = ours("fallback", to_np(x), np.empty((2, 3), np.float32))
    np.testing.assert_array_equal(got, to_np(llama.fallback(x)))


# The official functional op plans at most 4 tiles (MAX_NUM_TILES).
@pytest.mark.parametrize(
    "shape,tile", [((3, 4, 4), 2), ((2, 2, 8), 2), ((3, 8, 8), 4), ((1, 5, 5), 5)]
)
def test_tile_crop(llama, shape, tile):
    image = rand(*shape)
    want = to_np(torch.ops.preprocess.tile_crop(image, tile))
    got = ours("tile_crop", to_np(image), tile, np.empty(want.shape, np.float32))
    np.testing.assert_array_equal(got, want)


def test_tile_crop_keeps_integer_dtypes():
    image = np.arange(2 * 4 * 4, dtype=np.int32).reshape(2, 4, 4)
    got = ours("tile_crop", image, 2, np.empty((4, 2, 2, 2), np.int32))
    np.testing.assert_array_equal(got[1, 0], [[2, 3], [6, 7]])  # the second tile of row 0


# --------------------------------------------------------------------------------------
# Errors


def _f(*shape, dtype=np.float32):
    return np.zeros(shape, dtype)


def _qargs(**bad):
    """custom_quantized_sdpa arguments on int8 [1, 2, 4, 8] / [1, 6, 2, 8] tensors."""
    q, k = _f(1, 2, 4, 8, dtype=np.int8), _f(1, 6, 2, 8, dtype=np.int8)
    params = {
        "qz": _f(1, 2, 4, 1, dtype=np.int8),
        "qs": _f(1, 2, 4, 1),
        "kz": _f(1, 6, 2, 1, dtype=np.int8),
        "ks": _f(1, 6, 2, 1),
        "vz": _f(1, 6, 2, 1, dtype=np.int8),
        "vs": _f(1, 6, 2, 1),
    }
    params.update(bad)
    p = params
    return (
        q,
        k,
        k.copy(),
        0,
        None,
        0.0,
        True,
        None,
        p["qz"],
        p["qs"],
        p["kz"],
        p["ks"],
        p["vz"],
        p["vs"],
        False,
        _f(1, 2, 4, 8),
    )


def _sdpa(q=None, k=None, v=None, pos=0, mask=None, causal=False):
    q = _f(1, 2, 4, 8) if q is None else q
    k = _f(1, 6, 2, 8) if k is None else k
    v = k.copy() if v is None else v
    return (q, k, v, pos, mask, 0.0, causal, None, _f(*q.shape))


def _delta(alias=False, **bad):
    """gated_delta_rule arguments: 2 query and 2 state heads, 3 tokens, K=4, V=5."""
    a = {"query": _f(1, 2, 3, 4), "key": _f(1, 2, 3, 4), "value": _f(1, 2, 3, 5)}
    a.update(decay=_f(1, 2, 3, 4), beta=_f(1, 2, 3), state=_f(1, 2, 4, 5))
    a.update(bad)
    final = a["state"] if alias else _f(1, 2, 4, 5)
    return (*a.values(), _f(1, 2, 3, 5), final)


ERRORS = {
    "sdpa-mask-and-causal": (
        "custom_sdpa",
        _sdpa(mask=_f(2, 6), causal=True),
        "attn_mask and is_causal cannot be set at the same time",
    ),
    "sdpa-rank": ("custom_sdpa", _sdpa(q=_f(2, 4, 8)), "query must be a 4-D tensor"),
    "sdpa-dtype": (
        "custom_sdpa",
        _sdpa(q=_f(1, 2, 4, 8, dtype=np.float64), k=_f(1, 6, 2, 8, dtype=np.float64)),
        "query must be float32, float16, bfloat16, got float64",
    ),
    "sdpa-int8": (
        "custom_sdpa",
        _sdpa(q=_f(1, 2, 4, 8, dtype=np.int8), k=_f(1, 6, 2, 8, dtype=np.int8)),
        "query must be float32, float16, bfloat16, got int8",
    ),
    "sdpa-mixed-dtype": (
        "custom_sdpa",
        _sdpa(q=_f(1, 2, 4, 8, dtype=np.float16)),
        "key and value must have the query's dtype float16",
    ),
    "sdpa-kv-shapes": (
        "custom_sdpa",
        _sdpa(v=_f(1, 5, 2, 8)),
        "key and value must have the same shape",
    ),
    "sdpa-head-size": (
        "custom_sdpa",
        _sdpa(q=_f(1, 2, 4, 4)),
        "must have the same head size, got 4 and 8",
    ),
    "sdpa-batch": ("custom_sdpa", _sdpa(q=_f(2, 2, 4, 8)), "must have the same batch size"),
    "sdpa-heads": (
        "custom_sdpa",
        _sdpa(q=_f(1, 2, 3, 8)),
        "query heads (3) must be a multiple of the number of key/value heads (2)",
    ),
    "sdpa-more-kv-heads": (
        "custom_sdpa",
        _sdpa(q=_f(1, 2, 1, 8)),
        "query heads (1) must be a multiple",
    ),
    "sdpa-start-pos": (
        "custom_sdpa",
        _sdpa(pos=5),
        "start_pos + seq_len = 5 + 2 must be in [seq_len, 6]",
    ),
    "sdpa-negative-start-pos": (
        "custom_sdpa",
        _sdpa(pos=-1),
        "start_pos + seq_len = -1 + 2 must be in",
    ),
    "sdpa-mask-shape": (
        "custom_sdpa",
        _sdpa(mask=_f(2, 4)),
        "attn_mask must have shape (seq_len, cache_len) = (2, 6), got (2, 4)",
    ),
    "sdpa-mask-dtype": (
        "custom_sdpa",
        _sdpa(mask=_f(2, 6, dtype=np.float16)),
        "attn_mask must be a 2-D float32 tensor, got float16",
    ),
    "sdpa-bool-mask": (
        "custom_sdpa",
        _sdpa(mask=_f(2, 6, dtype=np.bool_)),
        "attn_mask must be a 2-D float32 tensor, got bool",
    ),
    "update-start-pos-at-end": (
        "update_cache",
        (_f(1, 1, 2, 8), _f(1, 6, 2, 8), 6, _f(1)),
        "start_pos 6 must be in [0, 6)",
    ),
    "update-negative-start-pos": (
        "update_cache",
        (_f(1, 1, 2, 8), _f(1, 6, 2, 8), -1, _f(1)),
        "start_pos -1 must be in [0, 6)",
    ),
    "update-past-end": (
        "update_cache",
        (_f(1, 2, 2, 8), _f(1, 6, 2, 8), 5, _f(1)),
        "start_pos + seq_len = 5 + 2 must be <= the cache length 6",
    ),
    "update-dtype": (
        "update_cache",
        (_f(1, 2, 2, 8, dtype=np.int32), _f(1, 6, 2, 8), 0, _f(1)),
        "must have the same dtype, got int32 and float32",
    ),
    "update-heads": (
        "update_cache",
        (_f(1, 2, 3, 8), _f(1, 6, 2, 8), 0, _f(1)),
        "same number of heads (dim 2)",
    ),
    "update-batch": (
        "update_cache",
        (_f(2, 2, 2, 8), _f(1, 6, 2, 8), 0, _f(1)),
        "same batch size (dim 0)",
    ),
    "update-rank": (
        "update_cache",
        (_f(2, 2, 8), _f(1, 6, 2, 8), 0, _f(1)),
        "must be 4-D [batch, seq, heads, head_dim]",
    ),
    "indices-past-end": (
        "update_cache_with_indices",
        (_f(1, 2, 2, 8), _f(1, 6, 2, 8), 0, np.array([[1, 6]]), _f(1)),
        "index 6 out of bounds: not in [0, 6)",
    ),
    "indices-negative": (
        "update_cache_with_indices",
        (_f(1, 2, 2, 8), _f(1, 6, 2, 8), 0, np.array([[1, -1]]), _f(1)),
        "index -1 out of bounds",
    ),
    "indices-dtype": (
        "update_cache_with_indices",
        (_f(1, 2, 2, 8), _f(1, 6, 2, 8), 0, np.array([[1, 2]], np.int32), _f(1)),
        "indices must be int64, got int32",
    ),
    "indices-shape": (
        "update_cache_with_indices",
        (_f(1, 2, 2, 8), _f(1, 6, 2, 8), 0, np.array([[1, 2, 3]]), _f(1)),
        "indices must be 2-D [batch, seq] = (1, 2) like value, got (1, 3)",
    ),
    "kv-cache-past-end": (
        "sdpa_with_kv_cache",
        (
            _f(1, 2, 4, 8),
            _f(1, 2, 2, 8),
            _f(1, 2, 2, 8),
            _f(1, 6, 2, 8),
            _f(1, 6, 2, 8),
            5,
            2,
            None,
            0.0,
            True,
            None,
            _f(1, 2, 4, 8),
        ),
        "start_pos + seq_len = 5 + 2 must be <= the cache length 6",
    ),
    "kv-cache-heads": (
        "sdpa_with_kv_cache",
        (
            _f(1, 2, 3, 8),
            _f(1, 2, 2, 8),
            _f(1, 2, 2, 8),
            _f(1, 6, 2, 8),
            _f(1, 6, 2, 8),
            0,
            2,
            None,
            0.0,
            True,
            None,
            _f(1, 2, 3, 8),
        ),
        "query heads (3) must be a multiple",
    ),
    "quantized-no-params": (
        "custom_quantized_sdpa",
        _qargs(qs=None),
        "an int8 query needs its scales and zero points",
    ),
    "quantized-scale-dtype": (
        "custom_quantized_sdpa",
        _qargs(ks=_f(1, 6, 2, 1, dtype=np.float64)),
        "key scales must be float32 (1, 6, 2, 1), got float64",
    ),
    "quantized-zero-point-shape": (
        "custom_quantized_sdpa",
        _qargs(vz=_f(1, 6, 2, 8, dtype=np.int8)),
        "value zero points must be int8 (1, 6, 2, 1)",
    ),
    "delta-dtype": (
        "gated_delta_rule",
        _delta(query=_f(1, 2, 3, 4, dtype=np.float16)),
        "query must be float32, got float16",
    ),
    "delta-heads": (
        "gated_delta_rule",
        _delta(query=_f(1, 3, 3, 4)),
        "query heads (3) must be a multiple of key/value heads (2)",
    ),
    "delta-decay": (
        "gated_delta_rule",
        _delta(decay=_f(1, 2, 3, 5)),
        "decay must be [B, H, T, K] = (1, 2, 3, 4) (per channel) or [B, H, T] = (1, 2, 3) (per token), got (1, 2, 3, 5)",
    ),
    "delta-beta": (
        "gated_delta_rule",
        _delta(beta=_f(1, 2, 4)),
        "beta must be [B, H, T] = (1, 2, 3), got (1, 2, 4)",
    ),
    "delta-state": (
        "gated_delta_rule",
        _delta(state=_f(1, 2, 5, 4)),
        "initial_state must be [B, H, K, V] = (1, 2, 4, 5)",
    ),
    "delta-aliased-state": (
        "gated_delta_rule",
        _delta(alias=True),
        "final_state_out must not alias initial_state",
    ),
    "hadamard-size": (
        "fast_hadamard_transform",
        (_f(3, 12), _f(3, 12)),
        "the last dim must be a power of 2 or 28 times a power of 2, got 12",
    ),
    "hadamard-bfloat16": (
        "fast_hadamard_transform",
        (_f(3, 16, dtype=BF16), _f(3, 16, dtype=BF16)),
        "mat must be float16, float32 or float64, got bfloat16",
    ),
    "tile-crop-size": (
        "tile_crop",
        (_f(3, 4, 6), 4, _f(6, 3, 4, 4)),
        "tile_size must be positive and divide the height and width 4x6, got 4",
    ),
    "tile-crop-rank": (
        "tile_crop",
        (_f(4, 6), 2, _f(6, 1, 2, 2)),
        "input must be a 3-D [C, H, W] tensor",
    ),
    "fallback-dtype": (
        "fallback",
        (_f(2), _f(2, dtype=np.int32)),
        "output must have the input's dtype float32, got int32",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_bad_arguments_raise_kernel_error(case):
    name, args, message = ERRORS[case]
    with pytest.raises(KernelError) as err:
        ours(name, *args)
    assert type(err.value) is KernelError
    assert message in str(err.value)


def test_failed_kv_cache_call_leaves_the_caches_alone():
    k_cache, v_cache = np.ones((1, 6, 2, 8), np.float32), np.ones((1, 6, 2, 8), np.float32)
    with pytest.raises(KernelError, match="must be a multiple"):
        ours(
            "sdpa_with_kv_cache",
            _f(1, 2, 3, 8),
            _f(1, 2, 2, 8),
            _f(1, 2, 2, 8),
            k_cache,
            v_cache,
            0,
            2,
            None,
            0.0,
            True,
            None,
            _f(1, 2, 3, 8),
        )
    assert (k_cache == 1).all() and (v_cache == 1).all()


# --------------------------------------------------------------------------------------
# End to end: a KV-cache attention block exported by the official exporter


class CachedAttention(torch.nn.Module):
    """One attention step over registered KV caches, as export_llama builds it."""

    def __init__(self, batch=1, length=12, kv_heads=2, head_dim=8, fused=False):
        super().__init__()
        self.fused = fused
        self.register_buffer("k_cache", torch.zeros(batch, length, kv_heads, head_dim))
        self.register_buffer("v_cache", torch.zeros(batch, length, kv_heads, head_dim))

    def forward(self, q, k, v, input_pos):
        pos = input_pos[0].item()
        torch._check(pos >= 0)
        torch._check(pos + q.shape[1] <= self.k_cache.shape[1])
        if self.fused:
            out = torch.ops.llama.sdpa_with_kv_cache(
                q, k, v, self.k_cache, self.v_cache, pos, q.shape[1], None, 0.0, True
            )
        else:
            torch.ops.llama.update_cache(k, self.k_cache, pos)
            torch.ops.llama.update_cache(v, self.v_cache, pos)
            out = torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, pos, None, 0.0, True)
        return out, torch.ops.llama.fast_hadamard_transform(out)


def _steps(heads=4, kv_heads=2, head_dim=8):
    """A 3-token prefill at 0, then decode steps at 3, 4, 5 and 6."""
    g = torch.Generator().manual_seed(9)
    steps, pos = [], 0
    for seq in (3, 1, 1, 1, 1):
        q = torch.randn(1, seq, heads, head_dim, generator=g)
        k = torch.randn(1, seq, kv_heads, head_dim, generator=g)
        v = torch.randn(1, seq, kv_heads, head_dim, generator=g)
        steps.append((q, k, v, torch.tensor([pos])))
        pos += seq
    return steps


LLAMA_OPS = {
    False: {
        "llama::update_cache.out",
        "llama::custom_sdpa.out",
        "llama::fast_hadamard_transform.out",
    },
    True: {"llama::sdpa_with_kv_cache.out", "llama::fast_hadamard_transform.out"},
}


@pytest.fixture(scope="module")
def exported(llama):
    programs = {}
    for fused in (False, True):
        example = _steps()[0]
        seq = torch.export.Dim("seq", min=1, max=12)
        shapes = ({1: seq}, {1: seq}, {1: seq}, None)
        ep = torch.export.export(CachedAttention(fused=fused), example, dynamic_shapes=shapes)
        pte = official.export_programs({"forward": ep})
        plan = decode_pte(pte).program.execution_plan[0]
        ops = {op.qualified_name for op in plan.operators}
        assert LLAMA_OPS[fused] == {op for op in ops if op.startswith("llama::")}
        programs[fused] = pte
    return programs


@pytest.mark.parametrize("jit", [False, True], ids=["numpy", "compiled"])
@pytest.mark.parametrize(
    "fused", [False, True], ids=["update_cache+custom_sdpa", "sdpa_with_kv_cache"]
)
def test_exported_kv_cache_attention_runs_over_steps(exported, fused, jit):
    pte = exported[fused]
    method = Runtime.get().load_program(pte, jit=jit).load_method("forward")
    eager = CachedAttention(fused=fused)
    theirs = official.OfficialRunner(pte)
    for step in _steps():
        with torch.no_grad():
            want = [t.numpy() for t in eager(*step)]
        got = [official.to_numpy(o) for o in method.execute([t.numpy() for t in step])]
        runtime = theirs.run(step)
        for g, w, r in zip(got, want, runtime, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=2e-6)
