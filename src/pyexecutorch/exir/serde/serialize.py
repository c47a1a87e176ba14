"""``serialize`` / ``deserialize``: a program of any exir dialect (ATen, edge, or the
executorch dialect after memory planning) as the official ``executorch.exir.serde``
writes it, and read back.

The file is torch's export JSON at the official exporter's schema version 5.4 (the
fields newer torch adds are left out, and defaulted again on reading), with what the
exir dialects add:

- edge operators named ``executorch.exir.dialects.edge.ops.<namespace>.<op>.<overload>``;
- ``memory.alloc`` nodes: target ``"memory.alloc"``, one input per planned tensor
  (``alloc_arg``, or ``alloc_list`` for a tensor list), each the string
  ``"<shape tuple>;<dtype number>"``;
- ``memory.view`` nodes: target ``"executorch.exir.memory.view"``, positional inputs;
- delegate calls: the lowered module as one JSON string input named after its attribute
  (backend id; processed bytes, compile spec values, state dict and constants in
  base64; its edge program serialized the same way; its named data), then
  ``delegate_arg_<i>``;
- each node's debug handle in its metadata (``"debug_handle": "<n>"``).

torch's own (de)serializer does the rest. Its classes are final, so these nodes are
handled by methods set on the one serializer (deserializer) instance that writes
(reads) a program and its nested graphs. A program read back is not validated (as with
the official reader): the executorch dialect's out variants and markers are not torch's
dialect.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import operator
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

import torch
from torch._export.non_strict_utils import _enable_graph_inputs_of_type_nn_module
from torch._export.serde import schema as S
from torch._export.serde.serialize import (
    _SERIALIZE_TO_TORCH_DTYPE,
    _TORCH_TO_SERIALIZE_DTYPE,
    EnumEncoder,
    ExportedProgramDeserializer,
    GraphModuleDeserializer,
    GraphModuleSerializer,
    SerializedArtifact,
    _dataclass_to_dict,
    _dict_to_dataclass,
    _int_to_sympy_int,
    serialize_range_constraints,
    serialize_torch_artifact,
)
from torch._export.serde.serialize import SerializeError as TorchSerializeError
from torch._export.serde.union import _Union
from torch._export.utils import remove_proxy_from_state_dict
from torch._export.verifier import load_verifier
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature
from torch.fx.experimental import symbolic_shapes
from torch.utils._sympy.numbers import int_oo

from pyexecutorch.exir import memory
from pyexecutorch.exir.dialects import dim_order_ops
from pyexecutorch.exir.dialects.edge._ops import edge_op
from pyexecutorch.exir.passes import _device_copy_ops_registry as device_copies

__all__ = ["SerializedArtifact", "SerializeError", "deserialize", "serialize"]


class SerializeError(RuntimeError):
    """A program that cannot be written in, or read from, the official exporter's form."""


# The official exporter (de)serializes programs with its own copy of torch's export
# schema, at version 5.4; torch's own is newer. The fields (and union members) 5.4
# lacks are left out when writing.
OFFICIAL_SCHEMA_VERSION = {"major": 5, "minor": 4}
_NEWER_FIELDS: dict[type, frozenset[str]] = {
    S.ExportedProgram: frozenset({"torch_version", "guards_code"}),
    S.Graph: frozenset({"sym_float_values"}),
    S.GraphModule: frozenset({"treespec_namedtuple_fields", "metadata"}),
    S.ModuleCallSignature: frozenset({"forward_arg_names"}),
    S.NamedArgument: frozenset({"kind"}),
    S.Node: frozenset({"is_hop_single_tensor_return"}),
    S.OutputSpec: frozenset({"parameter_mutation"}),
    S.Argument: frozenset(
        {
            "as_string_to_argument",
            "as_float_lists",
            "as_int_lists",
            "as_optional_tensor",
            "as_nested_tensors",
            "as_sym_float",
            "as_sym_floats",
            "as_complex",
        }
    ),
}

