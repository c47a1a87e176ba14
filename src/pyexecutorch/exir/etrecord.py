"""ETRecord: what the compiler knew, saved next to a ``.pte`` for the Inspector (needs torch).

The file is the official zip layout: an empty ``ETRECORD_V0`` marker entry;
each program as the four blobs of the official exporter's serializer
(:mod:`pyexecutorch.exir.serde.serialize`: ``<name>``, ``<name>_state_dict``,
``<name>_constants``, ``<name>_example_inputs``): ``exported_program`` (the ATen
program) and ``edge_dialect_exported_program/<method>`` (the edge programs; after
``to_executorch``, what the edge manager shows: the planned programs); the JSON maps
``debug_handle_map`` ({method: {instruction: handle or handles}}),
``delegate_map`` ({method: {instruction: {"name": backend, "delegate_map":
{backend id: handles}}}}) and ``instruction_id_to_num_outs_map``; and
``representative_inputs`` / ``reference_outputs`` saved by ``torch.save``.

Each node's debug handle is in its serialized metadata (``"debug_handle": "<n>"``),
so the official ``parse_etrecord`` restores it, and so does ours. A compilation made
with ``generate_etrecord=True`` records its edge programs before delegation: their
nodes, and the handles the delegate map points at, are all there.

The compiler holds the ETRecord (``to_edge(..., generate_etrecord=True)``,
``ExecutorchProgramManager.get_etrecord``); :mod:`pyexecutorch.devtools.etrecord`, the
official path, offers the same names for reading it.
"""

from __future__ import annotations

import copy
import enum
import io
import json
import os
import zipfile
from dataclasses import dataclass
from typing import Any

import torch
from torch.export import ExportedProgram

from pyexecutorch.exir.serde.serialize import (
    OFFICIAL_SCHEMA_VERSION as OFFICIAL_SCHEMA_VERSION,  # offered by devtools.etrecord
)
from pyexecutorch.exir.serde.serialize import (
    SerializedArtifact,
    SerializeError,
    deserialize,
    serialize,
)


class ETRecordReservedFileNames(enum.StrEnum):
    """The zip entry names an ETRecord reserves (no recorded module may use one)."""

    ETRECORD_IDENTIFIER = "ETRECORD_V0"
    EXPORTED_PROGRAM = "exported_program"
    EXPORT_GRAPH_ID = "export_graph_id"
    EDGE_DIALECT_EXPORTED_PROGRAM = "edge_dialect_exported_program"
    ET_DIALECT_GRAPH_MODULE = "et_dialect_graph_module"
    DEBUG_HANDLE_MAP_NAME = "debug_handle_map"
    DELEGATE_MAP_NAME = "delegate_map"
    INSTRUCTION_ID_TO_NUM_OUTS_MAP_NAME = "instruction_id_to_num_outs_map"
    REFERENCE_OUTPUTS = "reference_outputs"
    REPRESENTATIVE_INPUTS = "representative_inputs"


_R = ETRecordReservedFileNames
IDENTIFIER = _R.ETRECORD_IDENTIFIER.value
EXPORTED_PROGRAM = _R.EXPORTED_PROGRAM.value
EDGE_PROGRAM = _R.EDGE_DIALECT_EXPORTED_PROGRAM.value
DEBUG_HANDLE_MAP = _R.DEBUG_HANDLE_MAP_NAME.value
DELEGATE_MAP = _R.DELEGATE_MAP_NAME.value
NUM_OUTS_MAP = _R.INSTRUCTION_ID_TO_NUM_OUTS_MAP_NAME.value
REFERENCE_OUTPUTS = _R.REFERENCE_OUTPUTS.value
REPRESENTATIVE_INPUTS = _R.REPRESENTATIVE_INPUTS.value
EXPORT_GRAPH_ID = _R.EXPORT_GRAPH_ID.value
_BLOB_SUFFIXES = ("_state_dict", "_constants", "_example_inputs")


class ETRecordError(RuntimeError):
    """An ETRecord file that cannot be read, or an ETRecord that cannot be saved."""


@dataclass
class NodeInfo:
    """What the Inspector shows of one graph node."""

    name: str
    target_name: str
    stack_trace: str | None
    module_stack: dict[str, Any] | None
    node: Any


