"""Type promotion made explicit, and scalars where the schema wants tensors.

- ``add``/``sub``/``mul``/``div``/``minimum`` with tensors of mixed dtypes get
  ``_to_copy`` casts to the promoted dtype, so kernels see one dtype.
- A Python scalar passed for a ``Tensor`` argument becomes a 0-dim constant.
- A symbolic int/float/bool passed for a ``Tensor`` argument goes through
  ``aten.scalar_tensor``.
"""

from __future__ import annotations

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes
from torch.fx import GraphModule, Node

from pyexecutorch.exir.graph_utils import graph_modules, insert_call

aten = torch.ops.aten
_KIND = ELEMENTWISE_TYPE_PROMOTION_KIND

PROMOTING_OPS = {
    aten.add.Tensor: _KIND.DEFAULT,
    aten.mul.Tensor: _KIND.DEFAULT,
    aten.sub.Tensor: _KIND.DEFAULT,
    aten.div.Tensor: _KIND.INT_TO_FLOAT,
    aten.div.Tensor_mode: _KIND.DEFAULT,
    aten.minimum.default: _KIND.DEFAULT,
}


def _value(x):
    if isinstance(x, Node):
        v = x.meta.get("val")
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return torch.tensor(v.node.hint if v.node.hint is not None else 1)
        return v
    return x


def promote_mixed_types(gm: GraphModule, fake_mode) -> bool:
    changed = False
    for g in graph_modules(gm):
        for node in list(g.graph.nodes):
            if node.op != "call_function" or node.target not in PROMOTING_OPS or len(node.args) < 2:
                continue
            kind = PROMOTING_OPS[node.target]
            if node.target == aten.div.Tensor_mode and node.kwargs.get("rounding_mode") is None:
                kind = _KIND.INT_TO_FLOAT
            vals = [_value(a) for a in node.args[:2]]
            if not all(isinstance(v, (torch.Tensor, int, float, bool)) for v in vals):
                continue
            dtype = elementwise_dtypes(*vals, type_promotion_kind=kind)[1]
            new_args = list(node.args)
            for i, (arg, val) in enumerate(zip(node.args[:2], vals, strict=True)):
                if isinstance(arg, Node) and isinstance(val, torch.Tensor) and val.dtype != dtype:
                    if _fold_constant_cast(g, arg, dtype, fake_mode):
                        changed = True
                        continue
                    with g.graph.inserting_before(node):
                        cast = insert_call(
                            g.graph,
                            aten._to_copy.default,
                            (arg,),
                            {"dtype": dtype},
                            fake_mode=fake_mode,
                            like=node,
                        )
                    new_args[i] = cast
                    changed = True
            node.args = tuple(new_args)
    return changed


_OPMATH_FLOAT32 = {
    torch.bfloat16,
    torch.float8_e5m2,
    torch.float8_e4m3fn,
    torch.float8_e5m2fnuz,
    torch.float8_e4m3fnuz,
}


def _fold_constant_cast(g: GraphModule, node: Node, dtype: torch.dtype, fake_mode) -> bool:
    """A scalar constant made by :func:`scalars_to_tensors` next to bfloat16/float8
    tensors becomes float32 in place. Other scalars keep the official edge graph's
    form, their own dtype (int64, float32, bool) cast by a ``_to_copy`` node, which
    ``to_executorch`` folds."""
    if (
        node.op != "get_attr"
        or not node.target.startswith("_scalar_tensor_constant")
        or len(node.users) != 1
        or dtype not in _OPMATH_FLOAT32
    ):
        return False
    # Eager reads a Python scalar at float32 precision next to bfloat16/float8
    # tensors (it is never rounded to their type), and so do the kernels.
    dtype = torch.float32
    t = getattr(g, node.target).to(dtype)
    g.register_buffer(node.target, t, persistent=False)
    node.meta["val"] = fake_mode.from_tensor(t, static_shapes=True)
    return True


def _schema_tensor_args(op):
    return [
        (i, a) for i, a in enumerate(op._schema.arguments) if isinstance(a.type, torch.TensorType)
    ]


def scalars_to_tensors(gm: GraphModule, fake_mode) -> bool:
    """Python and symbolic scalars in ``Tensor`` argument slots become tensors."""
    changed = False
    sym_dtypes = {
        torch.SymInt: torch.int32,
        torch.SymFloat: torch.float32,
        torch.SymBool: torch.bool,
    }
    for g in graph_modules(gm):
        counter = 0
        for node in list(g.graph.nodes):
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            slots = _schema_tensor_args(node.target)
            if not slots:
                continue
            args = list(node.args)
            kwargs = dict(node.kwargs)
            touched = False
            for i, arg in slots:
                if arg.kwarg_only or i >= len(args):
                    if arg.name not in kwargs:
                        continue
                    box, key = kwargs, arg.name
                else:
                    box, key = args, i
                value = box[key]
                if isinstance(value, (bool, int, float)) and not isinstance(value, torch.Tensor):
                    name = f"_scalar_tensor_constant{counter}"
                    while hasattr(g, name):
                        counter += 1
                        name = f"_scalar_tensor_constant{counter}"
                    counter += 1
                    g.register_buffer(name, torch.tensor(value), persistent=False)
                    with g.graph.inserting_before(node):
                        const = g.graph.get_attr(name)
                    const.meta["val"] = fake_mode.from_tensor(getattr(g, name), static_shapes=True)
                    box[key] = const
                    touched = True
                elif isinstance(value, Node) and type(value.meta.get("val")) in sym_dtypes:
                    dtype = sym_dtypes[type(value.meta["val"])]
                    with g.graph.inserting_before(node):
                        t = insert_call(
                            g.graph,
                            aten.scalar_tensor.default,
                            (value,),
                            {"dtype": dtype},
                            fake_mode=fake_mode,
                            like=node,
                        )
                    box[key] = t
                    touched = True
            if touched:
                node.args = tuple(args)
                node.kwargs = kwargs
                changed = True
    return changed
