"""Program managers: ``to_edge`` -> :class:`EdgeProgramManager` -> ``to_executorch``
-> :class:`ExecutorchProgramManager` -> ``.pte``.

The stages, per method:

ATen -> edge (``to_edge``): decomposition to Core ATen with torch's tables,
the IR validity check, view ops to ``*_copy`` ops, small normalizations,
scalars to tensors and explicit type promotion, ``dim_order_ops``, constants
lifted, debug handles.

Edge -> executorch (``to_executorch``): user passes, buffer write-back,
spec propagation with symbolic-shape upper bounds, asserts removed, eval-mode
batch norms folded into the convolutions feeding them, constants folded,
copy-free views, out variants, memory planning; then the kernel check, the
emitter and serialization.
"""

from __future__ import annotations

import copy
import io
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import torch
from torch.export import ExportedProgram
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassResult
from torch.fx.passes.infra.pass_manager import PassManager as FxPassManager

from pyexecutorch.exir.config import (
    EdgeCompileConfig,
    ExecutorchBackendConfig,
    PropagateDeviceConfig,
)
from pyexecutorch.exir.error import InternalError
from pyexecutorch.exir.graph_utils import (
    HOP_WHILE,
    copy_graph_module,
    fake_mode_of,
    graph_modules,
    rebuild,
    record_output_values,
    updated_signature,
)
from pyexecutorch.exir.memory_planning import MemoryPlanningPass
from pyexecutorch.exir.passes.const_fold import fold_constants, lift_constant_attrs
from pyexecutorch.exir.passes.debug_handles import assign_debug_handles
from pyexecutorch.exir.passes.decompose import decompose
from pyexecutorch.exir.passes.dim_order import to_dim_order_ops
from pyexecutorch.exir.passes.executorch_passes import (
    RemoveGraphAssertsPass,
    pre_memory_planning_passes,
    run_pass,
    sym_shape_eval_pass_for,
)
from pyexecutorch.exir.passes.fold_batch_norm import fold_batch_norm
from pyexecutorch.exir.passes.fold_redundant_qdq_pass import fold_dq_q_pairs
from pyexecutorch.exir.passes.ir_validity import check_ir_validity
from pyexecutorch.exir.passes.kernel_check import check_kernels
from pyexecutorch.exir.passes.lift_constants import lift_constants
from pyexecutorch.exir.passes.matmul import bmm_to_mm
from pyexecutorch.exir.passes.normalize import normalize, remove_redundant_copies
from pyexecutorch.exir.passes.propagate_device_pass import PropagateDevicePass
from pyexecutorch.exir.passes.quant_fusion import fuse_quantized_embeddings
from pyexecutorch.exir.passes.reinplace import DEFAULT_INPLACEABLE_OPS, reinplace_pass
from pyexecutorch.exir.passes.remove_asserts import eliminate_dead_code, remove_asserts
from pyexecutorch.exir.passes.replace_aten_with_edge_pass import (
    name_nodes_by_target,
    replace_aten_with_edge,
)
from pyexecutorch.exir.passes.spec_prop import propagate_specs
from pyexecutorch.exir.passes.type_promotion import promote_mixed_types, scalars_to_tensors
from pyexecutorch.exir.passes.unused_parameters import remove_unused_parameters
from pyexecutorch.exir.passes.view_copy import replace_view_ops_with_view_copy
from pyexecutorch.exir.passes.write_back import insert_write_back
from pyexecutorch.exir.verification.verifier import EdgeDialectVerifier

PassType = Callable[[GraphModule], PassResult | None]

aten = torch.ops.aten


def _as_dict(
    programs: ExportedProgram | Mapping[str, ExportedProgram], what: str
) -> dict[str, ExportedProgram]:
    if isinstance(programs, ExportedProgram):
        return {"forward": programs}
    if isinstance(programs, Mapping):
        bad = [k for k, v in programs.items() if not isinstance(v, ExportedProgram)]
        if bad:
            raise TypeError(
                f"{what}: expected torch.export.ExportedProgram values; got others for {bad}"
            )
        return dict(programs)
    raise TypeError(
        f"{what}: expected an ExportedProgram or a dict of them, got {type(programs).__name__}"
    )


