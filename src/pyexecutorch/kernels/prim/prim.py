"""Scalar ("prim") kernels: the symbolic-shape arithmetic of a program.

``executorch_prim::*`` ops compute on Python ints, floats and bools with the
semantics of torch's SymInt/SymFloat math, i.e. Python's: ``//`` floors,
``%`` takes the divisor's sign, ``round`` rounds half to even. The last
argument is the previous value of the output slot (ignored); each kernel
returns the new value.

Where Python would raise and the official runtime defines a result, the
official result is used: float division by zero gives inf/nan (``truediv``,
and ``floordiv`` on floats gives +-inf by the dividend's sign). Integer
division or modulo by zero raises :class:`KernelError`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import numpy as np

from pyexecutorch.kernels.common import normalize_dim
from pyexecutorch.kernels.registry import KernelError, kernel

_NUMBER = (int, float)


def _check_number(name: str, *values: object) -> None:
    for v in values:
        if not isinstance(v, _NUMBER):  # bool is an int
            raise KernelError(f"{name} expects int, float or bool operands, got {type(v).__name__}")


def _binary(name: str, op: Callable[[object, object], object]) -> Callable:
    def run(a, b, out):
        _check_number(name, a, b)
        return op(a, b)

    run.__name__ = name
    return run


kernel("executorch_prim::add.Scalar")(_binary("add", operator.add))
kernel("executorch_prim::sub.Scalar")(_binary("sub", operator.sub))
kernel("executorch_prim::mul.Scalar")(_binary("mul", operator.mul))
kernel("executorch_prim::eq.Scalar")(_binary("eq", operator.eq))
kernel("executorch_prim::gt.Scalar")(_binary("gt", operator.gt))
kernel("executorch_prim::ge.Scalar")(_binary("ge", operator.ge))
kernel("executorch_prim::lt.Scalar")(_binary("lt", operator.lt))
kernel("executorch_prim::le.Scalar")(_binary("le", operator.le))


def _is_int(v: object) -> bool:
    return isinstance(v, int)  # bool included


@kernel("executorch_prim::truediv.Scalar")
def truediv(a, b, out):
    _check_number("truediv", a, b)
    if b == 0:
        # IEEE result (the official runtime divides doubles)
        a = float(a)
        if a != a or a == 0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, float(b))
    return a / b


@kernel("executorch_prim::floordiv.Scalar", "executorch_prim::floordiv.int")
def floordiv(a, b, out):
    _check_number("floordiv", a, b)
    if b == 0:
        if _is_int(a) and _is_int(b):
            raise KernelError(f"integer division by zero in floordiv({a}, {b}) (ZeroDivisionError)")
        return math.copysign(math.inf, float(a))  # the official runtime's result
    return a // b


@kernel("executorch_prim::mod.Scalar", "executorch_prim::mod.int")
def mod(a, b, out):
    _check_number("mod", a, b)
    if b == 0:
        if _is_int(a) and _is_int(b):
            raise KernelError(f"integer modulo by zero in mod({a}, {b}) (ZeroDivisionError)")
        return math.nan
    return a % b


@kernel("executorch_prim::neg.Scalar")
def neg(a, out):
    _check_number("neg", a)
    return -a


def _to_int(name: str, f: Callable[[float], int]) -> Callable:
    def run(a, out):
        _check_number(name, a)
        if isinstance(a, int):
            return int(a)
        if a != a or a in (math.inf, -math.inf):
            raise KernelError(f"{name} of {a} has no integer value")
        return f(a)

    run.__name__ = name
    return run


kernel("executorch_prim::ceil.Scalar")(_to_int("ceil", math.ceil))
kernel("executorch_prim::trunc.Scalar")(_to_int("trunc", math.trunc))
kernel("executorch_prim::round.Scalar")(_to_int("round", round))  # half to even
kernel("executorch_prim::sym_int.Scalar")(_to_int("sym_int", int))  # truncates


@kernel("executorch_prim::sym_float.Scalar")
def sym_float(a, out):
    _check_number("sym_float", a)
    return float(a)


@kernel("executorch_prim::sym_max.Scalar")
def sym_max(a, b, out):
    _check_number("sym_max", a, b)
    return max(a, b)


@kernel("executorch_prim::sym_min.Scalar")
def sym_min(a, b, out):
    _check_number("sym_min", a, b)
    return min(a, b)


@kernel("executorch_prim::sym_not.Scalar")
def sym_not(a, out):
    _check_number("sym_not", a)
    return not a


@kernel("executorch_prim::sym_ite.Scalar")
def sym_ite(cond, if_true, if_false, out):
    _check_number("sym_ite", cond)
    return if_true if cond else if_false


# Tensor queries whose results are scalars.


def _tensor(name: str, x: object) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise KernelError(f"{name} expects a tensor, got {type(x).__name__}")
    return x


@kernel("aten::sym_size.int")
def sym_size(x, dim, out):
    x = _tensor("sym_size", x)
    if x.ndim == 0:
        raise KernelError(f"sym_size: dimension {dim} is out of range for a 0-dimensional tensor")
    return int(x.shape[normalize_dim(dim, x.ndim)])


@kernel("aten::sym_numel")
def sym_numel(x, out):
    return int(_tensor("sym_numel", x).size)


@kernel("aten::_local_scalar_dense")
def local_scalar_dense(x, out):
    x = _tensor("_local_scalar_dense", x)
    if x.size == 0:
        raise KernelError("_local_scalar_dense needs a tensor with at least one element")
    if x.dtype.kind not in "biuf":
        raise KernelError(f"_local_scalar_dense does not support dtype {x.dtype}")
    return x.item(0)  # Python bool, int or float
