"""Whole-method compilation, views made at load, and torch outputs kept between calls.

A method whose every instruction is a compiled loop on arrays known at load
runs as one generated numba function (``Method.plan.whole_source``); its
numbers must be the numpy tier's and eager's, call after call.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")


class Gates(torch.nn.Module):
    """Elementwise runs split by a reshape copy: two fused loops and a copy."""

    def forward(self, x, y):  # noqa: ANN001, ANN201
        a = torch.sigmoid(x) * y + 1.0
        b = (torch.tanh(a) - x).reshape(-1, 2 * x.shape[-1])
        return b, torch.relu(b) * 0.5


class Broadcast(torch.nn.Module):
    """A broadcasting chain against a constant row, then a clamp at another shape."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("row", torch.linspace(-1.0, 1.0, 8))

    def forward(self, x):  # noqa: ANN001, ANN201
        h = torch.exp(-(x - self.row) * (x - self.row)) / 3.0
        return torch.clamp(h.reshape(-1, 8), 0.01, 0.3)


class IntegerOps(torch.nn.Module):
    """Integer arithmetic at two shapes: bit-exact with the numpy kernels."""

    def forward(self, a, b):  # noqa: ANN001, ANN201
        return (a * 3 + b).reshape(-1) * b.reshape(-1) - 7


class WithArctangent(torch.nn.Module):
    """An arctangent has no compiled step: the method stays instruction by instruction."""

    def forward(self, x, w):  # noqa: ANN001, ANN201
        return torch.sigmoid(torch.atan(x @ w)) * 2.0 + 1.0


class Reductions(torch.nn.Module):
    """Reductions with compiled steps: var, std, max.dim, amin, prod, a norm, two-run mean,
    cumsum."""

    def forward(self, x):  # noqa: ANN001, ANN201
        values, indices = x.max(dim=1)
        return (
            x.var(dim=1, keepdim=True),
            torch.std(x, dim=-1),
            values,
            indices,
            x.amin(dim=0),
            x.prod(dim=2),
            x.norm(dim=-1),
            x.mean(dim=(0, 2)),
            torch.cumsum(x, dim=1) * 0.5,
        )


