"""The Inspector: ETDump traces (ours or the official runtime's) as tables of events.

Reading a trace needs numpy only; an ETRecord (which holds torch programs)
is read lazily when one is given, to name each event's graph nodes, their
source lines and module hierarchy. Runs whose events have the same
signature are merged into one :class:`EventBlock`: each event's
``perf_data.raw`` holds one duration per run.
"""

from __future__ import annotations

import csv
import enum
import math
import os
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from typing import Any

import numpy as np

from pyexecutorch.runtime.outputs import tensor_output_kind, torch_from_array
from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.etdump import (
    OUTPUT_CHAIN,
    UNSET,
    ETDump,
    Value,
    ValueType,
    decode_etdump,
)
from pyexecutorch.schema.scalar_type import dtype_of

# The most dimensions a numpy array (and so a logged tensor) can have.
MAX_DIMS = 64
# The most bytes numpy can address: larger shapes are refused even when a zero size empties them.
MAX_BYTES = (1 << 63) - 1
# Events that only wrap another event of the same instruction (the official tools hide them too).
EXCLUDED_EVENTS_WHEN_PRINTING = frozenset({"OPERATOR_CALL"})


class TimeScale(enum.StrEnum):
    NS = "ns"
    US = "us"
    MS = "ms"
    S = "s"
    CYCLES = "cycles"


_PER_SECOND = {TimeScale.NS: 1e9, TimeScale.US: 1e6, TimeScale.MS: 1e3, TimeScale.S: 1.0}


def time_scale_factor(source: TimeScale, target: TimeScale) -> float:
    """What a duration in ``source`` units is multiplied by to be in ``target`` units."""
    source, target = TimeScale(source), TimeScale(target)
    if (source == TimeScale.CYCLES) != (target == TimeScale.CYCLES):
        raise ValueError("cycles convert only to cycles: give both time scales as CYCLES")
    if source == TimeScale.CYCLES:
        return 1.0
    return _PER_SECOND[target] / _PER_SECOND[source]


@dataclass
class PerfData:
    """Durations of one event over the runs, in the target time scale."""

    raw: list[float]

    def _percentile(self, q: float) -> float:
        return float(np.percentile(self.raw, q))

    @property
    def p10(self) -> float:
        return self._percentile(10)

    @property
    def p50(self) -> float:
        return self._percentile(50)

    @property
    def p90(self) -> float:
        return self._percentile(90)

    @property
    def avg(self) -> float:
        return float(np.mean(self.raw))

    @property
    def min(self) -> float:
        return float(np.min(self.raw))

    @property
    def max(self) -> float:
        return float(np.max(self.raw))

    @property
    def total(self) -> float:
        return float(np.sum(self.raw))


@dataclass
class Event:
    """One event of a block: an instruction, a node inside a delegate, or a whole-method span."""

    name: str
    perf_data: PerfData | None = None
    instruction_id: int | None = None
    chain_index: int | None = None
    delegate_debug_identifier: int | str | None = None
    is_delegated_op: bool = False
    delegate_backend_name: str | None = None
    delegate_debug_metadatas: list[bytes] = field(default_factory=list)
    debug_data: list[Any] = field(default_factory=list)  # tensors (see read_value), scalars
    debug_handles: int | tuple[int, ...] | None = None
    op_types: list[str] = field(default_factory=list)
    num_outputs: int = 1  # a delegate call's outputs (the ETRecord's count), logged in order
    stack_traces: dict[str, str] = field(default_factory=dict)
    module_hierarchy: dict[str, Any] = field(default_factory=dict)
    start_time: list[int] = field(default_factory=list)
    # the official constructor's names for delegate_debug_metadatas and instruction_id
    _delegate_debug_metadatas: InitVar[list[bytes] | None] = None
    _instruction_id: InitVar[int | None] = None

    def __post_init__(
        self, _delegate_debug_metadatas: list[bytes] | None, _instruction_id: int | None
    ) -> None:
        if _delegate_debug_metadatas is not None:
            self.delegate_debug_metadatas = list(_delegate_debug_metadatas)
        if _instruction_id is not None:
            self.instruction_id = _instruction_id

    @property
    def raw_delegate_debug_metadatas(self) -> list[bytes]:
        """The delegate's metadata blobs of this event, one per run (official name)."""
        return self.delegate_debug_metadatas

    def row(self, block: str) -> dict[str, Any]:
        perf = self.perf_data
        stats = (
            {
                "raw": perf.raw,
                "p10": perf.p10,
                "p50": perf.p50,
                "p90": perf.p90,
                "avg": perf.avg,
                "min": perf.min,
                "max": perf.max,
            }
            if perf is not None
            else dict.fromkeys(("raw", "p10", "p50", "p90", "avg", "min", "max"))
        )
        return {
            "event_block_name": block,
            "event_name": self.name,
            **stats,
            "op_types": self.op_types,
            "delegate_debug_identifier": self.delegate_debug_identifier,
            "stack_traces": self.stack_traces,
            "module_hierarchy": self.module_hierarchy,
            "is_delegated_op": self.is_delegated_op,
            "delegate_backend_name": self.delegate_backend_name,
            "debug_data": self.debug_data,
            "start_time": self.start_time,
        }


