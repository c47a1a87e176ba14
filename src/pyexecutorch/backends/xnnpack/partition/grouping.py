"""Delegates from groups of matched nodes, never splitting a group.

A group is what the op configs matched together (a linear with the dynamic
``choose_qparams``/quantize/dequantize of its input and its weight's
dequantization; a static q/dq pair and the op between; several linears reading
one quantized activation share one group). Each group starts as one candidate
delegate; candidates are then merged greedily, each with every later one whose
merge leaves no path out of the merged set and back into it, in the order the
official group-based partitioner uses (candidates numbered from the end of the
graph), so the delegates come out as the official exporter's do.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

from torch.fx import Graph, Node


def delegate_groups(graph: Graph, groups: Iterable[Iterable[Node]]) -> list[list[Node]]:
    """The call_function nodes of ``groups`` (disjoint) merged into delegates, each in
    graph order, the delegates ordered by their first node."""
    nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    group_of: dict[Node, int] = {}
    members: list[list[Node]] = []
    for group in groups:
        calls = [n for n in group if n.op == "call_function"]
        if calls:
            for n in calls:
                group_of[n] = len(members)
            members.append(calls)

    # downstream[n]: a bit per node reachable from n (n excluded)
    downstream: dict[Node, int] = {}
    for n in reversed(nodes):
        reach = 0
        for u in n.users:
            reach |= downstream[u] | (1 << order[u])
        downstream[n] = reach

    # candidates numbered as the official partitioner numbers them: from the graph's end
    candidates: list[set[Node]] = []
    seen: set[int] = set()
    for n in reversed(nodes):
        g = group_of.get(n)
        if g is not None and g not in seen:
            seen.add(g)
            candidates.append(set(members[g]))
    masks = [_mask(c, order) for c in candidates]

    alive = [True] * len(candidates)
    for i in range(len(candidates)):
        if not alive[i]:
            continue
        for j in range(i + 1, len(candidates)):
            if alive[j] and _acyclic(
                candidates[i] | candidates[j], masks[i] | masks[j], downstream
            ):
                candidates[i] |= candidates[j]
                masks[i] |= masks[j]
                alive[j] = False

    delegates = [c for c, keep in zip(candidates, alive, strict=True) if keep]
    _follow_tuple_producers(delegates)
    out = [sorted(c, key=order.__getitem__) for c in delegates if c]
    return sorted(out, key=lambda ns: order[ns[0]])


def _mask(nodes: Iterable[Node], order: dict[Node, int]) -> int:
    m = 0
    for n in nodes:
        m |= 1 << order[n]
    return m


def _acyclic(combined: set[Node], mask: int, downstream: dict[Node, int]) -> bool:
    """No node outside ``combined`` both reads it and leads back into it."""
    for n in combined:
        for u in n.users:
            if u not in combined and downstream[u] & mask:
                return False
    return True


def _follow_tuple_producers(delegates: list[set[Node]]) -> None:
    """A getitem goes with the delegate of the multi-output node it reads."""
    where = {n: i for i, d in enumerate(delegates) for n in d}
    for i, d in enumerate(delegates):
        for n in list(d):
            users = list(n.users)
            if not users or any(u.target is not operator.getitem for u in users):
                continue
            for u in users:
                j = where.get(u)
                if j is not None and j != i:
                    delegates[j].discard(u)
                    d.add(u)
                    where[u] = i


__all__ = ["delegate_groups"]
