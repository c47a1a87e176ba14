"""The official ``executorch.extension.pybindings`` path: ``portable_lib`` is
:mod:`pyexecutorch.portable_lib` itself (the same module object, so its live
attributes such as ``_tensor_output`` behave the same under either name)."""

import sys

from pyexecutorch import portable_lib

sys.modules[__name__ + ".portable_lib"] = portable_lib

__all__ = ["portable_lib"]
