"""Operator kernels in numpy, registered once under their program names.

One subpackage per operator family (``conv``, ``elementwise``, ``norm``,
``pool``, ``reduce``, ``index``, ``shape``, ...), each holding its reference
kernels and its load-time fast paths (``fast.py``). Every module registers
its kernels when imported; importing this package imports them all, except
the compiled (numba) forms, which the runtime imports only when numba is
available. See :mod:`pyexecutorch.kernels.registry` for the calling
convention.
"""

import importlib
import pkgutil
from pathlib import Path

from pyexecutorch.jit.generated import stamp_sources
from pyexecutorch.jit.source_stamps import inlined_sources
from pyexecutorch.kernels.registry import Kernel, KernelError, get_kernel, kernel, operator_names

# What the compiled forms inline from one another and from the window arithmetic: a
# compiled form's cached machine code is stamped with the ones its module imports.
inlined_sources(Path(__file__).parent, "**/compiled*.py")
inlined_sources(Path(__file__).parent, "conv/geometry.py")
# Generated code calls or inlines the families' compiled forms: their stamps key its cache.
stamp_sources(Path(__file__).parent, "**/compiled*.py")

_NOT_KERNELS = {"registry", "common"}

for _module in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
    _leaf = _module.name.rsplit(".", 1)[-1]
    if _leaf not in _NOT_KERNELS and not _leaf.startswith("compiled"):
        importlib.import_module(_module.name)

__all__ = ["Kernel", "KernelError", "get_kernel", "kernel", "operator_names"]
