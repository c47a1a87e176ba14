"""torchvision.models, as far as the conformance suite uses it: ResNet-18."""

from torchvision.models.resnet import BasicBlock, ResNet, resnet18

__all__ = ["BasicBlock", "ResNet", "resnet18"]
