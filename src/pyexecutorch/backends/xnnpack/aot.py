"""``XnnpackBackend``, ahead of time: a partition in, the official XNNPACK payload out.

``preprocess`` runs the XNNPACK passes (:mod:`._passes`) on the partition,
turns each edge node into XNNPACK nodes and values (:mod:`.operators`) and
writes the payload described by :mod:`.schema`: the ``XH00`` header and the
``XN01`` flatbuffer. Constants go to the program's named data under the
SHA-256 of their bytes, as the official exporter stores them, so identical
weights of several delegates are stored once. ``debug_handle_map`` maps each
XNNPACK node's index (also its ``debug_handle`` field) to the debug handles
of the edge nodes it came from.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack._passes import PassContext, run_passes
from pyexecutorch.backends.xnnpack.operators import GraphBuilder, visit
from pyexecutorch.backends.xnnpack.partition.config import is_constant
from pyexecutorch.exir.backend import (
    BackendDetails,
    CompileSpec,
    NamedDataStore,
    PreprocessError,
    PreprocessResult,
)


def _check_dim_order(ep: ExportedProgram) -> None:
    """Inputs fed at run time must be contiguous; constants are copied into the payload
    in XNNPACK's layout whatever their strides (a weight quantized per channel along
    axis 1, a transposed convolution's, folds into a tensor with dim order [1, 0, ...])."""
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        if node.op != "placeholder" or not hasattr(val, "dim_order") or is_constant(ep, node):
            continue
        order = tuple(val.dim_order())
        if order != tuple(range(val.dim())):
            raise PreprocessError(
                f"XnnpackBackend: input {node.name} has dim order {list(order)}; XNNPACK "
                "delegates take contiguous inputs only"
            )


# The official preprocess builds its SDPA and bilinear-upsampling pattern graphs from
# random example inputs on its first run in a process (cached after): torch's global
# generator moves on by these draws once. Ours draws the same, so that a seeded script
# sees the same random numbers after lowering as with the official exporter.
_OFFICIAL_FIRST_RUN_DRAWS = ((1, 3, 4, 4), (8, 16, 32, 64), (8, 16, 32, 64), (8, 16, 32, 64))
_drawn = False


def _draw_as_the_official_first_run() -> None:
    global _drawn
    if not _drawn:
        _drawn = True
        for shape in _OFFICIAL_FIRST_RUN_DRAWS:
            torch.randn(shape)


class XnnpackBackend(BackendDetails):
    """Serializes a partition for the XNNPACK delegate (see the module doc)."""

    @staticmethod
    def preprocess(
        edge_program: ExportedProgram, compile_specs: list[CompileSpec]
    ) -> PreprocessResult:
        _draw_as_the_official_first_run()
        _check_dim_order(edge_program)
        ctx = PassContext(edge_program, edge_program.graph_module)
        run_passes(ctx)
        store = NamedDataStore()
        builder = GraphBuilder(ctx, store)
        for node in ctx.gm.graph.nodes:
            if node.op == "call_function":
                visit(builder, node)
            elif node.op not in ("placeholder", "get_attr", "output"):
                raise PreprocessError(f"XnnpackBackend cannot serialize {node.op} node {node.name}")
        graph = builder.finish()
        return PreprocessResult(
            processed_bytes=S.encode_payload(graph),
            debug_handle_map=builder.debug_handle_map,
            data_store_output=store.get_named_data_store_output(),
        )


__all__ = ["XnnpackBackend"]
