"""A complete example backend to copy: ``aot`` (partitioner and ``preprocess``,
needs torch) and ``runtime`` (numpy only), meeting in the bytes of ``format``.

    from pyexecutorch.backends.example.aot import ExamplePartitioner
    edge = to_edge_transform_and_lower(exported, partitioner=[ExamplePartitioner()])
"""

from pyexecutorch.backends.example.format import BACKEND_ID

__all__ = ["BACKEND_ID"]
