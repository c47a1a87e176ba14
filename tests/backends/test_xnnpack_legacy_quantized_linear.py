"""Quantized ``nn.Linear`` lowered the legacy way (``to_edge`` then ``to_backend``), with a
dynamic batch: ``to_edge`` writes it as ``addmm``/``mm`` on ``permute_copy`` of the
weight's dequantize, between reshapes of the dequantized input. As the official
AddmmConfig/MMConfig, the partitioner judges the ``addmm``/``mm`` as the linear of its
source partition and takes the partition whole with its quantization (the input's
run-time quantization for dynamic activations, the output's quantize for static ones);
preprocess makes it one fully connected node again. Both runtime tiers run the program
against the official runtime on the same ``.pte`` and against the quantized module in
eager, over several input shapes. Per-tensor weights with dynamically quantized
activations stay portable (XNNPACK has no such kernel), their run-time quantization
too, rather than failing in preprocess."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from pyexecutorch.backends.xnnpack.partition.config import op_key
from pyexecutorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType
from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from pyexecutorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)
from pyexecutorch.exir import EdgeCompileConfig, to_edge, to_edge_transform_and_lower
from pyexecutorch.exir.backend import get_delegation_info
from pyexecutorch.runtime import Runtime
from tests import official

BATCH = torch.export.Dim("batch", min=2, max=6)


def _lower(
    model: nn.Module,
    x: torch.Tensor,
    dims: dict,
    *,
    dynamic: bool,
    per_channel: bool = True,
    legacy: bool = True,
):
    """The quantized module (eager reference) and its program lowered to XNNPACK, the
    legacy way or with ``to_edge_transform_and_lower`` (the linear kept whole)."""
    shapes = (dims,)
    # captured with the dynamic dims already: a capture at the example's size would be
    # specialized to it (torch guards a module made outside ExecuTorch's own files)
    captured = torch.export.export(model, (x,), dynamic_shapes=shapes).module()
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=per_channel, is_dynamic=dynamic)
    )
    prepared = prepare_pt2e(captured, quantizer)
    prepared(x)
    quantized = convert_pt2e(prepared)
    ep = torch.export.export(quantized, (x,), dynamic_shapes=shapes)
    precision = ConfigPrecisionType.DYNAMIC_QUANT if dynamic else ConfigPrecisionType.STATIC_QUANT
    partitioner = XnnpackPartitioner(config_precisions=precision)
    config = EdgeCompileConfig(_check_ir_validity=False)
    if not legacy:
        return quantized, to_edge_transform_and_lower(
            ep, partitioner=[partitioner], compile_config=config
        )
    return quantized, to_edge(ep, compile_config=config).to_backend(partitioner)


def _left_ops(lowered) -> set[str]:
    graph = lowered.exported_program().graph_module.graph
    return {op_key(n.target) for n in graph.nodes if n.op == "call_function"}


MM = {"aten::mm.default", "aten::addmm.default"}


CASES = {
    # name: (bias, input shape, dynamic dims, activations dynamic, dtype)
    "dynamic-rank3-bias": (True, (1, 5, 8), {1: BATCH}, True, torch.float32),
    "dynamic-two-batch-dims": (False, (3, 3, 8), {0: BATCH, 1: BATCH}, True, torch.float32),
    "dynamic-float16": (True, (4, 8), {0: BATCH}, True, torch.float16),
    "static-rank3": (True, (3, 2, 8), {0: BATCH}, False, torch.float32),
}
SHAPES = {
    "dynamic-rank3-bias": [(1, 6, 8), (1, 2, 8), (1, 4, 8)],
    "dynamic-two-batch-dims": [(6, 6, 8), (2, 2, 8), (5, 5, 8)],
    "dynamic-float16": [(6, 8), (2, 8), (3, 8)],
    "static-rank3": [(6, 2, 8), (2, 2, 8), (5, 2, 8)],
}


def _runs_as_the_official(quantized, lowered, shapes, dtype, dynamic) -> None:
    """One delegate; on both tiers, over several input shapes, bit for bit the official
    runtime's outputs on the same program, and within quantization error of eager."""
    info = get_delegation_info(lowered.exported_program().graph_module)
    assert info.num_delegated_subgraphs == 1
    assert not _left_ops(lowered) & MM
    pte = lowered.to_executorch().buffer
    runner = official.official_runner(pte)
    for jit in (False, True):
        method = Runtime.get().load_program(pte, jit=jit).load_method("forward")
        for seed, size in enumerate(shapes):
            g = torch.Generator().manual_seed(seed)
            xs = torch.randn(size, generator=g).to(dtype)
            (got,) = method.execute([xs])
            got = np.asarray(got)
            np.testing.assert_array_equal(got, runner.run([xs])[0], err_msg=f"jit={jit} {size}")
            reference = quantized(xs).detach().float().numpy()
            # dynamic: XNNPACK quantizes per row where the module does per tensor
            atol = 0.06 if dtype == torch.float16 else (0.05 if dynamic else 0.02)
            np.testing.assert_allclose(got.astype(np.float32), reference, atol=atol)


