"""Kernels of quantized programs: the ``quantized_decomposed`` and ``torchao`` operators.

Integer semantics follow the official runtime's quantized kernels (the ones a
program exported with quantized operators runs on): quantizing multiplies by
the float32 reciprocal of the scale, rounds half to even, adds the zero point
and saturates to ``[quant_min, quant_max]``; dequantizing subtracts the zero
point and multiplies by the scale.

- :mod:`.affine`: per-tensor, per-channel, per-token and per-group quantize,
  dequantize and parameter choice.
- :mod:`.torchao_affine`: torchao's block-wise ``quantize_affine`` family.
- :mod:`.embedding`: embedding lookups on 8-, 4- and 2-bit weights.
- :mod:`.fused`: the fused quantized operators (``add``, ``mixed_mm``, ``mixed_linear``).
"""

from pyexecutorch.kernels.quantized import affine, embedding, fused, torchao_affine

__all__ = ["affine", "embedding", "fused", "torchao_affine"]
