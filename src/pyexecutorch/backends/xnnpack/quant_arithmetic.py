"""XNNPACK's quantized arithmetic, shared by the numpy nodes and the compiled ones: output
bounds in the quantized domain, requantization (``clamp(rint(float32(acc) * scale) + zp)``,
ties to even) and the exactness of integer sums (float32 below 2**24, float64 above, and
int32's wrap-around where XNNPACK's accumulator would pass it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack.nodes import bounds
from pyexecutorch.schema.scalar_type import F32, F64

if TYPE_CHECKING:
    from pyexecutorch.backends.xnnpack.nodes_quantized import Quant

NDArray = np.ndarray
_INF = float("inf")


def quantize_bound(value: float, q: Quant) -> int:
    """A float output bound in the quantized domain, saturated to int8."""
    if value == _INF:
        return 127
    if value == -_INF:
        return -128
    v = np.float32(value) / np.float32(q.scale) + np.float32(q.zero_point)
    return int(np.rint(np.clip(v, -128.0, 127.0)))


def qbounds(node: S.XNode, q: Quant) -> tuple[int, int]:
    lo, hi = bounds(node)
    return quantize_bound(lo, q), quantize_bound(hi, q)


def requantize(
    acc: NDArray,
    scale: Any,
    zero_point: int,
    lo: int,
    hi: int,
    out: NDArray,
    f: NDArray | None = None,
) -> None:
    """``out = clamp(rint(float32(acc) * scale) + zero_point, lo, hi)``.

    ``f`` is a float32 scratch of ``acc``'s shape (``acc`` itself when float32).
    The clamp happens before the zero point joins, on integers, so it is exact.
    """
    if f is None:
        f = acc.astype(F32)
    elif f is not acc:
        np.copyto(f, acc, casting="unsafe")
    np.multiply(f, scale, out=f)
    np.rint(f, out=f)
    np.maximum(f, np.float32(lo - zero_point), out=f)
    np.minimum(f, np.float32(hi - zero_point), out=f)
    np.add(f, np.float32(zero_point), out=out, casting="unsafe")


# float32 sums of integer products stay exact below 2**24
EXACT_F32 = 1 << 24


def _largest_sum(k: int, zero_point_span: int, bias: NDArray | None) -> int:
    """A bound on every partial sum of ``k`` products and the bias."""
    # (in Python integers: numpy's abs of int32's minimum is that minimum)
    top = 0 if bias is None else max(-int(bias.min(initial=0)), int(bias.max(initial=0)))
    return k * zero_point_span * 128 + top


def exact_dtype(k: int, zero_point_span: int, bias: NDArray | None) -> np.dtype:
    """float32 when every partial sum of ``k`` products (and the bias) is an exact float32."""
    return F32 if _largest_sum(k, zero_point_span, bias) < EXACT_F32 else F64


def may_wrap(k: int, zero_point_span: int, bias: NDArray | None) -> bool:
    """Whether a sum can pass int32, where XNNPACK's int32 accumulator wraps around (a bias
    near the int32 limits): the exact float64 sums are then wrapped (:func:`wrap_int32`)."""
    return _largest_sum(k, zero_point_span, bias) >= 1 << 31


def wrap_int32(acc: NDArray) -> None:
    """Exact float64 integer sums wrapped in place into int32's range, two's complement."""
    acc += 2.0**31
    np.mod(acc, 2.0**32, out=acc)
    acc -= 2.0**31