class LinearNormSoftmax(torch.nn.Module):
    """Compiled kernel forms in one method: addmm, layer norm, softmax, a mean, bmm."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 12)
        self.norm = torch.nn.LayerNorm(12)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.norm(torch.relu(self.lin(x)))
        p = torch.softmax(h, dim=-1)
        q = torch.bmm(p.reshape(2, 3, 12), h.reshape(2, 12, 3))
        return p, q, h.mean(dim=-1, keepdim=True)


class GroupNormPermute(torch.nn.Module):
    """Group norm, then copies of strided views (permute, slice)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.GroupNorm(2, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        y = self.norm(x).permute(0, 2, 1)
        return y[:, 1:4] * 2.0


class GruLike(torch.nn.Module):
    """A GRU-like cell: a product past the standalone loop's size, split gates, a cat."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 48) * 0.3)

    def forward(self, x, h):  # noqa: ANN001, ANN201
        r, z, n = torch.split(x @ self.w, 16, dim=1)
        n = torch.tanh(n + torch.sigmoid(r) * h)
        out = (1 - torch.sigmoid(z)) * n + torch.sigmoid(z) * h
        return torch.cat([out, n], dim=0)


class WideClassifier(torch.nn.Module):
    """A classifier past the linalg forms' BLAS size (2**18 multiply-adds), left to numpy's
    BLAS alone but a BLAS step when it is all that keeps the method from compiling whole."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(512, 600)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.fc(torch.relu(x))


class LastStep(torch.nn.Module):
    """A linear layer on the last step of stacked states, as an LSTM's head reads it: the
    select becomes a strided view of the stack, not the array the product saw at load."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = torch.stack([torch.tanh(x[:, 0]), torch.tanh(x[:, 1]) * 2], 1)
        return self.fc(h[:, -1])


def _pte(module: torch.nn.Module, example: tuple) -> bytes:
    return to_edge(torch.export.export(module, example)).to_executorch().buffer


def _method(pte: bytes, jit: bool):  # noqa: ANN202
    return Runtime.get().load_program(pte, jit=jit).load_method("forward")


def _inputs(example: tuple, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(-50, 50, x.shape, generator=g, dtype=x.dtype)
        if not x.is_floating_point()
        else torch.randn(x.shape, generator=g, dtype=x.dtype)
        for x in example
    ]


CASES = {
    "gates": (Gates(), (torch.randn(4, 16), torch.randn(4, 16))),
    "gates_other_size": (Gates(), (torch.randn(6, 10), torch.randn(6, 10))),
    "broadcast": (Broadcast(), (torch.randn(3, 5, 8),)),
    "kernel_forms": (LinearNormSoftmax(), (torch.randn(6, 8),)),
    "group_norm_views": (GroupNormPermute(), (torch.randn(2, 4, 5),)),
    "gru_like": (GruLike(), (torch.randn(8, 16), torch.randn(8, 16))),
    "reductions": (Reductions(), (torch.randn(3, 4, 5),)),
    "row_view_product": (LastStep(), (torch.randn(2, 3, 16),)),
    "wide_classifier": (WideClassifier(), (torch.randn(2, 512),)),
    "integers": (
        IntegerOps(),
        (torch.ones(4, 6, dtype=torch.int32), torch.ones(4, 6, dtype=torch.int32)),
    ),
}

# Products and row statistics sum in another order than numpy's BLAS and passes: a few ulps
# (of the terms: row_view_product's 16-term sum of 0.0103 came 1.7e-7 off the numpy tier's
# in one cold suite run, equal in others).
SUMMED = {
    name: (1e-5, 1e-6)
    for name in (
        "kernel_forms",
        "group_norm_views",
        "gru_like",
        "reductions",
        "wide_classifier",
        "row_view_product",
    )
}


@pytest.mark.parametrize("name", list(CASES))
def test_whole_method_matches_numpy_tier_and_eager(name):
    module, example = CASES[name]
    pte = _pte(module, example)
    whole, numpy_tier = _method(pte, jit=True), _method(pte, jit=False)
    assert whole.plan.whole_source is not None, whole.plan.sources[0]
    assert "def whole(" in whole.plan.whole_source
    assert numpy_tier.plan.whole_source is None
    if name == "wide_classifier":
        assert "blas_matmul" in whole.plan.whole_source
    # Two different inputs: a method bound to stale arrays would repeat the first answer.
    for seed in (1, 2):
        inputs = _inputs(example, seed)
        got = whole.execute([x.numpy() for x in inputs])
        ref = numpy_tier.execute([x.numpy() for x in inputs])
        with torch.no_grad():
            want = module(*inputs)
        want = list(want) if isinstance(want, tuple) else [want]
        assert len(got) == len(want)
        for g, r, w in zip(got, ref, want, strict=True):
            if w.is_floating_point():
                rtol, atol = SUMMED.get(name, (1e-6, 1e-7))
                np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=rtol, atol=atol)
                np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_array_equal(np.asarray(g), np.asarray(r))
                np.testing.assert_array_equal(np.asarray(g), w.numpy())


def test_whole_function_is_generic_in_sizes():
    # The same model at two sizes generates the same function: one cache entry serves both.
    sources = []
    for name in ("gates", "gates_other_size"):
        module, example = CASES[name]
        sources.append(_method(_pte(module, example), jit=True).plan.whole_source)
    assert sources[0] is not None and sources[0] == sources[1]


def test_a_method_with_an_uncompiled_operator_runs_instruction_by_instruction():
    module = WithArctangent()
    example = (torch.randn(3, 4), torch.randn(4, 5))
    method = _method(_pte(module, example), jit=True)
    assert method.plan.whole_source is None
    inputs = _inputs(example, 3)
    got = method.execute([x.numpy() for x in inputs])[0]
    np.testing.assert_allclose(got.numpy(), module(*inputs).numpy(), rtol=1e-5, atol=1e-6)


def test_torch_outputs_are_kept_unless_the_caller_changed_them():
    module, example = CASES["gates"]
    method = _method(_pte(module, example), jit=True)
    x, y = (t.numpy() for t in _inputs(example, 4))
    first = method.execute([x, y], clone_outputs=False)
    second = method.execute([x, y], clone_outputs=False)
    assert all(a is b for a, b in zip(first, second, strict=True))  # no new wrapping per call
    shape = tuple(second[0].shape)
    second[0].unsqueeze_(0)  # a metadata change the next call must not inherit
    second[1].requires_grad_()
    x2, y2 = (t.numpy() for t in _inputs(example, 5))
    third = method.execute([x2, y2], clone_outputs=False)
    assert tuple(third[0].shape) == shape
    assert not third[1].requires_grad
    want = module(torch.from_numpy(x2), torch.from_numpy(y2))
    for got, w in zip(third, want, strict=True):
        np.testing.assert_allclose(got.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "name",
    ["norms", "where_mask", "gru", "mlp", "matmuls", "embedding", "kv_cache"]
    + ["gpt_block_sdpa"],  # products past the loop's size: BLAS steps
)
def test_suite_models_compile_whole_and_match_numpy_tier_and_eager(name):
    from tests import (
        models,  # noqa: PLC0415 - the compiler suite (tests/models.py)
        official,  # noqa: PLC0415
    )

    case = models.get_case(name)
    pte = to_edge(models.export(case)).to_executorch().buffer
    whole, numpy_tier = _method(pte, jit=True), _method(pte, jit=False)
    assert whole.plan.whole_source is not None, whole.plan.sources[0]
    for inputs in case.all_inputs():
        got = [official.to_numpy(x) for x in whole.execute(list(inputs))]
        ref = [official.to_numpy(x) for x in numpy_tier.execute(list(inputs))]
        for g, r in zip(got, ref, strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
        official.assert_close(case, got, official.eager_outputs(case, inputs), what=name)


class Lookup(torch.nn.Module):
    """An embedding and a cache-style index_put: checked steps in a whole method."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, ids, pos, cache):  # noqa: ANN001, ANN201
        cache = cache * 1.0
        cache[:, pos] = self.emb(ids) * 2.0
        return cache


def test_a_bad_index_in_a_whole_method_raises_the_kernel_error_naming_it():
    from pyexecutorch.runtime.errors import ExecutionError  # noqa: PLC0415

    module = Lookup()
    example = (torch.tensor([[1, 2]]), torch.tensor([0, 3]), torch.zeros(1, 5, 4))
    pte = _pte(module, example)
    whole, numpy_tier = _method(pte, jit=True), _method(pte, jit=False)
    assert whole.plan.whole_source is not None, whole.plan.sources[0]
    assert whole.plan.whole_source.count("        return ") == 2  # checked steps report
    ids, pos, cache = (x.numpy() for x in example)
    got = whole.execute([ids, pos, cache])[0]
    np.testing.assert_array_equal(got.numpy(), numpy_tier.execute([ids, pos, cache])[0].numpy())
    np.testing.assert_allclose(got.numpy(), module(*example).detach().numpy(), rtol=1e-6)
    for bad_ids, bad_pos, what in (([[1, 10]], [0, 3], "embedding"), ([[1, 2]], [0, 5], "index")):
        args = [np.array(bad_ids), np.array(bad_pos), cache]
        with pytest.raises(ExecutionError) as whole_error:
            whole.execute(args)
        with pytest.raises(ExecutionError) as numpy_error:
            numpy_tier.execute(args)
        assert what in str(whole_error.value)
        assert str(whole_error.value.__cause__) == str(numpy_error.value.__cause__)


class HalfLinearNormSoftmax(torch.nn.Module):
    """The float16 suite model's shape: linear, ReLU, layer norm, linear and softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.norm(torch.relu(self.fc1(x)))
        return self.fc2(h), torch.softmax(h, dim=-1), h


def test_float16_method_compiles_whole_and_rounds_as_the_numpy_tier():
    module = HalfLinearNormSoftmax().half()
    example = (torch.randn(4, 16, dtype=torch.float16),)
    pte = _pte(module, example)
    whole, numpy_tier = _method(pte, jit=True), _method(pte, jit=False)
    assert whole.plan.whole_source is not None, whole.plan.sources[0]
    for seed in (1, 2):
        inputs = _inputs(example, seed)
        got = whole.execute([x.numpy() for x in inputs])
        ref = numpy_tier.execute([x.numpy() for x in inputs])
        with torch.no_grad():
            want = module(*inputs)
        for g, r, w in zip(got, ref, want, strict=True):
            assert g.dtype == r.dtype == torch.float16
            # float32 sums in another order than BLAS's, each rounded once: an ulp or so
            np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=2e-3, atol=2e-3)
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-3, atol=2e-3)


class ResNetLike(torch.nn.Module):
    """Convolutions with batch norm, ReLU and residual adds (one downsampling through a
    strided 1x1), a global average pool and a classifier past the small-product loop."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU()
        )
        self.a = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 1, 1))
        self.b = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 16, 3, 1, 1))
        self.down = nn.Conv2d(8, 16, 1, 2)
        self.fc = nn.Linear(16, 600)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.stem(x)
        h = torch.relu(self.a(h) + h)
        h = torch.relu(self.b(h) + self.down(h))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(h, 1), 1))