def _check_constant_methods(constant_methods: Any) -> dict[str, Any] | None:
    if constant_methods is None:
        return None
    if isinstance(constant_methods, EdgeCompileConfig):
        raise TypeError("constant_methods got an EdgeCompileConfig; pass it as compile_config=")
    if not isinstance(constant_methods, Mapping):
        raise TypeError(
            f"constant_methods must be a dict of name -> value, got {type(constant_methods).__name__}"
        )
    return dict(constant_methods)


def _recompile(gm: GraphModule) -> None:
    for g in graph_modules(gm):
        g.recompile()


# --------------------------------------------------------------------------------------
# ATen -> edge


def _generate_edge_program(
    name: str,
    program: ExportedProgram,
    config: EdgeCompileConfig,
    preserve_ops: Sequence[Any] = (),
) -> ExportedProgram:
    ep = decompose(program, preserve_ops)
    gm = ep.graph_module
    fake_mode = fake_mode_of(gm)
    signature = remove_unused_parameters(ep, gm)
    remove_asserts(gm, {aten._assert_tensor_metadata.default})
    if config._check_ir_validity:
        check_ir_validity(gm, [*config._core_aten_ops_exception_list, *preserve_ops], method=name)
    replace_view_ops_with_view_copy(gm, fake_mode)
    normalize(gm)
    # A dequantize -> quantize pair left by the user or by a removed no-op between
    # them goes (the official RemoveNoopPass), where that changes no value.
    fold_dq_q_pairs(gm, exact_only=True)
    scalars_to_tensors(gm, fake_mode)
    if not config._skip_type_promotion:
        promote_mixed_types(gm, fake_mode)
    if config._use_edge_ops and not config._skip_dim_order:
        to_dim_order_ops(gm)
    signature, constants = lift_constants(gm, signature, ep.constants, fake_mode)
    eliminate_dead_code(gm)
    assign_debug_handles(gm)
    if config._use_edge_ops:
        replace_aten_with_edge(gm)
    name_nodes_by_target(gm)
    record_output_values(gm)
    _recompile(gm)
    edge = rebuild(ep, gm, updated_signature(signature, gm), constants=constants)
    edge._verifiers = [EdgeDialectVerifier]  # ExportedProgram.dialect: "EDGE"
    return edge


def to_edge(
    programs: ExportedProgram | Mapping[str, ExportedProgram],
    constant_methods: Mapping[str, Any] | None = None,
    compile_config: EdgeCompileConfig | None = None,
    generate_etrecord: bool = False,
) -> EdgeProgramManager:
    """Lower ATen ``ExportedProgram``s (one, named ``forward``, or a dict by
    method name) to the edge dialect. With ``generate_etrecord`` the programs
    are recorded for ``ExecutorchProgramManager.get_etrecord()``."""
    config = compile_config or EdgeCompileConfig()
    constant_methods = _check_constant_methods(constant_methods)
    aten_programs = _as_dict(programs, "to_edge")
    edge = {
        name: _generate_edge_program(name, program, config, config.preserve_ops)
        for name, program in aten_programs.items()
    }
    manager = EdgeProgramManager(edge, constant_methods, config)
    if generate_etrecord:
        manager._etrecord = _record(aten_programs, edge)
    return manager


def _record(aten: Mapping[str, ExportedProgram], edge: Mapping[str, ExportedProgram]) -> Any:
    from pyexecutorch.exir.etrecord import record_programs  # noqa: PLC0415 - needs torch serde

    return record_programs(dict(aten), dict(edge))


