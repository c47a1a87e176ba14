"""The Inspector's helpers under the official private module path
(``executorch.devtools.inspector._inspector_utils``), kept for code and tests that
import them from there: time scales, comparing logged outputs, graphs of an
ETRecord, and matching the runtime's intermediate outputs to the exported
program's by debug handle (a handle tuple names the graph nodes one logged value
comes from; fused or delegated instructions log several).

Needs torch (the values compared are torch tensors); the Inspector's trace
reading (:mod:`pyexecutorch.devtools.inspector`) does not.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from pyexecutorch.devtools.debug_format.base_schema import OperatorGraph, OperatorNode
from pyexecutorch.devtools.debug_format.et_schema import FXOperatorGraph
from pyexecutorch.devtools.inspector import TimeScale
from pyexecutorch.devtools.inspector._inspector import (  # noqa: F401 - the official names here
    find_populated_event,
    is_debug_output,
)
from pyexecutorch.exir.debug_handle_utils import (
    DEBUG_HANDLE_KEY,
    FROM_NODE_KEY,
    UNSET_DEBUG_HANDLE,
)

DebugHandle = tuple[int, ...]

FORWARD = "forward"
EDGE_DIALECT_GRAPH_KEY = "edge_dialect_graph_module"
EXCLUDED_EVENTS_WHEN_PRINTING = {"OPERATOR_CALL"}
EXCLUDED_EVENTS_FOR_INTERMEDIATE_OUTPUT = {"OPERATOR_CALL"}

# Units per second of each time scale; a cycle count converts only to cycles.
TIME_SCALE_DICT = {
    TimeScale.NS: 1_000_000_000,
    TimeScale.US: 1_000_000,
    TimeScale.MS: 1_000,
    TimeScale.S: 1,
    TimeScale.CYCLES: 1,
}


class NodeSource(enum.Enum):
    AOT = 1
    RUNTIME = 2


@dataclass
class NodeData:
    """One side's output in the debug-handle overlap graph."""

    source: NodeSource
    debug_handle: DebugHandle
    output: Any
    num_outputs: int  # > 1 for a delegate call logging several outputs


class NodeFilter:
    """Selects graph nodes: ``op_type`` nodes with ``metadata_key`` set whose name holds
    none of ``exclude_ops``."""

    def __init__(self, metadata_key: str, op_type: str, exclude_ops: list[str] | None = None):
        self.metadata_key = metadata_key
        self.op_type = op_type
        self.exclude_ops = list(exclude_ops or [])

    def matches(self, node: torch.fx.Node) -> bool:
        return (
            node.meta.get(self.metadata_key) is not None
            and node.op == self.op_type
            and not any(name in node.name for name in self.exclude_ops)
        )


def calculate_time_scale_factor(
    source_time_scale: TimeScale, target_time_scale: TimeScale
) -> float:
    """Source units per target unit: a duration in the source scale is divided by it."""
    source, target = TimeScale(source_time_scale), TimeScale(target_time_scale)
    if (source == TimeScale.CYCLES) != (target == TimeScale.CYCLES):
        raise ValueError("cycles convert only to cycles: give both time scales as CYCLES")
    return TIME_SCALE_DICT[source] / TIME_SCALE_DICT[target]


def is_inference_output_equal(output1: Any, output2: Any) -> bool:
    """Whether two logged outputs (tensors, lists of tensors or scalars) are the same."""
    if isinstance(output1, torch.Tensor) and isinstance(output2, torch.Tensor):
        return torch.equal(output1, output2)
    if isinstance(output1, (list, tuple)) and isinstance(output2, (list, tuple)):
        return len(output1) == len(output2) and all(
            is_inference_output_equal(a, b) for a, b in zip(output1, output2, strict=True)
        )
    if isinstance(output1, torch.Tensor) or isinstance(output2, torch.Tensor):
        return False
    return bool(output1 == output2)


