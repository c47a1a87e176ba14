"""Flattening nested inputs to a method's flat argument list (the official
``extension.pytree`` names): tuples, lists, dicts and named tuples, leaves in
order. Pure Python, so it serves the runtime side too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TreeSpec:
    """The shape of a nested structure: its container type and children's specs."""

    kind: type | None  # None: a leaf
    context: Any = None  # dict keys, or the named tuple's type
    children: list[TreeSpec] = field(default_factory=list)

    @property
    def num_leaves(self) -> int:
        return 1 if self.kind is None else sum(c.num_leaves for c in self.children)


def tree_flatten(tree: Any) -> tuple[list[Any], TreeSpec]:
    """The leaves of ``tree`` in order, and the spec to rebuild it."""
    leaves: list[Any] = []

    def walk(x: Any) -> TreeSpec:
        if isinstance(x, dict):
            keys = list(x)
            return TreeSpec(dict, keys, [walk(x[k]) for k in keys])
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return TreeSpec(tuple, type(x), [walk(v) for v in x])
        if isinstance(x, (list, tuple)):
            return TreeSpec(type(x), None, [walk(v) for v in x])
        leaves.append(x)
        return TreeSpec(None)

    spec = walk(tree)
    return leaves, spec


def tree_unflatten(leaves: list[Any], spec: TreeSpec) -> Any:
    """The structure ``spec`` describes, filled with ``leaves`` in order."""
    if len(leaves) != spec.num_leaves:
        raise ValueError(f"tree_unflatten: {len(leaves)} leaves for a spec of {spec.num_leaves}")
    it = iter(leaves)

    def build(s: TreeSpec) -> Any:
        if s.kind is None:
            return next(it)
        items = [build(c) for c in s.children]
        if s.kind is dict:
            return dict(zip(s.context, items, strict=True))
        if s.context is not None:  # a named tuple
            return s.context(*items)
        return s.kind(items)

    return build(spec)


__all__ = ["TreeSpec", "tree_flatten", "tree_unflatten"]