# Read back under the official Event's spelling too (set after the dataclass is made:
# as a class attribute before, it would be taken for the InitVar's default).
Event._instruction_id = property(lambda self: self.instruction_id)  # type: ignore[assignment]


@dataclass
class EventBlock:
    """The events of one kind of run (``Default`` for loading, ``Execute`` per run)."""

    name: str
    events: list[Event] = field(default_factory=list)
    bundled_input_index: int | None = None
    run_output: list[Any] = field(default_factory=list)
    runs: int = 1

    def to_dataframe(self) -> Any:
        return rows_table([e.row(self.name) for e in self.events])


def rows_table(rows: list[dict[str, Any]]) -> Any:
    """A pandas DataFrame of ``rows`` when pandas is installed, else the rows themselves."""
    try:
        import pandas as pd  # noqa: PLC0415 - optional
    except ImportError:
        return rows
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ reading values


# Which field of a Value holds each kind, and how its Python value is read from it.
_SCALAR_FIELDS = {
    ValueType.Int: ("int_value", "int_val"),
    ValueType.Bool: ("bool_value", "bool_val"),
    ValueType.Float: ("float_value", "float_val"),
    ValueType.Double: ("double_value", "double_val"),
}


def _member(value: Value, name: str) -> Any:
    member = getattr(value, name)
    if member is None:
        raise FormatError(f"debug event value of kind {value.val.name} has no {name} table")
    return member


def read_value(value: Value, debug_buffer: memoryview | None) -> Any:
    """A logged value: a tensor (copied out of the debug buffer; a torch tensor when torch
    is imported, else a numpy array), a list of them, or a scalar."""
    kind = value.val
    if kind == ValueType.Tensor:
        return _tensor(_member(value, "tensor"), debug_buffer)
    if kind == ValueType.TensorList:
        return [_tensor(t, debug_buffer) for t in _member(value, "tensor_list").tensors]
    if kind in _SCALAR_FIELDS:
        table, field_name = _SCALAR_FIELDS[kind]
        return getattr(_member(value, table), field_name)
    return None


def _tensor(t: Any, debug_buffer: memoryview | None) -> Any:
    shape = tuple(t.sizes)
    try:
        dtype = dtype_of(t.scalar_type)
    except TypeError as e:
        raise FormatError(f"debug event tensor of sizes {list(shape)}: {e}") from None
    nonzero = math.prod(s for s in shape if s)
    if any(s < 0 for s in shape) or len(shape) > MAX_DIMS or nonzero * dtype.itemsize > MAX_BYTES:
        raise FormatError(
            f"debug event tensor {dtype.name}{list(shape)}: sizes must be non-negative, "
            f"at most {MAX_DIMS} of them, and span at most {MAX_BYTES} bytes"
        )
    if debug_buffer is None:
        return None  # the values were not given: only their shapes are known
    count = math.prod(shape)
    end = t.offset + count * dtype.itemsize
    if t.offset < 0 or end > len(debug_buffer):
        raise FormatError(
            f"debug event tensor {dtype.name}{list(shape)} at offset {t.offset} lies outside "
            f"the {len(debug_buffer)}-byte debug buffer"
        )
    flat = np.frombuffer(debug_buffer, dtype=dtype, count=count, offset=t.offset)
    arr = flat.reshape(shape).copy()
    # As the runtime's outputs: torch tensors when torch is imported (the official
    # Inspector's values are torch tensors), numpy arrays otherwise.
    if tensor_output_kind() == "torch":
        import torch  # noqa: PLC0415 - imported already, or asked for (PYEXECUTORCH_TENSOR_OUTPUT)

        return torch_from_array(torch, arr)
    return arr


# ------------------------------------------------------------------- grouping


