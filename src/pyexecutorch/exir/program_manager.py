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

from pyexecutorch.exir.config import EdgeCompileConfig, ExecutorchBackendConfig
from pyexecutorch.exir.graph_utils import (
    copy_graph_module,
    fake_mode_of,
    graph_modules,
    rebuild,
    updated_signature,
)
from pyexecutorch.exir.memory_planning import MemoryPlanningPass
from pyexecutorch.exir.passes.const_fold import fold_constants
from pyexecutorch.exir.passes.debug_handles import assign_debug_handles
from pyexecutorch.exir.passes.decompose import decompose
from pyexecutorch.exir.passes.dim_order import to_dim_order_ops
from pyexecutorch.exir.passes.fold_batch_norm import fold_batch_norm
from pyexecutorch.exir.passes.ir_validity import check_ir_validity
from pyexecutorch.exir.passes.kernel_check import check_kernels
from pyexecutorch.exir.passes.lift_constants import lift_constants
from pyexecutorch.exir.passes.matmul import bmm_to_mm
from pyexecutorch.exir.passes.memory_view import replace_view_copies
from pyexecutorch.exir.passes.normalize import normalize, remove_redundant_copies
from pyexecutorch.exir.passes.out_variants import to_out_variants
from pyexecutorch.exir.passes.quant_fusion import fuse_quantized_embeddings
from pyexecutorch.exir.passes.remove_asserts import eliminate_dead_code, remove_asserts
from pyexecutorch.exir.passes.spec_prop import propagate_specs
from pyexecutorch.exir.passes.sym_shape_eval import ConstraintBasedSymShapeEvalPass
from pyexecutorch.exir.passes.type_promotion import promote_mixed_types, scalars_to_tensors
from pyexecutorch.exir.passes.unused_parameters import remove_unused_parameters
from pyexecutorch.exir.passes.view_copy import replace_view_ops_with_view_copy
from pyexecutorch.exir.passes.write_back import insert_write_back

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
    scalars_to_tensors(gm, fake_mode)
    if not config._skip_type_promotion:
        promote_mixed_types(gm, fake_mode)
    if not config._skip_dim_order:
        to_dim_order_ops(gm)
    signature, constants = lift_constants(gm, signature, ep.constants, fake_mode)
    eliminate_dead_code(gm)
    assign_debug_handles(gm)
    _recompile(gm)
    return rebuild(ep, gm, updated_signature(signature, gm), constants=constants)


def to_edge(
    programs: ExportedProgram | Mapping[str, ExportedProgram],
    constant_methods: Mapping[str, Any] | None = None,
    compile_config: EdgeCompileConfig | None = None,
) -> EdgeProgramManager:
    """Lower ATen ``ExportedProgram``s (one, named ``forward``, or a dict by
    method name) to the edge dialect."""
    config = compile_config or EdgeCompileConfig()
    constant_methods = _check_constant_methods(constant_methods)
    aten_programs = _as_dict(programs, "to_edge")
    edge = {
        name: _generate_edge_program(name, program, config, config.preserve_ops)
        for name, program in aten_programs.items()
    }
    return EdgeProgramManager(edge, constant_methods, config)


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
) -> EdgeProgramManager:
    """``to_edge``, then ``transform(transform_passes)``, then ``to_backend`` with each
    partitioner.  Operators a partitioner asks to keep (``ops_to_not_decompose``)
    are not decomposed."""
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
    # Partitioners apply in order: the first of every method, then the second, ...
    for i in range(max((len(v) for v in partitioners.values()), default=0)):
        manager = manager.to_backend({n: ps[i] for n, ps in partitioners.items() if i < len(ps)})
    for name, plist in partitioners.items():
        check_preserved_ops_consumed(name, manager.exported_program(name), plist)
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
        self._config_methods = _check_constant_methods(constant_methods)
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
        try:
            return self._edge_programs[method_name]
        except KeyError:
            raise KeyError(
                f"no method {method_name!r}; methods are {sorted(self._edge_programs)}"
            ) from None

    def transform(
        self,
        passes: Sequence[PassType] | Mapping[str, Sequence[PassType]],
        compile_config: EdgeCompileConfig | None = None,
    ) -> EdgeProgramManager:
        """A new manager with ``passes`` applied (to every method, or per method
        when a dict); the result is checked again for IR validity."""
        config = compile_config or self.compile_config
        new: dict[str, ExportedProgram] = {}
        for name, ep in self._edge_programs.items():
            plist = passes.get(name) if isinstance(passes, Mapping) else passes
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
        return EdgeProgramManager(new, copy.deepcopy(self._config_methods), config)

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
        return EdgeProgramManager(new, copy.deepcopy(self._config_methods), config)

    def to_executorch(
        self, config: ExecutorchBackendConfig | None = None
    ) -> ExecutorchProgramManager:
        """Lower every method to the executorch dialect, plan memory, emit and serialize."""
        config = config or ExecutorchBackendConfig()
        programs = {
            name: _to_executorch_program(name, ep, config)
            for name, ep in self._edge_programs.items()
        }
        check_kernels(
            {n: ep.graph_module for n, ep in programs.items()}, strict=config.check_kernels
        )
        return ExecutorchProgramManager(programs, self._config_methods, config)


def _per_method(value: Any, name: str, default: Any) -> Any:
    if isinstance(value, Mapping):
        return value.get(name, default)
    return value if value is not None else default


def _to_executorch_program(
    name: str, ep: ExportedProgram, config: ExecutorchBackendConfig
) -> ExportedProgram:
    gm = copy_graph_module(ep.graph_module)
    gm = _run_passes(gm, list(config.passes))
    fake_mode = fake_mode_of(gm)
    bmm_to_mm(gm, fake_mode)
    remove_redundant_copies(gm)
    signature = insert_write_back(ep, gm)
    sym_eval = (
        _per_method(config.sym_shape_eval_pass, name, None) or ConstraintBasedSymShapeEvalPass()
    )
    if not hasattr(sym_eval, "bound_shape"):
        raise TypeError(
            f"sym_shape_eval_pass for {name!r} must be a pyexecutorch sym-shape pass "
            "(ConstraintBasedSymShapeEvalPass or HintBasedSymShapeEvalPass)"
        )
    propagate_specs(ep, gm, sym_eval)
    remove_asserts(gm)
    if config.do_quant_fusion_and_const_prop:
        signature = fuse_quantized_embeddings(gm, signature, fake_mode)
    signature = fold_batch_norm(gm, signature, fake_mode)
    signature = fold_constants(gm, signature, fake_mode)
    if config.remove_view_copy:
        replace_view_copies(gm)
        eliminate_dead_code(gm)
    to_out_variants(gm, method=name)
    planner = _per_method(config.memory_planning_pass, name, None) or MemoryPlanningPass()
    if hasattr(planner, "run"):
        res = planner.run(gm, signature)
    else:
        res = planner(gm)
    if isinstance(res, PassResult):
        gm = res.graph_module
    _recompile(gm)
    new_ep = rebuild(ep, gm, updated_signature(signature, gm))
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
