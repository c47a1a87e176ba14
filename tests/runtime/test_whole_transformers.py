"""Transformer patterns that compile whole: a key/value head repeat (a broadcast copy), a
rotary half-swap (a cat of a load-time slice), a one-token KV-cache update (index_put of a
transposed view), a class token (a cat of a constant and a transposed view) and a
channels-last layer norm feeding a convolution (a permuted view staged by a copy); the
small llama, ViT and ConvNeXt of the architecture suite as one numba call each; and the
products of one row or column on BLAS's gemv."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.exir import to_edge
from pyexecutorch.kernels.registry import fast_path_of
from pyexecutorch.runtime import Runtime

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")


class HeadRepeat(torch.nn.Module):
    """Grouped-query attention's pieces: rotate-half on q, the key/value heads repeated."""

    def forward(self, q, k):  # noqa: ANN001, ANN201
        half = q.shape[-1] // 2
        rotated = torch.cat([-q[..., half:], q[..., :half]], dim=-1)
        b, heads, s, d = k.shape
        repeated = k[:, :, None].expand(b, heads, 3, s, d).reshape(b, heads * 3, s, d)
        return rotated * 0.5 + q, repeated @ repeated.transpose(-1, -2)


class OneTokenCache(torch.nn.Module):
    """A decoder step's cache update, as the KV-cache GPT of the benchmarks makes it: one
    token's keys split from a projection, viewed per head and transposed, copied at ``pos``
    into a buffer (an index_put of a view made at load, not the array planned for it)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
        self.register_buffer("cache", torch.zeros(1, 4, 6, 4))

    def forward(self, x, pos):  # noqa: ANN001, ANN201
        q, k, v = (t.view(1, 1, 4, 4).transpose(1, 2) for t in self.qkv(x).split(16, dim=2))
        self.cache.index_copy_(2, pos, k)
        return (q @ self.cache.transpose(-2, -1)) * v.sum()


class ClassToken(torch.nn.Module):
    """A ViT's patch embedding: a class token before the flattened, transposed patches."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = torch.nn.Conv2d(3, 8, 4, 4)
        self.token = torch.nn.Parameter(torch.randn(1, 1, 8))

    def forward(self, x):  # noqa: ANN001, ANN201
        patches = self.patch(x).flatten(2).transpose(1, 2)
        return torch.cat([self.token, patches], dim=1) * 2.0