def _profile_signature(p: Any) -> tuple:
    return (
        p.name,
        p.chain_index,
        p.instruction_id,
        p.delegate_debug_id_int,
        p.delegate_debug_id_str or None,
    )


def _delegate_id(did_int: int, did_str: str | None) -> int | str | None:
    if did_int != UNSET:
        return did_int
    return did_str or None


def event_blocks_of(
    etdump: ETDump, scale: float, debug_buffer: memoryview | None
) -> list[EventBlock]:
    """The event blocks of ``etdump`` as :class:`Inspector` lists them in ``event_blocks``:
    runs with the same events grouped into one block, each event's durations (the ETDump's
    ticks times ``scale``) one per run, its debug values read from ``debug_buffer``."""
    grouped: dict[tuple, EventBlock] = {}
    for run in etdump.run_data:
        signatures: list[tuple] = []
        profiles: dict[tuple, list[Any]] = {}
        debug: dict[tuple, list[Any]] = {}
        debug_order: list[tuple] = []
        outputs: list[Any] = []
        for event in run.events:
            if (p := event.profile_event) is not None:
                sig = _profile_signature(p)
                if sig not in profiles:
                    signatures.append(sig)
                    profiles[sig] = []
                profiles[sig].append(p)
            elif (d := event.debug_event) is not None and d.debug_entry is not None:
                if d.chain_index == OUTPUT_CHAIN or d.debug_entry.output is not None:
                    outputs.append(read_value(d.debug_entry, debug_buffer))
                    continue
                did = _delegate_id(d.delegate_debug_id_int, d.delegate_debug_id_str)
                key = (d.chain_index, d.instruction_id, did)
                if key not in debug:
                    debug_order.append(key)
                    debug[key] = []
                debug[key].append(d)
        # Debug events with no profile event of their instruction become events of their own.
        covered = {(s[1], s[2], _delegate_id(s[3], s[4])) for s in signatures}
        debug_only = [k for k in debug_order if k not in covered]
        run_key = (run.name, run.bundled_input_index, tuple(signatures), tuple(debug_only))
        block = grouped.get(run_key)
        if block is None:
            block = grouped[run_key] = EventBlock(
                run.name or "",
                bundled_input_index=None
                if run.bundled_input_index == UNSET
                else run.bundled_input_index,
                run_output=outputs,
                runs=0,
            )
            for sig in signatures:
                name, chain, instruction, did_int, did_str = sig
                did = _delegate_id(did_int, did_str)
                logged = debug.get((chain, instruction, did), [])
                block.events.append(
                    Event(
                        name=name if did is None else str(did),
                        perf_data=PerfData([]),
                        instruction_id=instruction,
                        chain_index=chain,
                        delegate_debug_identifier=did,
                        is_delegated_op=did is not None,
                        delegate_debug_metadatas=[
                            bytes(p.delegate_debug_metadata or b"") for p in profiles[sig]
                        ],
                        debug_data=[read_value(d.debug_entry, debug_buffer) for d in logged],
                    )
                )
            for chain, instruction, did in debug_only:
                logged = debug[chain, instruction, did]
                block.events.append(
                    Event(
                        name=logged[0].name or f"instruction {instruction}",
                        instruction_id=instruction,
                        chain_index=chain,
                        delegate_debug_identifier=did,
                        is_delegated_op=did is not None,
                        debug_data=[read_value(d.debug_entry, debug_buffer) for d in logged],
                    )
                )
        block.runs += 1
        for sig, event in zip(signatures, block.events, strict=False):
            for p in profiles[sig]:
                event.perf_data.raw.append(_elapsed(p.start_time, p.end_time) * scale)
                event.start_time.append(p.start_time)
    return list(grouped.values())


def _elapsed(start: int, end: int) -> int:
    if end >= start:
        return end - start
    return (0xFFFFFFFF - start) + end  # a 32-bit timer that wrapped around


# ------------------------------------------------------------------ the Inspector