def gen_graphs_from_etrecord(etrecord: Any, enable_module_hierarchy: bool = False) -> dict:
    """Operator graphs of an ETRecord's recorded programs, by name; the edge program's
    under ``EDGE_DIALECT_GRAPH_KEY``."""
    graphs = {
        name: FXOperatorGraph.gen_operator_graph(
            program.graph_module, enable_module_hierarchy=enable_module_hierarchy
        )
        for name, program in (etrecord.graph_map or {}).items()
    }
    edge = etrecord.edge_dialect_program
    if isinstance(edge, Mapping):
        edge = edge.get(FORWARD)
    if edge is not None:
        graphs[EDGE_DIALECT_GRAPH_KEY] = FXOperatorGraph.gen_operator_graph(
            edge.graph_module, enable_module_hierarchy=enable_module_hierarchy
        )
    return graphs


def create_debug_handle_to_op_node_mapping(op_graph: OperatorGraph) -> dict[Any, list]:
    """Debug handle -> the operator nodes carrying it, over every nested graph."""
    mapping: dict[Any, list[OperatorNode]] = {}
    pending = [op_graph]
    while pending:
        graph = pending.pop()
        for element in graph.elements:
            if isinstance(element, OperatorGraph):
                pending.append(element)
            elif isinstance(element, OperatorNode) and element.metadata:
                handle = element.metadata.get(DEBUG_HANDLE_KEY)
                if handle is not None:
                    mapping.setdefault(handle, []).append(element)
    return mapping


# ----------------------------------------------------------------- numeric metrics


def _as_float(value: torch.Tensor) -> torch.Tensor:
    return value.to(torch.float32)


def _metric(ref_values: Sequence[Any], values: Sequence[Any], fn: Any) -> list[float | None]:
    # one number per pair of tensors, rounded to two places; other values have none
    return [
        round(float(fn(_as_float(a), _as_float(b))), 2)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
        else None
        for a, b in zip(ref_values, values, strict=False)  # as many as both have
    ]


def calculate_mse(ref_values: Sequence[Any], values: Sequence[Any]) -> list[float | None]:
    return _metric(ref_values, values, lambda a, b: ((a - b) ** 2).mean())


def calculate_snr(ref_values: Sequence[Any], values: Sequence[Any]) -> list[float | None]:
    """Signal-to-noise ratio in dB, the reference being the signal."""
    return _metric(
        ref_values, values, lambda a, b: 10 * torch.log10((a**2).mean() / ((a - b) ** 2).mean())
    )


def calculate_cosine_similarity(
    ref_values: Sequence[Any], values: Sequence[Any]
) -> list[float | None]:
    def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if a.shape != b.shape:
            raise ValueError(f"cosine similarity of shapes {tuple(a.shape)} and {tuple(b.shape)}")
        return (a * b).sum() / (a.norm() * b.norm())

    return _metric(ref_values, values, cosine)


def convert_to_float_tensor(input_data: Any) -> torch.Tensor:
    """A scalar or tensor as a float64 CPU tensor, NaN read as 0 (sequences are refused)."""
    assert not isinstance(input_data, Sequence), "a sequence holds several values, not one"
    try:
        tensor = torch.as_tensor(input_data, dtype=torch.float64)
    except Exception as e:  # noqa: BLE001 - whatever torch refuses, said as one error
        raise ValueError(f"Cannot convert value of type {type(input_data)} to a tensor: {e}") from e
    return torch.nan_to_num(tensor.detach().cpu().double(), nan=0.0)


# --------------------------------------------------- matching outputs by debug handle


def _merge_handles(first: DebugHandle, second: DebugHandle) -> DebugHandle:
    """``first``'s handles not in ``second``, then ``second``'s, each once, in order."""
    return tuple(dict.fromkeys((*(h for h in first if h not in second), *second)))


