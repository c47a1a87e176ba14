"""Operator kernels in numpy, registered once under their program names.

Every module in this package registers its kernels when imported; importing
the package imports them all. See :mod:`pyexecutorch.kernels.registry` for
the calling convention.
"""

import importlib
import pkgutil

from pyexecutorch.kernels.registry import Kernel, KernelError, get_kernel, kernel, operator_names

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in {"registry", "common"}:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Kernel", "KernelError", "get_kernel", "kernel", "operator_names"]
