"""Event tracing for ETDump: what a traced method records while it loads and runs.

One :class:`EventTracer` serves a program (or a module) loaded with
``enable_etdump=True``. Its methods are compiled in an instrumented variant
(see :mod:`pyexecutorch.runtime.method`) whose generated lines append
``(key, start_ns, end_ns)`` to :attr:`EventTracer.pending`; a key names a
registered template, so the hot path builds one tuple per instruction and the
ETDump tables are made only when the trace is written.

Events follow the official runtime's: ``Program::load_method`` and
``Method::init`` in the current block (``Default`` at first), then per run a
block ``Execute`` with ``native_call_<op>.out`` and ``OPERATOR_CALL`` per
kernel instruction, ``DELEGATE_CALL`` per delegate call (events a backend logs
from inside it carry that instruction's id) and ``Method::execute``. With a
debug buffer, every instruction's outputs (and values a backend logs) become
debug events whose bytes are copied into the buffer at 64-byte aligned
offsets, and a run's outputs are logged with ``output`` set.

Backends receive the tracer as ``BackendInitContext.event_tracer`` and call
:meth:`EventTracer.delegate_key`, :meth:`EventTracer.record_delegate` and
:meth:`EventTracer.log_delegate_output`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pyexecutorch.schema.etdump import (
    DEBUG_BUFFER_ALIGNMENT,
    OUTPUT_CHAIN,
    UNSET,
    Bool,
    DebugEvent,
    Double,
    ETDump,
    Event,
    Int,
    ProfileEvent,
    RunData,
    Tensor,
    TensorList,
    Value,
    ValueType,
    encode_etdump,
)
from pyexecutorch.schema.scalar_type import scalar_type_of

clock = time.perf_counter_ns  # monotonic nanoseconds


class DebugBufferFullError(RuntimeError):
    """The debug buffer cannot hold another intermediate output."""


@dataclass
class _Block:
    name: str
    items: list[Any]  # (key, start, end[, (chain, instruction)]) tuples, or Event objects


class EventTracer:
    """Records profile and debug events; :meth:`write` saves them as an ETDump."""

    def __init__(self, debug_buffer_size: int = 0) -> None:
        if not isinstance(debug_buffer_size, int) or debug_buffer_size < 0:
            raise ValueError(
                f"debug_buffer_size must be a non-negative int, got {debug_buffer_size!r}"
            )
        self.templates: list[tuple[ProfileEvent, ...]] = []
        self.blocks: list[_Block] = [_Block("Default", [])]
        self.pending: list[Any] = []  # the generated code's appends, moved to a block per run
        # Bound once, so that generated code binds one name for each.
        self.record = self.pending.append
        self.log_values = self.log
        self.debug_buffer = np.zeros(debug_buffer_size, np.uint8) if debug_buffer_size else None
        self.debug_used = 0
        # The instruction running now, set around delegate calls for the backend's events.
        self.instruction: tuple[int, int] = (0, UNSET)

    @property
    def logs_outputs(self) -> bool:
        return self.debug_buffer is not None

    # ------------------------------------------------------------ registration

    def key(self, *events: ProfileEvent) -> int:
        """Register the profile events one recorded ``(key, start, end)`` stands for."""
        self.templates.append(events)
        return len(self.templates) - 1

    def kernel_key(
        self, operator: str, overload: str, chain: int, instruction: int, *, prim: bool
    ) -> int:
        """The key of one kernel instruction: ``native_call_<op>.<overload>`` inside ``OPERATOR_CALL``.

        Primitive operators (``executorch_prim::``, ``aten::sym_size.int``) have
        no generated wrapper in the official runtime, hence only ``OPERATOR_CALL``.
        """
        call = ProfileEvent(name="OPERATOR_CALL", chain_index=chain, instruction_id=instruction)
        if prim:
            return self.key(call)
        base = operator.split("::", 1)[-1]
        name = f"native_call_{base}.{overload}" if overload else f"native_call_{base}"
        return self.key(
            ProfileEvent(name=name, chain_index=chain, instruction_id=instruction), call
        )

    def delegate_key(
        self, debug_id: int | None = None, name: str | None = None, metadata: bytes = b""
    ) -> int:
        """The key of one event inside a delegate: by integer debug id, else by name."""
        if debug_id is not None:
            event = ProfileEvent(delegate_debug_id_int=debug_id, delegate_debug_metadata=metadata)
        else:
            event = ProfileEvent(delegate_debug_id_str=name, delegate_debug_metadata=metadata)
        return self.key(event)

    # --------------------------------------------------------------- recording

    def profile(self, name: str, start: int, end: int) -> None:
        """A whole-method event (``Program::load_method``, ``Method::execute``) in the current block."""
        event = ProfileEvent(name=name, chain_index=-1, instruction_id=0)
        self.blocks[-1].items.append(
            Event(profile_event=replace(event, start_time=start, end_time=end))
        )

    def discard_runs(self) -> None:
        """Forget the runs recorded so far (e.g. warm-up runs), keeping the load events."""
        self.pending.clear()
        self.blocks = self.blocks[:1]

    def begin_block(self, name: str) -> None:
        self.blocks.append(_Block(name, []))

    def flush(self) -> None:
        """Move the generated code's events into the current block."""
        if self.pending:
            self.blocks[-1].items.extend(self.pending)
            self.pending.clear()

    def record_delegate(self, key: int, start: int, end: int) -> None:
        """An event inside the delegate call now running."""
        self.pending.append((key, start, end, self.instruction))

    def log_delegate_output(
        self, value: Any, debug_id: int | None = None, name: str | None = None
    ) -> None:
        """An intermediate output inside the delegate call now running."""
        chain, instruction = self.instruction
        self.pending.append(
            self._debug_event(
                value,
                chain,
                instruction,
                delegate_debug_id_int=UNSET if debug_id is None else debug_id,
                delegate_debug_id_str=None if debug_id is not None else name,
            )
        )

    def log(self, chain: int, instruction: int, values: tuple[Any, ...]) -> None:
        """Outputs of one instruction, logged from the generated code."""
        append = self.pending.append
        for value in values:
            append(self._debug_event(value, chain, instruction))

    def log_run_outputs(self, outputs: list[Any]) -> None:
        items = self.blocks[-1].items
        for value in outputs:
            event = self._debug_event(value, OUTPUT_CHAIN, 0)
            event.debug_event.debug_entry.output = Bool(True)
            items.append(event)

    # ------------------------------------------------------------- debug data

    def _tensor(self, array: np.ndarray) -> Tensor:
        buf = self.debug_buffer
        data = np.ascontiguousarray(array)
        start = -self.debug_used // DEBUG_BUFFER_ALIGNMENT * -DEBUG_BUFFER_ALIGNMENT
        end = start + data.nbytes
        if end > buf.size:
            raise DebugBufferFullError(
                f"the {buf.size}-byte ETDump debug buffer is full: a {data.dtype.name}"
                f"{list(data.shape)} output needs {data.nbytes} bytes at offset {start}; "
                "load with a larger debug_buffer_size"
            )
        buf[start:end] = data.reshape(-1).view(np.uint8)
        self.debug_used = end
        item = data.itemsize
        return Tensor(
            scalar_type=scalar_type_of(data.dtype),
            sizes=list(data.shape),
            strides=[s // item for s in data.strides] if data.size else [0] * data.ndim,
            offset=start,
        )

    def _value(self, value: Any) -> Value:
        if isinstance(value, np.ndarray):
            return Value(val=ValueType.Tensor, tensor=self._tensor(value))
        if isinstance(value, (list, tuple)) and all(isinstance(x, np.ndarray) for x in value):
            tensors = [self._tensor(x) for x in value]
            return Value(val=ValueType.TensorList, tensor_list=TensorList(tensors))
        if isinstance(value, (bool, np.bool_)):
            return Value(val=ValueType.Bool, bool_value=Bool(bool(value)))
        if isinstance(value, (int, np.integer)):
            return Value(val=ValueType.Int, int_value=Int(int(value)))
        if isinstance(value, (float, np.floating)):
            return Value(val=ValueType.Double, double_value=Double(float(value)))
        return Value(val=ValueType.Null)

    def _debug_event(self, value: Any, chain: int, instruction: int, **ids: Any) -> Event:
        return Event(
            debug_event=DebugEvent(
                chain_index=chain % (1 << 64),
                instruction_id=instruction,
                debug_entry=self._value(value),
                **ids,
            )
        )

    # ----------------------------------------------------------------- output

    def to_etdump(self) -> ETDump:
        """The recorded events as ETDump tables, one ``RunData`` per block."""
        self.flush()
        templates = self.templates
        runs = []
        for block in self.blocks:
            events: list[Event] = []
            for item in block.items:
                if type(item) is not tuple:
                    events.append(item)
                    continue
                start, end = item[1], item[2]
                for template in templates[item[0]]:
                    event = replace(template, start_time=start, end_time=end)
                    if len(item) == 4:
                        event.chain_index, event.instruction_id = item[3]
                    events.append(Event(profile_event=event))
            runs.append(RunData(name=block.name, events=events))
        return ETDump(version=0, run_data=runs)

    def etdump_bytes(self) -> bytes:
        return encode_etdump(self.to_etdump())

    def write(
        self, path: str | os.PathLike, debug_buffer_path: str | os.PathLike | None = None
    ) -> None:
        """Write the ETDump to ``path`` and, when there is one, the debug buffer to ``debug_buffer_path``."""
        data = self.etdump_bytes()
        with open(path, "wb") as f:
            f.write(data)
        if debug_buffer_path is not None and self.debug_buffer is not None:
            with open(debug_buffer_path, "wb") as f:
                f.write(self.debug_buffer.tobytes())
