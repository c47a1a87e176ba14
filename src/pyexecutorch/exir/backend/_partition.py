"""Graph surgery for delegation: tagged nodes out, ``executorch_call_delegate`` in.

Each tag of a graph becomes a :class:`Partition`: its nodes, the values it
reads (inputs) and those read after it (outputs), and an edge program of its
own. After the backend has preprocessed it, :func:`replace_with_delegate` puts a
delegate call where the nodes were.
"""

from __future__ import annotations

import copy
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.exported_program import ModuleCallEntry, ModuleCallSignature
from torch.export.graph_signature import (
    ConstantArgument,
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    SymIntArgument,
    TensorArgument,
)
from torch.fx import GraphModule, Node
from torch.utils import _pytree as pytree

from pyexecutorch.exir.backend.lowered_module import (
    LoweredBackendModule,
    executorch_call_delegate,
    get_lowered_module_name,
)
from pyexecutorch.exir.backend.partitioner import DELEGATION_TAG, DelegationSpec
from pyexecutorch.exir.error import ExportError, source_location
from pyexecutorch.exir.graph_utils import is_control_flow, submodule_nodes

_CONSTANT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


class DelegationError(ExportError, RuntimeError):
    """A partitioner's tags cannot be turned into delegates (a ``RuntimeError``, as
    the official ``to_backend`` raises)."""


class UnsupportedBufferMutationError(DelegationError, AssertionError):
    """A delegate would own a mutable buffer whose new value the method also returns
    (an ``AssertionError`` too, as the official check)."""


class PartitionerChangedGraphError(DelegationError, AssertionError):
    """A partitioner changed the graph it was given instead of only tagging it (also
    an ``AssertionError``: the official check is an assert)."""


@dataclass
class Partition:
    """One tag's nodes in one graph module, ready to be lowered."""

    method: str
    tag: str
    spec: DelegationSpec
    owner: GraphModule  # the graph module holding the nodes (top level or a branch)
    top_level: bool
    nodes: list[Node]  # every node replaced, in graph order
    inputs: list[Node]  # owner values passed to the delegate, in order
    outputs: list[Node]  # owner values the delegate returns, in order
    consumed: dict[str, InputSpec] = field(default_factory=dict)  # placeholder name -> spec
    # Mutable buffers the delegate owns: the node computing each one's new value -> its name.
    mutations: dict[Node, str] = field(default_factory=dict)
    program: ExportedProgram | None = None


def _is_tuple_valued(node: Node) -> bool:
    return isinstance(node.meta.get("val"), (list, tuple))


def _signature_by_name(ep: ExportedProgram) -> dict[str, InputSpec]:
    return {s.arg.name: s for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")}


def _mutated_targets(ep: ExportedProgram) -> set[str]:
    return {
        s.target
        for s in ep.graph_signature.output_specs
        if s.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)
    }


def _buffer_updates(ep: ExportedProgram) -> tuple[dict[str, Node], set[str]]:
    """Each mutated buffer's name -> the node computing its new value, and the names of
    the nodes the method also returns as user outputs."""
    output = ep.graph.output_node()
    values = list(pytree.tree_leaves(output.args[0]))
    updates, returned = {}, set()
    for value, spec in zip(values, ep.graph_signature.output_specs, strict=False):
        if not isinstance(value, Node):
            continue
        if spec.kind == OutputKind.BUFFER_MUTATION:
            updates[spec.target] = value
        elif spec.kind == OutputKind.USER_OUTPUT:
            returned.add(value.name)
    return updates, returned