class MobileNetLike(torch.nn.Module):
    """A strided stem with ReLU6, an inverted residual (1x1 expand, 3x3 depthwise, 1x1
    project, residual add), a strided 5x5 depthwise with hardswish, a mean and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU6())
        self.block = nn.Sequential(
            nn.Conv2d(8, 24, 1), nn.ReLU6(), nn.Conv2d(24, 24, 3, 1, 1, groups=24), nn.ReLU6()
        )
        self.project = nn.Conv2d(24, 8, 1)
        self.down = nn.Sequential(nn.Conv2d(8, 8, 5, 2, 2, groups=8), nn.Hardswish())
        self.fc = nn.Linear(8, 5)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.stem(x)
        h = self.project(self.block(h)) + h
        return self.fc(self.down(h).mean(dim=(2, 3)))


CNNS = {
    "resnet_like": (ResNetLike().eval(), (torch.randn(1, 3, 12, 12),)),
    "mobilenet_like": (MobileNetLike().eval(), (torch.randn(1, 3, 34, 30),)),
}


@pytest.mark.parametrize("name", list(CNNS))
def test_cnns_compile_whole_and_match_numpy_tier_and_eager(name):
    module, example = CNNS[name]
    pte = _pte(module, example)
    whole, numpy_tier = _method(pte, jit=True), _method(pte, jit=False)
    source = whole.plan.whole_source
    assert source is not None, whole.plan.sources[0]
    # convolutions on channels-last activations (runtime.layout), their clamps and residual
    # adds in their stores, and the classifier as a BLAS step
    assert "# pyexecutorch.kernels.conv.compiled_nhwc_dense:" in source
    assert whole.plan.channels_last
    if name == "resnet_like":  # its classifier is past the small-product loop
        assert "blas_matmul" in source
    for seed in (1, 2):
        (x,) = _inputs(example, seed)
        got = whole.execute([x.numpy()])[0].numpy()
        ref = numpy_tier.execute([x.numpy()])[0].numpy()
        with torch.no_grad():
            want = module(x).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


class Pools(torch.nn.Module):
    """Two max pools and two average pools, each pair of different window sizes."""

    def forward(self, x):  # noqa: ANN001, ANN201
        a = torch.nn.functional.max_pool2d(x, 3, stride=2, padding=1)
        c = torch.nn.functional.avg_pool2d(x, 2, stride=2)
        return (
            torch.nn.functional.max_pool2d(a, 2, stride=2),
            torch.nn.functional.avg_pool2d(c, 3, stride=1, padding=1),
        )


# Loads a program on the compiled tier (an empty cache) counting numba's compilations per
# function; argv: the program, the input, where to write the outputs of two calls.
_COUNTING_CHILD = """
import collections, json, sys
import numpy as np
from numba.core import event
from pyexecutorch.runtime import Runtime