_OFFICIAL_EDGE_OPS = "executorch.exir.dialects.edge.ops."
# Our edge operators name themselves with this module (torch's serializer writes
# "<module>.<name>"); the file names them as the official exporter does.
_OUR_EDGE_OPS = dim_order_ops.EDGE_MODULE + "."
_DIM_ORDER_OPS = f"torch.ops.{dim_order_ops.NAMESPACE}."
# The host/device copies are torch operators there, not edge ones.
_DEVICE_COPY_OPS = f"torch.ops.{device_copies.NAMESPACE}."
_ALLOC = "memory.alloc"
_VIEW = "executorch.exir.memory.view"


# ------------------------------------------------------------------ schema 5.4


@cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _to_official(value: Any, tp: Any, where: str) -> Any:
    """``value`` (torch's JSON of type ``tp``) without what schema 5.4 lacks."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return value if value is None or len(inner) != 1 else _to_official(value, inner[0], where)
    if origin is list:
        (item,) = typing.get_args(tp)
        return [_to_official(v, item, where) for v in value]
    if origin is dict:
        item = typing.get_args(tp)[1]
        return {k: _to_official(v, item, where) for k, v in value.items()}
    if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)) or not isinstance(value, dict):
        return value
    newer = _NEWER_FIELDS.get(tp, frozenset())
    hints = _field_types(tp)
    if issubclass(tp, _Union):
        (member,) = value
        if member in newer:
            raise SerializeError(
                f"{where}: a {tp.__name__} of kind {member!r} cannot be written in the official "
                "exporter's schema 5.4"
            )
    return {
        k: _to_official(v, hints[k], f"{where}.{k}") if k in hints else v
        for k, v in value.items()
        if k not in newer
    }


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# ------------------------------------------------------------------------ writing


def _alloc_text(spec: Any) -> str:
    shape, dtype = (spec.shape, spec.dtype) if hasattr(spec, "dtype") else spec
    return f"{tuple(int(s) for s in shape)};{_TORCH_TO_SERIALIZE_DTYPE[dtype].value}"


def _outputs_by_position(writer: GraphModuleSerializer, node: torch.fx.Node) -> list[S.Argument]:
    """A node without a schema: one tensor, or several named after their ``getitem``s (an
    unread one ``<node>_unused_<i>``); one list output when it holds a single tensor."""
    val = node.meta["val"]
    if isinstance(val, torch.Tensor):
        return [S.Argument.create(as_tensor=writer.serialize_tensor_output(node.name, val))]
    names = {u.args[1]: u.name for u in node.users if u.target is operator.getitem}
    tensors = [
        writer.serialize_tensor_output(names.get(i, f"{node.name}_unused_{i}"), v)
        for i, v in enumerate(val)
    ]
    if len(tensors) == 1:
        return [S.Argument.create(as_tensors=tensors)]
    return [S.Argument.create(as_tensor=t) for t in tensors]


def _write_alloc(writer: GraphModuleSerializer, node: torch.fx.Node) -> S.Node:
    (spec,) = node.args
    if isinstance(spec, list):
        inputs = [
            S.NamedArgument(name="alloc_list", arg=S.Argument.create(as_string=_alloc_text(s)))
            for s in spec
        ]
    else:
        inputs = [
            S.NamedArgument(name="alloc_arg", arg=S.Argument.create(as_string=_alloc_text(spec)))
        ]
    return S.Node(
        name=node.name,
        target=_ALLOC,
        inputs=inputs,
        outputs=_outputs_by_position(writer, node),
        metadata=writer.serialize_metadata(node),
    )


def _write_view(writer: GraphModuleSerializer, node: torch.fx.Node) -> S.Node:
    return S.Node(
        name=node.name,
        target=_VIEW,
        inputs=writer.serialize_hoo_inputs(node.args, node.kwargs),
        outputs=writer.serialize_hoo_outputs(node),
        metadata=writer.serialize_metadata(node),
    )


def _named_data_json(store: Any) -> str | None:
    if store is None:
        return None

    def entry(e: Any) -> dict[str, Any]:
        layout = e.tensor_layout
        return {
            "buffer_index": e.buffer_index,
            "alignment": e.alignment,
            "tensor_layout": None
            if layout is None
            else {
                "scalar_type": int(layout.scalar_type),
                "sizes": list(layout.sizes),
                "dim_order": list(layout.dim_order),
            },
        }

    return json.dumps(
        {
            "buffers": [_b64(bytes(b)) for b in store.buffers],
            "pte_data": {k: entry(e) for k, e in store.pte_data.items()},
            "external_data": {
                tag: {k: entry(e) for k, e in entries.items()}
                for tag, entries in store.external_data.items()
            },
        }
    )


def _lowered_json(lowered: Any) -> str:
    program, state_dict, constants, _ = _serialized(lowered.original_module, "lowered module")
    values = [
        (s.key, s.value.encode() if isinstance(s.value, str) else s.value)
        for s in lowered.compile_specs
    ]
    return json.dumps(
        {
            "backend_id": lowered.backend_id,
            "processed_bytes": _b64(lowered.processed_bytes),
            "compile_specs": [{"key": k, "value": _b64(v)} for k, v in values],
            "original_module": program,
            "original_state_dict": _b64(state_dict),
            "original_constants": _b64(constants),
            "named_data_store": _named_data_json(lowered.named_data_store_output),
        },
        cls=EnumEncoder,
    )


def _write_delegate(writer: GraphModuleSerializer, node: torch.fx.Node) -> S.Node:
    attr, *args = node.args
    lowered = getattr(attr.graph.owning_module, attr.target)
    inputs = [
        S.NamedArgument(name=attr.target, arg=S.Argument.create(as_string=_lowered_json(lowered)))
    ]
    inputs += [
        S.NamedArgument(name=f"delegate_arg_{i}", arg=writer.serialize_input(a))
        for i, a in enumerate(args)
    ]
    return S.Node(
        name=node.name,
        target=writer.serialize_operator(node.target),
        inputs=inputs,
        outputs=_outputs_by_position(writer, node),
        metadata=writer.serialize_metadata(node),
    )


@cache
def _writers() -> dict[Any, Callable[[GraphModuleSerializer, torch.fx.Node], S.Node]]:
    from pyexecutorch.exir.delegate import executorch_call_delegate  # noqa: PLC0415 - torch HOP

    return {
        memory.alloc: _write_alloc,
        memory.view: _write_view,
        executorch_call_delegate: _write_delegate,
    }


def _is_device_copy(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and target._schema.name.startswith(
        f"{device_copies.NAMESPACE}::"
    )


def _official_operator_names(name_of: Callable[[Any], str]) -> Callable[[Any], str]:
    def serialize_operator(target: Any) -> str:
        if _is_device_copy(target):
            return f"{_DEVICE_COPY_OPS}{target._overloadpacket.__name__}.{target._overloadname}"
        name = name_of(target)
        if name.startswith(_OUR_EDGE_OPS):
            return _OFFICIAL_EDGE_OPS + name[len(_OUR_EDGE_OPS) :]
        return name

    return serialize_operator


def _with_debug_handle(metadata_of: Callable[[torch.fx.Node], dict[str, str]]) -> Any:
    def serialize_metadata(node: torch.fx.Node) -> dict[str, str]:
        metadata = metadata_of(node)
        if node.meta.get("debug_handle") is not None:
            metadata["debug_handle"] = str(node.meta["debug_handle"])
        return metadata

    return serialize_metadata


def _serialized(program: ExportedProgram, where: str) -> tuple[dict[str, Any], bytes, bytes, bytes]:
    """``program`` as the official JSON (a dict) and its state dict, constants and example
    inputs as torch's artifacts."""
    writer = GraphModuleSerializer(program.graph_signature, program.module_call_graph)
    writers = _writers()
    handle_default = writer.handle_call_function

    def handle_call_function(node: torch.fx.Node) -> None:
        special = (
            writers.get(node.target) if not isinstance(node.target, torch._ops.OpOverload) else None
        )
        if special is None:
            handle_default(node)
        else:
            writer.graph_state.nodes.append(special(writer, node))

    writer.handle_call_function = handle_call_function
    writer.serialize_operator = _official_operator_names(writer.serialize_operator)
    writer.serialize_metadata = _with_debug_handle(writer.serialize_metadata)
    try:
        with _enable_graph_inputs_of_type_nn_module(program.example_inputs):
            graph_module = writer.serialize(program.graph_module)
    except TorchSerializeError as e:
        # torch's message names the node; its traceback is left out
        raise SerializeError(f"{where}: {str(e).split(chr(10))[0]}") from e
    constants = {**writer.custom_objs, **program.constants}
    serialized = S.ExportedProgram(
        graph_module=graph_module,
        opset_version={"aten": torch._C._get_max_operator_version()},
        range_constraints=serialize_range_constraints(program.range_constraints),
        schema_version=S.SchemaVersion(**OFFICIAL_SCHEMA_VERSION),
        verifiers=[v.dialect for v in program.verifiers],
    )
    payload = _to_official(_dataclass_to_dict(serialized), S.ExportedProgram, where)
    payload["dialect"] = ""  # the official schema's field, left at its default
    example_inputs = (
        serialize_torch_artifact(program.example_inputs)
        if program.example_inputs is not None
        else b""
    )
    return (
        payload,
        serialize_torch_artifact(remove_proxy_from_state_dict(program.state_dict, in_place=False)),
        serialize_torch_artifact(constants),
        example_inputs,
    )


