"""Compile configurations, with the official exporter's names and defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from pyexecutorch.exir.memory_planning import MemoryPlanningPass
from pyexecutorch.exir.passes.sym_shape_eval import ConstraintBasedSymShapeEvalPass


@dataclass
class EdgeCompileConfig:
    """How ``to_edge`` lowers ATen programs.

    - ``_check_ir_validity``: fail on operators outside Core ATen.
    - ``_skip_dim_order``: keep ``_to_copy``/``clone`` instead of ``dim_order_ops``.
    - ``_skip_type_promotion``: do not insert casts for mixed-dtype arithmetic.
    - ``_core_aten_ops_exception_list``: non-core operators to accept anyway.
    - ``preserve_ops``: operators not to decompose.
    """

    _check_ir_validity: bool = True
    _skip_dim_order: bool = False
    _skip_type_promotion: bool = False
    _core_aten_ops_exception_list: list[torch._ops.OpOverload] = field(default_factory=list)
    preserve_ops: list[torch._ops.OpOverload] = field(default_factory=list)


@dataclass
class ExecutorchBackendConfig:
    """How ``to_executorch`` lowers edge programs and serializes them.

    Official fields keep their defaults; ``check_kernels`` is ours: when true,
    an operator without a pyexecutorch kernel is an error instead of a warning.
    ``memory_planning_pass`` and ``sym_shape_eval_pass`` may be dicts keyed by
    method name.
    """

    passes: list[Any] = field(default_factory=list)
    memory_planning_pass: Any = field(default_factory=MemoryPlanningPass)
    sym_shape_eval_pass: Any = field(default_factory=ConstraintBasedSymShapeEvalPass)
    to_out_var_pass: Any = None
    emit_stacktrace: bool = False
    extract_delegate_segments: bool = True
    segment_alignment: int = 128
    constant_tensor_alignment: int | None = None
    delegate_alignment: int | None = None
    remove_view_copy: bool = True
    external_constants: bool | Callable[[torch.fx.Node], str | None] = False
    external_mutable_weights: bool = False
    emit_mutable_buffer_names: bool = False
    do_quant_fusion_and_const_prop: bool = False
    run_reinplace_pass: bool = False
    check_kernels: bool = False


__all__ = ["EdgeCompileConfig", "ExecutorchBackendConfig"]