class Inspector:
    """Events of an ETDump (and, with an ETRecord, the graph nodes behind them).

    ``etdump_path`` or ``etdump_data`` gives the trace; ``debug_buffer_path``
    the intermediate outputs it refers to; ``etrecord`` an
    :class:`~pyexecutorch.devtools.etrecord.ETRecord` or the path of one.
    """

    def __init__(
        self,
        etdump_path: str | os.PathLike | None = None,
        etdump_data: bytes | None = None,
        etrecord: Any = None,
        source_time_scale: TimeScale = TimeScale.NS,
        target_time_scale: TimeScale = TimeScale.MS,
        debug_buffer_path: str | os.PathLike | None = None,
        delegate_metadata_parser: Callable[[list[bytes]], Any] | None = None,
        delegate_time_scale_converter: Callable[[Any, float], float] | None = None,
        enable_module_hierarchy: bool = False,
    ) -> None:
        if (etdump_path is None) == (etdump_data is None):
            raise ValueError("give exactly one of etdump_path and etdump_data")
        if etdump_data is None:
            with open(etdump_path, "rb") as f:
                etdump_data = f.read()
        self._etdump = decode_etdump(etdump_data)
        self._source_time_scale = TimeScale(source_time_scale)
        self._target_time_scale = TimeScale(target_time_scale)
        scale = time_scale_factor(self._source_time_scale, self._target_time_scale)
        debug_buffer = None
        if debug_buffer_path is not None:
            with open(debug_buffer_path, "rb") as f:
                debug_buffer = memoryview(f.read())
        self.event_blocks: list[EventBlock] = event_blocks_of(self._etdump, scale, debug_buffer)
        if delegate_time_scale_converter is not None:
            for block in self.event_blocks:
                for event in block.events:
                    if event.is_delegated_op and event.perf_data is not None:
                        event.perf_data.raw = [
                            delegate_time_scale_converter(event.name, t / scale)
                            for t in event.perf_data.raw
                        ]
        if delegate_metadata_parser is not None:
            for block in self.event_blocks:
                for event in block.events:
                    if event.delegate_debug_metadatas:
                        event.delegate_debug_metadatas = delegate_metadata_parser(
                            event.delegate_debug_metadatas
                        )
        self._etrecord = None
        if etrecord is not None:
            if isinstance(etrecord, (str, os.PathLike)):
                from pyexecutorch.devtools.etrecord import parse_etrecord  # noqa: PLC0415 - torch

                etrecord = parse_etrecord(etrecord)
            self._etrecord = etrecord
            self._link_etrecord(enable_module_hierarchy)

    # ---------------------------------------------------------------- ETRecord

    def _link_etrecord(self, enable_module_hierarchy: bool) -> None:
        """Debug handles, operator types, source lines and modules of each event."""
        from pyexecutorch.devtools.etrecord._etrecord import (  # noqa: PLC0415 - torch
            _json_keys,
            nodes_by_debug_handle,
        )

        record = self._etrecord
        # keyed as a saved ETRecord's JSON keys them (strings), however the record was made
        handle_map = (_json_keys(record._debug_handle_map) or {}).get("forward", {})
        delegate_map = (_json_keys(record._delegate_map) or {}).get("forward", {})
        num_outs = (_json_keys(record._instruction_id_to_num_outs_map) or {}).get("forward", {})
        nodes = nodes_by_debug_handle(record.edge_dialect_program)
        for block in self.event_blocks:
            for event in block.events:
                instruction = event.instruction_id
                if event.chain_index == -1 or str(instruction) not in handle_map:
                    continue  # whole-method events (Method::execute) have no node
                handles = handle_map[str(instruction)]
                if not event.is_delegated_op:  # an event inside a delegate logs its own node's
                    event.num_outputs = num_outs.get(str(instruction), 1)
                delegate = delegate_map.get(str(instruction)) or delegate_map.get(instruction)
                if delegate is not None:
                    event.delegate_backend_name = delegate.get("name")
                if event.is_delegated_op:
                    inner = (delegate or {}).get("delegate_map") or {}
                    did = event.delegate_debug_identifier
                    found = inner.get(did, inner.get(str(did)))
                    handles = found if found is not None else handles
                event.debug_handles = tuple(handles) if isinstance(handles, list) else handles
                for h in handles if isinstance(handles, (list, tuple)) else [handles]:
                    for node in nodes.get(h, []):
                        event.op_types.append(node.target_name)
                        if node.stack_trace:
                            event.stack_traces[node.name] = node.stack_trace
                        if enable_module_hierarchy and node.module_stack:
                            event.module_hierarchy[node.name] = node.module_stack

    def get_exported_program(self, graph: str | None = None) -> Any:
        if self._etrecord is None:
            return None
        if graph is None:
            return self._etrecord.edge_dialect_program
        return (self._etrecord.graph_map or {}).get(graph)

    # ------------------------------------------------------------------ tables

    def _rows(self, *, printing: bool = False) -> list[dict[str, Any]]:
        rows = []
        for block in self.event_blocks:
            for event in block.events:
                if printing and event.name in EXCLUDED_EVENTS_WHEN_PRINTING:
                    continue
                rows.append(event.row(block.name))
        return rows

    def to_dataframe(
        self, include_units: bool = True, include_delegate_debug_data: bool = False
    ) -> Any:
        """Every event of every block, one row each (a pandas DataFrame when pandas is installed)."""
        rows = self._rows()
        if include_units:
            unit = self._target_time_scale.value
            stats = ("p10", "p50", "p90", "avg", "min", "max")
            rows = [{(f"{k} ({unit})" if k in stats else k): v for k, v in r.items()} for r in rows]
        return rows_table(rows)

    def print_data_tabular(
        self, file: Any = None, include_delegate_debug_data: bool = False
    ) -> None:
        """Print the events (without ``OPERATOR_CALL`` wrappers) as a table."""
        unit = self._target_time_scale.value
        columns = ["event_block_name", "event_name", "p10", "p50", "p90", "avg", "min", "max"]
        headers = columns[:2] + [f"{c} ({unit})" for c in columns[2:]] + ["is_delegated_op"]
        lines = []
        for r in self._rows(printing=True):
            cells = [str(r["event_block_name"]), str(r["event_name"])]
            cells += ["" if r[c] is None else f"{r[c]:.6f}" for c in columns[2:]]
            cells.append(str(r["is_delegated_op"]))
            lines.append(cells)
        widths = [
            max(len(h), *(len(c[i]) for c in lines)) if lines else len(h)
            for i, h in enumerate(headers)
        ]
        out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
        out += [
            "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) for cells in lines
        ]
        print("\n".join(out), file=file)

    def save_data_to_tsv(self, file: str | os.PathLike) -> None:
        rows = self._rows()
        with open(file, "w", newline="") as f:
            if not rows:
                return
            writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
            writer.writeheader()
            writer.writerows(rows)

    def find_total_for_module(self, module_name: str) -> float:
        """Sum of the average times of the operators inside module ``module_name`` (needs an ETRecord)."""
        total = 0.0
        for block in self.event_blocks:
            for event in block.events:
                if event.name in EXCLUDED_EVENTS_WHEN_PRINTING or event.perf_data is None:
                    continue
                if any(
                    module_name in key for stack in event.module_hierarchy.values() for key in stack
                ):
                    total += event.perf_data.avg
        return total

    def get_op_list(
        self, event_block: str = "Execute", show_delegated_ops: bool = True
    ) -> dict[str, list[Event]]:
        """The events of ``event_block`` by operator type (the event name without an ETRecord)."""
        ops: dict[str, list[Event]] = {}
        for block in self.event_blocks:
            if block.name != event_block:
                continue
            for event in block.events:
                if event.name in EXCLUDED_EVENTS_WHEN_PRINTING or event.perf_data is None:
                    continue
                if event.is_delegated_op and not show_delegated_ops:
                    continue
                for op in event.op_types or [event.name]:
                    ops.setdefault(op, []).append(event)
        return ops

    def get_vgf_neural_statistics(self) -> list[dict[str, Any]]:
        """The VGF delegate's neural-accelerator statistics records in the trace's
        delegate metadata (see :mod:`.vgf_neural_statistics`)."""
        from pyexecutorch.devtools.inspector.vgf_neural_statistics import (  # noqa: PLC0415
            parse_vgf_neural_statistics_delegate_metadata,
        )

        return [
            record
            for block in self.event_blocks
            for event in block.events
            for record in parse_vgf_neural_statistics_delegate_metadata(
                event.delegate_debug_metadatas
            )
        ]

    def calculate_numeric_gap(
        self,
        distance: Any = "MSE",
        disable_debug_handle_valdiation: bool = False,  # noqa: FBT001, FBT002 - official spelling
        reference_graph: str | None = None,
    ) -> Any:
        """Each operator's intermediate output here against the ETRecord's reference graph.

        Needs an ETRecord with representative inputs and a debug buffer. ``distance`` is
        ``"MSE"``, ``"L1"``, ``"SNR"`` (dB) or a ``NumericalComparatorBase``;
        ``reference_graph`` is ``"exported_program"`` (the ATen program, the default when
        every debug handle carries back onto it), ``"edge_dialect_exported_program"`` or a
        graph of the ETRecord's ``graph_map``. One row per runtime output matched to
        reference outputs by debug handles (see :mod:`.numeric_gap`).
        """
        from pyexecutorch.devtools.inspector.numeric_gap import numeric_gap  # noqa: PLC0415 - torch

        return numeric_gap(self, distance, disable_debug_handle_valdiation, reference_graph)
