"""Channels-last activations of CNNs compiled whole (runtime/layout.py).

On the compiled tier a method's 4-D activations between convolutions are stored
NHWC when the method then compiles whole: the chosen values, the values that must
stay NCHW (outputs, views, operands of operators without a channels-last step),
the fallback when the method does not compile whole, and every result against
eager and the numpy tier.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime
from pyexecutorch.runtime.fusion import flat_views

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")


def _pte(module: nn.Module, example: tuple) -> bytes:
    return to_edge(torch.export.export(module.eval(), example)).to_executorch().buffer


def _load(pte: bytes, jit: bool):  # noqa: ANN202
    return Runtime.get().load_program(pte, jit=jit).load_method("forward")


def _check(module: nn.Module, example: tuple, seeds=(1, 2), rtol=1e-4, atol=1e-5):  # noqa: ANN001, ANN202
    """The method on both tiers against eager for a few inputs; returns the compiled one."""
    pte = _pte(module, example)
    compiled, numpy_tier = _load(pte, True), _load(pte, False)
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        inputs = [torch.randn(x.shape, generator=g, dtype=x.dtype) for x in example]
        with torch.no_grad():
            expected = module(*inputs)
        expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
        got = compiled.execute([x.numpy() for x in inputs])
        reference = numpy_tier.execute([x.numpy() for x in inputs])
        for g_out, r_out, e_out in zip(got, reference, expected, strict=True):
            assert g_out.is_contiguous()  # outputs are NCHW, whatever is inside
            g_out, r_out = g_out.numpy(), r_out.numpy()
            np.testing.assert_allclose(g_out, e_out.numpy(), rtol=rtol, atol=atol)
            np.testing.assert_allclose(g_out, r_out, rtol=rtol, atol=atol)
    return compiled


def _bn(c: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
    return bn


class InvertedResidual(nn.Module):
    """Expand 1x1 + ReLU6, depthwise 3x3 + ReLU6, linear projection, residual add."""

    def __init__(self, c: int = 8, expand: int = 24) -> None:
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(c, expand, 1, bias=False), _bn(expand), nn.ReLU6())
        self.dw = nn.Sequential(
            nn.Conv2d(expand, expand, 3, padding=1, groups=expand, bias=False),
            _bn(expand),
            nn.ReLU6(),
        )
        self.project = nn.Sequential(nn.Conv2d(expand, c, 1, bias=False), _bn(c))

    def forward(self, x):  # noqa: ANN001, ANN201
        return x + self.project(self.dw(self.expand(x)))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

    def forward(self, x):  # noqa: ANN001, ANN201
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.fc2(F.relu(self.fc1(s))))


class SmallMobileNet(nn.Module):
    """A stem from the NCHW input, an inverted residual, a stride-2 depthwise block with
    squeeze-excite and hardswish, a global mean and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), _bn(8), nn.ReLU())
        self.block = InvertedResidual()
        self.down = nn.Sequential(
            nn.Conv2d(8, 32, 1), nn.Hardswish(), nn.Conv2d(32, 32, 5, 2, 2, groups=32)
        )
        self.se = SqueezeExcite(32)
        self.head = nn.Sequential(nn.Conv2d(32, 48, 1), nn.SiLU())
        self.fc = nn.Linear(48, 10)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.se(self.down(self.block(self.stem(x))))
        return self.fc(self.head(h).mean(dim=(2, 3)))


def test_a_mobile_cnn_runs_channels_last_whole_and_matches_eager():
    method = _check(SmallMobileNet(), (torch.randn(1, 3, 24, 20),))
    assert method.plan.whole_source is not None
    assert "compiled_nhwc" in method.plan.whole_source
    # the global mean reads the channels-last activation in its memory's order (a fused
    # reduction would read its rows across it)
    average = re.search(r"^(f\d+) = None  # .*WINDOW_AVERAGE_NHWC", method.plan.whole_source, re.M)
    assert average is not None
    # (the squeeze-excite's mean and the global one)
    assert method.plan.whole_source.count(f"    {average.group(1)}(") == 2
    chosen = method.plan.channels_last
    # every activation between the stem and the global mean: 4-D, more than one pixel
    activations = {
        j
        for j, arr in method._loaded.capacity.items()
        if arr.ndim == 4 and arr.shape[2] * arr.shape[3] > 1 and arr.shape[1] > 1
        if j not in method._loaded.constant_values and j not in method._loaded.plan.inputs
    }
    assert chosen and chosen <= activations
    for j in chosen:
        arr = method._loaded.values[j]
        assert arr.transpose(0, 2, 3, 1).flags.c_contiguous and not arr.flags.c_contiguous
        # a view of the method's own planned bytes, not a copy
        assert any(np.shares_memory(arr, arena) for arena in method._loaded.arenas)
    # arenas start on a cache line: the kernels' 64-byte vectors of tensors at 64-byte
    # offsets never straddle two lines
    assert all(arena.ctypes.data % 64 == 0 for arena in method._loaded.arenas if arena.size)


