"""4-bit groupwise linears (torchao's ``quantize_``) in forms beyond float32 groups of 32.

XNNPACK's qd8-bf16-qb4w linear: a bfloat16 model with 4-bit blockwise weights and
int8 activations quantized per token at run time (torchao's ``quantize_``), lowered
with ``enable_bf16``. The delegate converts the bfloat16 rows to qdint8 and writes a
bfloat16 output, its bias in float32 (the official visitor's form: XNNPACK has no
other kernel). Our exporter's program runs bit for bit as in the official runtime, on
both tiers, over several inputs; a bfloat16 value anywhere
else in a delegate is refused at load, by node.

A group size XNNPACK cannot take (not a multiple of 32) is partitioned, as the official
partitioner does, and refused at preprocess with the official assert's sentence, as an
``AssertionError`` (official test_linear_qd8_per_token_groupwise_unsupported_groupsize)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from pyexecutorch.backends.xnnpack.interpreter import load_graph
from pyexecutorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType
from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from pyexecutorch.backends.xnnpack.schema import decode_payload
from pyexecutorch.exir import to_edge_transform_and_lower
from pyexecutorch.exir.backend import PreprocessError
from pyexecutorch.runtime import Runtime
from pyexecutorch.schema.pte import decode_pte
from tests import official


def _bits(x: torch.Tensor) -> np.ndarray:
    return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)


def _as_float(out: object) -> np.ndarray:
    if isinstance(out, torch.Tensor):
        return out.float().numpy()
    return np.asarray(out).astype(np.float32)


@pytest.fixture(scope="module")
def quantized() -> tuple[torch.export.ExportedProgram, torch.Tensor]:
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.utils import unwrap_tensor_subclass

    official.silence_noise()
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 17).to(torch.bfloat16)
    quantize_(
        linear,
        Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4, weight_granularity=PerGroup(32)
        ),
    )
    unwrap_tensor_subclass(linear)
    x = torch.randn(1, 5, 64).to(torch.bfloat16)
    return torch.export.export(linear, (x,)), x


@pytest.fixture(scope="module")
def program(quantized) -> bytes:
    ep, _ = quantized
    partitioner = XnnpackPartitioner(
        config_precisions=ConfigPrecisionType.DYNAMIC_QUANT, enable_bf16=True
    )
    return to_edge_transform_and_lower(ep, partitioner=[partitioner]).to_executorch().buffer


def test_bf16_int4_linear_matches_official_runtime(quantized, program) -> None:
    ep, example = quantized
    (segment,) = decode_pte(program).delegate_segments
    graph = decode_payload(segment).graph
    datatypes = [
        v.xvalue_union.datatype.name for v in graph.xvalues if hasattr(v.xvalue_union, "datatype")
    ]
    # input, bias (float32, as the official visitor writes it), output
    assert datatypes == ["bf16", "fp32", "bf16"]
    runner = official.official_runner(program)
    for jit in (False, True):
        method = Runtime.get().load_program(program, jit=jit).load_method("forward")
        for seed in range(3):
            x = torch.randn(example.shape, generator=torch.Generator().manual_seed(seed))
            x = x.to(torch.bfloat16)
            expected = runner.module.run_method("forward", (x,))[0].float().numpy()
            got = _as_float(method.execute([_bits(x)])[0])
            np.testing.assert_array_equal(got, expected, err_msg=f"jit={jit}")
            eager = ep.module()(x).float().detach().numpy()
            np.testing.assert_allclose(got, eager, atol=0.05, rtol=0.02)


def test_bf16_value_elsewhere_is_refused(program) -> None:
    pte = decode_pte(program)
    (segment,) = pte.delegate_segments
    payload = decode_payload(segment)
    # the Convert's float input becomes the fully connected layer's input1 too: a
    # bfloat16 value read by a node that takes only qdint8 rows
    fc = payload.graph.xnodes[1].xnode_union
    fc.input1_id = payload.graph.xnodes[0].xnode_union.input_id
    with pytest.raises(NotImplementedError, match=r"node 1 \(XNNFullyConnected\) reads or "
                       r"writes bfloat16 value 0 as input1_id"):  # fmt: skip
        load_graph(payload, {k: bytes(v.data) for k, v in pte.named_data.items()})


def test_group_size_not_a_multiple_of_32_fails_preprocess_as_the_official() -> None:
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.utils import unwrap_tensor_subclass

    linear = torch.nn.Linear(60, 60)
    quantize_(
        linear,
        Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4, weight_granularity=PerGroup(30)
        ),
    )
    unwrap_tensor_subclass(linear)
    ep = torch.export.export(linear, (torch.randn(1, 60),))
    partitioner = XnnpackPartitioner(config_precisions=ConfigPrecisionType.DYNAMIC_QUANT)
    with pytest.raises(AssertionError) as caught:
        to_edge_transform_and_lower(ep, partitioner=[partitioner])
    assert isinstance(caught.value, PreprocessError)
    assert str(caught.value) == (
        "XnnpackBackend: aten_linear_default: Delegation to XNNPACK requires group_size to be a "
        "multiple of 32, but got 30"
    )


def test_torchao_visitors_registered_when_torchao_imports_late(quantized, monkeypatch) -> None:
    # operators/quantized.py registers torchao's operators where they exist when it
    # imports; a process that loaded it before torchao (a PT2E lowering first) must
    # still serialize them: the visitors are registered again when a node finds none
    from pyexecutorch.backends.xnnpack.operators import visitors

    ep, _ = quantized
    kept = {k: v for k, v in visitors.VISITORS.items() if not k.startswith("torchao::")}
    monkeypatch.setattr(visitors, "VISITORS", kept)
    partitioner = XnnpackPartitioner(
        config_precisions=ConfigPrecisionType.DYNAMIC_QUANT, enable_bf16=True
    )
    edge = to_edge_transform_and_lower(ep, partitioner=[partitioner])
    assert any(k.startswith("torchao::") for k in visitors.VISITORS)
    assert b"XnnpackBackend" in edge.to_executorch().buffer
