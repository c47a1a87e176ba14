"""Between dim orders and torch memory formats (the official ``exir.dim_order_utils``
names; defined in :mod:`pyexecutorch.exir.dialects.dim_order_ops`)."""

from pyexecutorch.exir.dialects.dim_order_ops import dim_order_of as get_dim_order
from pyexecutorch.exir.dialects.dim_order_ops import memory_format_of as get_memory_format

__all__ = ["get_dim_order", "get_memory_format"]
