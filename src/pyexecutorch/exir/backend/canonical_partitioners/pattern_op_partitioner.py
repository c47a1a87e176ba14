"""Partitions from operator support, subgraph patterns or node lists: the largest
groups of matching nodes that can each become one delegate (no path leaves a group
and comes back)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
from torch.fx.passes.operator_support import OperatorSupportBase, any_chain
from torch.fx.passes.utils.matcher_utils import SubgraphMatcher


class _Marked(OperatorSupportBase):
    """Supports exactly the given nodes."""

    def __init__(self, nodes: set[torch.fx.Node]) -> None:
        self.nodes = nodes

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:  # noqa: ANN001
        return node in self.nodes


def _propose(graph_module: torch.fx.GraphModule, support: OperatorSupportBase) -> list[Partition]:
    return CapabilityBasedPartitioner(
        graph_module, support, allows_single_node_partition=True
    ).propose_partitions()


def generate_pattern_op_partitions(
    graph_module: torch.fx.GraphModule,
    patterns: Sequence[torch.fx.Graph] | None = None,
    partitions_list: Sequence[Sequence[torch.fx.Node]] | None = None,
    op_support: OperatorSupportBase | None = None,
    ignore_literals: bool = False,
) -> list[Partition]:
    """Partitions of the nodes that match one of ``patterns`` (placeholders of a
    pattern excluded), appear in ``partitions_list``, or ``op_support`` accepts."""
    marked: set[torch.fx.Node] = set()
    for pattern in patterns or ():
        matcher = SubgraphMatcher(pattern, ignore_literals=ignore_literals)
        for match in matcher.match(graph_module.graph):
            marked.update(
                found
                for in_pattern, found in match.nodes_map.items()
                if in_pattern.op != "placeholder" and found.op != "placeholder"
            )
    for nodes in partitions_list or ():
        marked.update(nodes)
    supports = [s for s in (op_support,) if s is not None]
    if marked or not supports:
        supports.append(_Marked(marked))
    return _propose(graph_module, any_chain(*supports))


def generate_partitions_from_list_of_nodes(
    graph_module: torch.fx.GraphModule,
    pattern_list: Sequence[Sequence[torch.fx.Node]] | None = None,
    op_support: OperatorSupportBase | None = None,
) -> list[Partition]:
    """Partitions of the nodes in ``pattern_list`` (and those ``op_support`` accepts)."""
    return generate_pattern_op_partitions(
        graph_module, partitions_list=pattern_list, op_support=op_support
    )


__all__ = ["generate_partitions_from_list_of_nodes", "generate_pattern_op_partitions"]
