"""Mutable buffers written back: ``copy_(buffer, new_value)`` at the end of the graph.

torch.export functionalizes ``self.buf.add_(x)`` into ``new = add(buf, x)``
and lists ``new`` as a BUFFER_MUTATION output.  Like the official exporter we
copy each such value into the buffer's own input (planned for the whole
method, so the state survives between calls) and make the ``copy_`` node the
mutation output.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    OutputKind,
    OutputSpec,
    TensorArgument,
)
from torch.fx import GraphModule, Node

from pyexecutorch.exir.graph_utils import is_inplace

aten = torch.ops.aten


def _reaches(value: Node, placeholder: Node) -> bool:
    """``value`` is ``placeholder`` after a chain of in-place ops on it."""
    while value is not placeholder:
        if value.op != "call_function" or not is_inplace(value.target):
            return False
        value = value.args[0]
    return True


def insert_write_back(ep: ExportedProgram, gm: GraphModule) -> ExportGraphSignature:
    sig = ep.graph_signature
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    target_to_ph: dict[str, Node] = {}
    for spec in sig.input_specs:
        name = getattr(spec.arg, "name", None)
        if name in placeholders:
            if spec.kind in (InputKind.BUFFER, InputKind.PARAMETER, InputKind.CONSTANT_TENSOR):
                target_to_ph[spec.target] = placeholders[name]
            elif spec.kind == InputKind.USER_INPUT:
                target_to_ph[name] = placeholders[name]
    out_node = gm.graph.output_node()
    outs = list(out_node.args[0])
    new_specs = []
    changed = False
    for i, spec in enumerate(sig.output_specs):
        if (
            spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)
            and spec.target in target_to_ph
        ):
            ph = target_to_ph[spec.target]
            value = outs[i]
            if isinstance(value, Node) and not _reaches(value, ph):
                with gm.graph.inserting_before(out_node):
                    copy = gm.graph.call_function(aten.copy_.default, (ph, value))
                copy.meta["val"] = ph.meta.get("val")
                for key in ("stack_trace", "nn_module_stack", "from_node"):
                    if key in value.meta:
                        copy.meta[key] = value.meta[key]
                outs[i] = copy
                changed = True
                new_specs.append(OutputSpec(spec.kind, TensorArgument(name=copy.name), spec.target))
                continue
        new_specs.append(spec)
    if changed:
        out_node.args = (tuple(outs),)
    return ExportGraphSignature(input_specs=list(sig.input_specs), output_specs=new_specs)
