"""The official ``exir.tracer`` path: the decomposition table ``to_edge`` applies
(defined in :mod:`pyexecutorch.exir.passes.decompose`)."""

from pyexecutorch.exir.passes.decompose import default_decomposition_table

# The official private name, which its tests and some export scripts import.
_default_decomposition_table = default_decomposition_table

__all__ = ["_default_decomposition_table", "default_decomposition_table"]
