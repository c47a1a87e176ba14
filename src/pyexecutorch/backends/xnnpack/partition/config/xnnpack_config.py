"""``ConfigPrecisionType`` under the official
``backends.xnnpack.partition.config.xnnpack_config`` path (the operator configs
themselves are in :mod:`pyexecutorch.backends.xnnpack.partition.config`)."""

from pyexecutorch.backends.xnnpack.partition.config import ConfigPrecisionType, OpConfig

__all__ = ["ConfigPrecisionType", "OpConfig"]
