"""The float operators of the official LLM programs, bit for bit against the official runtime.

An 8da4w program quantizes its activations to int8 after every normalisation: an output
one ulp from the official one flips a code wherever it lands on a rounding boundary, and
the KV cache keeps the flip (the Qwen2 8da4w drift of test_official_llm_programs). So
these operators are compared with ``array_equal``, not a tolerance, on both tiers and over
several calls with changing inputs:

* XNNPACK's sin, cos, sigmoid and 1/sqrt (its own approximations, not correctly rounded;
  1/sqrt from the CPU's ``vrsqrt14ps`` estimate: the emulation is of an x86-64 CPU with
  AVX-512F, the kind the official delegate picks those kernels on);
* the portable ``mean`` (a running float32 sum, then a division), on the rows of an
  RMS norm.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from pyexecutorch.runtime import Runtime
from pyexecutorch.schema.pte import decode_pte
from tests import official

TIERS = {"numpy": False, "compiled": True}
CALLS = 3
SIZE = 4096


class _Ops(torch.nn.Module):
    def forward(self, x: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mean = torch.mean(x * x, dim=-1, keepdim=True)  # the square delegated, not the mean
        return torch.sin(x), torch.cos(x), torch.sigmoid(x), torch.rsqrt(p), mean


def _inputs(call: int) -> list[np.ndarray]:
    """Call ``call``'s inputs: angles and sigmoid arguments over the ranges the programs
    see and beyond, positive values over many binades for 1/sqrt (and special values)."""
    rng = np.random.default_rng(call)
    x = np.concatenate(
        [rng.uniform(-130, 130, SIZE // 2), rng.normal(0, 3, SIZE // 2 - 10)]
    ).astype(np.float32)
    specials = [0, -0.0, 1e-40, np.inf, -np.inf, np.nan, 88, -150, 1e30, -1e30]
    x = np.concatenate([x, np.array(specials, np.float32)])
    p = np.exp(rng.uniform(-90, 85, SIZE - 10)).astype(np.float32)
    p = np.concatenate(
        [p, np.array([1, 4, 2, 1e-40, 3.4e38, 0, -0.0, np.inf, -1, np.nan], np.float32)]
    )
    return [x.reshape(-1, 64), p.reshape(-1, 64)]


@pytest.fixture(scope="module")
def program() -> bytes:
    """The official XNNPACK export of ``_Ops`` (cached)."""

    def build() -> bytes:
        official.silence_noise()
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
            XnnpackPartitioner,
        )
        from executorch.exir import to_edge_transform_and_lower

        args = tuple(torch.from_numpy(a) for a in _inputs(0))
        exported = torch.export.export(_Ops(), args)
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
        return edge.to_executorch().buffer

    key = official.versions() + repr(SIZE) + "v1"
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    return official.cached_file(official.cache_dir() / f"exact_arithmetic.{name}.pte", build)


def test_the_program_delegates_the_unary_operators_and_keeps_the_mean_portable(program):
    plan = decode_pte(program).program.execution_plan[0]
    assert [d.id for d in plan.delegates] == ["XnnpackBackend"]
    assert "aten::mean.out" in {op.qualified_name for op in plan.operators}


@pytest.mark.parametrize("tier", TIERS)
def test_operators_equal_the_official_bit_for_bit(program, tier):
    theirs = official.OfficialRunner(program)
    ours = Runtime.get().load_program(program, jit=TIERS[tier]).load_method("forward")
    for call in range(CALLS):
        inputs = _inputs(call)
        expected = theirs.run(inputs)
        got = [np.asarray(o) for o in ours.execute(inputs)]
        names = ("sin", "cos", "sigmoid", "rsqrt", "mean")
        for name, g, e in zip(names, got, expected, strict=True):
            same = (g.view(np.uint32) == e.view(np.uint32)) | (np.isnan(g) & np.isnan(e))
            where = np.flatnonzero(~same.reshape(-1))
            arguments = inputs[1 if name == "rsqrt" else 0].reshape(-1)
            first = (
                "" if name == "mean" or not where.size else f", first at {arguments[where[0]]!r}"
            )
            assert not where.size, (
                f"call {call}: {name} differs from the official on {where.size} of {g.size}{first}"
            )


@pytest.mark.parametrize(
    ("node", "exact", "plain"),
    [
        ("XNNSigmoid", "sigmoid", lambda x: 1 / (1 + np.exp(-x.astype(np.float64)))),
        ("XNNSin", "sin", lambda x: np.sin(x.astype(np.float64))),
        ("XNNCos", "cos", lambda x: np.cos(x.astype(np.float64))),
    ],
)
def test_numpy_tier_emulates_up_to_its_limit_and_takes_numpys_function_past_it(node, exact, plain):
    # The emulation costs ~100 ns a value on the numpy tier: a CNN's activations take
    # numpy's function (within an ulp or two of XNNPACK's), an LLM's per-token tensors
    # XNNPACK's own bits.
    from pyexecutorch.backends.xnnpack import exact_math, nodes

    run = nodes._UNARY[node]()
    rng = np.random.default_rng(7)
    for size in (nodes.EXACT_NUMPY_LIMIT, nodes.EXACT_NUMPY_LIMIT + 1):
        x = rng.uniform(-8, 8, size).astype(np.float32)
        out = np.empty_like(x)
        run(x, out)
        emulated = getattr(exact_math, exact)(x)
        if size <= nodes.EXACT_NUMPY_LIMIT:
            assert np.array_equal(out.view(np.uint32), emulated.view(np.uint32))
        else:
            np.testing.assert_allclose(out, plain(x), rtol=3e-7, atol=1e-7)
            np.testing.assert_allclose(out, emulated, rtol=1e-6, atol=1e-6)
