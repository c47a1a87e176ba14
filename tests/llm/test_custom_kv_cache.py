"""``examples.models.llama.source_transformation.custom_kv_cache.CustomKVCache`` and the
official path of the ``llama::`` operators' module: a KV cache written through
``llama::update_cache`` (and ``update_cache_with_indices``) exported by our exporter,
run over several calls in our runtime against torch eager and the official runtime."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from pyexecutorch.examples.models.llama.source_transformation.custom_kv_cache import (
    CustomKVCache,
)
from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime
from tests import official

pytestmark = pytest.mark.filterwarnings("ignore:_check_is_size will be removed:FutureWarning")


class CacheSum(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kv_cache = CustomKVCache(max_batch_size=1, max_context_length=8, n_heads=2, head_dim=4)

    def forward(self, input_pos, k_val, v_val):
        k, v = self.kv_cache.update(input_pos, k_val, v_val)
        return k * 2 + v


def test_official_module_path_defines_the_operators():
    module = importlib.import_module("pyexecutorch.extension.llm.custom_ops.custom_ops")
    assert all(module.is_defined(name) for name in module.SCHEMAS)
    assert hasattr(torch.ops.llama, "update_cache")


def test_update_writes_at_the_position_eagerly():
    cache = CustomKVCache(max_batch_size=1, max_context_length=6, n_heads=2, head_dim=3)
    k, v = torch.randn(1, 2, 2, 3), torch.randn(1, 2, 2, 3)
    k_out, v_out = cache.update(torch.tensor([3, 4]), k, v)
    assert k_out.shape == (1, 2, 6, 3) and cache.k_cache.shape == (1, 6, 2, 3)
    torch.testing.assert_close(k_out[:, :, 3:5], k, rtol=0, atol=0)
    torch.testing.assert_close(v_out[:, :, 3:5], v, rtol=0, atol=0)
    assert not k_out[:, :, :3].any() and not k_out[:, :, 5:].any()
    indices = torch.tensor([[5, 0]])
    k_out, _ = cache.update(torch.tensor([0]), k, v, indices=indices)
    torch.testing.assert_close(k_out[:, :, 5], k[:, :, 0], rtol=0, atol=0)
    torch.testing.assert_close(k_out[:, :, 0], k[:, :, 1], rtol=0, atol=0)


def test_exported_cache_runs_like_eager_and_the_official_runtime():
    official.silence_noise()
    torch.manual_seed(0)
    example = (torch.tensor([0]), torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
    program = to_edge(torch.export.export(CacheSum().eval(), example)).to_executorch()
    assert "llama.update_cache" in program.exported_program().graph_module.code
    pte = bytes(program.buffer)
    eager = CacheSum().eval()
    methods = [
        Runtime.get().load_program(pte, jit=jit).load_method("forward") for jit in (False, True)
    ]
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 - the official kernels

    theirs = official.official_runner(pte)
    for position in (0, 1, 5, 2):  # each call writes one slot of the persistent caches
        inputs = (torch.tensor([position]), torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
        with torch.no_grad():
            want = eager(*inputs).numpy()
        np.testing.assert_array_equal(theirs.run(list(inputs))[0], want)
        for method in methods:
            got = method.execute([x.numpy() for x in inputs])[0]
            np.testing.assert_array_equal(np.asarray(got), want)
