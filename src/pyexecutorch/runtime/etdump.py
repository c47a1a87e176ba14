"""Event tracing for ETDump: what a traced method records while it loads and runs.

One :class:`EventTracer` serves a program (or a module) loaded with
``enable_etdump=True``. Its methods are compiled in an instrumented variant
(see :mod:`pyexecutorch.runtime.traced`) whose generated lines append
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
:meth:`EventTracer.delegate_key`, :meth:`EventTracer.record_delegate` and, when
:attr:`EventTracer.logs_delegate_outputs` (asked for at load),
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
from pyexecutorch.schema.scalar_type import ScalarType, scalar_type_of

clock = time.perf_counter_ns  # monotonic nanoseconds


class DebugBufferFullError(RuntimeError):
    """The debug buffer cannot hold another intermediate output."""


@dataclass
class _Block:
    """One RunData's raw events, made into ETDump tables (in time order) only when written.

    Items: ``(key, start, end)`` and ``(key, start, end, (chain, instruction))``
    for registered events; ``("slots", keys, times)``, the calls of a
    straight-line chain (call ``i`` from ``times[i]`` to ``times[i + 1]``);
    ``("span", name, start, end)`` for whole-method events; ``(time, Event)``
    for debug events.
    """

    name: str
    items: list[Any]


class EventTracer:
    """Records profile and debug events; :meth:`write` saves them as an ETDump."""

    def __init__(self, debug_buffer_size: int = 0, delegate_outputs: bool = False) -> None:
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
        self.debug_buffer = bytearray(debug_buffer_size) if debug_buffer_size else None
        if self.debug_buffer is not None:
            # Touch every page now (as the official runtime zeroes its buffer), not in the runs.
            np.frombuffer(self.debug_buffer, np.uint8).fill(0)
        self._debug_view = memoryview(self.debug_buffer) if debug_buffer_size else None
        # Outputs of the nodes inside delegates too (the official delegates log none: a
        # trace with them has more intermediate outputs than the official Inspector expects).
        self.delegate_outputs = delegate_outputs
        self._scalar_types: dict[np.dtype, int] = {}
        self.debug_used = 0
        # The instruction running now, set around delegate calls for the backend's events.
        self.instruction: tuple[int, int] = (0, UNSET)

    @property
    def logs_outputs(self) -> bool:
        return self.debug_buffer is not None

    @property
    def logs_delegate_outputs(self) -> bool:
        """Whether backends log the outputs of the nodes inside their delegates."""
        return self.debug_buffer is not None and self.delegate_outputs

    # ------------------------------------------------------------ registration

    def key(self, *events: ProfileEvent) -> int:
        """Register the profile events one recorded ``(key, start, end)`` stands for."""
        self.templates.append(events)
        return len(self.templates) - 1

    def kernel_key(
        self, operator: str, overload: str, chain: int, instruction: int, *, prim: bool
    ) -> int:
        """The key of one kernel instruction: ``native_call_<op>.<overload>`` inside ``OPERATOR_CALL``.

        Primitive operators (``prim``: the stack-style ones, see
        ``OperatorFacts.stack_style``) have no generated wrapper in the official runtime,
        hence only ``OPERATOR_CALL``.
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
        self.blocks[-1].items.append(("span", name, start, end))

    def record_slots(self, keys: tuple[int, ...], times: list[int]) -> None:
        """One run of a straight-line chain: call ``i`` (event ``keys[i]``) ran from
        ``times[i]`` to ``times[i + 1]``."""
        self.pending.append(("slots", keys, times.copy()))

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
        ids = (UNSET, name) if debug_id is None else (debug_id, None)
        self.pending.append(("debug", clock(), chain, instruction, *ids, False, self._value(value)))

    def log(self, chain: int, instruction: int, values: tuple[Any, ...]) -> None:
        """Outputs of one instruction, logged from the generated code."""
        append = self.pending.append
        now = clock()
        for value in values:
            append(("debug", now, chain, instruction, UNSET, None, False, self._value(value)))

    def log_run_outputs(self, outputs: list[Any]) -> None:
        items = self.blocks[-1].items
        now = clock()
        for value in outputs:
            items.append(("debug", now, OUTPUT_CHAIN, 0, UNSET, None, True, self._value(value)))

    # ------------------------------------------------------------- debug data
    # Values are kept as tuples of plain numbers while recording (cheap, and
    # untracked by the garbage collector) and become tables when written.

    def _tensor(self, array: np.ndarray) -> tuple:
        view = self._debug_view
        data = np.ascontiguousarray(array)
        start = -self.debug_used // DEBUG_BUFFER_ALIGNMENT * -DEBUG_BUFFER_ALIGNMENT
        end = start + data.nbytes
        if end > len(view):
            raise DebugBufferFullError(
                f"the {len(view)}-byte ETDump debug buffer is full: a {data.dtype.name}"
                f"{list(data.shape)} output needs {data.nbytes} bytes at offset {start}; "
                "load with a larger debug_buffer_size"
            )
        view[start:end] = data.reshape(-1).view(np.uint8).data
        self.debug_used = end
        item = data.itemsize
        strides = tuple(s // item for s in data.strides) if data.size else (0,) * data.ndim
        dtype = data.dtype
        scalar_type = self._scalar_types.get(dtype)
        if scalar_type is None:
            scalar_type = self._scalar_types[dtype] = int(scalar_type_of(dtype))
        return ("tensor", scalar_type, data.shape, strides, start)

    def _value(self, value: Any) -> tuple:
        if isinstance(value, np.ndarray):
            return self._tensor(value)
        if isinstance(value, (list, tuple)) and all(isinstance(x, np.ndarray) for x in value):
            return ("list", tuple(self._tensor(x) for x in value))
        if isinstance(value, (bool, np.bool_)):
            return ("bool", bool(value))
        if isinstance(value, (int, np.integer)):
            return ("int", int(value))
        if isinstance(value, (float, np.floating)):
            return ("double", float(value))
        return ("null",)

    # ----------------------------------------------------------------- output

    def to_etdump(self) -> ETDump:
        """The recorded events as ETDump tables, one ``RunData`` per block."""
        self.flush()
        runs = [RunData(name=block.name, events=self._events(block)) for block in self.blocks]
        return ETDump(version=0, run_data=runs)

    def _events(self, block: _Block) -> list[Event]:
        """A block's events in the order they ended, as the official runtime writes them."""
        templates = self.templates
        timed: list[tuple[int, int, Event]] = []

        def add(end: int, event: Event) -> None:
            timed.append((end, len(timed), event))

        def profile(key: int, start: int, end: int, where: tuple[int, int] | None = None) -> None:
            for template in templates[key]:
                event = replace(template, start_time=start, end_time=end)
                if where is not None:
                    event.chain_index, event.instruction_id = where
                add(end, Event(profile_event=event))

        for item in block.items:
            kind = item[0]
            if kind == "slots":
                _, keys, times = item
                for i, key in enumerate(keys):
                    profile(key, times[i], times[i + 1])
            elif kind == "span":
                _, name, start, end = item
                event = ProfileEvent(
                    name=name, chain_index=-1, instruction_id=0, start_time=start, end_time=end
                )
                add(end, Event(profile_event=event))
            elif kind == "debug":
                add(item[1], _debug_table(item))
            else:
                profile(*item)
        timed.sort(key=lambda t: (t[0], t[1]))
        return [event for _, _, event in timed]

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
                f.write(self.debug_buffer)


def _tensor_table(spec: tuple) -> Tensor:
    _, scalar_type, sizes, strides, offset = spec
    return Tensor(ScalarType(scalar_type), list(sizes), list(strides), offset)


def _value_table(spec: tuple) -> Value:
    kind = spec[0]
    if kind == "tensor":
        return Value(val=ValueType.Tensor, tensor=_tensor_table(spec))
    if kind == "list":
        tensors = [_tensor_table(t) for t in spec[1]]
        return Value(val=ValueType.TensorList, tensor_list=TensorList(tensors))
    if kind == "bool":
        return Value(val=ValueType.Bool, bool_value=Bool(spec[1]))
    if kind == "int":
        return Value(val=ValueType.Int, int_value=Int(spec[1]))
    if kind == "double":
        return Value(val=ValueType.Double, double_value=Double(spec[1]))
    return Value(val=ValueType.Null)


def _debug_table(item: tuple) -> Event:
    _, _, chain, instruction, did_int, did_str, output, spec = item
    value = _value_table(spec)
    if output:
        value.output = Bool(True)
    return Event(
        debug_event=DebugEvent(
            chain_index=chain % (1 << 64),
            instruction_id=instruction,
            debug_entry=value,
            delegate_debug_id_int=did_int,
            delegate_debug_id_str=did_str,
        )
    )
