"""Operator dialects of the compiler (edge ops are torch's own operators)."""

from pyexecutorch.exir.dialects._ops import ops

__all__ = ["ops"]
