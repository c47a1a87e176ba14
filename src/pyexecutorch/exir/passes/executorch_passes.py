"""The graph-level steps of ``to_executorch`` as pass objects, under the official names.

``edge_to_executorch_passes(config, name)`` and ``pre_memory_planning_passes(config,
name)`` list them as the official exporter does; ``to_executorch`` runs the same
objects, with the steps that need the program's signature and data (buffer
write-back, constant data in the specs, batch-norm and constant folding) between
spec propagation and the view and out-variant passes.
"""

from __future__ import annotations

from typing import Any

from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from pyexecutorch.exir.passes._official_names import recompile_all
from pyexecutorch.exir.passes.memory_view import replace_view_copies
from pyexecutorch.exir.passes.out_variants import to_out_variants
from pyexecutorch.exir.passes.remove_asserts import eliminate_dead_code, remove_asserts
from pyexecutorch.exir.passes.spec_prop import SpecPropagator
from pyexecutorch.exir.passes.sym_shape_eval import (
    ConstraintBasedSymShapeEvalPass,
    SymShapeEvalPass,
)


class SpecPropPass(PassBase):
    """``node.meta['spec']`` from each node's fake value, dynamic sizes bounded by
    ``sym_shape_eval_pass``."""

    def __init__(self, sym_shape_eval_pass: SymShapeEvalPass | None = None) -> None:
        self.sym_shape_eval_pass = sym_shape_eval_pass or ConstraintBasedSymShapeEvalPass()

    def call(self, graph_module: GraphModule) -> PassResult:
        SpecPropagator(self.sym_shape_eval_pass).run_graph(graph_module)
        return PassResult(graph_module, True)


class RemoveGraphAssertsPass(PassBase):
    """Drop runtime asserts (``_assert_scalar`` and friends): shapes are checked at
    load and on input instead."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, bool(remove_asserts(graph_module)))


class ReplaceViewCopyWithViewPass(PassBase):
    """``*_copy`` views of contiguous memory become ``memory.view`` (no copy at run
    time; static views are elided)."""

    def call(self, graph_module: GraphModule) -> PassResult:
        changed = replace_view_copies(graph_module)
        if changed:
            eliminate_dead_code(graph_module)
            recompile_all(graph_module)  # the module's code shows the views
        return PassResult(graph_module, bool(changed))


class ToOutVarPass(PassBase):
    """Functional operators to their ``.out`` variants writing into ``memory.alloc``.

    ``ignore_to_out_var_failure=True`` would leave operators without out variants
    functional, which the program format cannot call: it is refused."""

    def __init__(self, ignore_to_out_var_failure: bool = False) -> None:
        if ignore_to_out_var_failure:
            raise NotImplementedError(
                "ToOutVarPass(ignore_to_out_var_failure=True): an operator without an out "
                "variant cannot be emitted; give it one or delegate it"
            )
        self.ignore_to_out_var_failure = ignore_to_out_var_failure
        self.method = "forward"

    def call(self, graph_module: GraphModule) -> PassResult:
        to_out_variants(graph_module, method=self.method)
        return PassResult(graph_module, True)


def _per_method(value: Any, name: str | None, default: Any) -> Any:
    if isinstance(value, dict):
        return value.get(name, default) if name else default
    return value if value is not None else default


def sym_shape_eval_pass_for(config: Any, name: str | None = None) -> SymShapeEvalPass:
    """The config's sym-shape pass for method ``name`` (the default where a dict has none)."""
    found = _per_method(config.sym_shape_eval_pass, name, None)
    found = found or ConstraintBasedSymShapeEvalPass()
    if not isinstance(found, SymShapeEvalPass):
        raise TypeError(
            f"sym_shape_eval_pass for {name or 'a method'!r} must be a pyexecutorch sym-shape "
            f"pass (ConstraintBasedSymShapeEvalPass or HintBasedSymShapeEvalPass), got "
            f"{type(found).__name__}"
        )
    return found


def pre_memory_planning_passes(config: Any, name: str | None = None) -> list[Any]:
    """The passes before memory planning: copy-free views (``remove_view_copy``), the
    sym-shape pass and the out-variant pass of ``config`` for method ``name``."""
    out_var = config.to_out_var_pass
    if isinstance(out_var, ToOutVarPass) and name:
        out_var.method = name
    passes: list[Any] = [ReplaceViewCopyWithViewPass()] if config.remove_view_copy else []
    return [*passes, sym_shape_eval_pass_for(config, name), out_var]


def edge_to_executorch_passes(config: Any, name: str | None = None) -> list[Any]:
    """The passes from the edge dialect to the executorch dialect, before memory
    planning: the user's ``config.passes``, spec propagation, assert removal, then
    :func:`pre_memory_planning_passes`."""
    sym_eval = sym_shape_eval_pass_for(config, name)
    return [
        *config.passes,
        SpecPropPass(sym_eval),
        RemoveGraphAssertsPass(),
        *pre_memory_planning_passes(config, name),
    ]


def run_pass(p: Any, gm: GraphModule) -> GraphModule:
    """Run one pass (a ``PassBase``, a callable returning a ``PassResult``, a graph
    module or None) and return the graph module it leaves."""
    res = p(gm)
    if isinstance(res, PassResult):
        return res.graph_module
    if isinstance(res, GraphModule):
        return res
    return gm
