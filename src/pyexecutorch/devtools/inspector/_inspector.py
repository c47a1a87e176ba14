"""How the events of an ETDump run are told apart, under the official private module
path (``executorch.devtools.inspector._inspector``), over the official ETDump
dataclasses (:mod:`pyexecutorch.devtools.etdump.schema_flatcc`): the events of one
instruction in a run (:class:`InstructionEvent`), and the signatures that say which
events of two runs are the same event (a run's events with equal signatures are merged
into one Inspector event, one duration per run). Numpy-free and torch-free.

Our :class:`~pyexecutorch.devtools.inspector.Inspector` reads our own ETDump classes
and groups runs the same way; these names serve code written against the official
module."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypedDict

from pyexecutorch.devtools.etdump import schema_flatcc as flatcc
from pyexecutorch.devtools.etdump.schema_flatcc import DebugEvent, ProfileEvent
from pyexecutorch.devtools.inspector import Event, EventBlock, Inspector, PerfData, TimeScale

__all__ = [
    "DebugEventSignature",
    "DelegateMetadata",
    "Event",
    "EventBlock",
    "EventSignature",
    "Inspector",
    "InstructionEvent",
    "InstructionEventSignature",
    "PerfData",
    "ProfileEventSignature",
    "RunSignature",
    "TimeScale",
    "find_populated_event",
    "flatcc",
    "is_debug_output",
]

UNSET_ID = -1  # what the ETDump holds in an id field that is not set
UNSET_STR = ""  # likewise for a string field


def find_populated_event(event: flatcc.Event) -> ProfileEvent | DebugEvent:
    """The profile event of an ETDump event, else its debug event."""
    if event.profile_event is not None:
        return event.profile_event
    if event.debug_event is not None:
        return event.debug_event
    raise ValueError("the ETDump event holds neither a profile event nor a debug event")


def is_debug_output(value: flatcc.Value) -> bool:
    """Whether a logged value is one of a run's outputs."""
    return value.output is not None and bool(value.output.bool_val)


def _id(value: int | None) -> int | None:
    return None if value == UNSET_ID else value


def _id_str(value: str | None) -> str | None:
    return None if value == UNSET_STR else value


@dataclass(frozen=True, order=True)
class InstructionEventSignature:
    """Which instruction (and which delegate-internal event of it) an event belongs to."""

    instruction_id: int
    chain_index: int
    delegate_id: int | None = None
    delegate_id_str: str | None = None


@dataclass
class InstructionEvent:
    """The profile and debug events of one instruction in one run."""

    signature: InstructionEventSignature
    profile_events: list[ProfileEvent] | None = None
    debug_events: list[DebugEvent] | None = None

    @staticmethod
    def gen_from_events(run_events: list[flatcc.Event]) -> list[InstructionEvent]:
        """A run's events gathered by instruction, in first-seen order (the run's
        outputs, logged as debug events, left out)."""
        gathered: dict[InstructionEventSignature, InstructionEvent] = {}
        for event in run_events:
            inner = find_populated_event(event)
            signature = InstructionEventSignature(
                instruction_id=inner.instruction_id,
                chain_index=inner.chain_index,
                delegate_id=inner.delegate_debug_id_int,
                delegate_id_str=inner.delegate_debug_id_str,
            )
            entry = gathered.setdefault(signature, InstructionEvent(signature=signature))
            if isinstance(inner, ProfileEvent):
                entry.profile_events = [*(entry.profile_events or []), inner]
            elif not is_debug_output(inner.debug_entry):
                entry.debug_events = [*(entry.debug_events or []), inner]
        return list(gathered.values())


@dataclass(frozen=True, order=True)
class ProfileEventSignature:
    name: str
    instruction_id: int | None
    delegate_id: int | None = None
    delegate_id_str: str | None = None

    @staticmethod
    def _gen_from_event(event: ProfileEvent) -> ProfileEventSignature:
        """The signature of a profile event, the ETDump's unset markers read as None."""
        return ProfileEventSignature(
            event.name or "",
            _id(event.instruction_id),
            _id(event.delegate_debug_id_int),
            _id_str(event.delegate_debug_id_str),
        )


@dataclass(frozen=True, order=True)
class DebugEventSignature:
    name: str = ""
    instruction_id: int | None = UNSET_ID
    delegate_id: int | None = None
    delegate_id_str: str | None = None

    @staticmethod
    def _gen_from_event(event: DebugEvent) -> DebugEventSignature:
        """The signature of a debug event, the ETDump's unset markers read as None."""
        return DebugEventSignature(
            event.name or "",
            _id(event.instruction_id),
            _id(event.delegate_debug_id_int),
            _id_str(event.delegate_debug_id_str),
        )


@dataclass(frozen=True, order=True)
class EventSignature:
    """One event of a run: its profile and debug signatures (either suffices to tell
    events apart); ``instruction_id`` is theirs, surfaced."""

    instruction_id: int
    profile_event_signature: ProfileEventSignature | None = None
    debug_event_signature: DebugEventSignature | None = None

    @staticmethod
    def gen_from_instruction_event(
        instruction_event: InstructionEvent,
    ) -> list[tuple[EventSignature, InstructionEvent]]:
        """One (signature, events) pair per profile event of the instruction (one pair
        when it has only debug events); each pair keeps the instruction's debug events."""
        debug = instruction_event.debug_events
        debug_signature = DebugEventSignature._gen_from_event(debug[0]) if debug else None
        instruction_id = instruction_event.signature.instruction_id
        if instruction_event.profile_events is None:
            return [(EventSignature(instruction_id, None, debug_signature), instruction_event)]
        return [
            (
                EventSignature(
                    instruction_id, ProfileEventSignature._gen_from_event(p), debug_signature
                ),
                dataclasses.replace(instruction_event, profile_events=[p]),
            )
            for p in instruction_event.profile_events
        ]


@dataclass(frozen=True, order=True)
class RunSignature:
    """A run's name, its events' signatures and the bundled input it ran."""

    name: str
    events: tuple[EventSignature, ...] | None = None
    bundled_input_index: int | None = None


class DelegateMetadata(TypedDict):
    """An ETRecord delegate-map entry: the backend and its debug ids' handles."""

    name: str
    delegate_map: dict[Any, Any]
