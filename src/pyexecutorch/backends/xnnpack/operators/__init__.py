"""Serializing a partition as an ``XNNGraph``: the builder and the visitor table."""

from pyexecutorch.backends.xnnpack.operators import quantized as _quantized  # noqa: F401
from pyexecutorch.backends.xnnpack.operators.builder import GraphBuilder, xnode
from pyexecutorch.backends.xnnpack.operators.visitors import VISITORS, register, visit

__all__ = ["VISITORS", "GraphBuilder", "register", "visit", "xnode"]