def to_edge_with_preserved_ops(
    programs: ExportedProgram | Mapping[str, ExportedProgram],
    constant_methods: Mapping[str, Any] | None = None,
    compile_config: EdgeCompileConfig | None = None,
    preserve_ops: Sequence[torch._ops.OpOverload] = (),
) -> EdgeProgramManager:
    """``to_edge`` keeping ``preserve_ops`` undecomposed (they must have out variants
    or be delegated before ``to_executorch``)."""
    config = copy.copy(compile_config or EdgeCompileConfig())
    config.preserve_ops = [*config.preserve_ops, *preserve_ops]
    return to_edge(programs, constant_methods, config)


def to_edge_transform_and_lower(
    programs: ExportedProgram | Mapping[str, ExportedProgram],
    transform_passes: Sequence[PassType] | Mapping[str, Sequence[PassType]] | None = None,
    partitioner: Any = None,
    constant_methods: Mapping[str, Any] | None = None,
    compile_config: EdgeCompileConfig | None = None,
    generate_etrecord: bool = False,
) -> EdgeProgramManager:
    """``to_edge``, then ``transform(transform_passes)``, then ``to_backend`` with each
    partitioner.  Operators a partitioner asks to keep (``ops_to_not_decompose``)
    are not decomposed. With ``generate_etrecord`` the transformed edge programs
    (before delegation) are recorded for ``ExecutorchProgramManager.get_etrecord()``."""
    config = compile_config or EdgeCompileConfig()
    aten_programs = _as_dict(programs, "to_edge_transform_and_lower")
    if partitioner is None:
        partitioners: dict[str, list[Any]] = {}
    elif isinstance(partitioner, Mapping):
        partitioners = {
            k: list(v) if isinstance(v, (list, tuple)) else [v] for k, v in partitioner.items()
        }
    else:
        plist = list(partitioner) if isinstance(partitioner, (list, tuple)) else [partitioner]
        partitioners = {name: plist for name in aten_programs}

    from pyexecutorch.exir.backend import check_preserved_ops_consumed, prepare_preserved_ops

    edge: dict[str, ExportedProgram] = {}
    kept: list[Any] = []
    for name, program in aten_programs.items():
        # Operators a partitioner keeps stay whole, except the nodes its
        # check_op_support rejects, which decompose as usual.
        program, keep = prepare_preserved_ops(program, partitioners.get(name, []))
        edge[name] = _generate_edge_program(name, program, config, [*config.preserve_ops, *keep])
        kept += [op for op in keep if op not in kept]
    # Kept operators are legal edge IR for the rest of this pipeline (transforms re-verify).
    config = copy.copy(config)
    config._core_aten_ops_exception_list = [*config._core_aten_ops_exception_list, *kept]
    manager = EdgeProgramManager(edge, _check_constant_methods(constant_methods), config)
    if transform_passes is not None:
        manager = manager.transform(transform_passes)
    record = _record(aten_programs, manager._edge_programs) if generate_etrecord else None
    if record is not None and transform_passes is not None:
        # the graphs the custom passes made, a reference for numeric comparison
        record.add_extra_export_modules({"edge_after_transform": manager})
    # Partitioners apply in order: the first of every method, then the second, ...
    for i in range(max((len(v) for v in partitioners.values()), default=0)):
        manager = manager.to_backend({n: ps[i] for n, ps in partitioners.items() if i < len(ps)})
    for name, plist in partitioners.items():
        check_preserved_ops_consumed(name, manager.exported_program(name), plist)
    manager._etrecord = record
    return manager


# --------------------------------------------------------------------------------------
# Managers


def _run_passes(gm: GraphModule, passes: Sequence[PassType]) -> GraphModule:
    for p in passes:
        res = p(gm)
        if isinstance(res, PassResult):
            gm = res.graph_module
        elif isinstance(res, GraphModule):
            gm = res
    return gm


