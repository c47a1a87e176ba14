"""Eval-mode batch norms are folded into the convolutions feeding them."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from benchmarks import models_large
from pyexecutorch.runtime import Runtime
from tests import models, official

BN = "_native_batch_norm_legit_no_training"


def _case(name: str):
    if name in models_large.LARGE_CASES_BY_NAME:
        return models_large.LARGE_CASES_BY_NAME[name]
    return models.get_case(name)


def _compile(exported):
    from pyexecutorch.exir import to_edge

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_edge(exported).to_executorch()


def _operators(et) -> list[str]:
    return [op.name for plan in et.executorch_program.execution_plan for op in plan.operators]


def _run(buf: bytes, inputs) -> list:
    method = Runtime.get().load_program(buf).load_method("forward")
    return [official.to_numpy(x) for x in method.execute(list(inputs))]


@pytest.mark.parametrize("name", ["conv_bn", "small_cnn", "mobilenet_like"])
def test_suite_batch_norms_are_folded(name):
    case = _case(name)
    et = _compile(models.export(case))
    ops = _operators(et)
    assert "aten::convolution" in ops
    assert not [op for op in ops if BN in op], ops
    _module, inputs, _dyn = case.programs()["forward"]
    expected = official.eager_outputs(case, inputs)
    official.assert_close(case, _run(et.buffer, inputs), expected, rtol=1e-4, atol=1e-5)


class _ConvBN(nn.Module):
    def __init__(self, conv: nn.Module, bn: nn.Module, share: bool = False) -> None:
        super().__init__()
        self.conv, self.bn, self.share = conv, bn, share

    def forward(self, x):
        y = self.conv(x)
        z = self.bn(y)
        return (z, y) if self.share else z


def _randomized(bn: nn.Module) -> nn.Module:
    g = torch.Generator().manual_seed(0)
    c = bn.num_features
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(c, generator=g))
        bn.running_var.copy_(torch.rand(c, generator=g) + 0.5)
        if bn.affine:
            bn.weight.copy_(torch.randn(c, generator=g))
            bn.bias.copy_(torch.randn(c, generator=g))
    return bn


@pytest.mark.parametrize(
    "conv, bn, x, folded",
    [
        (nn.Conv1d(4, 6, 3, bias=False), nn.BatchNorm1d(6, affine=False), (2, 4, 9), True),
        (nn.Conv2d(4, 6, 3, groups=2), nn.BatchNorm2d(6), (1, 4, 8, 8), True),
        (nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2), nn.BatchNorm2d(6), (1, 4, 5, 5), True),
        (nn.ConvTranspose1d(3, 5, 2, bias=False), nn.BatchNorm1d(5), (2, 3, 7), True),
    ],
)
def test_conv_variants(conv, bn, x, folded):
    torch.manual_seed(0)
    m = _ConvBN(conv, _randomized(bn)).eval()
    inputs = (torch.randn(*x),)
    et = _compile(torch.export.export(m, inputs))
    assert any(BN in op for op in _operators(et)) != folded
    with torch.no_grad():
        expected = [m(*inputs).numpy()]
    official.assert_close("conv_variant", _run(et.buffer, inputs), expected, rtol=1e-4, atol=1e-5)


def test_conv_with_other_users_is_not_folded():
    m = _ConvBN(nn.Conv2d(3, 4, 3), _randomized(nn.BatchNorm2d(4)), share=True).eval()
    inputs = (torch.randn(1, 3, 6, 6),)
    et = _compile(torch.export.export(m, inputs))
    assert any(BN in op for op in _operators(et))
    with torch.no_grad():
        expected = [t.numpy() for t in m(*inputs)]
    official.assert_close("shared_conv", _run(et.buffer, inputs), expected, rtol=1e-4, atol=1e-5)
