"""Constant propagation over an exported program's lifted weights (the official
``constant_prop_pass``).

Operators whose inputs are all constants (parameters, buffers the method never
mutates, lifted tensor constants, and ``None``/numbers/dtypes) run now. A result
that a remaining operator (or the output) still reads becomes a new constant input,
``_prop_tensor_constant<N>`` (``InputKind.CONSTANT_TENSOR``), placed before the user
inputs; constants nothing reads any more leave the program, with their entries in
``state_dict``/``constants``. The program is changed in place and returned.

Not folded: quantization steps (a backend fuses them with their users), ``full``,
``memory.alloc``, and operators with side effects or random results. Control-flow
branches are not entered."""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument
from torch.fx import Node
from torch.utils import _pytree as pytree

from pyexecutorch.exir import memory
from pyexecutorch.exir.dialects import dim_order_ops
from pyexecutorch.exir.dialects.quantized_ops import QUANT_NAMESPACES
from pyexecutorch.exir.graph_utils import fake_mode_of, is_control_flow

DEFAULT_SKIP_TARGETS_NO_QUANT: frozenset[Any] = frozenset({torch.ops.aten.full.default})


def _default_skip(target: Any) -> bool:
    # Quantization steps (quantize, dequantize, choose_qparams of quantized_decomposed
    # and torchao) stay: a backend fuses them with the operators they feed.
    namespace = getattr(target, "namespace", None)
    return target in DEFAULT_SKIP_TARGETS_NO_QUANT or namespace in QUANT_NAMESPACES


PREFIX = "_prop_tensor_constant"
# Argument values that are constant by themselves.
_LITERALS = (type(None), bool, int, float, str, torch.device, torch.dtype, torch.layout)


def get_default_skip_targets_no_quant() -> set[Any]:
    return set(DEFAULT_SKIP_TARGETS_NO_QUANT)


def constant_placeholders(ep: ExportedProgram) -> dict[Node, torch.Tensor]:
    """Placeholder -> value, for the parameters, never-mutated buffers and lifted
    tensor constants of ``ep``."""
    sig = ep.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    found: dict[Node, torch.Tensor] = {}
    for node in ep.graph.find_nodes(op="placeholder"):
        if node.name in sig.inputs_to_parameters:
            found[node] = ep.state_dict[sig.inputs_to_parameters[node.name]]
        elif node.name in sig.inputs_to_buffers:
            fqn = sig.inputs_to_buffers[node.name]
            if fqn not in mutated:
                found[node] = ep.state_dict[fqn] if fqn in ep.state_dict else ep.constants[fqn]
        elif node.name in sig.inputs_to_lifted_tensor_constants:
            found[node] = ep.constants[sig.inputs_to_lifted_tensor_constants[node.name]]
    return found


def _is_constant(args: Any, known: dict[Node, Any]) -> bool:
    return all(
        (leaf in known) if isinstance(leaf, Node) else isinstance(leaf, (*_LITERALS, torch.Tensor))
        for leaf in pytree.tree_leaves(args)
    )


def _foldable(node: Node, skip: Any) -> bool:
    return (
        node.op == "call_function"
        and node.target is not memory.alloc
        and not (_default_skip(node.target) if skip is None else node.target in skip)
        and not is_control_flow(node)
        and not node.is_impure()  # random draws and mutations stay computed
    )


def propagate(ep: ExportedProgram, skip: Any = None) -> dict[Node, Any]:
    """Every node whose value is known now (constant placeholders included), in
    graph order, with the value; ``skip``: the operators not to run (None: the
    default ones)."""
    known: dict[Node, Any] = dict(constant_placeholders(ep))
    for node in ep.graph.nodes:
        if not _foldable(node, skip) or not _is_constant((node.args, node.kwargs), known):
            continue
        args, kwargs = pytree.tree_map(lambda a: known.get(a, a), (node.args, node.kwargs))
        with torch.no_grad():
            value = node.target(*args, **kwargs)
        # A broadcast view (zero strides) cannot be stored as a program constant.
        if isinstance(value, torch.Tensor) and 0 in value.stride():
            value = value.contiguous()
        known[node] = value
    # A value that is not a tensor (a tuple, a size) cannot become a constant input:
    # where something not folded reads it, its node stays and is computed.
    for node in [n for n in reversed(list(known)) if n.op != "placeholder"]:
        if not isinstance(known[node], torch.Tensor) and any(u not in known for u in node.users):
            del known[node]
    return known


