"""Debug handles: one id per original node, shared by everything decomposed from it."""

from __future__ import annotations

from torch.fx import GraphModule

from pyexecutorch.exir.graph_utils import graph_modules


def _origin(node) -> str:
    sources = node.meta.get("from_node")
    if not sources:
        return f"{node.name}.{id(node.graph)}"
    src = sources[-1]
    while getattr(src, "from_node", None):
        src = src.from_node[-1]
    return f"{src.name}.{getattr(src, 'graph_id', '')}"


def assign_debug_handles(gm: GraphModule) -> None:
    """Set ``node.meta['debug_handle']`` (1, 2, ...) on every non-placeholder,
    non-output node, as the official exporter does."""
    handles: dict[str, int] = {}
    for g in graph_modules(gm):
        for node in g.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            key = _origin(node)
            handle = handles.get(key)
            if handle is None:
                handle = handles[key] = len(handles) + 1
            node.meta["debug_handle"] = handle