def test_batches_and_float64_run_channels_last():
    module = SmallMobileNet().double()
    method = _check(
        module, (torch.randn(2, 3, 16, 16, dtype=torch.float64),), rtol=1e-9, atol=1e-10
    )
    assert method.plan.channels_last


class ConvOutput(nn.Module):
    """Convolutions whose last activation is the method's output."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1, groups=16)

    def forward(self, x):  # noqa: ANN001, ANN201
        return F.relu(self.b(F.relu(self.a(x))))


def test_method_outputs_stay_nchw():
    method = _check(ConvOutput(), (torch.randn(1, 3, 9, 7),))
    (out,) = method._loaded.plan.outputs
    assert out not in method.plan.channels_last
    assert method.plan.channels_last  # the activation between the two convolutions


class Flattened(nn.Module):
    """A spatial activation flattened into a classifier: its bytes are read as a view."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8 * 6 * 6, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.b(F.relu(self.a(x)))
        return self.fc(torch.flatten(h, 1))


def test_values_read_through_a_view_stay_nchw():
    method = _check(Flattened(), (torch.randn(1, 3, 6, 6),))
    conv_b_out = [
        j
        for j, arr in method._loaded.capacity.items()
        if arr.shape == (1, 8, 6, 6) and j not in method._loaded.constant_values
    ]
    assert conv_b_out
    # the value the flatten reads keeps its NCHW order (whatever the planner made of it)
    flattened = method._loaded.values[max(conv_b_out)]
    assert flattened.flags.c_contiguous


def test_a_method_that_does_not_compile_whole_keeps_nchw(monkeypatch):
    from pyexecutorch.kernels.conv import compiled_nhwc

    real = compiled_nhwc.channels_last_conv_step

    def declining(input, weight, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        # one layer has no channels-last step: the method must not stay channels-last
        if weight.shape[1] == 1 and weight.shape[2] == 5:
            return None
        return real(input, weight, *args, **kwargs)

    monkeypatch.setattr(compiled_nhwc, "channels_last_conv_step", declining)
    method = _check(SmallMobileNet(), (torch.randn(1, 3, 24, 20),))
    assert method.plan.channels_last == set()
    assert all(arr.flags.c_contiguous for arr in method._loaded.capacity.values() if arr.ndim == 4)


def test_the_numpy_tier_and_traced_methods_keep_nchw():
    pte = _pte(SmallMobileNet(), (torch.randn(1, 3, 24, 20),))
    numpy_tier = _load(pte, False)
    assert numpy_tier.plan.channels_last == set()
    traced = Runtime.get().load_program(pte, jit=True, enable_etdump=True).load_method("forward")
    assert traced.plan.channels_last == set()


class ResidualReLU(nn.Module):
    """ResNet's basic block: conv, ReLU, conv, add the input, ReLU; the add's output is
    planned over the skip tensor's bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.c1, self.c2 = nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1)
        self.head = nn.Conv2d(16, 8, 1)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = F.relu(self.stem(x))
        h = F.relu(self.c2(F.relu(self.c1(h))) + h)
        return self.head(h).amax(dim=(2, 3))


def test_a_residual_add_and_relu_run_in_the_convolution_store():
    method = _check(ResidualReLU(), (torch.randn(1, 3, 10, 10),))
    assert method.plan.channels_last
    # the add and the ReLUs are applied as the convolutions store: no loop of their own
    assert method.plan.whole_source.count("compiled_nhwc") >= 1
    assert "fused" not in method.plan.whole_source.split("def whole")[0]


def test_flat_views_follow_memory_order():
    a = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 4, 5, 3).transpose(0, 3, 1, 2)
    b = np.empty_like(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    flats = flat_views([a, b])
    assert flats is not None
    np.testing.assert_array_equal(flats[0], a.transpose(0, 2, 3, 1).reshape(-1))
    assert np.shares_memory(flats[1], b)
    # mixed layouts are not one elementwise loop
    assert flat_views([a, np.ascontiguousarray(a)]) is None