# to_edge's lifted scalars: a CONSTANT_TENSOR here, a state_dict buffer in the official
# edge program, so not counted where the official numbers by its constants.
_EDGE_SCALAR_PREFIX = "_lifted_tensor_constant"


def _fresh_name(ep: ExportedProgram) -> str:
    count = sum(1 for k in ep.constants if not k.startswith(_EDGE_SCALAR_PREFIX))
    name = f"{PREFIX}{count}"
    if name in ep.constants:
        taken = [int(k[len(PREFIX) :]) for k in ep.constants if k[len(PREFIX) :].isdigit()]
        name = f"{PREFIX}{max(taken, default=-1) + 1}"
    return name


def _drop_constant(ep: ExportedProgram, node: Node) -> None:
    sig = ep.graph_signature
    for table in (sig.inputs_to_parameters, sig.inputs_to_buffers):
        if node.name in table:
            ep.state_dict.pop(table[node.name], None)
            ep.constants.pop(table[node.name], None)
    if node.name in sig.inputs_to_lifted_tensor_constants:
        ep.constants.pop(sig.inputs_to_lifted_tensor_constants[node.name], None)
    ep.graph.erase_node(node)


def _lift(ep: ExportedProgram, node: Node, value: torch.Tensor, before: Node | None) -> InputSpec:
    """``node`` replaced by a new constant input holding ``value``."""
    name = _fresh_name(ep)
    ep.constants[name] = value
    with ep.graph.inserting_before(before):
        placeholder = ep.graph.placeholder(name)
    placeholder.meta.update(node.meta)
    fake = fake_mode_of(ep.graph_module).from_tensor(value, static_shapes=True)
    fake.constant = value
    placeholder.meta["val"] = fake
    node.replace_all_uses_with(placeholder)
    ep.graph.erase_node(node)
    return InputSpec(
        InputKind.CONSTANT_TENSOR, TensorArgument(name=placeholder.name), name, persistent=True
    )


def _clone_constant_outputs(ep: ExportedProgram, skip_dim_order: bool) -> None:
    """An output that is now a constant input is returned through a copy (a method's
    outputs are values it computes)."""
    constants = constant_placeholders(ep)
    output = ep.graph.output_node()
    values = list(output.args[0])
    clone = torch.ops.aten.clone.default if skip_dim_order else dim_order_ops.clone_dim_order()
    for i, (value, spec) in enumerate(zip(values, ep.graph_signature.output_specs, strict=True)):
        if value not in constants:
            continue
        with ep.graph.inserting_after(value):
            copy = ep.graph.call_function(clone, (value,))
        copy.meta["val"] = value.meta["val"]
        values[i] = copy
        spec.arg = TensorArgument(name=copy.name)
    output.args = (values,)


def constant_prop_pass(
    exported_program: ExportedProgram,
    custom_skip_targets: set[Any] | None = None,
    _skip_dim_order: bool = True,
) -> ExportedProgram:
    """Fold ``exported_program``'s constant subexpressions (see the module docstring);
    ``custom_skip_targets`` replaces the default set of operators left alone."""
    ep = exported_program
    if not ep.graph.find_nodes(op="placeholder"):
        return ep
    if any(is_control_flow(n) for n in ep.graph.nodes):
        logging.warning("constant_prop_pass does not constant propagate in control flow modules")
    known = propagate(ep, custom_skip_targets)
    user_inputs = set(ep.graph_signature.user_inputs)
    first_input = next((n for n in ep.graph.nodes if n.name in user_inputs), None)
    specs = {s.arg.name: s for s in ep.graph_signature.input_specs}
    # Last first, so that a folded node's users are settled before it.
    for node in reversed(list(known)):
        if all(user in known for user in node.users):
            _drop_constant(ep, node)
        elif node.op != "placeholder":
            spec = _lift(ep, node, known[node], first_input)
            specs[spec.arg.name] = spec
    ep.graph_signature.input_specs = [specs[n.name] for n in ep.graph.find_nodes(op="placeholder")]
    _clone_constant_outputs(ep, _skip_dim_order)
    ep.graph.eliminate_dead_code()
    ep.graph_module.recompile()
    return ep


__all__ = [
    "DEFAULT_SKIP_TARGETS_NO_QUANT",
    "constant_placeholders",
    "constant_prop_pass",
    "get_default_skip_targets_no_quant",
    "propagate",
]
