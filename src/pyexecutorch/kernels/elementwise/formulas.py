"""Each elementwise operator's scalar formula, written once: the table fused loops are built from.

The compiled tier (:mod:`pyexecutorch.runtime.fusion`) reads this table to
turn a run of elementwise instructions into one generated loop. A formula is a
Python expression over one element of each tensor operand; it is written so
that, computed in the operands' dtype, it gives what the numpy kernel gives:

* ``{i}`` stands for argument ``i`` of the kernel (an element of a tensor
  operand, or a constant argument as a literal of the loop's dtype);
* ``T(...)`` rounds to the loop's dtype (every intermediate is rounded, as the
  numpy kernels round each pass), ``C(...)`` to the dtype it computes in (float32
  for float16: a formula's irrational constants are not rounded to half
  precision), ``math`` and ``np`` are the modules, and ``EXP``, ``ERF`` and
  ``TANH`` the loop's exp, erf and tanh (vectorizable float64 forms in float32
  loops, see :mod:`pyexecutorch.jit.math_functions`);
* NaN, infinities and signed zeros follow the numpy kernel (comparisons are
  written so that NaN takes the branch the kernel's ufunc takes), and integer
  formulas wrap exactly as the numpy kernels do.

Operators whose formula depends on a constant argument (``clamp``'s optional
bounds, ``gelu``'s approximation, ``pow``'s exponent) give a function of their
constant arguments returning the expression, or ``None`` where no formula
matches the kernel exactly (the instruction then keeps its numpy kernel).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

_SQRT1_2 = math.sqrt(0.5)
_TANH_BETA = math.sqrt(2.0 / math.pi)
_TANH_BETA_KAPPA = _TANH_BETA * 0.044715


@dataclass(frozen=True)
class Formula:
    """One operator's element formula and what it accepts."""

    tensors: tuple[int, ...]  # argument positions read element by element
    expr: str | Callable[..., str | None]  # over {i}; a callable gets the constant arguments
    ints: bool = False  # exact for integer dtypes too (else floating only)
    bool_tensors: tuple[int, ...] = ()  # tensor operands that are bool whatever the loop's dtype
    # passes over memory of the numpy fast path: one op alone is compiled when > 1 (one
    # np.clip or a max-and-copy pass is as fast as a loop, which also costs a dispatch)
    passes: int = 1
    bool_out: bool = False  # a test: bool output, computed in the operands' dtype
    shape_only: tuple[int, ...] = ()  # tensor operands read for their shape only
    # float16 too: the numpy kernel computes float16 as this formula, rounding each result
    halves: bool = True

    def expression(self, constants: dict[int, object]) -> str | None:
        """The formula for these constant arguments (position -> value), or None."""
        if isinstance(self.expr, str):
            return self.expr
        return self.expr(constants)


def _scaled(alpha: object, term: str) -> str:
    return term if alpha == 1 else f"{{2}} * {term}"


def _clamp(lo_at: int, hi_at: int) -> Callable[[dict[int, object]], str | None]:
    # min(max(x, lo), hi) as numpy's maximum and minimum compute it: NaN kept, and on a
    # tie the first operand (so -0.0 stays -0.0); each operand appears once, as a select
    def expr(c: dict[int, object]) -> str | None:
        x = "{0}"
        if c.get(lo_at) is not None:
            x = f"np.maximum({x}, {{{lo_at}}})"
        if c.get(hi_at) is not None:
            x = f"np.minimum({x}, {{{hi_at}}})"
        return x

    return expr


def _pow(c: dict[int, object]) -> str | None:
    exponent = c.get(1)
    if isinstance(exponent, bool):
        return None
    # the exponents the numpy kernel computes with plain arithmetic, rounded as it rounds;
    # the others with pow in the loop's dtype, as the kernel's np.power
    return {
        1: "{0}",
        2: "{0} * {0}",
        3: "T({0} * {0}) * {0}",
        0.5: "math.sqrt({0})",
        -0.5: "T(1) / T(math.sqrt({0}))",
        -1: "T(1) / {0}",
        -2: "T(1) / T({0} * {0})",
    }.get(exponent, "{0} ** {1}")  # type: ignore[call-overload]


def _gelu(c: dict[int, object]) -> str | None:
    return {
        # 0.5 * erf rounded once to the compute dtype, as the numpy kernel scales erf
        "none": f"{{0}} * (T(0.5) + C(0.5 * ERF({{0}} * C({_SQRT1_2!r}))))",
        "tanh": (
            "T(0.5) * {0} * (T(1) + TANH({0} * "
            f"(C({_TANH_BETA!r}) + {{0}} * {{0}} * C({_TANH_BETA_KAPPA!r}))))"
        ),
    }.get(c.get(1))  # type: ignore[arg-type]


def _elu(c: dict[int, object]) -> str | None:
    alpha, scale, input_scale = (float(c[i]) for i in (1, 2, 3))  # type: ignore[arg-type]
    return (
        f"({{0}} * C({scale!r}) if {{0}} > T(0) "
        f"else math.expm1({{0}} * C({input_scale!r})) * C({alpha * scale!r}))"
    )


def _unary(fn: str) -> Formula:
    return Formula((0,), f"{fn}({{0}})")


