"""The official custom ops with the official build's own BLAS.

The official ``llama::custom_sdpa`` computes its two matmuls with ``sgemm_``. The official
build links it from its Eigen BLAS (``executorch/lib/libexecutorch_kernels_optimized.so``),
but its custom-ops library depends on libtorch_cpu, whose MKL exports the same symbol and
is found first in a process that imports torch: the numbers then follow MKL's
size-, alignment- and thread-dependent order. A script that starts with ``PREAMBLE`` loads
the official BLAS into the global scope before anything loads torch, so that the kernel
runs as the official build links it (and as a torch-free official runtime runs it).
"""

from __future__ import annotations

PREAMBLE = """
import ctypes, importlib.util, os, pathlib
_package = pathlib.Path(importlib.util.find_spec("executorch").submodule_search_locations[0])
ctypes.CDLL(str(_package / "lib" / "libexecutorch_kernels_optimized.so"),
            mode=os.RTLD_GLOBAL | os.RTLD_NOW)
"""
