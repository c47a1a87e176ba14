"""Partitioners: which parts of a program a backend takes.

A partitioner tags nodes (``node.meta["delegation_tag"] = tag``) in the
program it is given and returns the tags with the backend each goes to::

    class MyPartitioner(Partitioner):
        def partition(self, exported_program):
            for node in exported_program.graph.nodes:
                if node.op == "call_function" and node.target in MY_OPS:
                    node.meta["delegation_tag"] = "tag0"
            return PartitionResult(exported_program, {"tag0": DelegationSpec("MyBackend", [])})

Nodes with one tag become one delegate: they must form a connected piece of
the graph that no outside node depends on halfway (no path leaves the tagged
nodes and comes back). Parameter, buffer and constant placeholders may be
tagged too when all their users carry the same tag: the delegate then owns
their data and the program no longer stores it. Nodes inside control-flow
branches (``torch.cond`` submodules) may be tagged as well; each branch is
lowered on its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import torch
from torch.export import ExportedProgram

from pyexecutorch.exir.backend.compile_spec_schema import CompileSpec

DELEGATION_TAG = "delegation_tag"


class DelegationSpec(NamedTuple):
    """Where a tag's nodes go: the backend's id and its compile specs."""

    backend_id: str
    compile_specs: list[CompileSpec]


@dataclass
class PartitionResult:
    """The program with its nodes tagged, and each tag's :class:`DelegationSpec`."""

    tagged_exported_program: ExportedProgram
    partition_tags: dict[str, DelegationSpec]


class Partitioner(ABC):
    """Decides which nodes of an edge program a backend runs (see the module doc)."""

    def __init__(self, spec: Mapping[Any, object] = MappingProxyType({})) -> None:
        self._spec = spec

    def __call__(self, exported_program: ExportedProgram) -> PartitionResult:
        return self.partition(exported_program)

    @property
    def spec(self) -> Mapping[Any, object]:
        return self._spec

    @abstractmethod
    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        """Tag the nodes to delegate in ``exported_program`` (only ``node.meta``
        may change) and return them with their delegation specs."""

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[torch._ops.OpOverload], Callable[[torch.fx.Node], bool] | None]:
        """Operators ``to_edge_transform_and_lower`` should keep whole for this
        partitioner, and optionally a filter: a node of such an operator is kept
        only where the filter returns True (others are decomposed as usual).
        Every kept node must then be delegated by this partitioner."""
        return [], None

    def transform_for_pre_decomposition(self, exported_program: ExportedProgram) -> ExportedProgram:
        """Rewrite the ATen program before decomposition (default: unchanged)."""
        return exported_program


__all__ = ["DELEGATION_TAG", "DelegationSpec", "PartitionResult", "Partitioner"]
