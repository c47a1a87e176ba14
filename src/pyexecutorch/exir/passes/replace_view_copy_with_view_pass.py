"""``ReplaceViewCopyWithViewPass`` under its official module path."""

from pyexecutorch.exir.passes.executorch_passes import ReplaceViewCopyWithViewPass

__all__ = ["ReplaceViewCopyWithViewPass"]
