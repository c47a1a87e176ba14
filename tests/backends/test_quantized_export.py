"""Quantized architectures through our exporter, in both runtimes.

For static int8 CNNs (our XNNPACKQuantizer, per-channel weights), a dynamically
quantized transformer and a Llama-shaped decoder with 4-bit groupwise linears
and int8 embeddings (torchao ``quantize_``):

(a) our XNNPACK ``.pte`` in the official runtime matches the official exporter's
    ``.pte`` of the same quantized graph within one quantum of the output;
(b) our runtime on our ``.pte`` matches the official runtime within one quantum;
(c) our portable ``.pte`` (no delegate) in our runtime matches the quantized graph
    run eagerly;
(d) the quantized outputs stay near the float model's (SNR in dB and top-1
    agreement, printed; bounded loosely).

The quantum of a statically quantized output is the scale of its last
dequantize; of a float output (dynamic quantization) one int8 step over the
official output's range.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import official

official.silence_noise()
# The official package defines the quantized out variants and fused embedding operators
# (and refuses to import once they exist): import it before ours define them.
import executorch.exir  # noqa: E402, F401
import executorch.kernels.quantized  # noqa: E402, F401

from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import (  # noqa: E402
    XnnpackPartitioner,
)
from pyexecutorch.exir import (  # noqa: E402
    ExecutorchBackendConfig,
    to_edge,
    to_edge_transform_and_lower,
)
from pyexecutorch.runtime import Runtime  # noqa: E402

from ._quantized_models import (  # noqa: E402
    official_pte,
    quantized_case,
    snr_db,
    top1_agreement,
)

CASES = [
    ("mobilenet_v2", "static", 20.0),
    ("gpt2", "dynamic", 20.0),
    ("llama", "llm4", 10.0),
]

_BUILT: dict[str, tuple] = {}


def _build(arch: str, recipe: str):
    key = f"{arch}-{recipe}"
    if key not in _BUILT:
        q = quantized_case(arch, recipe)
        ours = to_edge_transform_and_lower(
            q.program(), partitioner=[XnnpackPartitioner()]
        ).to_executorch(ExecutorchBackendConfig(do_quant_fusion_and_const_prop=q.fuse))
        portable = to_edge(q.program()).to_executorch()
        _BUILT[key] = (q, ours.buffer, portable.buffer, official_pte(q, "xnnpack"))
    return _BUILT[key]


def _run_ours(pte: bytes, inputs) -> np.ndarray:
    method = Runtime.get().load_program(pte).load_method("forward")
    return np.asarray(method.execute([x.numpy() for x in inputs])[0])


def _output_quantum(q, reference: np.ndarray) -> float:
    out = q.graph.graph.output_node().args[0][0] if hasattr(q.graph, "graph") else None
    if (
        isinstance(out, torch.fx.Node)
        and out.target is torch.ops.quantized_decomposed.dequantize_per_tensor.default
    ):
        return float(out.args[1])
    return float(reference.max() - reference.min()) / 255


@pytest.mark.parametrize("arch,recipe,min_snr", CASES, ids=[f"{a}-{r}" for a, r, _ in CASES])
def test_quantized_architecture(arch, recipe, min_snr, capsys):
    q, ours, portable, theirs = _build(arch, recipe)
    x = q.inputs
    official_ours = official.official_run(ours, x)[0]
    official_theirs = official.official_run(theirs, x)[0]
    quantum = _output_quantum(q, official_theirs)
    # (a) our lowering computes what the official one does, in the official runtime
    np.testing.assert_allclose(official_ours, official_theirs, rtol=0, atol=quantum * 1.001)
    # (b) our runtime agrees with the official runtime on our program
    np.testing.assert_allclose(_run_ours(ours, x), official_ours, rtol=0, atol=quantum * 1.001)
    # (c) the portable program in our runtime computes the quantized graph
    eager = q.graph(*x).detach().numpy()
    np.testing.assert_allclose(_run_ours(portable, x), eager, rtol=0, atol=quantum * 1.001)
    # (d) quantization error against the float model
    reference = q.float_model(*x).detach().numpy()
    snr = snr_db(reference, official_ours)
    agree = top1_agreement(reference, official_ours)
    with capsys.disabled():
        print(f"\n{q.name}: SNR {snr:.1f} dB, top-1 agreement {agree:.2f}, quantum {quantum:.3g}")
    assert snr > min_snr, f"{q.name}: SNR {snr:.1f} dB"
    assert len(ours) <= len(theirs) * 1.01 + 256, (len(ours), len(theirs))
