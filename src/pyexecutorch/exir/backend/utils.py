"""Helpers for writing partitioners and for inspecting delegated programs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx import Graph, GraphModule, Node

from pyexecutorch.exir.backend.lowered_module import executorch_call_delegate
from pyexecutorch.exir.backend.partitioner import DELEGATION_TAG
from pyexecutorch.exir.error import op_name
from pyexecutorch.exir.graph_utils import graph_modules

_CONSTANT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def tag_supported_nodes(
    gm: GraphModule,
    is_supported: Callable[[Node], bool],
    tag_prefix: str = "tag",
    start: int = 0,
) -> list[str]:
    """Tag the nodes of ``gm`` (this graph only) that ``is_supported`` accepts, in
    groups that can each become one delegate (maximal, without paths that leave a
    group and come back). Returns the new tags, ``f"{tag_prefix}{i}"`` from ``start``."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    class _Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node: Node) -> bool:  # noqa: ANN001
            return node.op == "call_function" and bool(is_supported(node))

    proposed = CapabilityBasedPartitioner(
        gm, _Support(), allows_single_node_partition=True
    ).propose_partitions()
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    groups = sorted(
        (sorted(p.nodes, key=order.__getitem__) for p in proposed), key=lambda ns: order[ns[0]]
    )
    tags = []
    for i, nodes in enumerate(groups, start):
        tag = f"{tag_prefix}{i}"
        for node in nodes:
            node.meta[DELEGATION_TAG] = tag
        tags.append(tag)
    return tags


def tag_constant_data(exported_program: ExportedProgram) -> None:
    """Tag each parameter, buffer and constant placeholder whose users all carry one
    tag with that tag, so the delegate owns its data. Mutated buffers stay inputs."""
    sig = exported_program.graph_signature
    mutated = {
        s.target
        for s in sig.output_specs
        if s.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)
    }
    constant = {
        s.arg.name for s in sig.input_specs if s.kind in _CONSTANT_KINDS and s.target not in mutated
    }
    for node in exported_program.graph.nodes:
        if node.op != "placeholder" or node.name not in constant or not node.users:
            continue
        tags = {u.meta.get(DELEGATION_TAG) for u in node.users}
        if len(tags) == 1 and None not in tags:
            node.meta[DELEGATION_TAG] = tags.pop()


def tag_mutated_buffer(edge_program: ExportedProgram) -> None:
    """Give each mutated buffer the tag of its users when they all share one, so the
    delegate owns the buffer and its update. Call it after tagging the operators."""
    sig = edge_program.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    for node in edge_program.graph.nodes:
        if node.op != "placeholder" or sig.inputs_to_buffers.get(node.name) not in mutated:
            continue
        tags = {u.meta.get(DELEGATION_TAG) for u in node.users}
        if len(tags) == 1 and None not in tags:
            node.meta[DELEGATION_TAG] = tags.pop()


def get_delegates(graph: Graph) -> list[Node]:
    """The ``get_attr`` nodes of ``graph`` that hold lowered modules, in graph order."""
    return [
        node
        for node in graph.nodes
        if node.op == "get_attr"
        and any(
            u.op == "call_function" and u.target is executorch_call_delegate and u.args[0] is node
            for u in node.users
        )
    ]


@dataclass
class DelegationInfo:
    """How much of a program went to delegates."""

    num_delegated_subgraphs: int = 0
    delegated_ops: Counter = field(default_factory=Counter)
    non_delegated_ops: Counter = field(default_factory=Counter)
    backends: Counter = field(default_factory=Counter)

    @property
    def num_delegated_nodes(self) -> int:
        return sum(self.delegated_ops.values())

    @property
    def num_non_delegated_nodes(self) -> int:
        return sum(self.non_delegated_ops.values())

    def summary(self) -> str:
        lines = [
            f"delegates: {self.num_delegated_subgraphs} "
            f"({', '.join(f'{b}: {n}' for b, n in sorted(self.backends.items())) or 'none'})",
            f"delegated operator nodes: {self.num_delegated_nodes}",
            f"non-delegated operator nodes: {self.num_non_delegated_nodes}",
        ]
        names = sorted(set(self.delegated_ops) | set(self.non_delegated_ops))
        if names:
            width = max(len(n) for n in names)
            lines.append(f"{'operator':<{width}}  delegated  non-delegated")
            for n in names:
                lines.append(
                    f"{n:<{width}}  {self.delegated_ops[n]:>9}  {self.non_delegated_ops[n]:>13}"
                )
        return "\n".join(lines)


_IGNORED = {"getitem"}


def _count_ops(gm: GraphModule, into: Counter) -> None:
    for g in graph_modules(gm):
        for node in g.graph.nodes:
            if node.op != "call_function" or node.target is executorch_call_delegate:
                continue
            name = op_name(node.target)
            if name in _IGNORED:
                continue
            into[name] += 1


def get_delegation_info(graph_module: GraphModule) -> DelegationInfo:
    """Counts of delegates and of operator nodes inside and outside them."""
    info = DelegationInfo()
    _count_ops(graph_module, info.non_delegated_ops)
    for g in graph_modules(graph_module):
        for node in g.graph.nodes:
            if node.op == "call_function" and node.target is executorch_call_delegate:
                lowered = getattr(g, node.args[0].target)
                info.num_delegated_subgraphs += 1
                info.backends[lowered.backend_id] += 1
                _count_ops(lowered.original_module.graph_module, info.delegated_ops)
    return info


__all__ = [
    "DelegationInfo",
    "get_delegates",
    "get_delegation_info",
    "tag_constant_data",
    "tag_mutated_buffer",
    "tag_supported_nodes",
]
