"""Compile configurations, with the official exporter's names and defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import torch

from pyexecutorch.exir.memory_planning import MemoryPlanningPass
from pyexecutorch.exir.passes.executorch_passes import ToOutVarPass
from pyexecutorch.exir.passes.sym_shape_eval import ConstraintBasedSymShapeEvalPass


class DynamicMemoryPlanningMode(IntEnum):
    """How dynamic tensors get memory: ``UPPER_BOUND`` plans each at its largest size
    (the official default); ``SYMBOLIC`` is not implemented."""

    UPPER_BOUND = 0
    SYMBOLIC = 1


@dataclass
class PropagateDeviceConfig:
    """Copies between host and device memory at the boundary of a delegate whose compile
    specs name a device (:mod:`pyexecutorch.exir.passes.propagate_device_pass`).

    - ``skip_h2d_for_method_inputs``: a method input that only feeds such a delegate is
      planned on the device (the caller passes device memory), with no copy;
    - ``skip_d2h_for_method_outputs``: such a delegate's output that is only a method
      output stays on the device.

    Each a bool or a dict by method name; both need ``enable_non_cpu_memory_planning``.
    Our runtime has host memory only: it refuses to load a method planned on a device."""

    skip_h2d_for_method_inputs: bool | dict[str, bool] = False
    skip_d2h_for_method_outputs: bool | dict[str, bool] = False


@dataclass
class EdgeCompileConfig:
    """How ``to_edge`` lowers ATen programs (the official fields and defaults).

    - ``_check_ir_validity``: fail on operators outside Core ATen.
    - ``_skip_dim_order``: keep ``_to_copy``/``clone`` instead of ``dim_order_ops``.
    - ``_skip_type_promotion``: do not insert casts for mixed-dtype arithmetic.
    - ``_use_edge_ops``: use the edge dialect's operators; our edge operators are the
      torch operators themselves, so ``False`` only skips the ``dim_order_ops``
      conversion, as the official exporter does.
    - ``_core_aten_ops_exception_list``: non-core operators to accept anyway.
    - ``preserve_ops``: operators not to decompose.

    ``None`` for either list means empty, as official scripts pass it.
    """

    _check_ir_validity: bool = True
    _skip_dim_order: bool = False
    _skip_type_promotion: bool = False
    _use_edge_ops: bool = True
    _core_aten_ops_exception_list: list[torch._ops.OpOverload] = field(default_factory=list)
    preserve_ops: list[torch._ops.OpOverload] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._core_aten_ops_exception_list = list(self._core_aten_ops_exception_list or ())
        self.preserve_ops = list(self.preserve_ops or ())


@dataclass
class ExecutorchBackendConfig:
    """How ``to_executorch`` lowers edge programs and serializes them.

    Every official field, with its effect here:

    - ``passes``: run first, on each method's graph.
    - ``memory_planning_pass``, ``sym_shape_eval_pass``: one for every method or a dict
      by method name (the default for names it lacks).
    - ``propagate_device_config``: see :class:`PropagateDeviceConfig`.
    - ``to_out_var_pass``: the pass that makes out variants (a ``ToOutVarPass`` or any
      pass of the user's that does the same job).
    - ``dynamic_memory_planning_mode``: ``UPPER_BOUND`` only.
    - ``emit_stacktrace``: each instruction's source frames in the program.
    - ``extract_delegate_segments``, ``segment_alignment``, ``constant_tensor_alignment``,
      ``delegate_alignment``: the file layout.
    - ``remove_view_copy``: copy-free views instead of ``*_copy`` kernels.
    - ``external_constants``: weights to a ``.ptd`` (all, or those a function tags).
    - ``external_mutable_weights``: trained weights (those with gradient outputs) to
      a ``.ptd``.
    - ``emit_mutable_buffer_names``: each mutable buffer's name in the program.
    - ``enable_non_cpu_memory_planning``: the tensors of each non-CPU device (a
      ``TensorSpec.device``) get arenas of their own, after the CPU ones.
    - ``do_quant_fusion_and_const_prop``: quantized embeddings (dequantize then
      ``embedding``) become ``quantized_decomposed::embedding_byte`` / ``embedding_4bit``
      calls, as the official pass rewrites them (constant propagation always runs).
    - ``run_reinplace_pass``, ``reinplace_extra_ops``: rewrite functional calls to their
      in-place forms where safe (``index_put``, and the extra operators), before the
      write-back of mutated buffers (:func:`pyexecutorch.exir.passes.reinplace.reinplace_pass`).

    ``check_kernels`` is ours: when true, an operator without a pyexecutorch kernel is
    an error instead of a warning.

    ``emit_while_loop`` is ours: ``torch.while_loop`` is refused by default, as the
    official exporter refuses it (``InternalError``, "Unsupported control flow operator:
    while_loop"); when true it is emitted as a loop of jumps over copied loop state, a
    program both pyexecutorch's runtime and the official one run.
    """

    passes: list[Any] = field(default_factory=list)
    memory_planning_pass: Any = field(default_factory=MemoryPlanningPass)
    propagate_device_config: Any = field(default_factory=PropagateDeviceConfig)
    to_out_var_pass: Any = field(default_factory=ToOutVarPass)
    dynamic_memory_planning_mode: DynamicMemoryPlanningMode = DynamicMemoryPlanningMode.UPPER_BOUND
    emit_stacktrace: bool = False
    extract_delegate_segments: bool = True
    segment_alignment: int = 128
    constant_tensor_alignment: int | None = None
    delegate_alignment: int | None = None
    sym_shape_eval_pass: Any = field(default_factory=ConstraintBasedSymShapeEvalPass)
    remove_view_copy: bool = True
    external_constants: bool | Callable[[torch.fx.Node], str | None] = False
    external_mutable_weights: bool = False
    emit_mutable_buffer_names: bool = False
    do_quant_fusion_and_const_prop: bool = False
    run_reinplace_pass: bool = False
    enable_non_cpu_memory_planning: bool = True
    reinplace_extra_ops: frozenset[Any] | None = None
    check_kernels: bool = False
    emit_while_loop: bool = False

    def check_supported(self) -> None:
        """Raise ``NotImplementedError`` naming each field set to a value whose effect
        is not implemented (and ``TypeError`` for values of the wrong kind)."""
        refused = [name for name, ok in _UNSUPPORTED.items() if not ok(getattr(self, name))]
        devices = self.propagate_device_config
        for cfg in devices.values() if isinstance(devices, dict) else [devices]:
            if not isinstance(cfg, PropagateDeviceConfig):
                raise TypeError(
                    "propagate_device_config must be a PropagateDeviceConfig (or a dict of "
                    f"them), got {type(cfg).__name__}"
                )
        if refused:
            raise NotImplementedError(
                f"ExecutorchBackendConfig: {', '.join(dict.fromkeys(refused))} "
                "is not implemented by pyexecutorch; leave it at its default"
            )
        if not callable(self.to_out_var_pass):
            raise TypeError(
                f"to_out_var_pass must be a pass, got {type(self.to_out_var_pass).__name__}"
            )


# Fields whose non-default values have no implementation: field -> accepted value test.
_UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "dynamic_memory_planning_mode": lambda v: v == DynamicMemoryPlanningMode.UPPER_BOUND,
}


__all__ = [
    "DynamicMemoryPlanningMode",
    "EdgeCompileConfig",
    "ExecutorchBackendConfig",
    "PropagateDeviceConfig",
]
