"""Softmax, log-softmax and layer norm as the primitive steps of the runtime's fused
reduction loops (see :class:`pyexecutorch.kernels.registry.Reduction`); declared in
:mod:`pyexecutorch.kernels.norm.facts`."""

from __future__ import annotations

from typing import Any

from pyexecutorch.kernels.reduce.reduction_steps import one_dim, trailing_dims
from pyexecutorch.kernels.registry import Reduction


def _softmax(g: Any, x: str, n: str, c: dict, t: dict) -> dict[int, str]:
    m = g.reduce("max", x)
    e = g.elem("EXP({0} - {1})", x, m)
    return {0: g.elem("{0} / {1}", e, g.reduce("sum", e))}


def _log_softmax(g: Any, x: str, n: str, c: dict, t: dict) -> dict[int, str]:
    m = g.reduce("max", x)
    s = g.reduce("sum", g.elem("EXP({0} - {1})", x, m))
    return {0: g.elem("({0} - {1}) - math.log({2})", x, m, s)}


def _layer_norm(g: Any, x: str, n: str, c: dict, t: dict) -> dict[int, str]:
    mean = g.elem("{0} / " + n, g.reduce("sum", x))
    d = g.elem("{0} - {1}", x, mean)
    var = g.elem("{0} / " + n, g.reduce("sum", g.elem("{0} * {0}", d)))
    rstd = g.elem(f"C(1) / math.sqrt({{0}} + {c[4]})", var)
    y = g.elem("{0} * {1}", d, rstd)
    if t.get(2) is not None:
        y = g.elem("{0} * {1}", y, t[2])
    if t.get(3) is not None:
        y = g.elem("{0} + {1}", y, t[3])
    return {0: y, 1: mean, 2: rstd}


# softmax(x, dim, half_to_float): not the half-to-float variant.
SOFTMAX = Reduction(_softmax, one_dim, constant=lambda c: c[2] is False)
LOG_SOFTMAX = Reduction(_log_softmax, one_dim, constant=lambda c: c[2] is False)
# native_layer_norm(x, shape, weight, bias, eps, out, mean, rstd)
LAYER_NORM = Reduction(
    _layer_norm, trailing_dims, tensors=(2, 3), constant=lambda c: isinstance(c[4], float)
)
