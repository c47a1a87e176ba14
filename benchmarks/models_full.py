"""Full-size image classifiers for ``benchmarks/bench_full_size.py``: torchvision's
architectures at 224x224 with 1000 classes and random weights (nothing is downloaded,
torchvision is not needed).

Built from the blocks of ``tests/architectures.py`` (which keep each paper's block
structure at reduced widths) at torchvision's full widths, depths and heads:

- ``resnet18``: widths 64..512, basic blocks [2, 2, 2, 2];
- ``mobilenet_v2``: width 1.0, the 1280-channel last convolution;
- ``mobilenet_v3_small``: torchvision's block table, 576-channel last convolution and its
  1024-wide classifier with hardswish;
- ``efficientnet_b0``: repeats [1, 2, 2, 3, 3, 4, 1], the 1280-channel head;
- ``squeezenet1_1``: 64-channel stem, fire modules 16/64 .. 64/256, classifier by 1x1
  convolution.

Every model is in eval mode with non-trivial BatchNorm statistics (seeded), so that two
builds are equal.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from tests.architectures import Fire as FireModule
from tests.architectures import InvertedResidual as InvertedResidualBlock
from tests.architectures import (
    MBConv,
    MobileNetV2,
    ResNet18,
    V3Block,
    conv_bn,
)
from tests.models import _perturb_norm_stats

IMAGE = (1, 3, 224, 224)
CLASSES = 1000


class MobileNetV2Full(nn.Module):
    """torchvision's mobilenet_v2: width 1.0 and its 1280-channel last convolution (the
    suite's MobileNetV2 keeps a quarter of it)."""

    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        c = 32
        layers: list[nn.Module] = [conv_bn(3, c, 3, 2, act=nn.ReLU6)]
        for t, ch, n, s in MobileNetV2.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidualBlock(c, ch, s if i == 0 else 1, t))
                c = ch
        layers.append(conv_bn(c, 1280, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class MobileNetV3SmallFull(nn.Module):
    """torchvision's mobilenet_v3_small (its blocks are the suite's V3Block at width 1)."""

    # (kernel, expansion, out, squeeze-excite, activation, stride)
    SETTINGS = [
        (3, 16, 16, True, nn.ReLU, 2),
        (3, 72, 24, False, nn.ReLU, 2),
        (3, 88, 24, False, nn.ReLU, 1),
        (5, 96, 40, True, nn.Hardswish, 2),
        (5, 240, 40, True, nn.Hardswish, 1),
        (5, 240, 40, True, nn.Hardswish, 1),
        (5, 120, 48, True, nn.Hardswish, 1),
        (5, 144, 48, True, nn.Hardswish, 1),
        (5, 288, 96, True, nn.Hardswish, 2),
        (5, 576, 96, True, nn.Hardswish, 1),
        (5, 576, 96, True, nn.Hardswish, 1),
    ]

    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        c = 16
        layers: list[nn.Module] = [conv_bn(3, c, 3, 2, act=nn.Hardswish)]
        for k, exp, out, se, act, s in self.SETTINGS:
            layers.append(V3Block(c, k, exp, out, se, act, s))
            c = out
        layers.append(conv_bn(c, 576, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class EfficientNetB0Full(nn.Module):
    """torchvision's efficientnet_b0: all repeats of the seven MBConv stages, the
    1280-channel head (the suite's keeps one block a stage)."""

    # (expansion, kernel, stride, channels, repeats)
    STAGES = [
        (1, 3, 1, 16, 1),
        (6, 3, 2, 24, 2),
        (6, 5, 2, 40, 2),
        (6, 3, 2, 80, 3),
        (6, 5, 1, 112, 3),
        (6, 5, 2, 192, 4),
        (6, 3, 1, 320, 1),
    ]

    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        c = 32
        layers: list[nn.Module] = [conv_bn(3, c, 3, 2, act=nn.SiLU)]
        for e, k, s, ch, n in self.STAGES:
            for i in range(n):
                layers.append(MBConv(c, ch, k, s if i == 0 else 1, e))
                c = ch
        layers.append(conv_bn(c, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class SqueezeNet11Full(nn.Module):
    """torchvision's squeezenet1_1 (the suite's halves its widths)."""

    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()

        def pool() -> nn.Module:
            return nn.MaxPool2d(3, 2, ceil_mode=True)

        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, stride=2),
            nn.ReLU(),
            pool(),
            FireModule(64, 16, 64),
            FireModule(128, 16, 64),
            pool(),
            FireModule(128, 32, 128),
            FireModule(256, 32, 128),
            pool(),
            FireModule(256, 48, 192),
            FireModule(384, 48, 192),
            FireModule(384, 64, 256),
            FireModule(512, 64, 256),
        )
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Conv2d(512, classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


BUILDERS: dict[str, Callable[[], nn.Module]] = {
    "resnet18": lambda: ResNet18((64, 128, 256, 512), CLASSES),
    "mobilenet_v2": MobileNetV2Full,
    "mobilenet_v3_small": MobileNetV3SmallFull,
    "efficientnet_b0": EfficientNetB0Full,
    "squeezenet1_1": SqueezeNet11Full,
}
MODELS = list(BUILDERS)


def build(name: str, seed: int = 0) -> nn.Module:
    """The model ``name`` (one of :data:`MODELS`), eval mode, weights drawn from ``seed``."""
    if name not in BUILDERS:
        raise KeyError(f"unknown full-size model {name!r}; known: {', '.join(MODELS)}")
    torch.manual_seed(seed)
    return _perturb_norm_stats(BUILDERS[name]()).eval()


def image(seed: int = 1) -> torch.Tensor:
    """One 224x224 RGB input, drawn from ``seed``."""
    return torch.randn(IMAGE, generator=torch.Generator().manual_seed(seed))
