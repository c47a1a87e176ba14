"""Whole-method compilation, views made at load, and torch outputs kept between calls.

A method whose every instruction is a compiled loop on arrays known at load
runs as one generated numba function (``LoadedMethod.whole_source``); its
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


class WithMatmul(torch.nn.Module):
    """A matrix product has no compiled step: the method stays instruction by instruction."""

    def forward(self, x, w):  # noqa: ANN001, ANN201
        return torch.sigmoid(x @ w) * 2.0 + 1.0


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
    "integers": (
        IntegerOps(),
        (torch.ones(4, 6, dtype=torch.int32), torch.ones(4, 6, dtype=torch.int32)),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_whole_method_matches_numpy_tier_and_eager(name):
    module, example = CASES[name]
    pte = _pte(module, example)
    whole, numpy_tier = _method(pte, jit=True), _method(pte, jit=False)
    assert whole._loaded.whole_source is not None, whole._loaded.chains[0].source
    assert "def whole(" in whole._loaded.whole_source
    assert numpy_tier._loaded.whole_source is None
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
                np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-6, atol=1e-7)
                np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_array_equal(np.asarray(g), np.asarray(r))
                np.testing.assert_array_equal(np.asarray(g), w.numpy())


def test_whole_function_is_generic_in_sizes():
    # The same model at two sizes generates the same function: one cache entry serves both.
    sources = []
    for name in ("gates", "gates_other_size"):
        module, example = CASES[name]
        sources.append(_method(_pte(module, example), jit=True)._loaded.whole_source)
    assert sources[0] is not None and sources[0] == sources[1]


def test_a_method_with_an_uncompiled_operator_runs_instruction_by_instruction():
    module = WithMatmul()
    example = (torch.randn(3, 4), torch.randn(4, 5))
    method = _method(_pte(module, example), jit=True)
    assert method._loaded.whole_source is None
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