def _target_name(node: torch.fx.Node) -> str:
    # The operator's own __name__, as the official Inspector reads it: edge operators call
    # themselves "aten.add.Tensor", torch's "add.Tensor".
    return getattr(node.target, "__name__", str(node.target))


def edge_program_of(record: Any, method: str = "forward") -> Any:
    """The ETRecord's edge program of ``method`` (its only one when not saved per method)."""
    program = record.edge_dialect_program
    return program.get(method) if isinstance(program, dict) else program


def nodes_by_debug_handle(program: Any) -> dict[int, list[NodeInfo]]:
    """The call nodes of an edge program (or a dict of them, ``forward`` used) by debug handle;
    several nodes share a handle when they come from one source operator."""
    if isinstance(program, dict):
        program = program.get("forward") or next(iter(program.values()), None)
    if program is None:
        return {}
    found: dict[int, list[NodeInfo]] = {}
    for node in program.graph_module.graph.nodes:
        handle = node.meta.get("debug_handle")
        if node.op != "call_function" or handle is None:
            continue
        found.setdefault(handle, []).append(
            NodeInfo(
                node.name,
                _target_name(node),
                node.meta.get("stack_trace"),
                node.meta.get("nn_module_stack"),
                node,
            )
        )
    return found


def _json_keys(mapping: Any) -> Any:
    """A map as JSON keeps it: keys become strings, at every level."""
    return json.loads(json.dumps(mapping)) if mapping is not None else None


