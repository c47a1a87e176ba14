"""Small cleanups before the edge dialect: packets to overloads, no-op copies,
empty ``cat`` inputs."""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from pyexecutorch.exir.graph_utils import graph_modules

aten = torch.ops.aten

_PACKETS = {
    aten.sym_size: aten.sym_size.int,
    aten.sym_stride: aten.sym_stride.int,
    aten.sym_numel: aten.sym_numel.default,
}


def _static(t) -> bool:
    return all(isinstance(s, int) for s in t.shape)


def is_noop(node: Node) -> bool:
    """A copy that changes nothing: same dtype, layout and shape."""
    target = node.target
    if target not in (aten._to_copy.default, aten.slice_copy.Tensor, aten.alias_copy.default):
        return False
    src = node.args[0]
    if not isinstance(src, Node):
        return False
    a, b = src.meta.get("val"), node.meta.get("val")
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    if a is b:
        return True
    if target == aten.alias_copy.default:
        return False  # a real copy: the result must not alias its input
    if not (_static(a) and _static(b)):
        return False
    if target == aten._to_copy.default:
        return (
            a.dtype == b.dtype
            and a.device == b.device
            and a.shape == b.shape
            and a.stride() == b.stride()
        )
    return a.shape == b.shape  # full-range slice


def replace_packets(gm: GraphModule) -> bool:
    """``sym_size``/``sym_stride``/``sym_numel`` packets to their overloads."""
    changed = False
    for g in graph_modules(gm):
        for node in g.graph.nodes:
            if node.op == "call_function" and node.target in _PACKETS:
                node.target = _PACKETS[node.target]
                changed = True
    return changed


def normalize(gm: GraphModule) -> bool:
    changed = False
    for g in graph_modules(gm):
        for node in list(g.graph.nodes):
            if node.op != "call_function":
                continue
            if node.target in _PACKETS:
                node.target = _PACKETS[node.target]
                changed = True
            if is_noop(node) and all(u.op != "output" for u in node.users):
                node.replace_all_uses_with(node.args[0])
                g.graph.erase_node(node)
                changed = True
            elif node.target == aten.cat.default:
                inputs = node.args[0]
                kept = [
                    x
                    for x in inputs
                    if not (
                        isinstance(x, Node)
                        and isinstance(x.meta.get("val"), torch.Tensor)
                        and _static(x.meta["val"])
                        and x.meta["val"].numel() == 0
                        and x.meta["val"].dim() <= 1
                    )
                ]
                if len(kept) != len(inputs) and kept:
                    node.args = (kept, *node.args[1:])
                    changed = True
    return changed


def _same_layout(a, b) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.dtype == b.dtype
        and _static(a)
        and _static(b)
        and tuple(a.shape) == tuple(b.shape)
        and tuple(a.stride()) == tuple(b.stride())
    )


def remove_redundant_copies(gm: GraphModule) -> int:
    """Drop copies that change nothing: identity ``expand_copy``, ``clone`` /
    ``_clone_dim_order`` / ``alias_copy`` / ``_to_dim_order_copy`` keeping dtype
    and layout.  In a functional graph a copy is only needed to give a value
    its own memory, which matters for placeholders (a mutable buffer's old
    value) and graph outputs; those are kept."""
    from pyexecutorch.exir.dialects import dim_order_ops

    copies = {
        aten.expand_copy.default,
        aten.clone.default,
        aten.alias_copy.default,
        aten._to_copy.default,
        dim_order_ops.clone_dim_order(),
        dim_order_ops.to_dim_order_copy(),
    }
    removed = 0
    for g in graph_modules(gm):
        for node in list(g.graph.nodes):
            if node.op != "call_function" or node.target not in copies:
                continue
            src = node.args[0]
            if not isinstance(src, Node) or src.op == "placeholder":
                continue
            if any(u.op == "output" for u in node.users):
                continue
            if not _same_layout(src.meta.get("val"), node.meta.get("val")):
                continue
            node.replace_all_uses_with(src)
            g.graph.erase_node(node)
            removed += 1
    return removed
