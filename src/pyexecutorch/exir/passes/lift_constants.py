"""Tensor constants referenced with ``get_attr`` become lifted constant inputs.

Only the top-level graph is lifted; constants inside control-flow branches
stay ``get_attr`` nodes (their specs are marked ``const``).
"""

from __future__ import annotations

import torch
from torch.export.graph_signature import ExportGraphSignature, InputKind, InputSpec, TensorArgument
from torch.fx import GraphModule


def lift_constants(
    gm: GraphModule, signature: ExportGraphSignature, constants: dict, fake_mode
) -> tuple[ExportGraphSignature, dict]:
    attrs = [
        n
        for n in gm.graph.nodes
        if n.op == "get_attr" and isinstance(getattr(gm, n.target, None), torch.Tensor)
    ]
    if not attrs:
        return signature, constants
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    specs = list(signature.input_specs)
    # Before the first user input, or first of all without one, and numbered after the
    # method's buffers, as the official lift_constant_tensor_pass places and names them.
    first_user = next((i for i, s in enumerate(specs) if s.kind == InputKind.USER_INPUT), 0)
    anchor = placeholders[first_user] if first_user < len(placeholders) else None
    constants = dict(constants)
    new_specs = []
    taken = set(constants) | {s.target for s in specs if s.target}
    counter = sum(1 for s in specs if s.kind == InputKind.BUFFER)
    for node in attrs:
        tensor = getattr(gm, node.target)
        while f"_lifted_tensor_constant{counter}" in taken:
            counter += 1
        fqn = f"_lifted_tensor_constant{counter}"
        taken.add(fqn)
        if anchor is not None:
            ctx = gm.graph.inserting_before(anchor)
        else:
            first_non_ph = next(n for n in gm.graph.nodes if n.op != "placeholder")
            ctx = gm.graph.inserting_before(first_non_ph)
        with ctx:
            ph = gm.graph.placeholder(fqn)
        ph.meta.update(node.meta)
        ph.meta["val"] = fake_mode.from_tensor(tensor, static_shapes=True)
        node.replace_all_uses_with(ph)
        gm.graph.erase_node(node)
        delattr(gm, node.target)
        constants[fqn] = tensor
        new_specs.append(
            InputSpec(
                kind=InputKind.CONSTANT_TENSOR,
                arg=TensorArgument(name=ph.name),
                target=fqn,
                persistent=None,
            )
        )
    specs[first_user:first_user] = new_specs
    return ExportGraphSignature(
        input_specs=specs, output_specs=list(signature.output_specs)
    ), constants
