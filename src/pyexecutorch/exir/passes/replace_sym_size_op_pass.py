"""``sym_size``/``sym_stride``/``sym_numel`` packets to their overloads."""

from __future__ import annotations

from pyexecutorch.exir.passes._official_names import GraphFunctionPass
from pyexecutorch.exir.passes.normalize import replace_packets


class ReplaceSymSizeOpPass(GraphFunctionPass):
    function = staticmethod(replace_packets)


__all__ = ["ReplaceSymSizeOpPass"]