def _fetch(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _describe(node: Node) -> str:
    target = (
        node.target if node.op != "call_function" else getattr(node.target, "__name__", node.target)
    )
    return f"{node.name} ({target}) from {source_location(node)}"


def tagged_groups(gm: GraphModule, tags: dict[str, DelegationSpec]) -> dict[str, list[Node]]:
    """``{tag: nodes}`` of ``gm`` for the tags of ``tags``, in graph order."""
    groups: dict[str, list[Node]] = {}
    for node in gm.graph.nodes:
        tag = node.meta.get(DELEGATION_TAG)
        if tag is None or tag not in tags:
            continue
        if node.op == "output":
            raise DelegationError(
                f"the output node of the graph is tagged {tag!r}; tag only the nodes that compute"
            )
        groups.setdefault(tag, []).append(node)
    return groups


def make_partition(
    method: str,
    tag: str,
    spec: DelegationSpec,
    owner: GraphModule,
    tagged: list[Node],
    ep: ExportedProgram,
    top_level: bool,
) -> Partition | None:
    """The :class:`Partition` of ``tagged`` nodes, with its edge program; ``None``
    if the tag holds no operator."""
    members: set[Node] = set()
    by_name = _signature_by_name(ep) if top_level else {}
    mutated = _mutated_targets(ep) if top_level else set()
    consumed: dict[str, InputSpec] = {}
    lifted: list[Node] = []  # tagged tensor get_attr nodes, lifted into the partition's constants
    for node in tagged:
        if node.op == "call_function":
            members.add(node)
    if not members:
        return None
    # The results of a tagged multi-output node are read through getitem nodes: take them too.
    for node in list(members):
        if _is_tuple_valued(node):
            for user in node.users:
                if user.op == "call_function" and user.target is operator.getitem:
                    members.add(user)
    updates, returned = _buffer_updates(ep) if top_level else ({}, set())
    owned: dict[Node, str] = {}
    for node in tagged:
        users_inside = all(u in members for u in node.users)
        if node.op == "placeholder":
            spec_in = by_name.get(node.name)
            if (
                spec_in is not None
                and spec_in.kind in _CONSTANT_KINDS
                and spec_in.target not in mutated
                and users_inside
                and node.users
            ):
                consumed[node.name] = spec_in
                members.add(node)
            elif (
                spec_in is not None
                and spec_in.kind == InputKind.BUFFER
                and updates.get(spec_in.target) in members
                and users_inside
            ):
                # A mutable buffer read and updated only inside: the delegate owns it.
                update = updates[spec_in.target]
                if update.name in returned:
                    raise UnsupportedBufferMutationError(
                        f"method {method!r}, tag {tag!r}: buffer {spec_in.target!r} would live "
                        f"in the delegate, but its new value {_describe(update)} is also "
                        "returned by the method; leave the buffer (or the update) untagged"
                    )
                consumed[node.name] = spec_in
                members.add(node)
                owned[update] = spec_in.target
        elif node.op == "get_attr":
            if isinstance(_fetch(owner, node.target), torch.Tensor) and users_inside and node.users:
                lifted.append(node)
                members.add(node)
    order = [n for n in owner.graph.nodes if n in members]
    _check_convex(tag, order, members)

    inputs: list[Node] = []
    seen: set[Node] = set()
    copied_attrs: list[Node] = []
    for node in order:
        for arg in node.all_input_nodes:
            if arg in members or arg in seen:
                continue
            seen.add(arg)
            if arg.op == "get_attr" and not isinstance(_fetch(owner, arg.target), torch.Tensor):
                copied_attrs.append(arg)  # a branch of a tagged control-flow node
            else:
                inputs.append(arg)
    # A buffer update the delegate owns leaves through no output (only the method's
    # output node, which loses it, reads it).
    outputs = [
        n
        for n in order
        if n.op != "placeholder"
        and any(u not in members and not (n in owned and u.op == "output") for u in n.users)
    ]
    for node in outputs:
        if _is_tuple_valued(node):
            raise DelegationError(
                f"method {method!r}, tag {tag!r}: node {_describe(node)} returns several values and is "
                "used outside the partition as a whole; tag its users as well"
            )
    part = Partition(method, tag, spec, owner, top_level, order, inputs, outputs, consumed, owned)
    part.program = _partition_program(part, ep, lifted, copied_attrs)
    return part


def _check_convex(tag: str, order: list[Node], members: set[Node]) -> None:
    """No path may leave the partition and come back into it."""
    if not order:
        return
    graph = order[0].graph
    reached: dict[Node, Node] = {}  # outside node -> the partition node it depends on
    started = False
    for node in graph.nodes:
        if node is order[0]:
            started = True
        if not started:
            continue
        if node in members:
            for arg in node.all_input_nodes:
                if arg in reached:
                    raise DelegationError(
                        f"tag {tag!r} does not form one piece: {_describe(node)} depends on "
                        f"{_describe(arg)}, which is outside the partition but uses "
                        f"{reached[arg].name} from inside it. Tag the nodes in between too, or "
                        "split them into two tags"
                    )
            continue
        for arg in node.all_input_nodes:
            if arg in members:
                reached[node] = arg
                break
            if arg in reached:
                reached[node] = reached[arg]
                break


def _argument(node: Node) -> Any:
    val = node.meta.get("val")
    if isinstance(val, torch.SymInt):
        return SymIntArgument(name=node.name)
    if val is None or isinstance(val, (int, float, bool, str)):
        return ConstantArgument(name=node.name, value=val)
    return TensorArgument(name=node.name)


def _partition_program(
    part: Partition, ep: ExportedProgram, lifted: list[Node], copied_attrs: list[Node]
) -> ExportedProgram:
    graph = torch.fx.Graph()
    root = torch.nn.Module()
    env: dict[Node, Node] = {}
    input_specs: list[InputSpec] = []
    state_dict: dict[str, Any] = {}
    constants: dict[str, Any] = {}

    for node in part.nodes:
        if node.op == "placeholder":
            spec = part.consumed[node.name]
            new = graph.placeholder(node.name)
            new.meta = copy.copy(node.meta)
            new.meta.pop(DELEGATION_TAG, None)
            env[node] = new
            input_specs.append(
                InputSpec(spec.kind, TensorArgument(new.name), spec.target, spec.persistent)
            )
            if spec.target in ep.state_dict:
                state_dict[spec.target] = ep.state_dict[spec.target]
            elif spec.target in ep.constants:
                constants[spec.target] = ep.constants[spec.target]
    for node in lifted:
        new = graph.placeholder(f"c_{node.name}")
        new.meta = copy.copy(node.meta)
        new.meta.pop(DELEGATION_TAG, None)
        tensor = _fetch(part.owner, node.target)
        if "val" not in new.meta:
            new.meta["val"] = tensor
        env[node] = new
        target = f"{part.tag}.{node.target}"
        input_specs.append(
            InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(new.name), target, None)
        )
        constants[target] = tensor
    for node in part.inputs:
        new = graph.placeholder(node.name)
        new.meta = copy.copy(node.meta)
        new.meta.pop(DELEGATION_TAG, None)
        env[node] = new
        input_specs.append(InputSpec(InputKind.USER_INPUT, _argument(new), None, None))
    for node in copied_attrs:
        setattr(root, node.target.replace(".", "_"), _fetch(part.owner, node.target))
        new = graph.get_attr(node.target.replace(".", "_"))
        new.meta = copy.copy(node.meta)
        env[node] = new
    for node in part.nodes:
        if node in env:
            continue
        new = graph.node_copy(node, lambda n: env[n])
        new.meta = copy.copy(node.meta)
        new.meta.pop(DELEGATION_TAG, None)
        env[node] = new
    outs = tuple(env[n] for n in part.outputs)
    updates = tuple(env[n] for n in part.mutations)
    graph.output(updates + outs)  # buffer updates first, as export orders them
    gm = GraphModule(root, graph, "DelegatedPartition")
    user_inputs = [env[n] for n in part.inputs]
    output_specs = [
        OutputSpec(OutputKind.BUFFER_MUTATION, _argument(env[n]), fqn)
        for n, fqn in part.mutations.items()
    ]
    output_specs += [OutputSpec(OutputKind.USER_OUTPUT, _argument(n), None) for n in outs]
    signature = ExportGraphSignature(input_specs, output_specs)
    in_spec = pytree.tree_flatten((tuple(user_inputs), {}))[1]
    out_spec = pytree.tree_flatten(outs)[1]
    program = copy.copy(ep)
    program._graph_module = gm
    program._graph_signature = signature
    program._state_dict = state_dict
    program._constants = constants
    program._module_call_graph = [
        ModuleCallEntry("", ModuleCallSignature([], [], in_spec, out_spec))
    ]
    program._example_inputs = None
    return program