def _comparisons() -> dict[str, Formula]:
    # NaN compares as numpy compares it: false, except for !=
    table = {}
    for name, op in (
        ("eq", "=="),
        ("ne", "!="),
        ("lt", "<"),
        ("le", "<="),
        ("gt", ">"),
        ("ge", ">="),
    ):
        table[f"aten::{name}.Tensor_out"] = Formula(
            (0, 1), f"{{0}} {op} {{1}}", True, bool_out=True
        )
        table[f"aten::{name}.Scalar_out"] = Formula((0,), f"{{0}} {op} {{1}}", True, bool_out=True)
    return table


FORMULAS: dict[str, Formula] = {
    "aten::add.out": Formula((0, 1), lambda c: "{0} + " + _scaled(c[2], "{1}"), ints=True),
    "aten::add.Scalar_out": Formula((0,), lambda c: "{0} + " + _scaled(c[2], "{1}"), ints=True),
    "aten::sub.out": Formula((0, 1), lambda c: "{0} - " + _scaled(c[2], "{1}"), ints=True),
    "aten::sub.Scalar_out": Formula((0,), lambda c: "{0} - " + _scaled(c[2], "{1}"), ints=True),
    "aten::rsub.Scalar_out": Formula((0,), lambda c: "{1} - " + _scaled(c[2], "{0}"), ints=True),
    "aten::mul.out": Formula((0, 1), "{0} * {1}", ints=True),
    "aten::mul.Scalar_out": Formula((0,), "{0} * {1}", ints=True),
    "aten::div.out": Formula((0, 1), "{0} / {1}"),
    "aten::div.Scalar_out": Formula((0,), "{0} / {1}"),
    "aten::neg.out": Formula((0,), "-{0}", ints=True),
    "aten::abs.out": Formula((0,), "abs({0})", ints=True),
    "aten::relu.out": Formula((0,), "(T(0) if {0} < T(0) else {0})", ints=True),
    "aten::sigmoid.out": Formula((0,), "T(1) / (T(1) + T(EXP(-{0})))", passes=4),
    "aten::reciprocal.out": Formula((0,), "T(1) / {0}"),
    "aten::rsqrt.out": Formula((0,), "T(1) / math.sqrt({0})", passes=2),
    "aten::exp.out": _unary("EXP"),
    "aten::expm1.out": _unary("math.expm1"),
    "aten::log.out": _unary("math.log"),
    "aten::log1p.out": _unary("math.log1p"),
    "aten::sqrt.out": _unary("math.sqrt"),
    "aten::tanh.out": _unary("TANH"),
    "aten::sin.out": _unary("math.sin"),
    "aten::cos.out": _unary("math.cos"),
    "aten::erf.out": _unary("ERF"),
    "aten::floor.out": _unary("np.floor"),
    "aten::ceil.out": _unary("np.ceil"),
    "aten::trunc.out": _unary("np.trunc"),
    # float16 powers go through C's pow in torch and the numpy kernel (pow(-inf, 0.5) is inf)
    "aten::pow.Tensor_Scalar_out": Formula((0,), _pow, halves=False),
    # numpy's maximum and minimum: NaN from either side, and the second operand on a tie
    # (so maximum(-0.0, 0.0) is 0.0 and maximum(0.0, -0.0) is -0.0)
    "aten::maximum.out": Formula((0, 1), "({0} if ({0} > {1} or {0} != {0}) else {1})", True),
    "aten::minimum.out": Formula((0, 1), "({0} if ({0} < {1} or {0} != {0}) else {1})", True),
    "aten::round.out": _unary("np.rint"),  # half to even, as torch
    "aten::atan2.out": Formula((0, 1), "math.atan2({0}, {1})", halves=False),
    "aten::leaky_relu.out": Formula((0,), "({0} if {0} > T(0) else {0} * {1})"),
    "aten::hardtanh.out": Formula((0,), _clamp(1, 2)),
    "aten::clamp.out": Formula((0,), _clamp(1, 2), ints=True),
    "aten::elu.out": Formula((0,), _elu, passes=5),
    "aten::gelu.out": Formula((0,), _gelu, passes=4),
    "aten::where.self_out": Formula(
        (0, 1, 2), "({1} if {0} else {2})", ints=True, bool_tensors=(0,)
    ),
    "aten::logical_not.out": Formula((0,), "not {0}", ints=True, bool_tensors=(0,), bool_out=True),
    # on bool tensors (other dtypes keep their kernels): the bitwise operators are the logical
    **{
        name: Formula((0, 1), expr, ints=True, bool_tensors=(0, 1), bool_out=True)
        for name, expr in (
            ("aten::logical_and.out", "({0} and {1})"),
            ("aten::logical_or.out", "({0} or {1})"),
            ("aten::logical_xor.out", "({0} != {1})"),
            ("aten::bitwise_and.Tensor_out", "({0} and {1})"),
            ("aten::bitwise_or.Tensor_out", "({0} or {1})"),
            ("aten::bitwise_xor.Tensor_out", "({0} != {1})"),
        )
    },
    "aten::bitwise_not.out": Formula((0,), "not {0}", ints=True, bool_tensors=(0,), bool_out=True),
    "aten::full_like.out": Formula((), "{1}", ints=True, shape_only=(0,)),
    **_comparisons(),
}