class ChannelsLastDownsample(torch.nn.Module):
    """ConvNeXt's downsampling: a layer norm over channels-last, then a 2x2 stride-2 conv."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(6)
        self.down = torch.nn.Conv2d(6, 10, 2, 2)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return torch.relu(self.down(h))


def _pte(module: torch.nn.Module, example: tuple) -> bytes:
    return to_edge(torch.export.export(module, example)).to_executorch().buffer


def _method(pte: bytes, jit: bool):  # noqa: ANN202
    return Runtime.get().load_program(pte, jit=jit).load_method("forward")


CASES = {
    # name: (module, example inputs, a loop the whole function calls)
    "head_repeat": (
        HeadRepeat(),
        (torch.randn(1, 6, 5, 8), torch.randn(1, 2, 5, 8)),
        "broadcast_rows",
    ),
    "class_token": (ClassToken().eval(), (torch.randn(1, 3, 8, 8),), "copy_view"),
    "channels_last_downsample": (
        ChannelsLastDownsample().eval(),
        (torch.randn(1, 6, 8, 8),),
        "copy_view",
    ),
}


def _check(whole, numpy_tier, module, inputs: list[torch.Tensor]) -> None:  # noqa: ANN001
    got = whole.execute([x.numpy() for x in inputs])
    ref = numpy_tier.execute([x.numpy() for x in inputs])
    with torch.no_grad():
        want = module(*inputs)
    want = list(want) if isinstance(want, tuple) else [want]
    assert len(got) == len(want)
    for g, r, w in zip(got, ref, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_pattern_compiles_whole_and_matches_numpy_tier_and_eager(name):
    module, example, loop = CASES[name]
    pte = _pte(module, example)
    whole, numpy_tier = _method(pte, jit=True), _method(pte, jit=False)
    source = whole.plan.whole_source
    assert source is not None, whole.plan.sources[0]
    assert loop in source
    for seed in (1, 2):  # a method bound to stale arrays would repeat the first answer
        g = torch.Generator().manual_seed(seed)
        _check(whole, numpy_tier, module, [torch.randn(x.shape, generator=g) for x in example])


def test_one_token_cache_update_compiles_whole_and_a_bad_position_raises_as_numpy():
    from pyexecutorch.runtime.errors import ExecutionError  # noqa: PLC0415

    module = OneTokenCache()
    pte = _pte(module, (torch.randn(1, 1, 16), torch.tensor([2])))
    whole, numpy_tier = _method(pte, jit=True), _method(pte, jit=False)
    source = whole.plan.whole_source
    assert source is not None, whole.plan.sources[0]
    assert "PUT_ROWS" in source  # the compiled form, made again on the transposed view
    g = torch.Generator().manual_seed(1)
    for pos in (0, 5, 2, 0):  # the buffer carries every step's keys to the next call
        _check(whole, numpy_tier, module, [torch.randn(1, 1, 16, generator=g), torch.tensor([pos])])
    args = [np.zeros((1, 1, 16), np.float32), np.array([6])]
    with pytest.raises(ExecutionError) as whole_error:
        whole.execute(args)
    with pytest.raises(ExecutionError) as numpy_error:
        numpy_tier.execute(args)
    assert "index" in str(whole_error.value)
    assert str(whole_error.value.__cause__) == str(numpy_error.value.__cause__)


@pytest.mark.parametrize("name", ["llama"])  # vit and convnext: their patterns above
def test_architectures_compile_whole_and_match_eager(name):
    from tests import (
        architectures,  # noqa: PLC0415 - the held-out architectures (tests/architectures.py)
        models,  # noqa: PLC0415
        official,  # noqa: PLC0415
    )

    case = architectures.get_arch(name)
    pte = to_edge(models.export(case)).to_executorch().buffer
    whole, numpy_tier = _method(pte, jit=True), _method(pte, jit=False)
    assert whole.plan.whole_source is not None, whole.plan.sources[0]
    for inputs in case.all_inputs():
        got = [official.to_numpy(x) for x in whole.execute(list(inputs))]
        ref = [official.to_numpy(x) for x in numpy_tier.execute(list(inputs))]
        for g, r in zip(got, ref, strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
        official.assert_close(case, got, official.eager_outputs(case, inputs), what=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape",
    [(1, 37, 53), (1, 1, 9), (19, 23, 1), (1, 8, 1), (5, 7, 11)],
    ids=["row", "row-short", "column", "dot", "matrix"],
)
def test_blas_products_of_one_row_or_column_match_numpy(shape, dtype):
    from pyexecutorch.kernels.linalg.compiled import blas_matmul  # noqa: PLC0415

    m, k, n = shape
    rng = np.random.default_rng(m * 100 + n)
    # rows of a and b inside wider arrays: leading dimensions past their widths
    a = rng.standard_normal((2, m, k + 3)).astype(dtype)[:, :, :k]
    b = rng.standard_normal((2, k, n + 2)).astype(dtype)[:, :, :n]
    a[0, 0, 0] = np.inf  # propagates as numpy's does: inf or nan in row 0
    bias = rng.standard_normal((1, n)).astype(dtype)
    out = np.full((2, m, n), np.nan, dtype)  # nothing of the old out may survive
    blas_matmul(a, b, bias, out, True)
    want = np.matmul(a, b) + bias
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(
        out[1], torch.from_numpy(a[1] @ b[1] + bias).numpy(), rtol=tol, atol=tol
    )


@pytest.mark.parametrize(
    ("source", "target", "dtype"),
    [
        ((2, 1, 3, 4), (2, 5, 3, 4), np.float32),  # a head repeat: runs of 12
        ((3, 1), (2, 3, 4), np.int64),  # new leading dims, the last one repeated
        ((1,), (7,), np.bool_),
        ((), (2, 3), np.int32),
        ((4, 1, 2), (4, 3, 2), np.float64),
    ],
)
def test_broadcast_copy_step_matches_numpy(source, target, dtype):
    from pyexecutorch.kernels.shape.compiled import _expand_form  # noqa: PLC0415

    rng = np.random.default_rng(len(target))
    a = np.asarray((rng.standard_normal(source) * 10).astype(dtype))
    out = np.zeros(target, dtype)
    assert _expand_form(a, list(target), False, out) is None  # alone: numpy's copy
    form = _expand_form(a, list(target), False, out, whole=True)
    function, args = fast_path_of(form).step
    function(*args)
    np.testing.assert_array_equal(out, np.broadcast_to(a, target))
    np.testing.assert_array_equal(out, torch.from_numpy(a).expand(target).numpy())
