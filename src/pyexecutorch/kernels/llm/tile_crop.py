"""``preprocess::tile_crop``: cut a ``[C, H, W]`` image into ``tile_size`` square tiles.

Part of the same official LLM op library (multimodal preprocessing). Tiles are
ordered row by row over the image and each keeps all channels: the output is
``[(H // t) * (W // t), C, t, t]`` in the input's dtype.
"""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.common import fit
from pyexecutorch.kernels.registry import KernelError, kernel


@kernel("preprocess::tile_crop.out")
def tile_crop_out(input: np.ndarray, tile_size: int, out: np.ndarray) -> np.ndarray:
    """Split ``input`` into ``tile_size`` x ``tile_size`` tiles."""
    op = "tile_crop"
    if input.ndim != 3:
        raise KernelError(f"{op}: input must be a 3-D [C, H, W] tensor, got shape {input.shape}")
    if out.dtype != input.dtype:
        raise KernelError(f"{op}: out must have the input's dtype {input.dtype}, got {out.dtype}")
    c, h, w = input.shape
    t = int(tile_size)
    if t <= 0 or h % t or w % t:
        raise KernelError(
            f"{op}: tile_size must be positive and divide the height and width {h}x{w}, got {t}"
        )
    tiles = input.reshape(c, h // t, t, w // t, t).transpose(1, 3, 0, 2, 4)
    dst = fit(out, ((h // t) * (w // t), c, t, t))
    dst[...] = tiles.reshape(dst.shape)
    return dst
