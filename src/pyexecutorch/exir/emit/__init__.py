"""The emitter: execution-dialect ``ExportedProgram``s to a program-format ``Program``.

``emit_program(methods, constant_methods, config)`` emits every method (in
name order, as the official emitter does), then one method per constant
method, and returns an :class:`EmitterOutput` whose ``pte_file`` is ready for
:func:`pyexecutorch.schema.encode_pte_chunks`.

What the graphs must look like (the conventions of ``to_executorch``): out
variants with ``memory.alloc`` out arguments, ``memory.view`` for
non-copying views, ``node.meta["spec"]`` tensor specs with planned
``mem_id``/``mem_offset``, ``graph_module.meta["non_const_buffer_sizes"]``
(derived from the specs when absent), control flow as ``cond`` /
``map_impl`` / ``while_loop`` with submodules, delegates as
``executorch_call_delegate``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.utils import _pytree as pytree

from pyexecutorch.exir.emit._convert import EmitError, TensorFromTensor, scalar_type
from pyexecutorch.exir.emit._method import MethodEmitter
from pyexecutorch.exir.emit._program_state import ProgramState
from pyexecutorch.schema.flat_tensor import PtdFile
from pyexecutorch.schema.program import (
    BackendDelegateDataReference,
    BackendDelegateInlineData,
    Bool,
    Chain,
    ContainerMetadata,
    DataLocation,
    Double,
    EValue,
    ExecutionPlan,
    Int,
    Program,
    String,
)
from pyexecutorch.schema.pte import PteFile

SCHEMA_VERSION = 0

__all__ = ["EmitError", "EmitterOutput", "emit_program"]


@dataclass
class EmitterOutput:
    """The emitted program and what debugging tools need to map it back to the graphs."""

    program: Program
    # The program to write, with its segment data, ready for ``encode_pte_chunks``
    # (``program`` itself holds every delegate's data inline, as the official emitter's).
    pte_file: PteFile
    # {method: {instruction index: debug handle, or the list of handles a delegate call covers}}
    debug_handle_map: dict[str, dict[int, Any]] = field(default_factory=dict)
    # {method: {delegate instruction index: {"name": backend id, "delegate_map": backend's debug map}}}
    delegate_map: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    # {method: {delegate instruction index: number of outputs}}
    instruction_id_to_num_outs_map: dict[str, dict[int, int]] = field(default_factory=dict)
    # External data files (``.ptd``), by file tag: external constants (keyed by their
    # fully qualified names) and delegates' external named data. Ready for encode_ptd_chunks.
    ptd_files: dict[str, PtdFile] = field(default_factory=dict)


def emit_program(
    methods: ExportedProgram | Mapping[str, ExportedProgram],
    constant_methods: Mapping[str, Any] | None = None,
    config: Any = None,
) -> EmitterOutput:
    """Emit ``methods`` (and ``constant_methods``) as one program.

    ``config`` is an ``ExecutorchBackendConfig`` (or ``None`` for the
    defaults); the emitter reads ``emit_stacktrace``,
    ``emit_mutable_buffer_names``, ``external_constants`` and
    ``extract_delegate_segments`` from it.
    """
    if isinstance(methods, ExportedProgram):
        methods = {"forward": methods}
    bad = [name for name, ep in methods.items() if not isinstance(ep, ExportedProgram)]
    if bad:
        raise EmitError(
            f"expected an ExportedProgram for each method; got something else for {bad}"
        )
    constant_methods = dict(constant_methods or {})
    clash = sorted(set(constant_methods) & set(methods))
    if clash:
        raise EmitError(f"constant methods {clash} have the same names as methods")

    state = ProgramState(
        extract_delegate_segments=bool(getattr(config, "extract_delegate_segments", True))
    )
    plans: list[ExecutionPlan] = []
    output = EmitterOutput(program=None, pte_file=None)  # type: ignore[arg-type]
    for name in sorted(methods):
        emitter = MethodEmitter(name, state, config)
        plans.append(emitter.emit_method(methods[name]))
        output.debug_handle_map[name] = emitter.debug_handle_map
        output.delegate_map[name] = emitter.delegate_map
        output.instruction_id_to_num_outs_map[name] = emitter.num_outs_map
    for name, value in constant_methods.items():
        plans.append(_constant_method(name, value, state))

    program = Program(
        version=SCHEMA_VERSION,
        execution_plan=plans,
        constant_buffer=state.constant_buffers(),
        backend_delegate_data=state.inline_delegate_data,
        segments=[],
    )
    output.program = _inline_delegates(program, state.delegate_segments)
    output.pte_file = PteFile(
        program=program,
        delegate_segments=state.delegate_segments,
        mutable_data=state.mutable_buffers(),
        named_data=state.named_data,
    )
    output.ptd_files = state.ptd_files()
    return output


def _inline_delegates(program: Program, segments: list[Any]) -> Program:
    """``program`` with every delegate's data inline, as the emitter made it (the
    official ``EmitterOutput.program``); the file's program (``pte_file``) keeps
    the data in segments when ``extract_delegate_segments`` asks for it."""
    if not segments:
        return program
    inline = list(program.backend_delegate_data)
    moved: dict[int, int] = {}  # segment index -> inline index
    plans = []
    for plan in program.execution_plan:
        delegates = []
        for d in plan.delegates:
            ref = d.processed
            if ref.location == DataLocation.SEGMENT:
                if ref.index not in moved:
                    moved[ref.index] = len(inline)
                    data = segments[ref.index]
                    data = data if isinstance(data, bytes) else bytes(memoryview(data).cast("B"))
                    inline.append(BackendDelegateInlineData(data=data))
                ref = BackendDelegateDataReference(DataLocation.INLINE, moved[ref.index])
            delegates.append(dataclasses.replace(d, processed=ref))
        plans.append(dataclasses.replace(plan, delegates=delegates))
    return dataclasses.replace(program, execution_plan=plans, backend_delegate_data=inline)


def _constant_method(name: str, value: Any, state: ProgramState) -> ExecutionPlan:
    """A method with no inputs and no instructions that returns ``value`` (flattened)."""
    leaves, spec = pytree.tree_flatten(value)
    values: list[EValue] = []
    for leaf in leaves:
        if isinstance(leaf, bool):
            values.append(EValue(Bool(leaf)))
        elif isinstance(leaf, int):
            values.append(EValue(Int(leaf)))
        elif isinstance(leaf, float):
            values.append(EValue(Double(leaf)))
        elif isinstance(leaf, str):
            values.append(EValue(String(leaf)))
        elif isinstance(leaf, torch.dtype):
            values.append(EValue(Int(int(scalar_type(leaf)))))
        elif isinstance(leaf, torch.Tensor):
            emitter = MethodEmitter(name, state, None)
            emitter._const_tensor(leaf, TensorFromTensor(leaf))
            values.append(emitter.values[0])
        else:
            raise EmitError(
                f"constant method {name!r} returns a {type(leaf).__name__}; "
                "only bool, int, float, str, dtype and tensors (in lists, tuples or dicts) are supported"
            )
    return ExecutionPlan(
        name=name,
        container_meta_type=ContainerMetadata("", pytree.treespec_dumps(spec)),
        values=values,
        inputs=[],
        outputs=list(range(len(values))),
        chains=[Chain(inputs=[], outputs=[], instructions=[], stacktrace=None)],
        operators=[],
        delegates=[],
        non_const_buffer_sizes=[0],
    )