class EdgeProgramManager:
    """Methods in the edge dialect, ready for transforms, delegation and ``to_executorch``."""

    def __init__(
        self,
        edge_programs: ExportedProgram | Mapping[str, ExportedProgram],
        constant_methods: Mapping[str, Any] | None = None,
        compile_config: EdgeCompileConfig | None = None,
        ops_set_to_not_decompose: Sequence[Any] | None = None,
    ) -> None:
        self.compile_config = compile_config or EdgeCompileConfig()
        self._edge_programs: dict[str, ExportedProgram] = _as_dict(
            edge_programs, "EdgeProgramManager"
        )
        # What exported_program() shows after to_executorch: the lowered and planned
        # programs, as the official manager (which plans its programs in place) shows them.
        # Every later stage (to_executorch again, transform, to_backend) starts from the
        # edge programs as they were.
        self._planned: dict[str, ExportedProgram] = {}
        self._config_methods = _check_constant_methods(constant_methods)
        self._etrecord: Any = None  # the ETRecord begun by generate_etrecord=True
        clash = sorted(set(self._config_methods or {}) & set(self._edge_programs))
        if clash:
            raise ValueError(f"constant methods {clash} have the same names as methods")

    @property
    def methods(self) -> set[str]:
        return set(self._edge_programs)

    @property
    def config_methods(self) -> set[str]:
        return set(self._config_methods or {})

    def exported_program(self, method_name: str = "forward") -> ExportedProgram:
        """Method ``method_name``'s edge program; after ``to_executorch``, the program it
        was lowered to (planned, in the executorch dialect), as the official manager shows."""
        if method_name in self._planned:
            return self._planned[method_name]
        try:
            return self._edge_programs[method_name]
        except KeyError:
            raise KeyError(
                f"no method {method_name!r}; methods are {sorted(self._edge_programs)}"
            ) from None

    def transform(
        self,
        passes: Sequence[PassType] | Mapping[str, Sequence[PassType]] | FxPassManager,
        compile_config: EdgeCompileConfig | None = None,
    ) -> EdgeProgramManager:
        """A new manager with ``passes`` applied (a list or a ``PassManager``, to every
        method, or per method when a dict); the result is checked again for IR validity."""
        config = compile_config or self.compile_config
        new: dict[str, ExportedProgram] = {}
        for name, ep in self._edge_programs.items():
            plist = passes.get(name) if isinstance(passes, Mapping) else passes
            if isinstance(plist, FxPassManager):
                plist = [plist]  # one pass that runs its own list
            if not plist:
                new[name] = ep
                continue
            gm = _run_passes(copy_graph_module(ep.graph_module), list(plist))
            if config._check_ir_validity:
                check_ir_validity(
                    gm, [*config._core_aten_ops_exception_list, *config.preserve_ops], method=name
                )
            _recompile(gm)
            new[name] = rebuild(ep, gm)
        manager = EdgeProgramManager(new, copy.deepcopy(self._config_methods), config)
        manager._etrecord = self._etrecord
        return manager

    def to_backend(self, partitioner: Any) -> EdgeProgramManager:
        """Delegate the parts each partitioner tags (one for all methods, or a dict)."""
        try:
            from pyexecutorch.exir.backend.backend_api import to_backend
        except ImportError as e:
            raise NotImplementedError(
                "delegation (pyexecutorch.exir.backend) is not available yet"
            ) from e
        new: dict[str, ExportedProgram] = {}
        for name, ep in self._edge_programs.items():
            if isinstance(partitioner, Mapping):
                new[name] = to_backend(ep, partitioner[name]) if name in partitioner else ep
            else:
                new[name] = to_backend(ep, partitioner)
        config = copy.copy(self.compile_config)
        config._check_ir_validity = False
        manager = EdgeProgramManager(new, copy.deepcopy(self._config_methods), config)
        manager._etrecord = self._etrecord
        return manager

    def to_executorch(
        self, config: ExecutorchBackendConfig | None = None
    ) -> ExecutorchProgramManager:
        """Lower every method to the executorch dialect, plan memory, emit and serialize."""
        config = config or ExecutorchBackendConfig()
        config.check_supported()
        if not config.emit_while_loop:
            _refuse_while_loops(self._edge_programs)
        planners = {
            name: _per_method(config.memory_planning_pass, name, None) or MemoryPlanningPass()
            for name in self._edge_programs
        }
        # Buffers a method mutates are state in every method that shares them.
        shared_state = frozenset(
            fqn
            for ep in self._edge_programs.values()
            for fqn in ep.graph_signature.buffers_to_mutate.values()
            if any(getattr(p, "share_mutable_buffers", False) for p in planners.values())
        )
        programs = {
            name: _to_executorch_program(name, ep, config, planners[name], shared_state)
            for name, ep in self._edge_programs.items()
        }
        for planner in {id(p): p for p in planners.values()}.values():
            if hasattr(planner, "run_multimethod"):
                planner.run_multimethod()
        check_kernels(
            {n: ep.graph_module for n, ep in programs.items()}, strict=config.check_kernels
        )
        manager = ExecutorchProgramManager(programs, self._config_methods, config)
        manager._etrecord = self._etrecord
        self._planned = dict(programs)
        return manager


