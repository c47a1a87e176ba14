"""Common subexpression elimination (PyTorch's pass: identical calls on identical
arguments computed once; random and in-place operators are left alone)."""

from torch.fx.passes.dialect.common.cse_pass import CSEPass

__all__ = ["CSEPass"]