def serialize(
    exported_program: ExportedProgram, opset_version: dict[str, int] | None = None
) -> SerializedArtifact:
    """``exported_program`` as the official exporter's serializer writes it: the program's
    JSON, then its state dict, constants and example inputs as torch artifacts."""
    if not isinstance(exported_program, ExportedProgram):
        raise TypeError(
            f"serialize takes an ExportedProgram, not {type(exported_program).__name__}"
        )
    payload, state_dict, constants, example_inputs = _serialized(exported_program, "program")
    if opset_version:
        payload["opset_version"].update(opset_version)
    return SerializedArtifact(
        json.dumps(payload, cls=EnumEncoder, allow_nan=False).encode(),
        state_dict,
        constants,
        example_inputs,
    )


# ------------------------------------------------------------------------ reading


def _alloc_spec(text: str) -> tuple[tuple[int, ...], torch.dtype]:
    shape, sep, dtype = text.partition(";")
    if not sep:
        raise SerializeError(f"memory.alloc: {text!r} is not '<shape>;<dtype number>'")
    dims = tuple(int(d) for d in shape.strip("()[] ").split(",") if d.strip())
    return dims, _SERIALIZE_TO_TORCH_DTYPE[S.ScalarType(int(dtype))]


def _read_outputs_by_position(
    reader: GraphModuleDeserializer, serialized: S.Node, node: torch.fx.Node
) -> None:
    outputs = serialized.outputs
    if not outputs:
        return
    if len(outputs) == 1 and outputs[0].type == "as_tensor":
        reader.sync_fx_node(outputs[0].as_tensor.name, node)
    else:
        reader.deserialize_multiple_outputs(serialized, node)