class ETRecord:
    """The graphs and maps the Inspector needs, with the official attribute names.

    Made by ``to_edge(..., generate_etrecord=True)`` and
    ``ExecutorchProgramManager.get_etrecord()``, by :func:`generate_etrecord`, or
    piece by piece with the ``add_*`` methods. The maps are kept as given (a parsed
    ETRecord's, read from JSON, have string keys)."""

    def __init__(
        self,
        exported_program: ExportedProgram | None = None,
        export_graph_id: int | None = None,
        edge_dialect_program: ExportedProgram | dict[str, ExportedProgram] | None = None,
        graph_map: dict[str, ExportedProgram] | None = None,
        _debug_handle_map: dict | None = None,
        _delegate_map: dict | None = None,
        _instruction_id_to_num_outs_map: dict | None = None,
        _reference_outputs: dict[str, list[Any]] | None = None,
        _representative_inputs: list[Any] | None = None,
    ) -> None:
        self.exported_program = exported_program
        self.export_graph_id = export_graph_id
        self.edge_dialect_program = edge_dialect_program
        self.graph_map = graph_map
        self._debug_handle_map = _debug_handle_map
        self._delegate_map = _delegate_map
        self._instruction_id_to_num_outs_map = _instruction_id_to_num_outs_map
        self._reference_outputs = _reference_outputs
        self._representative_inputs = _representative_inputs

    def _edge_programs(self) -> dict[str, ExportedProgram]:
        program = self.edge_dialect_program
        if isinstance(program, ExportedProgram):
            return {"forward": program}
        return dict(program or {})

    def copy(self) -> ETRecord:
        """The programs recorded so far, without the executorch program's maps and data."""
        return ETRecord(
            exported_program=self.exported_program,
            export_graph_id=self.export_graph_id,
            edge_dialect_program=self.edge_dialect_program,
            graph_map=self.graph_map,
        )

    def save(self, path: str | os.PathLike | Any) -> None:
        """Write the ETRecord zip to ``path`` (a path or a binary file object)."""
        if not (self.edge_dialect_program and self._debug_handle_map):
            raise ETRecordError(
                "ETRecord must contain edge dialect program and executorch program to be saved: "
                "get it from ExecutorchProgramManager.get_etrecord() or add them "
                "(add_edge_dialect_program, add_executorch_program)"
            )
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(IDENTIFIER, "")
            if self.exported_program is not None:
                _write_program(z, EXPORTED_PROGRAM, self.exported_program)
            for method, program in self._edge_programs().items():
                _write_program(z, f"{EDGE_PROGRAM}/{method}", program)
            for name, program in (self.graph_map or {}).items():
                _write_program(z, name if "/" in name else f"{name}/forward", program)
            z.writestr(DEBUG_HANDLE_MAP, json.dumps(self._debug_handle_map))
            if self._delegate_map is not None:
                z.writestr(DELEGATE_MAP, json.dumps(self._delegate_map))
            if self._instruction_id_to_num_outs_map is not None:
                z.writestr(NUM_OUTS_MAP, json.dumps(self._instruction_id_to_num_outs_map))
            for name, value in (
                (REFERENCE_OUTPUTS, self._reference_outputs),
                (REPRESENTATIVE_INPUTS, self._representative_inputs),
            ):
                if value is not None:
                    buf = io.BytesIO()
                    torch.save(value, buf)
                    z.writestr(name, buf.getvalue())
            if self.export_graph_id is not None:
                z.writestr(EXPORT_GRAPH_ID, json.dumps(self.export_graph_id))

    # ------------------------------------------------------- recording piece by piece

    def add_exported_program(
        self, exported_program: ExportedProgram | dict[str, ExportedProgram] | None
    ) -> None:
        """Record the ATen program (a dict's ``forward``); None records nothing."""
        if self.exported_program is not None or self.export_graph_id is not None:
            raise ETRecordError(
                "Exported program already exists in the ETRecord: add_exported_program records one"
            )
        if isinstance(exported_program, dict):
            exported_program = exported_program.get("forward")
        if exported_program is not None and not isinstance(exported_program, ExportedProgram):
            raise ETRecordError(
                f"add_exported_program takes a torch.export ExportedProgram (or a dict of them), "
                f"not {type(exported_program).__name__}"
            )
        self.exported_program = exported_program
        # the graph's identity, which the Inspector matches the ATen graph's nodes by
        self.export_graph_id = id(exported_program.graph) if exported_program is not None else None

    def add_edge_dialect_program(self, edge_dialect_program: Any) -> None:
        """Record an EdgeProgramManager's programs (one method: its program alone)."""
        if self.edge_dialect_program is not None:
            raise ETRecordError(
                "Edge dialect program already exists in the ETRecord: "
                "add_edge_dialect_program records one"
            )
        self.edge_dialect_program = _edge_of(edge_dialect_program, "edge_dialect_program")

    def add_executorch_program(self, executorch_program: Any) -> None:
        """Record an ExecutorchProgramManager's maps (a BundledProgram's too, with its
        test inputs and expected outputs)."""
        held = (
            self._debug_handle_map,
            self._delegate_map,
            self._instruction_id_to_num_outs_map,
            self._reference_outputs,
            self._representative_inputs,
        )
        if any(v is not None for v in held):
            raise ETRecordError(
                "Executorch program data already exists in the ETRecord: "
                "add_executorch_program records one"
            )
        manager = executorch_program
        if _is_bundled(executorch_program):
            self._reference_outputs = _get_reference_outputs(executorch_program)
            self._representative_inputs = _get_representative_inputs(executorch_program)
            manager = executorch_program.executorch_program
        if not hasattr(manager, "debug_handle_map"):
            raise ETRecordError(
                "add_executorch_program takes an ExecutorchProgramManager or a BundledProgram, "
                f"not {type(executorch_program).__name__}"
            )
        self._debug_handle_map = manager.debug_handle_map
        self._delegate_map = manager.delegate_map
        self._instruction_id_to_num_outs_map = manager.instruction_id_to_num_outs_map

    def add_extra_export_modules(self, extra_recorded_export_modules: dict[str, Any]) -> None:
        """Record more programs under names of one's own (``name/method`` in ``graph_map``)."""
        graph_map = self.graph_map if self.graph_map is not None else {}
        for name, module in extra_recorded_export_modules.items():
            clash = [r.value for r in ETRecordReservedFileNames if r.value in name]
            if clash:
                raise ETRecordError(
                    f"extra_recorded_export_modules: the name {name!r} holds the reserved "
                    f"ETRecord name {clash[0]!r}"
                )
            if isinstance(module, ExportedProgram):
                graph_map[f"{name}/forward"] = module
            elif _is_edge_manager(module):
                for method in module.methods:
                    graph_map[f"{name}/{method}"] = module.exported_program(method)
            elif isinstance(getattr(module, "exported_program", None), ExportedProgram):
                graph_map[f"{name}/forward"] = module.exported_program
            else:
                raise ETRecordError(
                    f"extra_recorded_export_modules[{name!r}]: a {type(module).__name__} is not "
                    "an ExportedProgram or an EdgeProgramManager"
                )
        self.graph_map = graph_map

    def update_representative_inputs(self, inputs: Any) -> None:
        """The inputs the Inspector reruns: a list, or a BundledProgram's forward inputs."""
        self._representative_inputs = (
            _get_representative_inputs(inputs) if _is_bundled(inputs) else list(inputs)
        )

    def update_reference_outputs(self, outputs: Any) -> None:
        """Expected outputs by method: a dict, a list (forward's), or a BundledProgram's."""
        if _is_bundled(outputs):
            self._reference_outputs = _get_reference_outputs(outputs)
        else:
            self._reference_outputs = outputs if isinstance(outputs, dict) else {"forward": outputs}


