"""Parameters no node reads leave the program, as the official ``to_edge`` drops them.

Typical case: a PT2E-quantized model keeps its float weights as parameters
while the graph reads their int8 copies; they would otherwise be serialized
as unused constants.
"""

from __future__ import annotations

from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, InputKind
from torch.fx import GraphModule


def remove_unused_parameters(ep: ExportedProgram, gm: GraphModule) -> ExportGraphSignature:
    """Erase ``gm``'s placeholders of parameters without users; ``ep``'s signature
    without them (``ep`` itself is not changed)."""
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    sig = ep.graph_signature
    unused = [
        s
        for s in sig.input_specs
        if s.kind == InputKind.PARAMETER
        and s.arg.name in placeholders
        and not placeholders[s.arg.name].users
    ]
    if not unused:
        return sig
    for s in unused:
        gm.graph.erase_node(placeholders[s.arg.name])
    return ExportGraphSignature(
        input_specs=[s for s in sig.input_specs if s not in unused],
        output_specs=list(sig.output_specs),
    )