def _read_alloc(reader: GraphModuleDeserializer, serialized: S.Node) -> None:
    specs = [_alloc_spec(i.arg.as_string) for i in serialized.inputs]
    single = len(specs) == 1 and serialized.inputs[0].name == "alloc_arg"
    node = reader.graph.create_node(
        "call_function", memory.alloc, (specs[0] if single else specs,), {}, serialized.name
    )
    _read_outputs_by_position(reader, serialized, node)
    node.meta.update(reader.deserialize_metadata(serialized.metadata))


def _getitems_after_their_writer(graph: torch.fx.Graph) -> None:
    """A tensor list's ``getitem``s are read right after its ``memory.alloc``; the planned
    graph has them after the operator that writes the list (its ``out``), as before."""
    for node in list(graph.nodes):
        if node.target is not memory.alloc or not isinstance(node.args[0], list):
            continue
        items = [u for u in node.users if u.target is operator.getitem]
        writers = [u for u in node.users if u.target is not operator.getitem]
        if writers:
            place = writers[0]
            for item in sorted(items, key=lambda u: u.args[1]):
                place.append(item)
                place = item
                # the writer's outputs, as they were before planning
                if place.meta.get("debug_handle") is None and "debug_handle" in writers[0].meta:
                    place.meta["debug_handle"] = writers[0].meta["debug_handle"]


