"""``pyexecutorch.exir.dialects.edge.aten.add.Tensor`` style access to edge ops."""

from __future__ import annotations

from pyexecutorch.exir.dialects._ops import ops


def __getattr__(namespace: str):
    if namespace.startswith("__"):
        raise AttributeError(namespace)
    return getattr(ops.edge, namespace)
