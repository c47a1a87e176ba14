"""The edge dialect: ``pyexecutorch.exir.dialects.edge.aten.add.Tensor`` style access
to edge operators, and their class in :mod:`._ops` (the official path)."""

from __future__ import annotations

from pyexecutorch.exir.dialects._ops import ops


def __getattr__(namespace: str):  # noqa: ANN202 - module attribute hook
    if namespace.startswith("__") or namespace == "_ops":
        raise AttributeError(namespace)
    return getattr(ops.edge, namespace)