def _read_view(reader: GraphModuleDeserializer, serialized: S.Node) -> None:
    args = tuple(reader.deserialize_input(i.arg) for i in serialized.inputs)
    node = reader.graph.create_node("call_function", memory.view, args, {}, serialized.name)
    _read_outputs_by_position(reader, serialized, node)
    node.meta.update(reader.deserialize_metadata(serialized.metadata))


def _named_data_store(text: str | None) -> Any:
    if text is None:
        return None
    from pyexecutorch.exir.backend.named_data_store import (  # noqa: PLC0415 - lazily
        DataEntry,
        NamedDataStoreOutput,
    )
    from pyexecutorch.schema.flat_tensor_schema import TensorLayout  # noqa: PLC0415
    from pyexecutorch.schema.scalar_type import ScalarType  # noqa: PLC0415

    def entry(e: dict[str, Any]) -> Any:
        layout = e.get("tensor_layout")
        if layout is not None:
            layout = TensorLayout(
                ScalarType(layout["scalar_type"]), list(layout["sizes"]), list(layout["dim_order"])
            )
        return DataEntry(e["buffer_index"], e.get("alignment", 1), layout)

    data = json.loads(text)
    return NamedDataStoreOutput(
        [base64.b64decode(b) for b in data["buffers"]],
        {k: entry(e) for k, e in data["pte_data"].items()},
        {t: {k: entry(e) for k, e in es.items()} for t, es in data["external_data"].items()},
    )


def _lowered_module(data: dict[str, Any]) -> Any:
    from pyexecutorch.exir.backend.compile_spec_schema import CompileSpec  # noqa: PLC0415
    from pyexecutorch.exir.backend.lowered_module import LoweredBackendModule  # noqa: PLC0415

    original = _deserialized(
        data["original_module"],
        base64.b64decode(data["original_state_dict"]),
        base64.b64decode(data["original_constants"]),
        b"",
    )
    return LoweredBackendModule(
        original,
        data["backend_id"],
        base64.b64decode(data["processed_bytes"]),
        [CompileSpec(s["key"], base64.b64decode(s["value"])) for s in data["compile_specs"]],
        _named_data_store(data.get("named_data_store")),
    )


def _read_delegate(
    reader: GraphModuleDeserializer, serialized: S.Node, target: Any, lowered: dict[str, Any]
) -> None:
    named, *args = serialized.inputs
    # Its program is read after this one (torch reads one program at a time): a
    # stand-in module holds the attribute until then.
    lowered[named.name] = json.loads(named.arg.as_string)
    reader.module.register_module(named.name, torch.nn.Module())
    attr = reader.graph.get_attr(named.name)
    inputs = tuple(reader.deserialize_input(a.arg) for a in args)
    outputs = serialized.outputs
    single = len(outputs) == 1 and outputs[0].type == "as_tensor"
    node = reader.graph.create_node(
        "call_function", target, (attr, *inputs), {}, outputs[0].as_tensor.name if single else None
    )
    _read_outputs_by_position(reader, serialized, node)
    node.meta.update(reader.deserialize_metadata(serialized.metadata))


def _reader(lowered: dict[str, Any]) -> GraphModuleDeserializer:
    """torch's deserializer, reading our dim-order operators (torch's dispatcher does not
    hold them; the official package registers them there, ours does not) and the exir
    dialects' nodes; the lowered modules' data is left in ``lowered`` by attribute."""
    from pyexecutorch.exir.delegate import executorch_call_delegate  # noqa: PLC0415

    reader = GraphModuleDeserializer()
    operator_default = reader.deserialize_operator
    node_default = reader.deserialize_node
    metadata_default = reader.deserialize_metadata

    def deserialize_operator(target: str) -> Any:
        if target.startswith(_OFFICIAL_EDGE_OPS):
            # the edge dialect's operators are torch's, in the edge namespace
            op = deserialize_operator("torch.ops." + target[len(_OFFICIAL_EDGE_OPS) :])
            return edge_op(op) if isinstance(op, torch._ops.OpOverload) else target
        if target.startswith(_DIM_ORDER_OPS):
            name, _, overload = target[len(_DIM_ORDER_OPS) :].partition(".")
            return getattr(dim_order_ops.packet(name), overload)
        if target.startswith(_DEVICE_COPY_OPS):
            name, _, overload = target[len(_DEVICE_COPY_OPS) :].partition(".")
            return getattr(device_copies.PACKETS[name], overload)
        return operator_default(target)

    def deserialize_metadata(metadata: dict[str, str]) -> dict[str, Any]:
        meta = metadata_default(metadata)
        if "debug_handle" in metadata:
            meta["debug_handle"] = int(metadata["debug_handle"])
        return meta

    def deserialize_node(serialized: S.Node, target: Any) -> None:
        if target == _ALLOC:
            _read_alloc(reader, serialized)
        elif target == _VIEW:
            _read_view(reader, serialized)
        elif target is executorch_call_delegate:
            _read_delegate(reader, serialized, target, lowered)
        else:
            node_default(serialized, target)

    reader.deserialize_operator = deserialize_operator
    reader.deserialize_node = deserialize_node
    reader.deserialize_metadata = deserialize_metadata
    return reader


