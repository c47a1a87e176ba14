"""``AllNodePartitioner``: the whole graph to one backend."""

from __future__ import annotations

from torch._export.utils import is_buffer, is_lifted_tensor_constant, is_param
from torch.export import ExportedProgram
from torch.fx import Node

from pyexecutorch.exir.backend.compile_spec_schema import CompileSpec
from pyexecutorch.exir.backend.partitioner import (
    DELEGATION_TAG,
    DelegationSpec,
    Partitioner,
    PartitionResult,
)


def is_non_tensor_placeholder(node: Node, ep: ExportedProgram) -> bool:
    """A placeholder that is a user input rather than a weight, buffer or constant."""
    return node.op == "placeholder" and not (
        is_param(ep, node) or is_buffer(ep, node) or is_lifted_tensor_constant(ep, node)
    )


class AllNodePartitioner(Partitioner):
    """Tags every operator and every weight of the top-level graph for ``backend_id``
    (one tag, named after the backend); user inputs and the output stay outside."""

    def __init__(self, backend_id: str, compile_specs: list[CompileSpec]) -> None:
        super().__init__()
        self.delegation_spec = DelegationSpec(backend_id, compile_specs)

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        tag = self.delegation_spec.backend_id
        for node in exported_program.graph_module.graph.nodes:
            if node.op == "output" or is_non_tensor_placeholder(node, exported_program):
                continue
            node.meta[DELEGATION_TAG] = tag
        return PartitionResult(exported_program, {tag: self.delegation_spec})


__all__ = ["AllNodePartitioner", "is_non_tensor_placeholder"]
