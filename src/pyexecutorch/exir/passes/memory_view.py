"""Copy-free reshapes: ``view_copy`` (and ``squeeze_copy``/``unsqueeze_copy``,
which only reshape) become ``memory.view`` where that is legal.

A view shares its base's planned memory, so the copy and its buffer disappear.
Legal when the base is a contiguous tensor of the same dtype whose data the
view fits, the view has the default dim order, and the view is not itself a
graph output (an output must own its memory, as in the official exporter).
The view's spec points at its base (``storage_base``); memory planning keeps
the base alive while any view is used and gives the view the base's offset.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from pyexecutorch.exir import memory
from pyexecutorch.exir.graph_utils import graph_modules
from pyexecutorch.exir.tensor_spec import TensorSpec

aten = torch.ops.aten

_RESHAPES = {
    aten.view_copy.default,
    aten.squeeze_copy.default,
    aten.squeeze_copy.dim,
    aten.squeeze_copy.dims,
    aten.unsqueeze_copy.default,
}


def _contiguous(spec: TensorSpec) -> bool:
    return tuple(spec.dim_order) == tuple(range(len(spec.shape)))


def _root(node: Node) -> Node:
    while node.op == "call_function" and node.target is memory.view:
        node = node.args[0]
    return node


def _view_spec(base: TensorSpec, spec: TensorSpec) -> TensorSpec:
    view = TensorSpec(
        dtype=spec.dtype,
        shape=spec.shape,
        shape_dynamism=spec.shape_dynamism,
        requires_grad=spec.requires_grad,
    )
    view.storage_base = base
    view.storage_base_offset = 0
    if base.const and base.storage is not None:
        view.const = True
        view.storage = base.storage.reshape(spec.shape)
        view.fqn = base.fqn
    return view


def _static_spec(node: Node) -> TensorSpec | None:
    """A view's spec from its value when spec propagation has not run on it (the
    official pass is also run on graphs whose only specs are the inputs')."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape):
        return None
    return TensorSpec.from_tensor(val)


def replace_view_copies(gm: GraphModule) -> int:
    """Returns the number of copies replaced."""
    replaced = 0
    for g in graph_modules(gm):
        for node in list(g.graph.nodes):
            if node.op != "call_function" or node.target not in _RESHAPES:
                continue
            if any(u.op == "output" for u in node.users):
                continue
            base = node.args[0]
            if not isinstance(base, Node):
                continue
            base = _root(base)
            if base.op == "placeholder" and g is not gm:
                continue  # a branch input aliases the caller's value: not planned here
            bspec, spec = base.meta.get("spec"), node.meta.get("spec") or _static_spec(node)
            if not isinstance(bspec, TensorSpec) or not isinstance(spec, TensorSpec):
                continue
            if bspec.dtype != spec.dtype or not _contiguous(bspec) or not _contiguous(spec):
                continue
            if spec.nbytes() > bspec.nbytes() or bspec.shape_dynamism != spec.shape_dynamism:
                continue
            if bspec.storage_base is not None:
                continue
            if node.target == aten.view_copy.default:
                size = node.args[1]
            elif spec.is_static_shape_tensor:
                size = list(spec.shape)
            else:
                continue  # a dynamic squeeze/unsqueeze would need symbolic sizes
            node.target = memory.view
            node.args = (base, size)
            node.kwargs = {}
            node.meta["spec"] = _view_spec(bspec, spec)
            replaced += 1
    return replaced
