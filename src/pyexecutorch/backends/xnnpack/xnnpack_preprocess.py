"""The XNNPACK backend's ahead-of-time class under its official module path
(``executorch.backends.xnnpack.xnnpack_preprocess.XnnpackBackend``)."""

from pyexecutorch.backends.xnnpack.aot import XnnpackBackend

__all__ = ["XnnpackBackend"]
