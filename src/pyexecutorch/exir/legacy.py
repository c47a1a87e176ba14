"""The official exporter's older entry points, as thin deprecated wrappers over the
program managers: ``ExirExportedProgram`` / ``ExecutorchProgram``, and the helpers
``transform_exported_program`` and ``lift_constant_tensor_pass``.

New code uses ``to_edge(...).to_executorch()``; these exist so that older scripts
port by changing their import.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

from torch.export import ExportedProgram

from pyexecutorch.exir.config import EdgeCompileConfig, ExecutorchBackendConfig
from pyexecutorch.exir.graph_utils import copy_graph_module, fake_mode_of, rebuild
from pyexecutorch.exir.passes.lift_constants import lift_constants
from pyexecutorch.exir.program_manager import (
    EdgeProgramManager,
    ExecutorchProgramManager,
    _recompile,
    _run_passes,
    to_edge,
)


def _deprecated(what: str) -> None:
    warnings.warn(
        f"{what} is deprecated; use to_edge(...).to_executorch() (EdgeProgramManager / "
        "ExecutorchProgramManager)",
        DeprecationWarning,
        stacklevel=3,
    )


def transform_exported_program(
    ep: ExportedProgram, *passes: Any, override_verifiers: list[type] | None = None
) -> ExportedProgram:
    """A new program with ``passes`` (graph passes) run on a copy of ``ep``'s graph;
    ``override_verifiers`` replaces the verifier classes the new program names."""
    if not passes and override_verifiers is None:
        return ep
    gm = _run_passes(copy_graph_module(ep.graph_module), list(passes))
    _recompile(gm)
    new = rebuild(ep, gm)
    if override_verifiers is not None:
        new._verifiers = list(override_verifiers)  # torch keeps them there; ep keeps its own
    return new


def lift_constant_tensor_pass(ep: ExportedProgram) -> ExportedProgram:
    """``ep`` with every tensor its top-level graph reads through ``get_attr`` lifted to a
    constant input (``_lifted_tensor_constantN``)."""
    gm = ep.graph_module
    signature, constants = lift_constants(gm, ep.graph_signature, ep.constants, fake_mode_of(gm))
    if signature is ep.graph_signature:
        return ep
    _recompile(gm)
    return rebuild(ep, gm, signature, constants=constants)


class ExirExportedProgram:
    """Deprecated: one method, before (``after_to_edge_passes=False``) or after ``to_edge``."""

    def __init__(self, exported_program: ExportedProgram, after_to_edge_passes: bool) -> None:
        _deprecated("ExirExportedProgram")
        self.exported_program = exported_program
        self.after_to_edge_passes = after_to_edge_passes

    def transform(self, *passes: Any) -> ExirExportedProgram:
        self.exported_program = transform_exported_program(self.exported_program, *passes)
        return self

    def __call__(self, *args: Any) -> Any:
        return self.exported_program.module()(*args)

    def to_edge(self, config: EdgeCompileConfig | None = None) -> ExirExportedProgram:
        edge = to_edge(self.exported_program, compile_config=config)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return ExirExportedProgram(edge.exported_program(), True)

    def dump(self) -> None:
        print(self.exported_program.graph_module.graph)

    def to_executorch(self, config: ExecutorchBackendConfig | None = None) -> ExecutorchProgram:
        if not self.after_to_edge_passes:
            raise RuntimeError("Must run to_edge before to_executorch.")
        manager = EdgeProgramManager(self.exported_program).to_executorch(config)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return ExecutorchProgram(manager)


class ExecutorchProgram:
    """Deprecated: the lowered ``forward`` of an :class:`ExirExportedProgram`."""

    def __init__(self, manager: ExecutorchProgramManager) -> None:
        _deprecated("ExecutorchProgram")
        self._manager = manager
        self.exported_program = manager.exported_program()

    @property
    def buffer(self) -> bytes:
        return self._manager.buffer

    @property
    def program(self) -> Any:
        return self._manager.executorch_program

    @property
    def debug_handle_map(self) -> dict:
        return self._manager.debug_handle_map.get("forward", {})

    @property
    def delegate_map(self) -> dict:
        return self._manager.delegate_map

    @property
    def graph_module(self) -> Any:
        return self.exported_program.graph_module

    def dump_graph_module(self) -> Any:
        return self.exported_program.graph_module

    def dump_exported_program(self) -> ExportedProgram:
        return self.exported_program

    def write_to_file(self, open_file: io.BufferedIOBase) -> None:
        self._manager.write_to_file(open_file)


__all__ = [
    "ExecutorchProgram",
    "ExirExportedProgram",
    "lift_constant_tensor_pass",
    "transform_exported_program",
]
