"""The edge dialect: ``pyexecutorch.exir.dialects.edge.aten.add.Tensor`` style access
to edge operators, and their class in :mod:`._ops` (the official path)."""

from __future__ import annotations


def __getattr__(namespace: str):  # noqa: ANN202 - module attribute hook
    if namespace.startswith("__") or namespace == "_ops":
        raise AttributeError(namespace)
    # imported here: exir.dialects._ops imports this package's _ops module
    from pyexecutorch.exir.dialects._ops import ops  # noqa: PLC0415

    return getattr(ops.edge, namespace)