def merge_runtime_overlapping_debug_handles(
    runtime_intermediate_outputs: dict[DebugHandle, tuple[int, Any, int]],
) -> dict[DebugHandle, tuple[int, Any, int]]:
    """Runtime outputs whose handle tuples overlap, as one entry: the handles of the
    earlier instruction first, and the value (instruction id, data, output count) of
    the latest instruction among them."""
    merged: dict[DebugHandle, tuple[int, Any, int]] = {}
    for handle, value in runtime_intermediate_outputs.items():
        key, kept = handle, value
        for other in [k for k in merged if set(k) & set(handle)]:
            other_value = merged.pop(other)
            if other_value[0] < value[0]:
                key = _merge_handles(other, key)
            else:
                key, kept = _merge_handles(key, other), other_value
        merged[tuple(dict.fromkeys(key))] = kept
    return merged


def _components(nodes: list[NodeData]) -> list[list[NodeData]]:
    """Groups of AOT and runtime outputs linked by shared debug handles."""
    parent = list(range(len(nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, a in enumerate(nodes):
        for j in range(i + 1, len(nodes)):
            b = nodes[j]
            if a.source != b.source and set(a.debug_handle) & set(b.debug_handle):
                parent[root(j)] = root(i)
    groups: dict[int, list[NodeData]] = {}
    for i, node in enumerate(nodes):
        groups.setdefault(root(i), []).append(node)
    return list(groups.values())


def _runtime_match(aot: Any, runtime: Any, num_outputs: int, back: int) -> Any:
    """The runtime value compared with ``aot``, the ``back``-th output from the end."""
    if isinstance(aot, Sequence):
        if not isinstance(runtime, Sequence):
            raise TypeError("an AOT output that is a sequence needs a runtime sequence")
        last = runtime[back]
        if isinstance(last, list):
            return tuple(last)
        if isinstance(last, torch.Tensor):
            return tuple(runtime)
        raise ValueError("the runtime output's last element must be a tensor or a list of them")
    if not isinstance(runtime, Sequence):
        return runtime
    if num_outputs == 1 and len(runtime) > 1 and isinstance(aot, torch.Tensor):
        # one AOT output of a multi-output operator: the runtime output of its shape (and dtype)
        same = [r for r in runtime if isinstance(r, torch.Tensor) and r.shape == aot.shape]
        if len(same) > 1:
            same = [r for r in same if r.dtype == aot.dtype]
        if len(same) == 1:
            return same[0]
        return runtime[-1]
    return runtime[back]


def map_runtime_aot_intermediate_outputs(
    aot_intermediate_outputs: dict[DebugHandle, Any],
    runtime_intermediate_outputs: dict[DebugHandle, tuple[Any, int]],
) -> dict[tuple[DebugHandle, Any], tuple[DebugHandle, Any]]:
    """(AOT handles, AOT output) -> (runtime handles, runtime output) for each runtime
    output whose handles cover the AOT outputs linked to it. The AOT output compared is
    the one of the runtime tuple's last handle (its ``i``-th from the end for a delegate
    call's ``i``-th output from the end)."""
    nodes = [NodeData(NodeSource.AOT, h, out, 1) for h, out in aot_intermediate_outputs.items()]
    nodes += [
        NodeData(NodeSource.RUNTIME, h, out, n)
        for h, (out, n) in runtime_intermediate_outputs.items()
    ]
    mapping: dict[tuple[DebugHandle, Any], tuple[DebugHandle, Any]] = {}
    for group in _components(nodes):
        aot = {n.debug_handle: n.output for n in group if n.source == NodeSource.AOT}
        runtime = [n for n in group if n.source == NodeSource.RUNTIME]
        if not aot or not runtime:
            continue
        if len(runtime) != 1:
            raise ValueError(
                f"AOT outputs {sorted(aot)} overlap {len(runtime)} runtime outputs "
                f"{[r.debug_handle for r in runtime]}: merge them first "
                "(merge_runtime_overlapping_debug_handles)"
            )
        (rt,) = runtime
        aot_handles = {h[0] for h in aot}
        if not aot_handles <= set(rt.debug_handle):
            continue  # AOT nodes outside the runtime's handles: not one computation
        for i in range(rt.num_outputs):
            back = -(i + 1)
            key = (rt.debug_handle[back],)
            if key not in aot:
                continue
            value = aot[key]
            matched = _runtime_match(value, rt.output, rt.num_outputs, back)
            if isinstance(value, Sequence):
                value = tuple(value)
            mapping[(rt.debug_handle, value)] = (rt.debug_handle, matched)
    return mapping


def get_aot_debug_handle_to_op_name_mapping(
    graph_module: torch.fx.GraphModule,
) -> dict[DebugHandle, list[str]]:
    """Handle tuple -> names of the operator nodes carrying it (getitems left out)."""
    keep = NodeFilter(DEBUG_HANDLE_KEY, "call_function", exclude_ops=["getitem"])
    mapping: dict[DebugHandle, list[str]] = {}
    for node in graph_module.graph.nodes:
        if keep.matches(node):
            handle = node.meta[DEBUG_HANDLE_KEY]
            key = (handle,) if isinstance(handle, int) else tuple(handle)
            mapping.setdefault(key, []).append(node.name)
    return mapping


def find_op_names(
    target_debug_handle: DebugHandle, debug_handle_to_op_names: dict[DebugHandle, list[str]]
) -> list[str]:
    """Names of the operators whose handles all lie within ``target_debug_handle``."""
    target = set(target_debug_handle)
    return [
        name
        for handle, names in debug_handle_to_op_names.items()
        if set(handle) <= target
        for name in names
    ]


# ------------------------------------------- debug handles back onto the exported program


def get_ancestor_node_identifiers(node: torch.fx.Node) -> list[str]:
    """``name.graph_id`` of the node's provenance chain (torch's ``from_node``), nearest first."""
    sources = node.meta.get(FROM_NODE_KEY)
    if not sources:
        return []
    source = sources[-1]
    found = [f"{source.name}.{source.graph_id}"]
    while source.from_node:
        source = source.from_node[-1]
        found.append(f"{source.name}.{source.graph_id}")
    return found


def get_parent_node_identifier(node: torch.fx.Node) -> str | None:
    sources = node.meta.get(FROM_NODE_KEY)
    return f"{sources[-1].name}.{sources[-1].graph_id}" if sources else None


def _operators(program: Any) -> list[torch.fx.Node]:
    return [n for n in program.graph_module.graph.nodes if n.op not in ("placeholder", "output")]


def propagate_back_debug_handle(
    exported_program: Any,
    exported_program_graph_id: int,
    edge_dialect_program: Any,
    disable_debug_handle_valdiation: bool = False,  # noqa: FBT001 - the official spelling
) -> bool:
    """Give each node of ``exported_program`` the debug handle of the edge nodes it became
    (found through their provenance); nodes to_edge removed get ``UNSET_DEBUG_HANDLE``.
    False, changing nothing, when some edge handle has no node in ``exported_program``
    (unless told not to check)."""
    handle_of: dict[str, Any] = {}
    for node in _operators(edge_dialect_program):
        for ancestor in get_ancestor_node_identifiers(node):
            handle_of.setdefault(ancestor, node.meta.get(DEBUG_HANDLE_KEY))

    def found(node: torch.fx.Node) -> Any:
        own = f"{node.name}.{exported_program_graph_id}"
        for key in (own, *get_ancestor_node_identifiers(node)):
            if key in handle_of:
                return handle_of[key]
        return None

    handles = {n: found(n) for n in _operators(exported_program)}
    matched = {h for h in handles.values() if h is not None}
    edge_handles = {n.meta.get(DEBUG_HANDLE_KEY) for n in _operators(edge_dialect_program)}
    if not disable_debug_handle_valdiation and not edge_handles <= matched:
        return False
    for node, handle in handles.items():
        node.meta[DEBUG_HANDLE_KEY] = UNSET_DEBUG_HANDLE if handle is None else handle
    return True