def test_per_tensor_weights_with_dynamic_activations_stay_portable() -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 9, bias=False).eval()
    x = torch.randn(1, 4, 8)
    _, lowered = _lower(model, x, {1: BATCH}, dynamic=True, per_channel=False)
    left = _left_ops(lowered)
    assert "executorch_call_delegate" not in left
    dynamic = {"quantized_decomposed::choose_qparams.tensor", "aten::mm.default"}
    assert dynamic | {"quantized_decomposed::quantize_per_tensor.tensor"} <= left


def test_dynamic_linear_scales_and_adds_the_bias_in_one_rounding() -> None:
    """XNNPACK's qd8 fully connected kernels end in one fused multiply-add of the weight
    scale and the bias (a multiply then an add was one float32 ulp off the official on
    a third of the outputs, on both tiers)."""
    torch.manual_seed(1)
    model = nn.Linear(16, 9).eval()
    x = torch.randn(1, 5, 16)
    quantized, lowered = _lower(model, x, {1: BATCH}, dynamic=True, legacy=False)
    _runs_as_the_official(quantized, lowered, [(1, 6, 16), (1, 3, 16)], torch.float32, True)


def test_two_batch_dims_of_one_size() -> None:
    """An input whose two batch dims are one Dim ``s``: the exporter spells the linear's
    output ``(s, s**2 // s, n)``. The legacy float program still folds its reshapes (the
    sizes are proven equal without a guard) and the dynamically quantized one loads
    (the declared output bound, ``max**2 / 2`` for the middle dim, is an upper bound)."""
    torch.manual_seed(2)
    model = nn.Linear(8, 6).eval()
    x = torch.randn(3, 3, 8)
    dims = ({0: BATCH, 1: BATCH},)
    ep = torch.export.export(model, (x,), dynamic_shapes=dims)
    config = EdgeCompileConfig(_check_ir_validity=False)
    lowered = to_edge(ep, compile_config=config).to_backend(XnnpackPartitioner())
    assert get_delegation_info(lowered.exported_program().graph_module).num_delegated_subgraphs == 1
    assert not _left_ops(lowered) & MM
    pte = lowered.to_executorch().buffer
    runner = official.official_runner(pte)
    for jit in (False, True):
        method = Runtime.get().load_program(pte, jit=jit).load_method("forward")
        for s in (6, 2, 4):
            xs = torch.randn(s, s, 8, generator=torch.Generator().manual_seed(s))
            (got,) = method.execute([xs])
            # (rows of several: a BLAS product on the compiled tier, summed in its order)
            np.testing.assert_allclose(np.asarray(got), runner.run([xs])[0], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(np.asarray(got), model(xs).detach(), rtol=1e-5, atol=1e-6)
    quantized, lowered = _lower(model, x, dims[0], dynamic=True, legacy=False)
    _runs_as_the_official(quantized, lowered, [(6, 6, 8), (2, 2, 8)], torch.float32, True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_legacy_quantized_linear_is_one_delegate_and_runs_as_the_official(case: str) -> None:
    bias, shape, dims, dynamic, dtype = CASES[case]
    torch.manual_seed(0)
    model = nn.Linear(8, 9, bias=bias).eval().to(dtype)
    quantized, lowered = _lower(model, torch.randn(shape).to(dtype), dims, dynamic=dynamic)
    _runs_as_the_official(quantized, lowered, SHAPES[case], dtype, dynamic)
