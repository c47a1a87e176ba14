"""Quantized programs from the official tools, in our runtime against the official one.

Models from :mod:`_quantized_programs` (a small CNN with conv, depthwise conv,
add, mul, cat, hardtanh, max pool, global average pool and linear; an MLP),
quantized with the official ``XNNPACKQuantizer`` (static int8 with per-channel
weights, dynamic per-token int8) or torchao's ``quantize_`` (int8 dynamic
activations, 4-bit weights in groups of 32), exported by the official exporter:

- lowered with the official ``XnnpackPartitioner``: our XNNPACK interpreter
  matches the official runtime within one quantum of the output's scale (static
  programs) or float rounding (dynamic ones, whose outputs are float);
- portable (no partitioner): our quantized kernels match the official runtime
  and the quantized graph run eagerly.
"""

from __future__ import annotations

import numpy as np
import pytest

from pyexecutorch.runtime import Runtime

from . import _quantized_programs as qp

CASES = [(model, recipe) for recipe, models in qp.RECIPES.items() for model in models]
_QUANTIZED: dict = {}


def quantized(model: str, recipe: str) -> qp.Quantized:
    key = (model, recipe)
    if key not in _QUANTIZED:
        _QUANTIZED[key] = qp.quantize(model, recipe)
    return _QUANTIZED[key]


def ours(pte: bytes, inputs) -> np.ndarray:
    method = Runtime.get().load_program(pte).load_method("forward")
    return np.asarray(method.execute([x.numpy() for x in inputs])[0])


def _output_quantum(q: qp.Quantized) -> float:
    # the scale of the last quantize node of the graph (static recipes)
    scales = [
        float(n.args[1])
        for n in q.program.graph.nodes
        if n.op == "call_function" and "quantize_per_tensor" in str(n.target)
        and "dequantize" not in str(n.target)
    ]  # fmt: skip
    return scales[-1]


@pytest.mark.parametrize("model, recipe", CASES)
def test_xnnpack_program_matches_official_runtime(model, recipe):
    q = quantized(model, recipe)
    pte = qp.official_pte(q, "xnnpack")
    assert b"XnnpackBackend" in pte
    for seed in (1, 2):
        inputs = qp.inputs_for(model, seed)
        expected = qp.official_run(pte, inputs)[0]
        got = ours(pte, inputs)
        diff = float(np.abs(got - expected).max())
        print(f"{q.name}: max |ours - official| = {diff:.3g}")
        if recipe == "static":
            assert diff <= _output_quantum(q) * 1.0001
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "model, recipe", [c for c in CASES if c[1] != "int4"]
)  # the official exporter has no out-variants for torchao's operators
def test_portable_program_matches_official_runtime_and_eager(model, recipe):
    q = quantized(model, recipe)
    pte = qp.official_pte(q, "portable")
    assert b"XnnpackBackend" not in pte
    inputs = qp.inputs_for(model, 3)
    expected = qp.official_run(pte, inputs)[0]
    got = ours(pte, inputs)
    if recipe == "static":  # integer arithmetic up to the final dequantize: exact
        np.testing.assert_array_equal(got, expected)
    else:  # float matmuls on dequantized values: summation order
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    eager = q.graph(*inputs).detach().numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-6)
