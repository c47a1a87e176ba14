"""``SpecPropPass`` under its official module path."""

from pyexecutorch.exir.passes.executorch_passes import SpecPropPass

__all__ = ["SpecPropPass"]
