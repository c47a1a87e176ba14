"""``llama::fallback``: a copy of its input (a placeholder op some delegates leave on CPU)."""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.common import fit
from pyexecutorch.kernels.registry import KernelError, kernel


@kernel("llama::fallback.out")
def fallback_out(input: np.ndarray, output: np.ndarray) -> np.ndarray:
    """Copy ``input`` into ``output``, which must have its dtype."""
    if output.dtype != input.dtype:
        raise KernelError(
            f"fallback: output must have the input's dtype {input.dtype}, got {output.dtype}"
        )
    dst = fit(output, input.shape)
    dst[...] = input
    return dst