def _refuse_while_loops(programs: Mapping[str, ExportedProgram]) -> None:
    """The official exporter's refusal of ``torch.while_loop`` (its error type and
    message), naming the opt-in that emits it."""
    for name, ep in programs.items():
        for g in graph_modules(ep.graph_module):
            for node in g.graph.nodes:
                if node.op == "call_function" and node.target is HOP_WHILE:
                    raise InternalError(
                        "Failed with error: Unsupported control flow operator: while_loop "
                        f"(node {node.name} of method {name!r}). The official exporter "
                        "refuses it; pyexecutorch emits it as a loop (a program both "
                        "runtimes run) with ExecutorchBackendConfig(emit_while_loop=True)"
                    )


def _per_method(value: Any, name: str, default: Any) -> Any:
    if isinstance(value, Mapping):
        return value.get(name, default)
    return value if value is not None else default


_AUTO_FUNCTIONALIZED = tuple(
    op
    for op in (
        getattr(torch.ops.higher_order, "auto_functionalized", None),
        getattr(torch.ops.higher_order, "auto_functionalized_v2", None),
    )
    if op is not None
)


def _without_auto_functionalized(ep: ExportedProgram) -> ExportedProgram:
    """Custom operators that mutate their inputs appear functionalized
    (``auto_functionalized(_v2)``); the program calls the mutating operator itself, on
    its inputs' memory, as the official exporter does."""
    if not any(
        node.target in _AUTO_FUNCTIONALIZED
        for g in graph_modules(ep.graph_module)
        for node in g.graph.nodes
    ):
        return ep
    from torch.export._remove_auto_functionalized_pass import (
        unsafe_remove_auto_functionalized_pass,
    )

    ep = copy.copy(ep)
    ep._graph_module = copy_graph_module(ep.graph_module)
    return unsafe_remove_auto_functionalized_pass(ep)


def _reinplaced(ep: ExportedProgram, extra: frozenset[Any]) -> ExportedProgram:
    """A copy of ``ep`` with ``index_put`` and ``extra`` rewritten in place where safe."""
    ep = copy.copy(ep)
    ep._graph_module = copy_graph_module(ep.graph_module)
    ep._graph_signature = copy.deepcopy(ep.graph_signature)
    return reinplace_pass(ep, DEFAULT_INPLACEABLE_OPS | extra)


def _propagate_device_pass(config: ExecutorchBackendConfig, name: str) -> PropagateDevicePass:
    """The method's device pass: its ``PropagateDeviceConfig`` (one for all methods or
    a dict by method name), each flag a bool or a dict by method name."""
    device = _per_method(config.propagate_device_config, name, PropagateDeviceConfig())
    return PropagateDevicePass(
        skip_h2d_for_method_inputs=bool(
            _per_method(device.skip_h2d_for_method_inputs, name, False)
        ),
        skip_d2h_for_method_outputs=bool(
            _per_method(device.skip_d2h_for_method_outputs, name, False)
        ),
        enable_non_cpu_memory_planning=config.enable_non_cpu_memory_planning,
    )


