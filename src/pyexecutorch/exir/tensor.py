"""``TensorSpec`` under the official ``exir.tensor`` path (defined in
:mod:`pyexecutorch.exir.tensor_spec`)."""

from pyexecutorch.exir.tensor_spec import TensorSpec, contiguous_strides, dim_order_from_strides

__all__ = ["TensorSpec", "contiguous_strides", "dim_order_from_strides"]
