"""``RemoveGraphAssertsPass`` under its official module path."""

from pyexecutorch.exir.passes.executorch_passes import RemoveGraphAssertsPass

__all__ = ["RemoveGraphAssertsPass"]
