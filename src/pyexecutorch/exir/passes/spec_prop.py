"""Spec propagation: a :class:`TensorSpec` on every tensor-producing node.

Sizes are concrete (upper bounds for dynamic dimensions, from the configured
sym-shape pass).  Placeholders are classified with the graph signature:
parameters, non-mutated buffers and lifted constants become ``const`` specs
holding their data; mutated buffers keep their initial value in ``storage``
with ``is_mutable_buffer``; user inputs get ``is_user_input``.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx import GraphModule, Node
from torch.utils import _pytree as pytree

from pyexecutorch.exir.graph_utils import is_control_flow, is_inplace, submodules
from pyexecutorch.exir.passes.sym_shape_eval import (
    ConstraintBasedSymShapeEvalPass,
    SymShapeEvalPass,
)
from pyexecutorch.exir.tensor_spec import TensorSpec, dim_order_from_strides
from pyexecutorch.schema.program import TensorShapeDynamism


def _hint(s) -> int:
    if isinstance(s, int):
        return s
    try:
        return int(s.node.hint) if s.node.hint is not None else 1
    except Exception:
        return 1


class SpecPropagator:
    def __init__(self, sym_eval: SymShapeEvalPass | None = None) -> None:
        self.sym_eval = sym_eval or ConstraintBasedSymShapeEvalPass()

    def make_spec(
        self, val: Any, node: Node | None = None, owner: Node | None = None, what: str = ""
    ) -> Any:
        if isinstance(val, torch.Tensor):
            shape, dynamic = self.sym_eval.bound_shape(val.shape, node, owner, what)
            try:
                strides = tuple(_hint(s) for s in val.stride())
                dim_order = dim_order_from_strides(strides)
            except Exception:
                dim_order = None
            return TensorSpec(
                dtype=val.dtype,
                shape=shape,
                shape_dynamism=TensorShapeDynamism.DYNAMIC_BOUND
                if dynamic
                else TensorShapeDynamism.STATIC,
                dim_order=dim_order,
                requires_grad=bool(val.requires_grad),
                layout=val.layout,
            )
        if isinstance(val, (bool, int, float)):
            return val
        return None

    def _tree_spec(self, val: Any, node: Node, owner: Node | None) -> Any:
        if isinstance(val, (list, tuple)):
            specs = [self._tree_spec(v, node, owner) for v in val]
            return specs if isinstance(val, list) else tuple(specs)
        return self.make_spec(val, node, owner)

    def run_graph(self, gm: GraphModule, owner: Node | None = None) -> None:
        for node in gm.graph.nodes:
            if node.op == "output":
                node.meta["spec"] = pytree.tree_map_only(
                    Node, lambda n: n.meta.get("spec"), node.args[0]
                )
                continue
            if node.op == "call_function" and node.target is operator.getitem:
                parent = node.args[0]
                pspec = parent.meta.get("spec") if isinstance(parent, Node) else None
                if isinstance(pspec, (list, tuple)) and isinstance(node.args[1], int):
                    node.meta["spec"] = pspec[node.args[1]]
                    continue
            if node.op == "get_attr":
                attr = gm
                for part in node.target.split("."):
                    attr = getattr(attr, part)
                if isinstance(attr, torch.Tensor):
                    node.meta["spec"] = TensorSpec.from_tensor(attr, const=True)
                continue
            if (
                "spec" in node.meta
                and node.op == "call_function"
                and getattr(node.target, "__name__", "") == ("executorch_call_delegate")
            ):
                continue  # delegate specs are set when lowering
            if (
                node.op == "call_function"
                and is_inplace(node.target)
                and isinstance(node.args[0], Node)
            ):
                # An in-place op's result is its first argument: one tensor, one spec.
                node.meta["spec"] = node.args[0].meta.get("spec")
                continue
            node.meta["spec"] = self._tree_spec(node.meta.get("val"), node, owner)
            if is_control_flow(node):
                for sub in submodules(gm, node):
                    self.run_graph(sub, owner or node)


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if not (t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)):
        t = t.contiguous()
    if t.untyped_storage().nbytes() != t.nbytes:
        t = t.clone()
    return t


def propagate_specs(
    ep: ExportedProgram,
    gm: GraphModule,
    sym_eval: SymShapeEvalPass | None = None,
    shared_state: frozenset[str] = frozenset(),
) -> None:
    """Set ``node.meta['spec']`` on every node of ``gm`` (the graph of ``ep``).

    ``shared_state``: buffers another method mutates (``share_mutable_buffers``); they
    are state here too, never constants, even where this method only reads them."""
    SpecPropagator(sym_eval).run_graph(gm)
    sig = ep.graph_signature
    mutated = (
        set(sig.buffers_to_mutate.values())
        | set(getattr(sig, "user_inputs_to_mutate", {}).values())
        | set(shared_state)
    )
    by_name = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        spec = node.meta.get("spec")
        if not isinstance(spec, TensorSpec):
            continue
        in_spec = by_name.get(node.name)
        if in_spec is None:
            continue
        kind, target = in_spec.kind, in_spec.target
        if kind == InputKind.USER_INPUT:
            spec.is_user_input = True
            continue
        data = None
        if target in ep.state_dict:
            data = ep.state_dict[target]
        elif target in ep.constants:
            data = ep.constants[target]
        if isinstance(data, torch.nn.Parameter):
            data = data.data
        spec.fqn = target
        if kind == InputKind.BUFFER and target in mutated:
            spec.is_mutable_buffer = True
            spec.storage = _contiguous(data) if isinstance(data, torch.Tensor) else None
            continue
        if isinstance(data, torch.Tensor):
            data = _contiguous(data)
            spec.const = True
            spec.storage = data
            spec.dim_order = dim_order_from_strides(tuple(data.stride()))