def _verifier(dialect: str) -> Any:
    if dialect == "EDGE":
        from pyexecutorch.exir.verification.verifier import EdgeDialectVerifier  # noqa: PLC0415

        return EdgeDialectVerifier
    return load_verifier(dialect)


def _deserialized(
    payload: dict[str, Any], state_dict: bytes, constants: bytes, example_inputs: bytes
) -> ExportedProgram:
    payload = dict(payload)  # edited below: the caller's stays as it was
    payload.pop("dialect", None)
    # Read as torch's current schema: its newer fields take their defaults.
    payload["schema_version"] = {"major": S.SCHEMA_VERSION[0], "minor": S.SCHEMA_VERSION[1]}
    verifiers = payload.pop("verifiers", None) or ["ATEN"]
    program = _dict_to_dataclass(S.ExportedProgram, payload)
    ranges = {
        k: symbolic_shapes.ValueRanges(
            _int_to_sympy_int(v.min_val, -int_oo),
            _int_to_sympy_int(v.max_val, int_oo),
        )
        for k, v in program.range_constraints.items()
    }
    lowered: dict[str, Any] = {}
    res = _reader(lowered).deserialize(
        program.graph_module, state_dict, constants, example_inputs or None, ranges
    )
    for name, data in lowered.items():
        setattr(res.graph_module, name, _lowered_module(data))
    for g in res.graph_module.modules():
        if isinstance(g, torch.fx.GraphModule):
            _getitems_after_their_writer(g.graph)
    # Built around an empty graph, then given the one read: the executorch dialect is
    # not torch's, whose checks an ExportedProgram runs when it is made.
    empty = torch.fx.Graph()
    empty.output(())
    ep = ExportedProgram(
        root=res.graph_module,
        graph=empty,
        graph_signature=ExportGraphSignature(input_specs=[], output_specs=[]),
        state_dict=res.state_dict,
        range_constraints=ExportedProgramDeserializer().deserialize_range_constraints(
            ranges, res.names_to_symbols
        ),
        module_call_graph=res.module_call_graph,
        example_inputs=res.example_inputs,
        constants=res.constants,
        verifiers=[_verifier(v) for v in verifiers],
    )
    graph = res.graph_module.graph
    ep.graph_module.graph = graph
    ep._graph_signature = res.signature
    for node in graph.nodes:
        if node.op == "get_attr":
            setattr(ep.graph_module, node.target, getattr(res.graph_module, node.target))
    return ep


def deserialize(artifact: SerializedArtifact) -> ExportedProgram:
    """The program :func:`serialize` (or the official exporter's serializer) wrote."""
    try:
        payload = json.loads(artifact.exported_program)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SerializeError(f"a serialized program is JSON: {e}") from None
    major = payload.get("schema_version", {}).get("major")
    if major not in (OFFICIAL_SCHEMA_VERSION["major"], 0):
        raise SerializeError(
            f"a serialized program of schema version {payload.get('schema_version')}: this reader "
            f"reads the official exporter's version {OFFICIAL_SCHEMA_VERSION['major']}"
        )
    return _deserialized(payload, artifact.state_dict, artifact.constants, artifact.example_inputs)
