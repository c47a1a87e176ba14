"""Small helpers over fx graphs shared by the passes."""

from __future__ import annotations

import copy
import operator
from collections.abc import Iterator
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.exported_program import ExportGraphSignature
from torch.fx import GraphModule, Node
from torch.utils import _pytree as pytree

HOP_COND = torch.ops.higher_order.cond
HOP_WHILE = torch.ops.higher_order.while_loop
HOP_MAP = torch.ops.higher_order.map_impl
HOP_SCAN = getattr(torch.ops.higher_order, "scan", None)

# Position of the submodule arguments of each control-flow operator.
_SUBMODULE_ARGS: dict[Any, tuple[int, ...]] = {HOP_COND: (1, 2), HOP_WHILE: (0, 1), HOP_MAP: (0,)}
if HOP_SCAN is not None:
    _SUBMODULE_ARGS[HOP_SCAN] = (0,)


def is_control_flow(node: Node) -> bool:
    return node.op == "call_function" and node.target in _SUBMODULE_ARGS


def submodule_nodes(node: Node) -> list[Node]:
    """The ``get_attr`` nodes naming the submodules of a control-flow node."""
    return [node.args[i] for i in _SUBMODULE_ARGS.get(node.target, ())]


def submodules(gm: GraphModule, node: Node) -> list[GraphModule]:
    """The graph modules a control-flow node runs, in emission order."""
    return [getattr(gm, n.target) for n in submodule_nodes(node)]


def graph_modules(gm: GraphModule) -> Iterator[GraphModule]:
    """``gm`` and, recursively, every control-flow submodule it runs."""
    yield gm
    for node in gm.graph.nodes:
        if is_control_flow(node):
            for sub in submodules(gm, node):
                yield from graph_modules(sub)


def nodes_with_owner(
    gm: GraphModule, owner: Node | None = None
) -> Iterator[tuple[GraphModule, Node, Node | None]]:
    """Every node of ``gm`` and its submodules with the top-level control-flow
    node that runs it (None at top level), for error messages."""
    for node in list(gm.graph.nodes):
        yield gm, node, owner
        if is_control_flow(node):
            for sub in submodules(gm, node):
                yield from nodes_with_owner(sub, owner or node)


def call_nodes(gm: GraphModule) -> Iterator[tuple[GraphModule, Node]]:
    """Every ``call_function`` node of ``gm`` and its submodules."""
    for g in graph_modules(gm):
        for node in g.graph.nodes:
            if node.op == "call_function":
                yield g, node


def fake_mode_of(gm: GraphModule):
    """The fake tensor mode the graph's ``meta['val']`` belong to (or a new one)."""
    from torch._guards import detect_fake_mode

    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    vals = [v for v in pytree.tree_leaves(vals) if isinstance(v, torch.Tensor)]
    mode = detect_fake_mode(vals)
    if mode is None:
        for n in gm.graph.nodes:
            v = n.meta.get("val")
            for leaf in pytree.tree_leaves(v):
                if isinstance(leaf, torch.SymInt):
                    from torch._subclasses import FakeTensorMode

                    return FakeTensorMode(shape_env=leaf.node.shape_env, allow_non_fake_inputs=True)
        from torch._subclasses import FakeTensorMode

        mode = FakeTensorMode(allow_non_fake_inputs=True)
    return mode


def meta_val(x: Any) -> Any:
    return pytree.tree_map_only(Node, lambda n: n.meta.get("val"), x)


def record_output_values(gm: GraphModule) -> None:
    """Every graph's output node carries the values it returns (``meta["val"]``, a
    tuple), as the official edge graphs' do: code reading a graph's results finds them
    there."""
    for g in graph_modules(gm):
        out = g.graph.output_node()
        out.meta["val"] = meta_val(out.args[0])


_VIEW_OF_COPY: dict[Any, Any] = {}


