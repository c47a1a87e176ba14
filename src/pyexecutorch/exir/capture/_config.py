"""The compile configurations under the official ``exir.capture._config`` path."""

from pyexecutorch.exir.config import EdgeCompileConfig, ExecutorchBackendConfig

__all__ = ["EdgeCompileConfig", "ExecutorchBackendConfig"]
