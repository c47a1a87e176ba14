"""float16 inside compiled loops, which numba cannot type: arrays travel as their uint16 bits.

A compiled loop over float16 tensors takes them viewed as ``uint16``
(``pyexecutorch.runtime.fusion.loop_array``), reads each element as its float32
value (:data:`HALF_TO_FLOAT`, one table entry per bit pattern, built by numpy),
computes in float32 and rounds each result to the nearest half
(:func:`round_half`) as numpy's float16 arithmetic does: computing one
``+ - * /`` or ``sqrt`` in float32 and rounding once gives the correctly rounded
half result. :func:`half_bits` encodes a float32 as the bits numpy's float32 ->
float16 cast gives (round half to even, overflow to infinity, subnormals, -0.0,
NaN with its sign). Imported only by the compiled tier.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

HALF_TO_FLOAT = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
HALF_TO_FLOAT = HALF_TO_FLOAT.astype(np.float32)

_EXPONENT_SHIFT = (15 - 127) << 23  # float32 exponent bias to float16's, in float32's field
_OVERFLOW_BITS = (127 + 16) << 23  # 65536.0: from there up (or from 65520 by rounding), inf
_NORMAL_BITS = (127 - 14) << 23  # 2**-14, the smallest normal half
_SUBNORMAL_MAGIC = ((127 - 15) + (23 - 10) + 1) << 23  # 0.5: adding it rounds to 2**-24 steps


@intrinsic
def _float_bits(typingctx: Any, x: Any) -> Any:
    """The bits of a float32 as a uint32."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def _bits_float(typingctx: Any, x: Any) -> Any:
    """The float32 whose bits a uint32 holds."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.uint32), codegen


@njit(cache=True, error_model="numpy")
def half_bits(x: float) -> np.uint16:
    """The float16 bit pattern of ``x`` (as a float32) rounded to half precision."""
    f = _float_bits(np.float32(x))
    sign = f & np.uint32(0x80000000)
    f ^= sign
    if f >= np.uint32(_OVERFLOW_BITS):
        h = np.uint32(0x7E00) if f > np.uint32(0x7F800000) else np.uint32(0x7C00)
    elif f < np.uint32(_NORMAL_BITS):
        # the float adder rounds to a multiple of 2**-24, ties to even
        magic = np.uint32(_SUBNORMAL_MAGIC)
        h = _float_bits(_bits_float(f) + _bits_float(magic)) - magic
    else:
        odd = (f >> np.uint32(13)) & np.uint32(1)
        f += np.uint32((_EXPONENT_SHIFT + 0xFFF) & 0xFFFFFFFF) + odd
        h = f >> np.uint32(13)
    return np.uint16((h | (sign >> np.uint32(16))) & np.uint32(0xFFFF))


@njit(cache=True, error_model="numpy")
def round_half(x: float) -> np.float32:
    """``x`` rounded to the nearest float16 value (ties to even), as a float32."""
    return HALF_TO_FLOAT[half_bits(x)]