def _view_of_copy(op: Any) -> Any:
    """``aten.slice.Tensor`` for ``aten.slice_copy.Tensor``; None for other operators."""
    if op not in _VIEW_OF_COPY:
        found = None
        if isinstance(op, torch._ops.OpOverload) and op.namespace == "aten":
            name = op._schema.name.split("::")[1]
            packet = getattr(torch.ops.aten, name[: -len("_copy")], None)
            if name.endswith("_copy") and packet is not None:
                view = getattr(packet, op._overloadname, None)
                args = view._schema.arguments if view is not None else ()
                if args and args[0].alias_info is not None and not args[0].alias_info.is_write:
                    found = view
        _VIEW_OF_COPY[op] = found
    return _VIEW_OF_COPY[op]


def infer_val(fake_mode, target, args, kwargs) -> Any:
    """Run ``target`` on the fake values of its arguments."""
    a, k = meta_val((args, kwargs))
    view = _view_of_copy(target)
    with fake_mode:
        if view is not None:
            # Some *_copy kernels read storage_offset(), which symbolic sizes forbid
            # (slice_copy of a dynamic-batch input); the view then a contiguous copy
            # is the same value.
            return pytree.tree_map_only(
                torch.Tensor,
                lambda t: t.clone(memory_format=torch.contiguous_format),
                view(*a, **k),
            )
        return target(*a, **k)


def insert_call(
    graph: torch.fx.Graph,
    target,
    args: tuple,
    kwargs: dict | None = None,
    *,
    fake_mode=None,
    like: Node | None = None,
    val: Any = None,
) -> Node:
    """A new ``call_function`` node at the current insertion point, with a ``val``."""
    kwargs = kwargs or {}
    node = graph.call_function(target, args, kwargs)
    if like is not None:
        for key in (
            "stack_trace",
            "nn_module_stack",
            "source_fn_stack",
            "from_node",
            "debug_handle",
        ):
            if key in like.meta:
                node.meta[key] = like.meta[key]
    if val is None and fake_mode is not None:
        val = infer_val(fake_mode, target, args, kwargs)
    if val is not None:
        node.meta["val"] = val
    return node