def _to_executorch_program(
    name: str,
    ep: ExportedProgram,
    config: ExecutorchBackendConfig,
    planner: Any,
    shared_state: frozenset[str] = frozenset(),
) -> ExportedProgram:
    ep = _without_auto_functionalized(ep)
    if config.run_reinplace_pass or config.reinplace_extra_ops:
        ep = _reinplaced(ep, frozenset(config.reinplace_extra_ops or ()))
    gm = copy_graph_module(ep.graph_module)
    gm = _run_passes(gm, list(config.passes))
    fake_mode = fake_mode_of(gm)
    bmm_to_mm(gm, fake_mode)
    remove_redundant_copies(gm)
    signature = insert_write_back(ep, gm)
    propagate_specs(ep, gm, sym_shape_eval_pass_for(config, name), shared_state)
    gm = run_pass(_propagate_device_pass(config, name), gm)
    gm = run_pass(RemoveGraphAssertsPass(), gm)
    if config.do_quant_fusion_and_const_prop:
        signature = fuse_quantized_embeddings(gm, signature, fake_mode)
    signature = fold_batch_norm(gm, signature, fake_mode)
    signature = fold_constants(gm, signature, fake_mode)
    signature, constants = lift_constant_attrs(gm, signature, ep.constants)
    for p in pre_memory_planning_passes(config, name):
        gm = run_pass(p, gm)
    if hasattr(planner, "enable_non_cpu_memory_planning"):  # the official pass's attribute
        planner.enable_non_cpu_memory_planning = config.enable_non_cpu_memory_planning
    if hasattr(planner, "run"):
        res = planner.run(gm, signature)
    else:
        res = planner(gm)
    if isinstance(res, PassResult):
        gm = res.graph_module
    _recompile(gm)
    new_ep = rebuild(ep, gm, updated_signature(signature, gm), constants=constants)
    new_ep.graph_module.meta.update(gm.meta)
    return new_ep


