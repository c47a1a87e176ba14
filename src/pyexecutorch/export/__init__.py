"""One-call export (the official ``executorch.export`` API): a model and example
inputs through a recipe's stages (torch.export, the edge dialect and its lowering,
the ExecuTorch program) to a ``.pte``, every stage done by :mod:`pyexecutorch.exir`.

    session = export(model, [example_inputs], ExportRecipe(lowering_recipe=
        LoweringRecipe(partitioners=[XnnpackPartitioner()])))
    session.save_to_pte("model")

Quantization recipes and the backends' recipe registry are not provided: quantize
first (torchao's pt2e flow with the XNNPACK quantizer), then export.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from pyexecutorch.exir import (
    EdgeCompileConfig,
    ExecutorchBackendConfig,
    to_edge,
    to_edge_transform_and_lower,
)

__all__ = ["ExportRecipe", "ExportSession", "LoweringRecipe", "StageType", "export"]


class StageType(enum.StrEnum):
    """The stages of an export pipeline."""

    SOURCE_TRANSFORM = "source_transform"
    QUANTIZE = "quantize"
    TORCH_EXPORT = "torch_export"
    TO_EDGE_TRANSFORM_AND_LOWER = "to_edge_transform_and_lower"
    TO_EDGE = "to_edge"
    EDGE_PROGRAM_MANAGER_TRANSFORM = "edge_program_manager_transform"
    TO_BACKEND = "to_backend"
    TO_EXECUTORCH = "to_executorch"


@dataclass
class LoweringRecipe:
    """How the edge programs are transformed and lowered."""

    partitioners: list[Any] | None = None
    edge_transform_passes: list[Any] | None = None
    edge_compile_config: EdgeCompileConfig | None = None


@dataclass
class ExportRecipe:
    """What an export does: its stages (by default torch.export, to_edge_transform_and_lower,
    to_executorch) and their settings."""

    name: str | None = None
    quantization_recipe: Any = None
    aten_transform_passes: list[Callable[[str, Any], Any]] | None = None
    lowering_recipe: LoweringRecipe | None = None
    executorch_backend_config: ExecutorchBackendConfig | None = None
    pipeline_stages: list[StageType] | None = None
    strict: bool = True


_DEFAULT_STAGES = (
    StageType.TORCH_EXPORT,
    StageType.TO_EDGE_TRANSFORM_AND_LOWER,
    StageType.TO_EXECUTORCH,
)
# Stages that make the edge programs: a pipeline has exactly one of them.
_EDGE_STAGES = (StageType.TO_EDGE_TRANSFORM_AND_LOWER, StageType.TO_EDGE)
_UNSUPPORTED = (StageType.SOURCE_TRANSFORM, StageType.QUANTIZE)


class ExportSession:
    """One export: the stages run by :meth:`export`, each one's result kept."""

    def __init__(
        self,
        model: Any,
        example_inputs: Any,
        export_recipe: ExportRecipe,
        name: str | None = None,
        dynamic_shapes: Any = None,
        constant_methods: Mapping[str, Any] | None = None,
        artifact_dir: str | None = None,
        generate_etrecord: bool = False,
    ) -> None:
        self._recipe = export_recipe
        self._stages = [StageType(s) for s in export_recipe.pipeline_stages or _DEFAULT_STAGES]
        wanted = [s for s in self._stages if s in _UNSUPPORTED]
        if wanted or export_recipe.quantization_recipe is not None:
            raise ValueError(
                f"export: {[s.value for s in wanted] or 'a quantization recipe'} is not "
                "provided by pyexecutorch; quantize the model first (torchao pt2e with the "
                "XNNPACK quantizer) and export the quantized model"
            )
        edge_stages = [s for s in self._stages if s in _EDGE_STAGES]
        if len(edge_stages) != 1:
            raise ValueError(
                f"export: a pipeline has one of {[s.value for s in _EDGE_STAGES]}, "
                f"not {[s.value for s in edge_stages]}"
            )
        self._models = dict(model) if isinstance(model, Mapping) else {"forward": model}
        per_method = isinstance(example_inputs, Mapping)
        self._inputs = {
            m: list((example_inputs.get(m) if per_method else example_inputs) or [])
            for m in self._models
        }
        self._dynamic_shapes = dynamic_shapes
        self._constant_methods = constant_methods
        self._name = name or export_recipe.name or "program"
        self._artifact_dir = artifact_dir
        self._generate_etrecord = generate_etrecord
        self._artifacts: dict[StageType, Any] = {}

    # ------------------------------------------------------------------ the stages

    def _torch_export(self, _: Any) -> dict[str, Any]:
        programs = {}
        for method, model in self._models.items():
            if isinstance(model, torch.export.ExportedProgram):
                programs[method] = model
                continue
            if not self._inputs[method]:
                raise ValueError(f"export: method {method!r} has no example inputs")
            shapes = self._dynamic_shapes
            if isinstance(shapes, Mapping) and method in shapes:
                shapes = shapes[method]
            programs[method] = torch.export.export(
                model,
                tuple(self._inputs[method][0]),
                dynamic_shapes=shapes,
                strict=self._recipe.strict,
            )
        for transform in self._recipe.aten_transform_passes or []:
            programs = {m: transform(m, ep) for m, ep in programs.items()}
        return programs

    def _lowering(self) -> LoweringRecipe:
        return self._recipe.lowering_recipe or LoweringRecipe()

    def _to_edge_transform_and_lower(self, programs: dict[str, Any]) -> Any:
        lowering = self._lowering()
        return to_edge_transform_and_lower(
            programs,
            transform_passes=lowering.edge_transform_passes,
            partitioner=lowering.partitioners,
            constant_methods=self._constant_methods,
            compile_config=lowering.edge_compile_config,
            generate_etrecord=self._generate_etrecord,
        )

    def _to_edge(self, programs: dict[str, Any]) -> Any:
        return to_edge(
            programs,
            constant_methods=self._constant_methods,
            compile_config=self._lowering().edge_compile_config,
            generate_etrecord=self._generate_etrecord,
        )

    def _transform(self, edge: Any) -> Any:
        passes = self._lowering().edge_transform_passes
        return edge.transform(passes) if passes else edge

    def _to_backend(self, edge: Any) -> Any:
        for partitioner in self._lowering().partitioners or []:
            edge = edge.to_backend(partitioner)
        return edge

    def _to_executorch(self, edge: Any) -> Any:
        return edge.to_executorch(self._recipe.executorch_backend_config)

    def export(self) -> None:
        """Run the stages in order, each on the previous one's result."""
        run = {
            StageType.TORCH_EXPORT: self._torch_export,
            StageType.TO_EDGE_TRANSFORM_AND_LOWER: self._to_edge_transform_and_lower,
            StageType.TO_EDGE: self._to_edge,
            StageType.EDGE_PROGRAM_MANAGER_TRANSFORM: self._transform,
            StageType.TO_BACKEND: self._to_backend,
            StageType.TO_EXECUTORCH: self._to_executorch,
        }
        value: Any = None
        for stage in self._stages:
            value = run[stage](value)
            self._artifacts[stage] = value

    # ------------------------------------------------------------------ the results

    def get_stage_artifacts(self) -> dict[StageType, Any]:
        return dict(self._artifacts)

    def get_executorch_program_manager(self) -> Any:
        manager = self._artifacts.get(StageType.TO_EXECUTORCH)
        if manager is None:
            raise RuntimeError("the export has not run its to_executorch stage")
        return manager

    def get_executorch_program(self) -> Any:
        return self.get_executorch_program_manager().executorch_program

    def get_pte_buffer(self) -> bytes:
        return self.get_executorch_program_manager().buffer

    def get_etrecord(self) -> Any:
        """The ETRecord of the export (``generate_etrecord=True`` in :func:`export`)."""
        if not self._generate_etrecord:
            raise RuntimeError(
                "ETRecord was not generated: pass generate_etrecord=True to export()"
            )
        return self.get_executorch_program_manager().get_etrecord()

    def save_to_pte(self, output_name: str | None = None) -> str:
        """Write the program to ``<artifact_dir>/<name>.pte``; the path written."""
        name = output_name or self._name
        path = name if name.endswith(".pte") else f"{name}.pte"
        if self._artifact_dir is not None:
            os.makedirs(self._artifact_dir, exist_ok=True)
            path = os.path.join(self._artifact_dir, path)
        with open(path, "wb") as f:
            f.write(self.get_pte_buffer())
        return path


def export(
    model: Any,
    example_inputs: Sequence[tuple] | Mapping[str, Sequence[tuple]] | None = None,
    export_recipe: ExportRecipe | None = None,
    name: str | None = None,
    dynamic_shapes: Any = None,
    constant_methods: Mapping[str, Any] | None = None,
    artifact_dir: str | None = None,
    generate_etrecord: bool = False,
) -> ExportSession:
    """Export ``model`` (a module, an ExportedProgram, or a dict of them by method) with
    ``example_inputs`` (a list of input tuples, or a dict of lists by method) through
    ``export_recipe``'s stages; the session holds each stage's result."""
    session = ExportSession(
        model,
        example_inputs,
        export_recipe or ExportRecipe(),
        name=name,
        dynamic_shapes=dynamic_shapes,
        constant_methods=constant_methods,
        artifact_dir=artifact_dir,
        generate_etrecord=generate_etrecord,
    )
    session.export()
    return session
