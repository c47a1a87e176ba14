"""The operator graph developer tools display: value and operator nodes grouped in
(nested) graphs, with the official ``executorch.devtools.debug_format.base_schema``
class and field names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Node:
    name: str
    inputs: list[Node] | None = None  # the nodes this one consumes
    output_shapes: list[list[int]] | None = None
    metadata: dict[str, Any] | None = None  # debug handle, stack trace, module stack
    named_args: list[str] | None = None  # argument names from the operator's schema


@dataclass
class OperatorGraph:
    graph_name: str
    elements: list[Node | OperatorGraph]
    metadata: dict[str, Any] | None = None


@dataclass
class ValueNode(Node):
    dtype: str = ""
    val: Any | None = None


@dataclass
class OperatorNode(Node):
    op: str | None = None