def _is_bundled(value: Any) -> bool:
    return hasattr(value, "method_test_suites") and hasattr(value, "executorch_program")


def _is_edge_manager(value: Any) -> bool:
    from pyexecutorch.exir.program_manager import EdgeProgramManager  # noqa: PLC0415 - lazily

    return isinstance(value, EdgeProgramManager)


def _edge_of(manager: Any, what: str) -> ExportedProgram | dict[str, ExportedProgram]:
    if isinstance(getattr(manager, "exported_program", None), ExportedProgram):
        return manager.exported_program  # a legacy ExirExportedProgram
    if not _is_edge_manager(manager):
        raise ETRecordError(f"{what}: takes an EdgeProgramManager, not {type(manager).__name__}")
    # what the manager shows: after a to_executorch, the planned programs (as the official
    # manager, which plans its programs in place)
    methods = sorted(manager.methods)
    if len(methods) == 1:
        return manager.exported_program(methods[0])
    return {m: manager.exported_program(m) for m in methods}


def _get_reference_outputs(bundled_program: Any) -> dict[str, list[Any]]:
    """A bundled program's expected outputs by method (the official private helper's name)."""
    outputs: dict[str, list[Any]] = {}
    for suite in bundled_program.method_test_suites:
        for case in suite.test_cases:
            if not case.expected_outputs:
                raise ETRecordError(
                    f"method {suite.method_name!r}: a test case has no expected outputs"
                )
        outputs[suite.method_name] = [case.expected_outputs for case in suite.test_cases]
    return outputs


def _get_representative_inputs(bundled_program: Any) -> list[Any] | None:
    """The inputs of a bundled program's first forward test case (None without forward)."""
    for suite in bundled_program.method_test_suites:
        if suite.method_name == "forward":
            if not suite.test_cases:
                raise ETRecordError("method 'forward' is bundled without a test case")
            return suite.test_cases[0].inputs
    return None


def _write_program(z: zipfile.ZipFile, name: str, program: ExportedProgram) -> None:
    try:
        artifact = serialize(program)
    except SerializeError as e:
        raise ETRecordError(f"ETRecord entry {name!r}: {e}") from e
    z.writestr(name, artifact.exported_program)
    z.writestr(f"{name}_state_dict", artifact.state_dict)
    z.writestr(f"{name}_constants", artifact.constants)
    z.writestr(f"{name}_example_inputs", artifact.example_inputs)


def _read_program(z: zipfile.ZipFile, name: str) -> ExportedProgram:
    try:
        blobs = [z.read(name), *(z.read(name + s) for s in _BLOB_SUFFIXES)]
    except KeyError as e:
        raise ETRecordError(f"ETRecord entry {name!r} lacks its companion entries: {e}") from None
    try:
        return deserialize(SerializedArtifact(*blobs))
    except SerializeError as e:
        raise ETRecordError(f"ETRecord entry {name!r}: {e}") from e


