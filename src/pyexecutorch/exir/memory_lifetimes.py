"""Lifetimes for memory planning: the step at which each planned tensor is first written
and last read, over the whole method, control-flow submodules included (see
:mod:`pyexecutorch.exir.memory_planning` for the conventions), and the in-place reuse of an
elementwise operator's input by its output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export.graph_signature import ExportGraphSignature
from torch.fx import GraphModule, Node
from torch.utils import _pytree as pytree

from pyexecutorch.exir import memory
from pyexecutorch.exir.graph_utils import HOP_COND, HOP_MAP, HOP_WHILE, is_control_flow, submodules
from pyexecutorch.exir.tensor_spec import ALIGNMENT, TensorSpec, aligned

# --------------------------------------------------------------------------------------
# Lifetimes


@dataclass
class PlanItem:
    """One tensor to place: its spec, aligned size and inclusive lifetime."""

    spec: TensorSpec
    size: int
    start: int
    end: int
    order: int = 0  # first appearance in the method, for stable tie-breaking
    # The map body whose own plan places it (None: the method's), see memory_planning.
    body: GraphModule | None = None


@dataclass
class _ControlFlow:
    node: Node
    kind: Any
    start: int
    end: int
    subgraphs: list[GraphModule]


@dataclass
class Lifetimes:
    items: list[PlanItem]
    views: list[TensorSpec]
    end: int
    # Each map body and the map body it sits in (None: the method).
    bodies: dict[GraphModule, GraphModule | None] = field(default_factory=dict)


def specs_of(x: Any) -> list[TensorSpec]:
    return [s for s in pytree.tree_leaves(x) if isinstance(s, TensorSpec)]


def node_specs(node: Any) -> list[TensorSpec]:
    if not isinstance(node, Node):
        return []
    return specs_of(node.meta.get("spec"))


# Out-variant kernels that compute out[i] from their inputs' element i in one
# pass, so ``out`` may be the memory of a same-shaped, same-dtype input that
# dies at the call (the tensor is "updated in place").
_ELEMENTWISE_NAMES = """
abs acos acosh asin asinh atan atanh ceil cos cosh erf exp expm1 floor log log10 log1p log2 neg
reciprocal relu round rsqrt sigmoid sign sin sinh sqrt tan tanh trunc gelu hardtanh hardswish
hardsigmoid leaky_relu elu silu clamp bitwise_not logical_not pow add sub mul div remainder fmod
maximum minimum atan2 bitwise_and bitwise_or bitwise_xor logical_and logical_or logical_xor where
masked_fill rsub frac
""".split()


def _elementwise_ops() -> frozenset:
    ops = set()
    for name in _ELEMENTWISE_NAMES:
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if any(a.is_out for a in op._schema.arguments):
                ops.add(op)
    return frozenset(ops)


# Multi-output ops whose first output is elementwise in their first input.
_FIRST_OUTPUT_ELEMENTWISE = frozenset({torch.ops.aten._native_batch_norm_legit_no_training.out})

ELEMENTWISE_OUT_OPS = _elementwise_ops() | _FIRST_OUTPUT_ELEMENTWISE


class _LifetimeWalker:
    def __init__(self) -> None:
        self.counter = 0
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.specs: dict[int, TensorSpec] = {}
        self.aliases: set[int] = set()  # branch inputs: the caller's values, not planned here
        self.flows: list[_ControlFlow] = []
        self.user_inputs: set[int] = set()
        # Every top-level placeholder's specs: without a graph signature, parameters
        # are graph inputs like any other.
        self.inputs: set[int] = set()
        self.outputs: set[int] = set()
        self.mutable: set[int] = set()
        self.ops: list[tuple[int, Node]] = []  # (index, node) of out-variant calls
        # The map body being walked, the one each tensor is first seen in, and the
        # nesting of map bodies.
        self.body: GraphModule | None = None
        self.owner: dict[int, GraphModule | None] = {}
        self.bodies: dict[GraphModule, GraphModule | None] = {}

    def touch(self, spec: TensorSpec, idx: int) -> None:
        key = id(spec)
        if key not in self.specs:
            self.specs[key] = spec
            self.owner[key] = self.body
            self.first[key] = idx
            self.last[key] = idx
            return
        if idx < self.first[key]:
            self.first[key] = idx
        if idx > self.last[key]:
            self.last[key] = idx

    def walk(self, gm: GraphModule, top: bool, kind: Any = None, n_planned_inputs: int = 0) -> None:
        position = 0
        for node in gm.graph.nodes:
            idx = self.counter
            self.counter += 1
            op = node.op
            if op == "placeholder":
                planned_here = top or position < n_planned_inputs
                position += 1
                for s in node_specs(node):
                    if not planned_here:
                        self.aliases.add(id(s))
                        continue
                    self.touch(s, 0 if top else idx)
                    if top:
                        self.inputs.add(id(s))
                    if top and s.is_user_input:
                        self.user_inputs.add(id(s))
                    if top and s.is_mutable_buffer:
                        self.mutable.add(id(s))
                continue
            if op == "get_attr":
                continue
            if op == "output":
                for s in _node_specs_tree(node.args[0]):
                    self.touch(s, idx)
                    if top:
                        self.outputs.add(id(s))
                continue
            if op != "call_function":
                continue
            target = node.target
            if target is memory.alloc:
                continue  # its spec is the consumer's; placed when the consumer runs
            if is_control_flow(node):
                flow = _ControlFlow(node, target, idx, idx, submodules(gm, node))
                self.flows.append(flow)
                # A map body plans all its inputs, the mapped slices and the operands
                # (as the official planner: the operands' memory goes unused).
                n_planned = len(node.args[1]) + len(node.args[2]) if target is HOP_MAP else 0
                outer = self.body
                for sub in flow.subgraphs:
                    if target is HOP_MAP:
                        self.bodies.setdefault(sub, outer)
                        self.body = sub
                    self.walk(sub, False, target, n_planned)
                    self.body = outer
                flow.end = self.counter
                self.counter += 1
                for arg in arg_nodes(node):
                    for s in node_specs(arg):
                        self.touch(s, flow.start)
                        self.touch(s, flow.end)
                for s in node_specs(node):
                    self.touch(s, flow.start)
                continue
            for arg in arg_nodes(node):
                for s in node_specs(arg):
                    self.touch(s, idx)
            if target is memory.view:
                spec = node.meta.get("spec")
                if isinstance(spec, TensorSpec):
                    self.touch(spec, idx)
                continue
            for s in node_specs(node):
                self.touch(s, idx)
            if target in ELEMENTWISE_OUT_OPS:
                self.ops.append((idx, node))


def _node_specs_tree(args: Any) -> list[TensorSpec]:
    out = []
    for leaf in pytree.tree_leaves(args):
        out += node_specs(leaf)
    return out


def arg_nodes(node: Node) -> list[Node]:
    return [a for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, Node)]


def _sub_outputs(sub: GraphModule) -> list[Any]:
    return list(pytree.tree_leaves(sub.graph.output_node().args[0]))


def storage_root(spec: TensorSpec) -> tuple[TensorSpec, int]:
    offset = 0
    while spec.storage_base is not None:
        offset += spec.storage_base_offset
        spec = spec.storage_base
    return spec, offset


def _extend_through_control_flow(
    w: _LifetimeWalker, first: dict[int, int], last: dict[int, int]
) -> None:
    """Lifetimes stretched across control flow: a branch's results, a loop body's state."""

    def extend(spec: TensorSpec, lo: int | None, hi: int | None) -> None:
        key = id(spec)
        if key not in first:
            return
        if lo is not None and lo < first[key]:
            first[key] = lo
        if hi is not None and hi > last[key]:
            last[key] = hi

    # Outer control flow first: its extensions feed the inner ones.
    for flow in w.flows:
        node = flow.node
        outs = node_specs(node)
        out_end = max([last.get(id(s), flow.end) for s in outs] + [flow.end])
        if flow.kind is HOP_COND:
            # Each branch's results are moved into the cond's results: they share
            # the results' memory (the branches never run together).
            operands = list(node.args[3])
            results = list(node.meta.get("spec") or [])
            for sub in flow.subgraphs:
                placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
                claimed: set[int] = set()
                for k, out in enumerate(_sub_outputs(sub)):
                    if not isinstance(out, Node):
                        continue
                    if out.op == "placeholder" and out in placeholders:
                        # A pass-through operand: the result aliases it.
                        j = placeholders.index(out)
                        if j < len(operands):
                            for s in node_specs(operands[j]):
                                extend(s, None, out_end)
                        continue
                    specs = node_specs(out)
                    result = results[k] if k < len(results) else None
                    if (
                        len(specs) == 1
                        and isinstance(result, TensorSpec)
                        and not specs[0].const
                        and specs[0].storage_base is None
                        and id(specs[0]) not in claimed
                        and specs[0].nbytes() <= result.nbytes()
                        and id(specs[0]) not in w.aliases
                    ):
                        claimed.add(id(specs[0]))
                        specs[0].storage_base = result
                        specs[0].storage_base_offset = 0
                        continue
                    for s in specs:
                        extend(s, flow.start, out_end)
        elif flow.kind is HOP_WHILE:
            # The body's results are copied into the loop state at the end of
            # each iteration; everything else lives within one iteration.
            for out in _sub_outputs(flow.subgraphs[-1]):
                for s in node_specs(out):
                    extend(s, None, flow.end)
        else:  # map: results are copied out at the end of each iteration
            for sub in flow.subgraphs:
                for out in _sub_outputs(sub):
                    for s in node_specs(out):
                        extend(s, None, flow.end)


def compute_lifetimes(
    gm: GraphModule,
    signature: ExportGraphSignature | None = None,
    *,
    alloc_graph_input: bool = True,
    alloc_graph_output: bool = True,
    alloc_mutable_buffers: bool = True,
    alignment: int = ALIGNMENT,
    reuse_inputs_in_place: bool = True,
) -> Lifetimes:
    w = _LifetimeWalker()
    w.walk(gm, True)
    end = w.counter
    first, last = w.first, w.last
    for key in w.outputs | w.mutable:
        last[key] = end
    for key in w.mutable:
        first[key] = 0
    _extend_through_control_flow(w, first, last)

    views = []
    items: list[PlanItem] = []
    by_id: dict[int, PlanItem] = {}
    pinned: set[int] = set()
    order = 0
    for key, spec in w.specs.items():
        if key in w.aliases or spec.const:
            continue
        # Every tensor's lifetime is known, planned here or not (the official
        # planner's convention; a caller-provided input lives from the start).
        spec.lifetime = [first[key], last[key]]
        if spec.storage_base is not None:
            views.append(spec)
            continue
        if key in w.inputs or key in w.mutable or key in w.outputs:
            pinned.add(key)
        if not alloc_graph_input and key in w.inputs and key not in w.mutable:
            continue
        if not alloc_graph_output and key in w.outputs:
            continue
        if not alloc_mutable_buffers and key in w.mutable:
            continue
        spec.alignment = alignment
        size = aligned(spec.nbytes(), alignment)
        it = PlanItem(spec, size, first[key], last[key], order, w.owner[key])
        items.append(it)
        by_id[key] = it
        order += 1
    # A view (or a branch result sharing its cond's result) keeps its base alive.
    for view in views:
        base, _ = storage_root(view)
        it = by_id.get(id(base))
        if it is None or id(view) not in first:
            continue
        it.start = min(it.start, first[id(view)])
        it.end = max(it.end, last[id(view)])
        view.lifetime = [first[id(view)], last[id(view)]]

    if reuse_inputs_in_place:
        items = _reuse_in_place(w, items, by_id, pinned, first, last)
    for it in items:
        it.spec.lifetime = [it.start, it.end]
    return Lifetimes(items, views, end, w.bodies)


def _same_symbolic_shape(arg: Node, node: Node) -> bool:
    a, b = arg.meta.get("val"), node.meta.get("val")
    if isinstance(b, (list, tuple)):
        b = b[0] if b else None
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    return [str(s) for s in a.shape] == [str(s) for s in b.shape]


def _reuse_in_place(w, items, by_id, pinned, first, last):
    """Let an elementwise op write into an input that dies at the op.

    The output's spec then shares the input's memory (``storage_base``) and
    the input's item is extended to the output's lifetime."""
    merged: set[int] = set()
    for idx, node in w.ops:
        out_specs = node_specs(node)
        if len(out_specs) != 1 and node.target not in _FIRST_OUTPUT_ELEMENTWISE:
            continue
        out = out_specs[0]
        args = node.args[:1] if node.target in _FIRST_OUTPUT_ELEMENTWISE else node.args
        out_item = by_id.get(id(out))
        if out_item is None or id(out) in merged or out_item.start != idx:
            continue
        for arg in args:
            if not isinstance(arg, Node):
                continue
            specs = node_specs(arg)
            if len(specs) != 1:
                continue
            src, offset = storage_root(specs[0])
            if offset or src is out:
                continue
            src_item = by_id.get(id(src))
            if src_item is None or id(src) in pinned or src_item.end != idx:
                continue
            if src_item.body is not out_item.body:
                continue  # planned in different regions
            a = specs[0]
            if (
                a.dtype != out.dtype
                or tuple(a.shape) != tuple(out.shape)
                or a.nbytes() != out.nbytes()
            ):
                continue
            if tuple(a.dim_order) != tuple(out.dim_order) or src_item.size != out_item.size:
                continue
            if a.shape_dynamism != out.shape_dynamism:
                continue
            if not out.is_static_shape_tensor and not _same_symbolic_shape(arg, node):
                continue  # equal bounds, but the sizes at run time could differ
            out.storage_base = src
            out.storage_base_offset = 0
            src_item.end = out_item.end
            merged.add(id(out))
            # The output's own aliases now resolve to ``src`` through it.
            by_id[id(out)] = src_item
            break
    if not merged:
        return items
    return [it for it in items if id(it.spec) not in merged]