def _max_debug_handle(gm: GraphModule) -> int:
    from pyexecutorch.exir.graph_utils import graph_modules

    best = 0
    for g in graph_modules(gm):
        for node in g.graph.nodes:
            handle = node.meta.get("debug_handle")
            if isinstance(handle, int):
                best = max(best, handle)
    return best


def replace_with_delegate(
    part: Partition,
    lowered: LoweredBackendModule,
    debug_handle: int,
    replaced: dict[Node, Node],
) -> Node:
    """Put ``executorch_call_delegate(lowered, *inputs)`` where the partition's nodes were.

    ``replaced`` maps the outputs of partitions already replaced to the ``getitem``
    nodes standing for them; this partition's outputs are added to it.
    """
    graph = part.owner.graph
    part.inputs = [replaced.get(n, n) for n in part.inputs]
    members = set(part.nodes)
    first = next(n for n in part.nodes if n.op != "placeholder")
    with graph.inserting_before(first):
        name = get_lowered_module_name(part.owner, lowered)
        attr = graph.get_attr(name)
        call = graph.call_function(executorch_call_delegate, (attr, *part.inputs))
    call.meta["val"] = [n.meta.get("val") for n in part.outputs]
    call.meta["debug_handle"] = debug_handle
    for key in ("stack_trace", "nn_module_stack"):
        if key in first.meta:
            call.meta[key] = first.meta[key]
    prev = call
    for i, out in enumerate(part.outputs):
        with graph.inserting_after(prev):
            item = graph.call_function(operator.getitem, (call, i))
        item.meta["val"] = out.meta.get("val")
        item.meta["debug_handle"] = debug_handle
        out.replace_all_uses_with(item, delete_user_cb=lambda user: user not in members)
        replaced[out] = item
        prev = item
    if part.mutations:
        # The delegate updates its buffers itself: the method no longer writes them back.
        output = graph.output_node()
        (values,) = output.args
        output.args = (type(values)(v for v in values if v not in part.mutations),)
    for node in reversed(part.nodes):
        if node.op == "placeholder":
            continue
        graph.erase_node(node)
    for node in part.nodes:
        if node.op == "placeholder":
            graph.erase_node(node)
    _stable_topological_sort(graph, part.tag)
    return call


