"""Control-flow submodules of a graph, under the official ``exir.graph_module`` path:
``(attribute name, submodule, the node that runs it)`` for the top-level graph only."""

from __future__ import annotations

from typing import Any

from torch.fx import GraphModule, Node

from pyexecutorch.exir.graph_utils import HOP_COND, HOP_MAP, HOP_SCAN, HOP_WHILE

SubmoduleUse = tuple[str, GraphModule, Node]


def _uses(gm: GraphModule, arg_positions: dict[Any, tuple[int, ...]]) -> list[SubmoduleUse]:
    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        for i in arg_positions.get(node.target, ()):
            attr = node.args[i]
            found.append((attr.target, gm.get_submodule(attr.target), node))
    return found


def get_control_flow_submodules(graph_module: GraphModule) -> list[SubmoduleUse]:
    """The submodules of ``cond`` (both branches), ``map`` and ``scan`` nodes."""
    positions = {HOP_COND: (1, 2), HOP_MAP: (0,)}
    if HOP_SCAN is not None:
        positions[HOP_SCAN] = (0,)
    return _uses(graph_module, positions)


def get_cond_while_submodules(graph_module: GraphModule) -> list[SubmoduleUse]:
    """The submodules of ``cond`` (both branches) and ``while_loop`` (cond, body)."""
    return _uses(graph_module, {HOP_COND: (1, 2), HOP_WHILE: (0, 1)})


def get_scan_submodules(graph_module: GraphModule) -> list[SubmoduleUse]:
    """The combine functions of ``scan`` nodes."""
    return _uses(graph_module, {HOP_SCAN: (0,)} if HOP_SCAN is not None else {})


__all__ = [
    "get_cond_while_submodules",
    "get_control_flow_submodules",
    "get_scan_submodules",
]
