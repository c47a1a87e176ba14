"""The XNNPACK backend, both halves, meeting in the payload that :mod:`.schema` describes
(``XH00`` header, ``XNNGraph`` flatbuffer, constant data).

Ahead of time (needs torch): :mod:`.partition` (``XnnpackPartitioner`` and its op
configs), :mod:`._passes` (graph passes), :mod:`.operators` (edge nodes to XNNPACK
nodes) and :mod:`.aot` (``XnnpackBackend.preprocess``)::

    from pyexecutorch.backends.xnnpack import XnnpackPartitioner
    edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])

At run time (numpy only): :mod:`.interpreter` resolves a graph and plans it for
given input shapes, :mod:`.nodes` turns each node type into numpy steps, and
:mod:`.runtime` registers ``"XnnpackBackend"``. Importing this package imports
neither half; the ahead-of-time names load on first use.
"""

from typing import Any

_LAZY = {
    "XnnpackPartitioner": "pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner",
    "ConfigPrecisionType": "pyexecutorch.backends.xnnpack.partition.config",
    "XnnpackBackend": "pyexecutorch.backends.xnnpack.aot",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = list(_LAZY)
