"""Test support for the emitter: execution-dialect programs from the OFFICIAL
exporter's passes (captured just before its emitter runs), emitted with ours,
encoded with our schema and run in the official runtime."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from tests import models, official


class _Captured(Exception):
    pass


def _plan_unplanned(gm: torch.fx.GraphModule) -> None:
    """Give every unplanned spec in control-flow submodules its own arena slot.

    The official memory planner skips while_loop submodules; a bump allocator past
    the end of the arena keeps every such tensor apart (wasteful, but correct).
    """
    sizes = list(gm.meta["non_const_buffer_sizes"])
    end = sizes[1] if len(sizes) > 1 else 0
    seen: set[int] = set()

    def visit(mod: torch.fx.GraphModule) -> None:
        nonlocal end
        for node in mod.graph.nodes:
            if node.op == "get_attr":
                sub = getattr(mod, node.target)
                if isinstance(sub, torch.fx.GraphModule):
                    visit(sub)
                continue
            spec = node.meta.get("spec")
            for s in spec if isinstance(spec, (list, tuple)) else [spec]:
                if not hasattr(s, "mem_id") or id(s) in seen or node.op == "get_attr":
                    continue
                seen.add(id(s))
                if s.mem_id is None and not s.const:
                    s.mem_id, s.mem_offset = 1, end
                    end += -(-s.allocated_memory // 16) * 16

    for node in gm.graph.nodes:
        if node.op == "get_attr":
            sub = getattr(gm, node.target)
            if isinstance(sub, torch.fx.GraphModule):
                visit(sub)
    if len(sizes) < 2:
        sizes = [0, 0]
    sizes[1] = end
    gm.meta["non_const_buffer_sizes"] = sizes


def official_execution_programs(
    programs: dict[str, torch.export.ExportedProgram],
    constant_methods: dict[str, Any] | None = None,
    config_kwargs: dict[str, Any] | None = None,
    partitioner: list | None = None,
    init_mutable_buffers: bool = False,
) -> tuple[dict[str, torch.export.ExportedProgram], dict[str, Any] | None]:
    """The official pipeline up to (not including) its emitter."""
    official.silence_noise()
    import executorch.exir as exir
    import executorch.exir.program._program as P

    def capture(methods, *args, **kwargs):
        raise _Captured(methods, args[1] if len(args) > 1 else kwargs.get("prim_getters"))

    edge = exir.to_edge_transform_and_lower(
        programs, partitioner=partitioner, constant_methods=constant_methods or None
    )
    passes = []
    if init_mutable_buffers:
        mutated = official.mutated_buffers({m: edge.exported_program(m) for m in programs})
        if mutated:
            from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

            passes.append(InitializedMutableBufferPass(mutated))
    original = P.emit_program
    P.emit_program = capture
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            edge.to_executorch(exir.ExecutorchBackendConfig(passes=passes, **(config_kwargs or {})))
    except _Captured as c:
        methods, getters = c.args
    else:  # pragma: no cover
        raise AssertionError("the official emitter was not reached")
    finally:
        P.emit_program = original
    for ep in methods.values():
        _plan_unplanned(ep.graph_module)
    return methods, getters


def case_execution_programs(case: models.ModelCase, **kw):
    return official_execution_programs(models.export(case), case.constant_methods, **kw)