def _stable_topological_sort(graph: torch.fx.Graph, tag: str) -> None:
    """Reorder ``graph`` so every node follows its inputs, moving as few as possible."""
    nodes = list(graph.nodes)
    position = {n: i for i, n in enumerate(nodes)}
    if all(position[a] < position[n] for n in nodes for a in n.all_input_nodes):
        return
    order: list[Node] = []
    state: dict[Node, int] = {}  # 1: in progress, 2: done
    for start in nodes:
        if state.get(start) == 2:
            continue
        stack = [(start, iter(start.all_input_nodes))]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[node] = 2
                order.append(node)
            elif state.get(nxt) == 1:
                raise DelegationError(
                    f"delegating tag {tag!r} makes the graph cyclic: partitions depend on each other "
                    f"both ways (at node {nxt.name}); merge those tags or split them differently"
                )
            elif state.get(nxt) is None:
                state[nxt] = 1
                stack.append((nxt, iter(nxt.all_input_nodes)))
    for prev, node in zip(order, order[1:], strict=False):
        if node.prev is not prev:
            prev.append(node)


def lower_partition_children(gm: GraphModule, parts: list[Partition]) -> list[GraphModule]:
    """The control-flow submodules of ``gm`` that stay outside every partition."""
    moved = {n for p in parts for n in p.nodes}
    out = []
    for node in gm.graph.nodes:
        if is_control_flow(node) and node not in moved:
            out.extend(_fetch(gm, a.target) for a in submodule_nodes(node))
    return out


__all__ = [
    "DelegationError",
    "Partition",
    "lower_partition_children",
    "make_partition",
    "replace_with_delegate",
    "tagged_groups",
]
