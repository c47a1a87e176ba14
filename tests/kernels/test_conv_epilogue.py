"""Convolution epilogues (compiled tier): the elementwise run after a convolution applied in
place on the convolution's result, against torch eager and the numpy tier."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

from pyexecutorch.exir import to_edge  # noqa: E402
from pyexecutorch.runtime import Runtime  # noqa: E402

ACTIVATIONS = {
    "relu": torch.relu,
    "relu6": F.relu6,
    "hardtanh": lambda t: F.hardtanh(t, -0.5, 0.75),
    "hardswish": F.hardswish,
    "silu": F.silu,
    "sigmoid_mul": lambda t: t * torch.sigmoid(t),
}

# (in channels, out channels, kernel, stride, padding, groups, image)
CONVS = {
    "3x3": (4, 8, 3, 1, 1, 1, 9),
    "3x3_stride2": (4, 8, 3, 2, 1, 1, 10),
    "pointwise": (6, 10, 1, 1, 0, 1, 7),
    # whole vectors of outputs: 8-pixel tiles of a vector pair and of an odd last vector
    # (the activation applied after the tile's stores), a channel tail
    "pointwise_wide": (16, 48, 1, 1, 0, 1, 8),
    "3x3_wide": (8, 40, 3, 1, 1, 1, 9),
    "depthwise": (8, 8, 3, 1, 1, 8, 8),
    "depthwise_5x5_large": (6, 6, 5, 1, 2, 6, 20),
    "grouped": (8, 8, 3, 1, 1, 2, 6),
}


class ConvAct(nn.Module):
    def __init__(self, conv: tuple, act: str):
        super().__init__()
        cin, cout, k, s, p, g, _ = conv
        self.conv = nn.Conv2d(cin, cout, k, s, p, groups=g)
        self.act = ACTIVATIONS[act]

    def forward(self, x):
        return self.act(self.conv(x)) * 2.0  # the run's output is read by another op


def _methods(model: nn.Module, example: torch.Tensor):
    pte = to_edge(torch.export.export(model, (example,))).to_executorch().buffer
    jit = Runtime.get().load_program(pte, jit=True).load_method("forward")
    ref = Runtime.get().load_program(pte, jit=False).load_method("forward")
    return jit, ref


def _check(model: nn.Module, shape: tuple, seed: int = 0) -> list[int]:
    """Run two calls in both tiers against eager; the fused convolutions' instructions."""
    torch.manual_seed(seed)
    model.eval()
    example = torch.randn(shape)
    jit, ref = _methods(model, example)
    for k in range(2):
        x = torch.randn(shape) * (1 + k)
        want = model(x).detach().numpy()
        got = jit.execute([x.numpy()])[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, ref.execute([x.numpy()])[0], rtol=1e-5, atol=1e-6)
    return list(jit.plan.conv_epilogues)


@pytest.mark.parametrize("act", list(ACTIVATIONS))
def test_activation_after_a_convolution_is_applied_in_place(act):
    conv = CONVS["3x3"]
    assert len(_check(ConvAct(conv, act), (1, conv[0], conv[6], conv[6]))) == 1


@pytest.mark.parametrize("name", [n for n in CONVS if n != "3x3"])
def test_every_convolution_path_takes_an_epilogue(name):
    conv = CONVS[name]
    assert len(_check(ConvAct(conv, "relu6"), (1, conv[0], conv[6], conv[6]))) == 1


def test_special_values_propagate_as_in_eager():
    model = ConvAct(CONVS["3x3"], "hardswish").eval()
    x = torch.randn(1, 4, 9, 9)
    x[0, 0, 2, 3] = float("nan")
    x[0, 1, 5, 5] = float("inf")
    jit, _ = _methods(model, x)
    assert jit.plan.conv_epilogues
    np.testing.assert_allclose(jit.execute([x.numpy()])[0], model(x).detach().numpy(), atol=1e-5)


class ReadTwice(nn.Module):
    """The convolution's output is read by the activation and by the residual add."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return torch.relu(y) + y


class OutputToo(nn.Module):
    """The convolution's output is a method output besides feeding the activation."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return y, torch.relu(y)


