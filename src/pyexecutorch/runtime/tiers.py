"""Whether a program runs on the compiled tier, and the compiled forms it then needs.

The runtime uses numba when it imports, unless ``PYEXECUTORCH_JIT=0`` or a program is
loaded with ``jit=False``; without numba everything runs on the numpy kernels. The
machinery itself (numba's import, the disk cache, entry points) is :mod:`pyexecutorch.jit`.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from pyexecutorch.jit import numba_env
from pyexecutorch.kernels import registry

JIT_ENV = "PYEXECUTORCH_JIT"

_compiled_forms_loaded = False


class JitUnavailableError(ImportError):
    """``jit=True`` was asked for but numba does not import."""


def enabled(requested: bool | None) -> bool:
    """Whether a program loaded with ``jit=requested`` uses the compiled tier."""
    if requested is False:
        return False
    if requested is None and os.environ.get(JIT_ENV, "").strip() == "0":
        return False
    if numba_env.numba_module() is None:
        if requested:
            raise JitUnavailableError(
                "jit=True needs numba, which does not import (pip install 'pyexecutorch[jit]')"
            )
        return False
    registry.use_compiled_forms()
    return True


def load_compiled_forms() -> None:
    """Import every kernel family's compiled forms (``kernels/<family>/compiled*.py``: the
    forms and the steps they build, the channels-last ones included) and the whole-method
    functions' argument binding, once. A load needs none of this: it imports the families
    of the kernels it asks for (see :func:`pyexecutorch.kernels.registry.use_compiled_forms`);
    this is for what lists every form."""
    global _compiled_forms_loaded
    if _compiled_forms_loaded:
        return
    with numba_env.lock:
        if _compiled_forms_loaded:
            return
        import pyexecutorch.kernels as kernels  # noqa: PLC0415

        root = Path(kernels.__path__[0])
        for family in sorted(p.name for p in root.iterdir() if p.is_dir()):
            registry.import_compiled_family(family)
        importlib.import_module("pyexecutorch.runtime.bound_arrays")
        _compiled_forms_loaded = True