class ExecutorchProgramManager:
    """Methods in the executorch dialect, emitted as one program and serialized."""

    def __init__(
        self,
        execution_programs: Mapping[str, ExportedProgram],
        config_methods: Mapping[str, Any] | None = None,
        backend_config: ExecutorchBackendConfig | None = None,
    ) -> None:
        from pyexecutorch.exir.emit import emit_program

        self._execution_programs = dict(execution_programs)
        self._config_methods = dict(config_methods) if config_methods else None
        self._config = backend_config or ExecutorchBackendConfig()
        self._emitter_output = emit_program(
            self._execution_programs, self._config_methods, self._config
        )
        self._buffer: bytes | None = None
        self._etrecord: Any = None

    def get_etrecord(self) -> Any:
        """The ETRecord of this compilation (``generate_etrecord=True`` in ``to_edge``)."""
        if self._etrecord is None:
            raise RuntimeError(
                "ETRecord was not generated: pass generate_etrecord=True to to_edge or "
                "to_edge_transform_and_lower"
            )
        from pyexecutorch.exir.etrecord import complete  # noqa: PLC0415 - needs torch serde

        return complete(self._etrecord, self)

    @property
    def methods(self) -> set[str]:
        return set(self._execution_programs)

    @property
    def config_methods(self) -> set[str]:
        return set(self._config_methods or {})

    def exported_program(self, method_name: str = "forward") -> ExportedProgram:
        try:
            return self._execution_programs[method_name]
        except KeyError:
            raise KeyError(
                f"no method {method_name!r}; methods are {sorted(self._execution_programs)}"
            ) from None

    @property
    def executorch_program(self):
        """The emitted program (``pyexecutorch.schema.Program``)."""
        return self._emitter_output.program

    @property
    def debug_handle_map(self) -> dict:
        return self._emitter_output.debug_handle_map

    @property
    def delegate_map(self) -> dict:
        return self._emitter_output.delegate_map

    @property
    def instruction_id_to_num_outs_map(self) -> dict[str, dict[int, int]]:
        """{method: {delegate call's instruction index: its number of outputs}}."""
        return self._emitter_output.instruction_id_to_num_outs_map

    @property
    def _tensor_data(self) -> dict[str, bytes]:
        """The encoded ``.ptd`` files by file tag (empty when nothing is external)."""
        from pyexecutorch.schema.flat_tensor import encode_ptd_chunks

        align = self._config.segment_alignment
        return {
            tag: b"".join(encode_ptd_chunks(ptd, segment_alignment=align))
            for tag, ptd in self.data_files.items()
        }

    def save(self, path: str) -> None:
        """Write the ``.pte`` to ``path``, which must end with ``.pte``."""
        if not str(path).endswith(".pte"):
            raise ValueError(f"Path {path} does not end with .pte")
        with open(path, "wb") as f:
            self.write_to_file(f)

    @property
    def memory_plans(self) -> dict[str, dict[str, Any]]:
        """Per method: the arena size of each planning algorithm and the one kept."""
        return {
            n: dict(ep.graph_module.meta.get("memory_planning", {}))
            for n, ep in self._execution_programs.items()
        }

    def _chunks(self):
        from pyexecutorch.schema import encode_pte_chunks

        c = self._config
        return encode_pte_chunks(
            self._emitter_output.pte_file,
            segment_alignment=c.segment_alignment,
            constant_tensor_alignment=c.constant_tensor_alignment,
            delegate_alignment=c.delegate_alignment,
        )

    @property
    def buffer(self) -> bytes:
        """The ``.pte`` bytes (built once; prefer ``write_to_file`` for big programs)."""
        if self._buffer is None:
            self._buffer = b"".join(self._chunks())
        return self._buffer

    def write_to_file(self, open_file: io.BufferedIOBase) -> None:
        """Stream the ``.pte`` into ``open_file`` chunk by chunk (no single big bytes)."""
        if self._buffer is not None:
            open_file.write(self._buffer)
            return
        for chunk in self._chunks():
            open_file.write(chunk)

    @property
    def data_files(self) -> dict[str, Any]:
        """External data files (``schema.flat_tensor.PtdFile``) by file tag, when
        ``external_constants`` moved constants out of the ``.pte``."""
        return dict(getattr(self._emitter_output, "ptd_files", None) or {})

    def write_tensor_data_to_file(self, outdir: str) -> None:
        """Write each external data file as ``<outdir>/<tag>.ptd`` (streamed)."""
        import os

        from pyexecutorch.schema.flat_tensor import encode_ptd_chunks

        for tag, ptd in self.data_files.items():
            with open(os.path.join(outdir, f"{tag}.ptd"), "wb") as f:
                for chunk in encode_ptd_chunks(
                    ptd, segment_alignment=self._config.segment_alignment
                ):
                    f.write(chunk)

    def dump_executorch_program(self, verbose: bool = False, out: TextIO | None = None) -> None:
        """Print the program readably (``verbose`` prints every table field)."""
        out = out or sys.stdout
        try:
            from pyexecutorch.schema.printer import format_program
        except ImportError:
            format_program = None
        if format_program is not None:
            text = format_program(self._emitter_output.pte_file, verbose=verbose)
        else:
            import pprint

            text = pprint.pformat(self._emitter_output.program, width=120)
        out.write(text if text.endswith("\n") else text + "\n")


__all__ = [
    "EdgeProgramManager",
    "ExecutorchProgramManager",
    "to_edge",
    "to_edge_transform_and_lower",
    "to_edge_with_preserved_ops",
]
