"""Concrete upper bounds for symbolic dimensions.

``ConstraintBasedSymShapeEvalPass`` (the default, as in the official exporter)
bounds each symbolic size with the value ranges torch.export recorded
(``Dim(..., max=...)``); ``HintBasedSymShapeEvalPass`` uses the example
inputs' sizes instead.  A dimension torch bounds by nothing (``int_oo``: a ``Dim``
without ``max``) is planned at its example's size, as the official pass does, with
a warning; one with no example size either (unbacked, data-dependent) is an error
naming the operator, the user's source line and the fix.
"""

from __future__ import annotations

import warnings
from typing import Any

import sympy
import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from pyexecutorch.exir.error import DynamicShapeError, op_name, source_location


class _Unbounded(Exception):
    pass


class SymShapeEvalPass(PassBase):
    """Base class: ``upper_bound(sym)`` returns an int or raises ``_Unbounded``."""

    def upper_bound(self, value: Any) -> int:
        raise NotImplementedError

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        # Spec propagation asks this pass for bounds; run alone it has nothing to do.
        return PassResult(graph_module, False)

    def bound_shape(
        self, shape, node=None, owner=None, what: str = ""
    ) -> tuple[tuple[int, ...], bool]:
        """Upper-bound ``shape``; returns (ints, whether any dim was symbolic)."""
        out = []
        dynamic = False
        for i, s in enumerate(shape):
            if isinstance(s, int):
                out.append(s)
                continue
            expr = s.node.expr if isinstance(s, torch.SymInt) else s
            if isinstance(expr, sympy.Integer) or (hasattr(expr, "is_number") and expr.is_number):
                out.append(int(expr))
                continue
            dynamic = True
            try:
                out.append(self.upper_bound(s))
            except _Unbounded:
                raise DynamicShapeError(_unbounded_message(node, owner, i, s, what)) from None
        return tuple(out), dynamic


def _unbounded_message(node, owner, dim, sym, what) -> str:
    if node is None:
        subject = f"a tensor{what}"
    elif node.op == "placeholder":
        subject = f"input {node.name!r}{what}"
    else:
        subject = f"the result of {op_name(node.target)}{what}"
    where = source_location(node, owner) if node is not None else "<unknown source>"
    return (
        f"{subject} (at {where}) has dimension {dim} of size {sym} with no upper bound, "
        "so its memory cannot be planned ahead of time. Give the dynamic dimension a maximum "
        "when exporting, e.g. torch.export.export(model, args, dynamic_shapes={...: "
        "{0: torch.export.Dim('batch', max=64)}}), or bound a data-dependent size with "
        "torch._check(size <= N)."
    )


class ConstraintBasedSymShapeEvalPass(SymShapeEvalPass):
    def upper_bound(self, value: Any) -> int:
        from torch.utils._sympy.value_ranges import bound_sympy

        node = value.node
        upper = bound_sympy(node.expr, node.shape_env.var_to_range).upper
        # torch's int_oo is a sympy Number claiming to be finite: test the type.
        if isinstance(upper, (int, sympy.Integer)):
            return int(upper)
        hint = trace_hint(value)
        if hint is None:
            raise _Unbounded
        warnings.warn(
            f"dynamic size {node.expr} has no upper bound: its memory is planned for the "
            f"example's size {hint}, and a larger input is refused at run time; give its "
            "torch.export.Dim a max= to plan for more",
            stacklevel=2,
        )
        return hint


def trace_hint(value: Any) -> int | None:
    """The size ``value`` had in the example inputs; None for an unbacked symbol."""
    hint = value.node.hint
    if hint is None:
        try:
            hint = value.node.shape_env.size_hint(value.node.expr)
        except Exception:  # unbacked symbols have no hint
            hint = None
    return None if hint is None else int(hint)


class HintBasedSymShapeEvalPass(SymShapeEvalPass):
    def upper_bound(self, value: Any) -> int:
        hint = trace_hint(value)
        if hint is None:
            raise _Unbounded
        return hint
