"""A stand-in for ``torchvision`` in the conformance harness (scripts/conformance.py).

The official suite's ``backends/xnnpack/test/models/resnet.py`` imports torchvision
for ``torchvision.models.resnet18()``. The registry's torchvision is built against
another torch (its compiled operators, ``torchvision::nms``, fail to load against
the venv's CPU torch), so the file could not even be collected, on either side. When
the real package cannot be imported, the harness puts this folder on the path of
both sides' test processes: the same model on both, so the file counts in the table.

Written for the harness, with torch only: ``models.resnet18`` (and the ResNet and
BasicBlock it is made of) with torchvision's module names, structure and default
initialization. Nothing else of torchvision is provided.
"""

from torchvision import models

__version__ = "0.0+pyexecutorch.conformance"

__all__ = ["models"]
