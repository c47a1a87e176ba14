"""An exported program's graph as an :class:`~.base_schema.OperatorGraph`
(``executorch.devtools.debug_format.et_schema``): three subgraphs, ``inputs``,
``forward`` (the operator calls) and ``outputs``; each node keeps its debug handle,
stack trace and module stack, the metadata the Inspector links events to."""

from __future__ import annotations

import enum
import operator
from collections import defaultdict
from typing import Any

import torch

from pyexecutorch.devtools.debug_format.base_schema import (
    Node,
    OperatorGraph,
    OperatorNode,
    ValueNode,
)

__all__ = ["RESERVED_METADATA_ARG", "FXOperatorGraph", "Node", "OperatorNode", "ValueNode"]


class RESERVED_METADATA_ARG(enum.Enum):  # noqa: N801 - the official name
    """Metadata keys the developer tools read or write."""

    DEBUG_HANDLE = "debug_handle"
    MODULE_STACK = "nn_module_stack"
    SOURCE_FN_STACK = "source_fn_stack"
    MODULE_TYPE = "module_type"
    PROFILE_START_TIME = "profile_start_time"
    PROFILE_END_TIME = "profile_end_time"
    LOAD_START_TIME = "load_start_time"
    LOAD_END_TIME = "load_end_time"
    MEMORY_USAGE = "memory_usage"
    DEBUG_ENTRY = "debug_entry"
    STACK_TRACE = "stack_trace"
    DEBUG_DATA = "debug_data"


# Node metadata kept on the operator graph (the stack trace unless skipped).
_KEPT = (
    RESERVED_METADATA_ARG.DEBUG_HANDLE.value,
    RESERVED_METADATA_ARG.STACK_TRACE.value,
    RESERVED_METADATA_ARG.MODULE_STACK.value,
)


def _is_alloc(node: torch.fx.Node) -> bool:
    # memory.alloc of an out-variant program: its tensor is the operator's output
    return getattr(node.target, "__name__", "") == "alloc" and node.op == "call_function"


def _name(node: torch.fx.Node) -> str:
    # getitem stands for the node it reads; "_" keeps viewers from folding n1/n2 names
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node.name + "_"


def _tensors(val: Any) -> list[Any] | None:
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (tuple, list)) and val and all(isinstance(v, torch.Tensor) for v in val):
        return list(val)
    return None


class FXOperatorGraph(OperatorGraph):
    """An operator graph built from a torch.fx graph module."""

    @staticmethod
    def gen_operator_graph(
        model: torch.fx.GraphModule,
        skip_stack_trace: bool | None = False,
        enable_module_hierarchy: bool = False,
    ) -> FXOperatorGraph:
        nodes: dict[str, Node] = {}
        inputs: dict[str, Node] = {}
        outputs: dict[str, Node] = {}
        out_tensors: set[str] = set()
        modules: dict[tuple[str, str], list[Node]] = defaultdict(list)
        for fx in model.graph.nodes:
            if fx.target is operator.getitem or _is_alloc(fx):
                continue
            name = _name(fx)
            meta = {
                k: fx.meta[k]
                for k in _KEPT
                if k in fx.meta and not (skip_stack_trace and k == "stack_trace")
            }
            tensors = _tensors(fx.meta.get("val"))
            shapes = [list(t.shape) for t in tensors] if tensors else None
            dtype = str([t.dtype for t in tensors]) if tensors else ""
            if fx.op in ("placeholder", "get_attr"):
                node: Node = ValueNode(name, output_shapes=shapes, metadata=meta, dtype=dtype)
                if fx.op == "placeholder":
                    inputs[name] = node
            elif fx.op == "output":
                returns = fx.args[0] if isinstance(fx.args[0], (list, tuple)) else [fx.args[0]]
                node = ValueNode(
                    name,
                    inputs=[nodes[_name(r)] for r in returns if isinstance(r, torch.fx.Node)],
                    output_shapes=shapes,
                    metadata=meta,
                    dtype=dtype,
                )
                outputs[name] = node
            elif fx.op == "call_function":
                schema = getattr(fx.target, "_schema", None)
                node = OperatorNode(
                    name,
                    inputs=[
                        nodes[_name(a)]
                        for a in fx.all_input_nodes
                        if not _is_alloc(a) and _name(a) in nodes
                    ],
                    output_shapes=shapes,
                    metadata=meta,
                    op=getattr(fx.target, "__name__", str(fx.target)),
                    named_args=[a.name for a in schema.arguments] if schema is not None else [],
                )
                source = fx.meta.get("source_fn_stack")
                if enable_module_hierarchy and source and "nn_module_stack" in fx.meta:
                    kind = source[-1][1]
                    modules[
                        (source[-1][0], kind if isinstance(kind, str) else kind.__name__)
                    ].append(node)
                out = fx.kwargs.get("out")
                if isinstance(out, torch.fx.Node) and _is_alloc(out):
                    nodes[_name(out)] = node  # readers of the out tensor read this operator
                    out_tensors.add(_name(out))
            else:
                raise ValueError(
                    f"node {fx.name}: {fx.op!r} nodes are not in exported programs' graphs"
                )
            nodes[name] = node
        grouped = [
            OperatorGraph(graph_name=key[0], elements=members, metadata={"module_type": key[1]})
            for key, members in modules.items()
        ]
        in_module = {id(n) for members in modules.values() for n in members}
        main = [
            n
            for key, n in nodes.items()
            if key not in inputs
            and key not in outputs
            and key not in out_tensors
            and id(n) not in in_module
        ]
        return FXOperatorGraph(
            graph_name="base",
            elements=[
                FXOperatorGraph(graph_name="inputs", elements=list(inputs.values())),
                FXOperatorGraph(graph_name="forward", elements=main + grouped),
                FXOperatorGraph(graph_name="outputs", elements=list(outputs.values())),
            ],
        )