class Chain(nn.Module):
    """conv -> relu + 1 -> conv -> relu: two epilogues, the planner reusing buffers
    (the second convolution's output lands in the method input's memory)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return torch.relu(self.b(torch.relu(self.a(x)) + 1.0))


def test_declines_when_the_output_is_read_elsewhere():
    assert _check(ReadTwice(), (1, 4, 6, 6)) == []


def test_declines_when_the_output_is_a_method_output():
    torch.manual_seed(0)
    model = OutputToo().eval()
    x = torch.randn(1, 4, 6, 6)
    jit, _ = _methods(model, x)
    assert jit.plan.conv_epilogues == ()
    got = jit.execute([x.numpy()])
    for g, w in zip(got, model(x), strict=True):
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_chains_of_convolutions_each_take_their_epilogue():
    assert _check(Chain(), (1, 4, 7, 7)) == [0, 3]


class Residual(nn.Module):
    """Inverted-residual and ResNet tails: the convolution's output plus a skip tensor
    (computed before the convolution), then optionally a ReLU."""

    def __init__(self, relu: bool):
        super().__init__()
        self.expand = nn.Conv2d(6, 12, 1)
        self.project = nn.Conv2d(12, 6, 3, padding=1)
        self.relu = relu

    def forward(self, x):
        skip = x * 0.5
        y = self.project(torch.relu(self.expand(x))) + skip
        return torch.relu(y) if self.relu else y


@pytest.mark.parametrize("relu", [False, True], ids=["add", "add_relu"])
def test_a_residual_add_after_a_convolution_is_applied_in_place(relu):
    assert len(_check(Residual(relu), (1, 6, 5, 5))) == 2


class SkipIsInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x) + x


def test_a_residual_add_of_the_method_input():
    _check(SkipIsInput(), (1, 4, 6, 6))  # numbers match eager whether or not it fused


class SkipInTarget(nn.Module):
    """The skip tensor's memory is free after the add: the planner may put the add's
    output there, which the fused call must not do (the convolution writes it first)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        skip = torch.relu(self.a(x))
        return torch.relu(self.b(x * 2.0) + skip) * 3.0


def test_a_skip_tensor_sharing_the_output_memory_still_gives_eager_numbers():
    _check(SkipInTarget(), (1, 4, 6, 6))


class SqueezeExcite(nn.Module):
    """x * gate(conv(mean(x))): the gate's (N, C, 1, 1) elementwise ops and the broadcast
    multiply into (N, C, H, W) are one loop. With ``reuse`` the gate is read again."""

    def __init__(self, gate: str, reuse: bool = False):
        super().__init__()
        self.reduce = nn.Conv2d(8, 4, 1)
        self.expand = nn.Conv2d(4, 8, 1)
        self.gate = {"hardsigmoid": F.hardsigmoid, "sigmoid": torch.sigmoid}[gate]
        self.reuse = reuse

    def forward(self, x):
        g = self.gate(self.expand(torch.relu(self.reduce(x.mean((2, 3), keepdim=True)))))
        y = x * g
        return (y, g + 1.0) if self.reuse else y


def _mul_is_fused(jit) -> bool:
    plan = jit.plan
    fused = {pc for run in plan.fused_runs for pc in run}
    names = [i.operator for i in plan.instructions if i.chain == 0]
    return any(n == "aten::mul.out" and pc in fused for pc, n in enumerate(names))


@pytest.mark.parametrize("gate", ["hardsigmoid", "sigmoid"])
@pytest.mark.parametrize("reuse", [False, True], ids=["gate_once", "gate_read_again"])
def test_squeeze_excite_gate_and_broadcast_multiply_fuse(gate, reuse):
    torch.manual_seed(0)
    model = SqueezeExcite(gate, reuse).eval()
    x = torch.randn(1, 8, 5, 6)
    jit, ref = _methods(model, x)
    # a gate read again is stored at its own shape: the multiply then runs on its own; a
    # sigmoid (a library call) is not recomputed at each of the 30 pixels
    assert _mul_is_fused(jit) is (not reuse and gate == "hardsigmoid")
    for k in range(2):
        x = torch.randn(1, 8, 5, 6) * (1 + k)
        want = model(x)
        got, numpy_tier = jit.execute([x.numpy()]), ref.execute([x.numpy()])
        for g, n, w in zip(got, numpy_tier, want if reuse else [want], strict=True):
            np.testing.assert_allclose(g, w.detach().numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(g, n, rtol=1e-5, atol=1e-6)


class InvertedResiduals(nn.Module):
    """MobileNetV2's blocks: each ends in a projecting convolution plus the block's input,
    whose memory the planner reuses for the sum (the loop then updates it in place)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(6, 12, 1), nn.ReLU6(), nn.Conv2d(12, 6, 3, padding=1))
            for _ in range(3)
        )

    def forward(self, x):
        y = x * 1.0
        for block in self.blocks:
            y = y + block(y)
        return y * 2.0


def test_residual_adds_over_the_skip_tensor_memory_are_applied_in_place():
    assert len(_check(InvertedResiduals(), (1, 6, 5, 5))) == 6
