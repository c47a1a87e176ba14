"""Functional operators rewritten to their in-place forms where nothing can tell:
``c = mul(a, b)`` becomes ``mul_(a, b)`` when ``a`` is read by nothing after it,
already has the result's shape and dtype, and is not an input the caller did not
let the method mutate. The result then lives in ``a``'s memory (spec propagation
gives an in-place call its first argument's spec), so memory planning places one
tensor where there were two.

A buffer update (``index_put`` of a mutable buffer, written back to it) is the
default case: the update writes the buffer's own memory instead of a copy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx import Node

aten = torch.ops.aten

DEFAULT_INPLACEABLE_OPS: frozenset[Any] = frozenset({aten.index_put.default})


def _schema_types(op: Any) -> list[str]:
    return [str(a.type) for a in op._schema.arguments]


def inplace_variant(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """``aten.X_`` with the same overload and arguments as ``op``, if there is one."""
    packet = getattr(getattr(torch.ops, op.namespace), op._opname + "_", None)
    overload = getattr(packet, op._overloadname, None) if packet is not None else None
    if overload is None:
        return None
    same = [a.name for a in overload._schema.arguments] == [a.name for a in op._schema.arguments]
    return overload if same else None


def mutated_positions(op: Any) -> tuple[int, ...]:
    """The positions of the arguments ``op`` writes (``Tensor(a!)``, not ``out``)."""
    return tuple(
        i
        for i, a in enumerate(op._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write and not a.is_out
    )


def check_inplace_mapping(functional: Any, inplace: Any) -> None:
    """``ValueError`` unless ``inplace`` is an in-place form of ``functional``: the same
    argument types in order, a name extending the functional one's with ``_``, and a
    first argument it writes."""
    f_name, i_name = functional._schema.name, inplace._schema.name
    problems = []
    if not i_name.startswith(f_name + "_"):
        problems.append(f"its name {i_name} does not extend {f_name} with '_'")
    if _schema_types(functional) != _schema_types(inplace):
        problems.append("its argument types differ")
    if 0 not in mutated_positions(inplace):
        problems.append("it does not write its first argument")
    if problems:
        raise ValueError(
            f"reinplace: {inplace} is not an in-place form of {functional}: " + "; ".join(problems)
        )


def _same_shape_and_dtype(arg: Node, node: Node) -> bool:
    a, r = arg.meta.get("val"), node.meta.get("val")
    if not isinstance(a, torch.Tensor) or not isinstance(r, torch.Tensor):
        return False
    # Symbolic sizes count as equal only when they are the same expression.
    return a.dtype == r.dtype and [str(s) for s in a.shape] == [str(s) for s in r.shape]


def _mutable_inputs(ep: ExportedProgram) -> set[str]:
    """Placeholders the method may write: mutated buffers and mutated user inputs."""
    sig = ep.graph_signature
    mutated_buffers = set(sig.buffers_to_mutate.values())
    names = {p for p, b in sig.inputs_to_buffers.items() if b in mutated_buffers}
    return names | set(sig.user_inputs_to_mutate.values())


def reinplace_pass(
    ep: ExportedProgram,
    ops_to_inplace: Iterable[Any] | None = None,
    inplace_overrides: Mapping[Any, Any] | None = None,
) -> ExportedProgram:
    """Rewrite calls of ``ops_to_inplace`` (default: ``index_put``) to their in-place
    forms (``X`` -> ``X_``, found by name and schema; ``inplace_overrides`` maps others
    explicitly) where safe; in place on ``ep``'s graph, which is returned.

    Safe means, for each argument the in-place form writes: no later node reads it,
    it already has the result's shape and dtype, and it is not a program input the
    method may not mutate. An operator with no in-place form is left alone (memory
    planning lets elementwise results reuse a dying input's memory by itself)."""
    overrides = dict(inplace_overrides or {})
    wanted = set(DEFAULT_INPLACEABLE_OPS if ops_to_inplace is None else ops_to_inplace)
    wanted |= set(overrides)
    forms: dict[Any, Any] = {}
    for op in wanted:
        inplace = overrides.get(op) or inplace_variant(op)
        if inplace is not None:
            check_inplace_mapping(op, inplace)
            forms[op] = inplace
    graph = ep.graph
    inputs = {n for n in graph.nodes if n.op == "placeholder"}
    writable = _mutable_inputs(ep)
    read_later: set[Node] = set()

    def safe(arg: Any, node: Node) -> bool:
        return (
            isinstance(arg, Node)
            and arg not in read_later
            and _same_shape_and_dtype(arg, node)
            and (arg not in inputs or arg.name in writable)
        )

    # Backwards, so that "read later" is known at each node (the outputs read too).
    for node in reversed(list(graph.nodes)):
        if node.op != "call_function" or node.target not in forms:
            read_later.update(node.all_input_nodes)
            continue
        inplace = forms[node.target]
        positions = mutated_positions(inplace)
        if any(p >= len(node.args) or not safe(node.args[p], node) for p in positions):
            read_later.update(node.all_input_nodes)
            continue
        with graph.inserting_before(node):
            new = graph.call_function(inplace, node.args, dict(node.kwargs))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        # Its operands are read here; the written ones are now this call's value.
        read_later.update(new.all_input_nodes)
    _rename_outputs(ep)
    ep.graph_module.recompile()
    return ep


def _rename_outputs(ep: ExportedProgram) -> None:
    """The signature names the new nodes that now produce the outputs."""
    output = ep.graph.output_node()
    values = output.args[0] if isinstance(output.args[0], (list, tuple)) else (output.args[0],)
    for spec, value in zip(ep.graph_signature.output_specs, values, strict=False):
        if isinstance(value, Node) and getattr(spec.arg, "name", None) not in (None, value.name):
            spec.arg.name = value.name


__all__ = [
    "DEFAULT_INPLACEABLE_OPS",
    "check_inplace_mapping",
    "inplace_variant",
    "mutated_positions",
    "reinplace_pass",
]