def _layout(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        try:
            return (v.dtype, tuple(v.shape), tuple(v.stride()))
        except Exception:
            return None
    if isinstance(v, (list, tuple)):
        return tuple(_layout(x) for x in v)
    return None


def refresh_layouts(gm: GraphModule, fake_mode, dirty: set[Node]) -> None:
    """Recompute ``meta['val']`` downstream of ``dirty`` nodes whose strides changed.

    Replacing a view with a copy makes its result contiguous; ops after it
    inherit the new layout (TensorIterator keeps its inputs' memory format).
    Control-flow and data-dependent nodes keep their values.
    """
    if not dirty:
        return
    for node in gm.graph.nodes:
        if node in dirty or node.op != "call_function":
            continue
        if not any(a in dirty for a in node.all_input_nodes):
            continue
        target = node.target
        if is_control_flow(node) or not callable(target):
            continue
        if (
            isinstance(target, torch._ops.OpOverload)
            and torch.Tag.data_dependent_output in target.tags
        ):
            continue
        old = node.meta.get("val")
        try:
            new = infer_val(fake_mode, target, node.args, node.kwargs)
        except Exception:
            continue
        if _layout(new) != _layout(old):
            node.meta["val"] = new
            dirty.add(node)


def copy_graph_module(gm: GraphModule) -> GraphModule:
    """A copy of ``gm`` (and its submodules) with fresh nodes and shallow-copied meta.

    Tensors in ``meta['val']`` and attributes are shared, which is what the
    passes need: they rewrite nodes, never the tensors.
    """
    new_graph = torch.fx.Graph()
    val_map: dict[Node, Node] = {}
    out = new_graph.graph_copy(gm.graph, val_map, return_output_node=True)
    if out is not None:
        new_graph.output(out[0] if isinstance(out, tuple) else out)
    for old, new in val_map.items():
        new.meta = dict(old.meta)
        # graph_copy renames nodes whose names shadow Python builtins (``input`` ->
        # ``input_1``); the copy must keep the names the signature refers to.
        if new.name != old.name:
            new.name = old.name
    for old_out in gm.graph.nodes:
        if old_out.op == "output":
            for new_out in new_graph.nodes:
                if new_out.op == "output":
                    new_out.meta = dict(old_out.meta)
    root = torch.nn.Module()
    for name, child in gm.named_children():
        setattr(root, name, copy_graph_module(child) if isinstance(child, GraphModule) else child)
    for name, buf in gm.named_buffers(recurse=False):
        root.register_buffer(name, buf)
    for name, p in gm.named_parameters(recurse=False):
        root.register_parameter(name, p)
    for node in gm.graph.nodes:
        if node.op == "get_attr" and not hasattr(root, node.target.split(".")[0]):
            obj = gm
            for part in node.target.split("."):
                obj = getattr(obj, part)
            setattr(root, node.target, obj)
    new_gm = GraphModule(root, new_graph, gm.__class__.__name__)
    new_gm.meta = dict(gm.meta)
    return new_gm


def updated_signature(old: ExportGraphSignature, gm: GraphModule) -> ExportGraphSignature:
    """``old`` with argument names following ``gm``'s placeholders and outputs."""
    from torch.export.graph_signature import ConstantArgument, InputSpec, OutputSpec

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(old.input_specs):
        raise RuntimeError(
            f"graph has {len(placeholders)} inputs but the signature lists {len(old.input_specs)}"
        )
    inputs = []
    for node, spec in zip(placeholders, old.input_specs, strict=True):
        arg = spec.arg if isinstance(spec.arg, ConstantArgument) else type(spec.arg)(name=node.name)
        inputs.append(InputSpec(spec.kind, arg, spec.target, spec.persistent))
    outs = pytree.tree_leaves(gm.graph.output_node().args[0])
    if len(outs) != len(old.output_specs):
        raise RuntimeError(
            f"graph has {len(outs)} outputs but the signature lists {len(old.output_specs)}"
        )
    outputs = []
    for node, spec in zip(outs, old.output_specs, strict=True):
        if isinstance(spec.arg, ConstantArgument) or not isinstance(node, Node):
            arg = spec.arg
        else:
            arg = type(spec.arg)(name=node.name)
        outputs.append(OutputSpec(spec.kind, arg, spec.target))
    return ExportGraphSignature(input_specs=inputs, output_specs=outputs)


def rebuild(
    ep: ExportedProgram,
    gm: GraphModule,
    signature: ExportGraphSignature | None = None,
    *,
    constants: dict | None = None,
    state_dict: dict | None = None,
) -> ExportedProgram:
    """A new ExportedProgram around ``gm`` with ``ep``'s other fields.

    Built without torch's verifier: edge graphs hold ``dim_order_ops`` and
    executorch graphs hold out variants and ``memory`` markers, which the
    ATen verifier rejects (the official exporter swaps graphs into existing
    programs for the same reason).
    """
    sig = signature if signature is not None else updated_signature(ep.graph_signature, gm)
    new_ep = copy.copy(ep)
    new_ep._graph_module = gm
    new_ep._graph_signature = sig
    if constants is not None:
        new_ep._constants = constants
    if state_dict is not None:
        new_ep._state_dict = state_dict
    return new_ep


def getitem_users(node: Node) -> dict[int, Node]:
    return {
        u.args[1]: u for u in node.users if u.op == "call_function" and u.target is operator.getitem
    }


def is_inplace(target: Any) -> bool:
    """Whether ``target`` is an operator that mutates its first argument (``add_``, ``copy_``)
    rather than writing an out argument."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    args = target._schema.arguments
    return (
        bool(args)
        and args[0].alias_info is not None
        and args[0].alias_info.is_write
        and not args[0].is_out
    )
