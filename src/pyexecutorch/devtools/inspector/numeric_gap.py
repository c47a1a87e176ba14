"""``Inspector.calculate_numeric_gap``: each runtime intermediate output against the
reference graph's output for the same debug handles (needs torch).

The steps are the official Inspector's, so a table made here has the rows the official
one makes from the same ETDump and ETRecord:

1. the reference graph: the ATen ``exported_program`` when every edge debug handle can
   be carried back onto it (:func:`propagate_back_debug_handle`), else the edge
   program; or the graph named by ``reference_graph``;
2. its intermediate outputs on the ETRecord's representative inputs, by debug handle
   (:class:`IntermediateOutputCapturer`);
3. the runtime's: each event with operator types and logged data, by its debug handles
   (a delegate call's wrapping event left out when events inside it logged their own
   outputs; of several events with one handle tuple, the last instruction's; tuples
   that overlap merged);
4. the two matched by overlapping handles and compared by the chosen comparator, one
   row per match, with the reference nodes' stack traces.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from pyexecutorch.devtools.etrecord import edge_program_of
from pyexecutorch.devtools.inspector import EXCLUDED_EVENTS_WHEN_PRINTING, Inspector
from pyexecutorch.devtools.inspector._inspector_utils import (
    DebugHandle,
    NodeFilter,
    get_aot_debug_handle_to_op_name_mapping,
    map_runtime_aot_intermediate_outputs,
    merge_runtime_overlapping_debug_handles,
    propagate_back_debug_handle,
)
from pyexecutorch.devtools.inspector._intermediate_output_capturer import (
    IntermediateOutputCapturer,
)
from pyexecutorch.devtools.inspector.numerical_comparator import (
    L1Comparator,
    MSEComparator,
    NumericalComparatorBase,
    SNRComparator,
)
from pyexecutorch.exir.debug_handle_utils import DEBUG_HANDLE_KEY

EXPORTED_PROGRAM = "exported_program"
EDGE_PROGRAM = "edge_dialect_exported_program"
COMPARATORS: dict[str, type[NumericalComparatorBase]] = {
    "MSE": MSEComparator,
    "L1": L1Comparator,
    "SNR": SNRComparator,
}


def comparator_of(distance: str | NumericalComparatorBase, inspector: Inspector) -> Any:
    """The comparator a ``distance`` names (or the one given, told its Inspector)."""
    if isinstance(distance, NumericalComparatorBase):
        if distance.inspector is None:
            distance.inspector = inspector
        return distance
    kind = COMPARATORS.get(str(distance).strip().upper())
    if kind is None:
        raise ValueError(
            f"Unsupported distance metric {distance!r}: use one of {sorted(COMPARATORS)} "
            "or a NumericalComparatorBase"
        )
    return kind(inspector=inspector)


def reference_graph_module(
    record: Any, reference_graph: str | None, disable_debug_handle_validation: bool
) -> tuple[torch.fx.GraphModule, str]:
    """The graph module the runtime is compared with, and its name."""
    name = reference_graph
    if reference_graph in (None, EXPORTED_PROGRAM):
        exported = record.exported_program
        if exported is not None and propagate_back_debug_handle(
            exported,
            record.export_graph_id,
            edge_program_of(record),
            disable_debug_handle_validation,
        ):
            name = EXPORTED_PROGRAM
        elif reference_graph is None:
            name = EDGE_PROGRAM
        else:
            raise ValueError(
                "Cannot use 'exported_program': the ETRecord has no ATen exported program, or "
                "some edge debug handle has no node in it (disable_debug_handle_valdiation=True "
                "compares what can be matched)"
            )
    if name == EXPORTED_PROGRAM:
        return record.exported_program.module(), name
    if name == EDGE_PROGRAM:
        return edge_program_of(record).module(), name
    lookup = name if "/" in name else f"{name}/forward"
    graphs = record.graph_map or {}
    if lookup not in graphs:
        raise ValueError(
            f"Reference graph '{lookup}' not found. Available options: 'exported_program', "
            f"'edge_dialect_exported_program', or one of the graphs in graph_map: {list(graphs)}"
        )
    return graphs[lookup].module(), name


def stack_traces_by_handle(module: torch.fx.GraphModule) -> dict[DebugHandle, dict[str, Any]]:
    """Debug handle tuple -> {node name: its stack trace (None when not recorded)}."""
    keep = NodeFilter(DEBUG_HANDLE_KEY, "call_function", exclude_ops=["getitem"])
    found: dict[DebugHandle, dict[str, Any]] = {}
    for node in module.graph.nodes:
        if keep.matches(node):
            handle = node.meta[DEBUG_HANDLE_KEY]
            key = (handle,) if isinstance(handle, int) else tuple(handle)
            found.setdefault(key, {})[node.name] = node.meta.get("stack_trace")
    return found


def _handle_tuple(handles: int | tuple[int, ...] | list[int]) -> DebugHandle:
    return (handles,) if isinstance(handles, int) else tuple(handles)


def runtime_outputs(
    inspector: Inspector,
) -> tuple[dict[DebugHandle, tuple[Any, int]], dict[DebugHandle, list[str]]]:
    """Runtime outputs by debug handle tuple (data, output count), and event names."""
    events = [e for block in inspector.event_blocks for e in block.events]
    # Handles covered by events inside a delegate that logged their own outputs, per backend:
    # the delegate call's event spans them all and would only repeat them.
    inner: dict[str | None, set[int]] = defaultdict(set)
    for event in events:
        if event.is_delegated_op and event.op_types and event.debug_data:
            if event.debug_handles is not None:
                inner[event.delegate_backend_name].update(_handle_tuple(event.debug_handles))
    latest: dict[DebugHandle, tuple[int, Any, int]] = {}
    names: dict[DebugHandle, list[str]] = {}
    for event in events:
        # Events that logged nothing (a delegate's nodes, unless asked to log them) have no
        # output to compare: the delegate call's event holds theirs.
        if event.name in EXCLUDED_EVENTS_WHEN_PRINTING or not event.op_types:
            continue
        if event.debug_handles is None or not event.debug_data:
            continue
        handle = _handle_tuple(event.debug_handles)
        if event.name == "DELEGATE_CALL" and not inner[event.delegate_backend_name].isdisjoint(
            handle
        ):
            continue
        instruction = -1 if event.instruction_id is None else event.instruction_id
        # Of several events with one handle tuple, the last instruction's output is kept.
        if instruction > latest.get(handle, (-1,))[0]:
            latest[handle] = (instruction, event.debug_data, event.num_outputs)
            names[handle] = [event.name]
    merged = merge_runtime_overlapping_debug_handles(latest)
    return {h: (data, n) for h, (_, data, n) in merged.items()}, names


def numeric_gap(
    inspector: Inspector,
    distance: str | NumericalComparatorBase,
    disable_debug_handle_validation: bool = False,
    reference_graph: str | None = None,
) -> Any:
    """The rows of ``Inspector.calculate_numeric_gap`` (a DataFrame with pandas)."""
    record = inspector._etrecord
    if record is None:
        raise ValueError("calculate_numeric_gap needs an ETRecord (etrecord=...)")
    comparator = comparator_of(distance, inspector)
    module, _ = reference_graph_module(record, reference_graph, disable_debug_handle_validation)
    aot_names = get_aot_debug_handle_to_op_name_mapping(module)
    inputs = record._representative_inputs
    aot = IntermediateOutputCapturer(module).run_and_capture(inputs) if inputs else {}
    if not aot or not aot_names:
        raise ValueError(
            "Missing etrecord or missing representative inputs within etrecord, both of which "
            "are required for calculating numerical gap"
        )
    traces = stack_traces_by_handle(module)
    runtime, runtime_names = runtime_outputs(inspector)
    mapping = map_runtime_aot_intermediate_outputs(aot, runtime)
    table = comparator.compare(mapping, aot_names, runtime_names)

    def stack_traces_of(ops: list[str]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for op in ops:
            found[op] = next((t[op] for t in traces.values() if op in t), None)
        return found

    if isinstance(table, list):  # without pandas
        for row in table:
            row["stacktraces"] = stack_traces_of(row["aot_ops"])
    elif len(table) > 0:
        table["stacktraces"] = table["aot_ops"].apply(stack_traces_of)
    return table
