"""A decomposed ``nn.Linear`` on a rank-3 input with dynamic sizes, lowered the legacy way
(``to_edge`` then ``to_backend``): ``to_edge`` writes it as a reshape to rows, ``addmm``
and a reshape back, the reshapes sized by the input's symbolic sizes. The partitioner
takes its source partition whole with the ``relu`` after it, as the official
AddmmConfig does: one delegate, the input's sizes passed in as integer arguments
(official partitioning), which the delegate's values skip (external ids with gaps, as
the official exporter numbers them). Both runtime tiers run it against the official
runtime and eager, over several input shapes.

Dynamically quantized, two such linears reading one input (a quantization chain each)
lower the same way: addmm/mm of an nn.Linear source partition go with the linear
configs' deps, as the official AddmmConfig fakes the linear (official
test_qd8_f32_per_channel_shared_dq_chain)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from pyexecutorch.exir import EdgeCompileConfig, to_edge
from pyexecutorch.exir.backend import get_delegation_info
from pyexecutorch.runtime import Runtime
from tests import official


class _LinearRelu(nn.Module):
    def __init__(self, bias: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(5, 6, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def _export(model: nn.Module):  # noqa: ANN202 - the edge program manager
    dims = {0: torch.export.Dim("b0", min=2, max=4), 1: torch.export.Dim("b1", min=2, max=3)}
    ep = torch.export.export(model, (torch.randn(4, 3, 5),), dynamic_shapes=({**dims},))
    config = EdgeCompileConfig(_check_ir_validity=False)
    return to_edge(ep, compile_config=config).to_backend(XnnpackPartitioner())


@pytest.mark.parametrize("bias", [True, False])
def test_legacy_rank3_dynamic_linear_relu_is_one_delegate(bias: bool) -> None:
    model = _LinearRelu(bias).eval()
    lowered = _export(model)
    graph = lowered.exported_program().graph_module.graph
    info = get_delegation_info(lowered.exported_program().graph_module)
    assert info.num_delegated_subgraphs == 1
    left = {n.target.__name__ for n in graph.nodes if n.op == "call_function"}
    assert left == {"sym_size.int", "executorch_call_delegate", "getitem"}
    pte = lowered.to_executorch().buffer
    runner = official.official_runner(pte)
    for jit in (False, True):
        method = Runtime.get().load_program(pte, jit=jit).load_method("forward")
        for seed, shape in enumerate([(4, 3, 5), (2, 2, 5), (3, 3, 5), (4, 3, 5)]):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
            (got,) = method.execute([x])
            expected = runner.run([x])[0]
            # (rows of several: a BLAS product, summed in another order than XNNPACK's)
            np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(torch.as_tensor(np.asarray(got)), model(x).detach())


class _SharedInput(nn.Module):
    """Two linears reading one input: after dynamic quantization, one quantization chain
    each (the official tester's DuplicateDynamicQuantChainPass)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first, self.second = nn.Linear(13, 17), nn.Linear(13, 17)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.first(x) + self.second(x)


@pytest.mark.parametrize("per_op_mode", [True, False])
def test_legacy_dynamic_linears_on_shared_input(per_op_mode: bool) -> None:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from pyexecutorch.backends.transforms.duplicate_dynamic_quant_chain import (
        DuplicateDynamicQuantChainPass,
    )
    from pyexecutorch.backends.xnnpack.partition.config.xnnpack_config import (
        ConfigPrecisionType,
    )
    from pyexecutorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    example = (torch.randn(1, 2, 13, generator=torch.Generator().manual_seed(0)),)
    # strict export: the source partitions (nn.Linear) the legacy lowering reads
    captured = torch.export.export(_SharedInput().eval(), example, strict=True).module()
    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    prepared = prepare_pt2e(captured, XNNPACKQuantizer().set_global(config))
    prepared(*example)
    converted = convert_pt2e(prepared)
    DuplicateDynamicQuantChainPass()(converted)
    ep = torch.export.export(converted, example, strict=True)
    partitioner = XnnpackPartitioner(
        config_precisions=ConfigPrecisionType.DYNAMIC_QUANT, per_op_mode=per_op_mode
    )
    config = EdgeCompileConfig(_check_ir_validity=False)
    lowered = to_edge(ep, compile_config=config).to_backend(partitioner)
    gm = lowered.exported_program().graph_module
    assert get_delegation_info(gm).num_delegated_subgraphs == (2 if per_op_mode else 1)
    assert not [n for n in gm.graph.nodes if "addmm" in str(n.target)]
    pte = lowered.to_executorch().buffer
    runner = official.official_runner(pte)
    for jit in (False, True):
        method = Runtime.get().load_program(pte, jit=jit).load_method("forward")
        for seed in range(3):
            x = torch.randn(1, 2, 13, generator=torch.Generator().manual_seed(seed))
            (got,) = method.execute([x])
            np.testing.assert_allclose(np.asarray(got), runner.run([x])[0], rtol=1e-5, atol=1e-5)


def test_legacy_int16_activation_linear_stays_portable() -> None:
    """8-bit weights with 16-bit activations (official test_passes'
    test_constant_prop_pass_after_delegation quantizes so): XNNPACK has no such linear,
    so the addmm's source partition is not taken along with its int8 weight; lowering
    succeeds and the program runs as the quantized graph does in eager."""
    from torchao.quantization.pt2e import MinMaxObserver, PerChannelMinMaxObserver
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import QuantizationSpec

    from pyexecutorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer
    from pyexecutorch.backends.xnnpack.quantizer.xnnpack_quantizer_utils import (
        QuantizationConfig,
    )

    torch.manual_seed(0)
    model = nn.Linear(8, 8).eval()
    x = torch.randn(4, 8)
    int16 = QuantizationSpec(
        dtype=torch.int16,
        quant_min=-32768,
        quant_max=32767,
        qscheme=torch.per_tensor_affine,
        observer_or_fake_quant_ctr=MinMaxObserver,
    )
    int8_weight = QuantizationSpec(
        dtype=torch.int8,
        quant_min=-128,
        quant_max=127,
        qscheme=torch.per_channel_symmetric,
        ch_axis=0,
        observer_or_fake_quant_ctr=PerChannelMinMaxObserver,
    )
    config = QuantizationConfig(int16, int16, int8_weight, None, is_qat=False)
    captured = torch.export.export(model, (x,), strict=True).module()
    prepared = prepare_pt2e(captured, XNNPACKQuantizer().set_global(config))
    prepared(x)
    quantized = convert_pt2e(prepared)
    ep = torch.export.export(quantized, (x,), strict=True)
    lowered = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    lowered = lowered.to_backend(XnnpackPartitioner())
    graph = lowered.exported_program().graph_module.graph
    targets = {str(n.target) for n in graph.nodes if n.op == "call_function"}
    assert not any("addmm" in t and "delegate" in t for t in targets)
    assert any("addmm" in t or "mm" in t for t in targets), targets
    pte = lowered.to_executorch().buffer
    (got,) = Runtime.get().load_program(pte).load_method("forward").execute([x])
    torch.testing.assert_close(torch.as_tensor(np.asarray(got)), quantized(x))
