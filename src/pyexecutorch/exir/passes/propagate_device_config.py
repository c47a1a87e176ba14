"""The official module path of :class:`PropagateDeviceConfig` (defined with the other
compile configurations)."""

from pyexecutorch.exir.config import PropagateDeviceConfig

__all__ = ["PropagateDeviceConfig"]
