"""The XNNPACK partitioner and its op configs (ahead of time; needs torch)."""

from pyexecutorch.backends.xnnpack.partition.config import (
    ConfigPrecisionType,
    OpConfig,
    register_configs,
)
from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

__all__ = ["ConfigPrecisionType", "OpConfig", "XnnpackPartitioner", "register_configs"]