def parse_etrecord(etrecord_path: str | os.PathLike | Any) -> ETRecord:
    """Read an ETRecord (ours or the official exporter's, when torch's serializer reads its graphs)."""
    try:
        z = zipfile.ZipFile(etrecord_path, "r")
    except (zipfile.BadZipFile, OSError) as e:
        raise ETRecordError(f"not an ETRecord file: {etrecord_path}: {e}") from None
    with z:
        names = z.namelist()
        if IDENTIFIER not in names:
            raise ETRecordError(f"not an ETRecord file: {etrecord_path}: no {IDENTIFIER} entry")
        maps = {
            key: json.loads(z.read(key)) if key in names else None
            for key in (DEBUG_HANDLE_MAP, DELEGATE_MAP, NUM_OUTS_MAP, EXPORT_GRAPH_ID)
        }
        saved = {
            key: torch.load(io.BytesIO(z.read(key)), weights_only=True) if key in names else None
            for key in (REFERENCE_OUTPUTS, REPRESENTATIVE_INPUTS)
        }
        programs = [n for n in names if not n.endswith(_BLOB_SUFFIXES) and n not in maps]
        programs = [n for n in programs if n not in saved and n != IDENTIFIER]
        exported = _read_program(z, EXPORTED_PROGRAM) if EXPORTED_PROGRAM in programs else None
        prefix = f"{EDGE_PROGRAM}/"
        edge = {n[len(prefix) :]: _read_program(z, n) for n in programs if n.startswith(prefix)}
        graph_map = {
            n: _read_program(z, n)
            for n in programs
            if n != EXPORTED_PROGRAM and not n.startswith(prefix)
        }
    return ETRecord(
        exported_program=exported,
        export_graph_id=maps[EXPORT_GRAPH_ID],
        edge_dialect_program=edge["forward"] if list(edge) == ["forward"] else edge or None,
        graph_map=graph_map,
        _debug_handle_map=maps[DEBUG_HANDLE_MAP],
        _delegate_map=maps[DELEGATE_MAP],
        _instruction_id_to_num_outs_map=maps[NUM_OUTS_MAP],
        _reference_outputs=saved[REFERENCE_OUTPUTS],
        _representative_inputs=saved[REPRESENTATIVE_INPUTS],
    )


# ------------------------------------------------------------- from the compiler


def record_programs(aten: Any, edge: dict[str, ExportedProgram]) -> ETRecord:
    """The start of an ETRecord, taken by ``to_edge(..., generate_etrecord=True)``."""
    aten_forward = aten.get("forward") if isinstance(aten, dict) else aten
    return ETRecord(
        exported_program=copy.deepcopy(aten_forward) if aten_forward is not None else None,
        # the caller's graph: the Inspector matches ATen nodes to edge nodes by its identity
        export_graph_id=id(aten_forward.graph) if aten_forward is not None else None,
        edge_dialect_program=copy.deepcopy(edge["forward"] if list(edge) == ["forward"] else edge),
    )


def complete(record: ETRecord, manager: Any) -> ETRecord:
    """``record`` with an ExecutorchProgramManager's maps and a reference run of its inputs."""
    done = copy.copy(record)
    done._debug_handle_map = manager.debug_handle_map
    done._delegate_map = manager.delegate_map
    done._instruction_id_to_num_outs_map = manager.instruction_id_to_num_outs_map
    aten = record.exported_program
    if aten is not None and done._representative_inputs is None:
        args, kwargs = aten.example_inputs or ((), {})
        if not kwargs and all(isinstance(a, torch.Tensor) for a in args):
            done._representative_inputs = [a.clone() for a in args]
            with torch.no_grad():
                out = aten.module()(*args)
            flat = list(out) if isinstance(out, (list, tuple)) else [out]
            done._reference_outputs = {"forward": [[o.detach().clone() for o in flat]]}
    return done


def generate_etrecord(
    et_record: str | os.PathLike | Any,
    edge_dialect_program: Any,
    executorch_program: Any,
    exported_program: ExportedProgram | dict[str, ExportedProgram] | None = None,
    extra_recorded_export_modules: dict[str, Any] | None = None,
) -> None:
    """Save the ETRecord of a compilation. A compilation made with
    ``generate_etrecord=True`` keeps its edge programs from before delegation, which
    are recorded then; otherwise ``edge_dialect_program``'s are."""
    record = getattr(executorch_program, "_etrecord", None)
    if record is None:
        record = ETRecord()
        record.add_exported_program(exported_program)
        record.add_edge_dialect_program(edge_dialect_program)
        record.add_executorch_program(executorch_program)
    else:
        record = complete(record, executorch_program)
    if extra_recorded_export_modules is not None:
        record.add_extra_export_modules(extra_recorded_export_modules)
    record.save(et_record)