counts = collections.Counter()

class Count(event.Listener):
    def on_start(self, ev):
        counts[ev.data["dispatcher"].py_func.__qualname__] += 1

    def on_end(self, ev):
        pass

event.register("numba:compile", Count())
method = Runtime.get().load_program(open(sys.argv[1], "rb").read(), jit=True).load_method("forward")
x = np.load(sys.argv[2])
outs = [np.array(o) for o in method.execute([x])]
outs += [np.array(o) for o in method.execute([x * -2.0])]
np.savez(sys.argv[3], *outs)
print(json.dumps({"counts": counts, "source": method.plan.whole_source}))
"""


def test_a_kernel_compiles_once_for_layers_of_different_sizes(tmp_path):
    # Whole numbers reach a kernel as int64 values, not literals: numba compiled the pooling
    # kernels once per window size (a cold load's seconds, for each pooling layer)
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    x = torch.randn(1, 8, 20, 20)
    (tmp_path / "pools.pte").write_bytes(_pte(Pools(), (x,)))
    np.save(tmp_path / "x.npy", x.numpy())
    env = {**os.environ, "PYEXECUTORCH_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("NUMBA_CACHE_DIR", None)
    paths = [str(tmp_path / name) for name in ("pools.pte", "x.npy", "outs.npz")]
    result = subprocess.run(
        [sys.executable, "-c", _COUNTING_CHILD, *paths],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    source = report["source"]
    assert source is not None and source.count("f0(") == 2 and source.count("f1(") == 2
    assert "np.int64(3)" in source and "np.int64(2)" in source
    assert report["counts"]["max_pool_values"] == 1
    assert report["counts"]["avg_pool"] == 1
    assert report["counts"]["whole"] == 1
    got = np.load(tmp_path / "outs.npz")
    with torch.no_grad():
        want = [*Pools()(x), *Pools()(x * -2.0)]
    assert len(got.files) == len(want) == 4
    for k, w in enumerate(want):
        np.testing.assert_allclose(got[f"arr_{k}"], w.numpy(), rtol=1e-6, atol=1e-6)
