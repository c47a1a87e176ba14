"""The XNNPACK quantizer: PT2E annotations for what XNNPACK runs quantized.

Used with torchao's PT2E flow::

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model, args).module(), quantizer)
    prepared(*calibration_args)
    quantized = convert_pt2e(prepared)

Configurations apply in the official quantizer's order: module names first,
then module types, then operator types, then the global configuration, each
to what earlier ones left unannotated.  Int8 activations (per tensor, static
or dynamic per token) and int8 symmetric weights (per tensor or per output
channel); biases stay float.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e import (
    FakeQuantize,
    FusedMovingAvgObsFakeQuantize,
    HistogramObserver,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    PerChannelMinMaxObserver,
    PlaceholderObserver,
)
from torchao.quantization.pt2e.quantizer import (
    QuantizationConfig,
    QuantizationSpec,
    Quantizer,
    get_module_name_filter,
)

from pyexecutorch.backends.xnnpack.quantizer.annotators import (
    ANNOTATORS,
    propagate_annotation,
    scalars_to_attrs,
)

aten = torch.ops.aten

# Observers' smallest scale.
_EPS = 2**-12


@functools.lru_cache
def get_symmetric_quantization_config(
    is_per_channel: bool = False,
    is_qat: bool = False,
    is_dynamic: bool = False,
    act_qmin: int = -128,
    act_qmax: int = 127,
    weight_qmin: int = -127,
    weight_qmax: int = 127,
) -> QuantizationConfig:
    """Int8 affine activations and int8 symmetric weights (per output channel when
    ``is_per_channel``); fake-quantized for QAT; activations quantized at run time,
    per token, when ``is_dynamic``.  Cached: equal arguments give the same object."""
    act_args: dict[str, Any] = {"eps": _EPS}
    if is_qat and is_dynamic:
        act_ctr: Any = FakeQuantize
        act_args["observer"] = MovingAverageMinMaxObserver.with_args(averaging_constant=1)
    elif is_qat:
        act_ctr = FusedMovingAvgObsFakeQuantize
    elif is_dynamic:
        act_ctr = PlaceholderObserver
    else:
        act_ctr = HistogramObserver
    act = QuantizationSpec(
        dtype=torch.int8,
        quant_min=act_qmin,
        quant_max=act_qmax,
        qscheme=torch.per_tensor_affine,
        is_dynamic=is_dynamic,
        observer_or_fake_quant_ctr=act_ctr.with_args(**act_args),
    )

    weight_args: dict[str, Any] = {"eps": _EPS}
    if is_qat:
        weight_ctr: Any = FusedMovingAvgObsFakeQuantize
        weight_args["observer"] = (
            MovingAveragePerChannelMinMaxObserver if is_per_channel else MovingAverageMinMaxObserver
        )
    else:
        weight_ctr = PerChannelMinMaxObserver if is_per_channel else MinMaxObserver
    weight = QuantizationSpec(
        dtype=torch.int8,
        quant_min=weight_qmin,
        quant_max=weight_qmax,
        qscheme=torch.per_channel_symmetric if is_per_channel else torch.per_tensor_symmetric,
        ch_axis=0,
        is_dynamic=False,
        observer_or_fake_quant_ctr=weight_ctr.with_args(**weight_args),
    )
    # Dynamic configurations leave outputs float.
    return QuantizationConfig(act, None if is_dynamic else act, weight, None, is_qat)


@dataclass(frozen=True)
class QuantPattern:
    """A pattern and which configurations it serves: dynamic ones only where
    ``is_dynamic``, QAT-only ones (batch norms still in the graph) where ``is_qat``."""

    name: str
    is_dynamic: bool
    is_qat: bool
    targets: frozenset


CONV_TARGETS = frozenset({aten.conv2d.default, aten.conv1d.default, aten.convolution.default})
CONV_TRANSPOSE_TARGETS = frozenset(
    {
        aten.conv_transpose1d,
        aten.conv_transpose1d.default,
        aten.conv_transpose2d,
        aten.conv_transpose2d.input,
        aten.conv_transpose3d,
        aten.conv_transpose3d.input,
    }
)
LINEAR_TARGETS = frozenset({aten.linear.default})

# In the order they are tried: fused patterns before their parts.
SUPPORTED_PATTERNS: tuple[QuantPattern, ...] = (
    QuantPattern("conv_bn_relu", False, True, CONV_TARGETS),
    QuantPattern("conv_bn", False, True, CONV_TARGETS),
    QuantPattern("conv_transpose_bn_relu", False, True, CONV_TRANSPOSE_TARGETS),
    QuantPattern("conv_transpose_bn", False, True, CONV_TRANSPOSE_TARGETS),
    QuantPattern("linear_relu", False, False, LINEAR_TARGETS),
    QuantPattern("linear", True, False, LINEAR_TARGETS),
    QuantPattern("conv", True, False, CONV_TARGETS),
    QuantPattern("conv_transpose", True, False, CONV_TRANSPOSE_TARGETS),
    QuantPattern("conv_relu", False, False, CONV_TARGETS),
    QuantPattern("conv_transpose_relu", False, False, CONV_TRANSPOSE_TARGETS),
    QuantPattern(
        "adaptive_avg_pool2d", False, False, frozenset({aten.adaptive_avg_pool2d.default})
    ),
    QuantPattern("add_relu", False, False, frozenset({aten.add.Tensor})),
    QuantPattern("add", False, False, frozenset({aten.add.Tensor})),
    QuantPattern("mul_relu", False, False, frozenset({aten.mul.Tensor})),
    QuantPattern("mul", False, False, frozenset({aten.mul.Tensor})),
    QuantPattern("cat", False, False, frozenset({aten.cat.default})),
)


def _serves(pattern: QuantPattern, config: QuantizationConfig) -> bool:
    dynamic = config.input_activation is not None and config.input_activation.is_dynamic
    return not dynamic or pattern.is_dynamic or (config.is_qat and pattern.is_qat)


def _module_type_filter(module_type: Callable) -> Callable[[Node], bool]:
    """Nodes traced inside a module of ``module_type`` (at any depth)."""
    wanted = f"{module_type.__module__}.{module_type.__qualname__}"

    def inside(node: Node) -> bool:
        for _, t in node.meta.get("nn_module_stack", {}).values():
            name = f"{t.__module__}.{t.__qualname__}" if isinstance(t, type) else t
            if name == wanted:
                return True
        return False

    return inside


class XNNPACKQuantizer(Quantizer):
    """PT2E quantizer for the XNNPACK delegate (see the module docstring)."""

    SUPPORTED_PATTERNS = SUPPORTED_PATTERNS

    def __init__(self) -> None:
        super().__init__()
        self.global_config: QuantizationConfig | None = None
        self.operator_type_config: dict[Any, QuantizationConfig | None] = {}
        self.module_type_config: dict[Callable, QuantizationConfig | None] = {}
        self.module_name_config: dict[str, QuantizationConfig | None] = {}
        self.filter_fn: Callable[[Node], bool] | None = None

    def set_global(self, quantization_config: QuantizationConfig) -> XNNPACKQuantizer:
        self.global_config = quantization_config
        return self

    def set_operator_type(
        self, operator_type: Any, quantization_config: QuantizationConfig
    ) -> XNNPACKQuantizer:
        """Patterns whose operator is ``operator_type`` (an OpOverload such as
        ``torch.ops.aten.linear.default``) outside named or typed modules."""
        self.operator_type_config[operator_type] = quantization_config
        return self

    def set_module_type(
        self, module_type: Callable, quantization_config: QuantizationConfig
    ) -> XNNPACKQuantizer:
        """Patterns inside any submodule of type ``module_type``."""
        self.module_type_config[module_type] = quantization_config
        return self

    def set_module_name(
        self, module_name: str, quantization_config: QuantizationConfig
    ) -> XNNPACKQuantizer:
        """Patterns inside the submodule named ``module_name`` (``"blocks.0.attn"``)."""
        if quantization_config is None:
            raise ValueError(
                f"set_module_name({module_name!r}, None): a module name needs a "
                "quantization config (None is not supported)"
            )
        self.module_name_config[module_name] = quantization_config
        return self

    def set_filter_function(self, filter_fn: Callable[[Node], bool]) -> XNNPACKQuantizer:
        """Quantize only nodes for which ``filter_fn`` is true."""
        self.filter_fn = filter_fn
        return self

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        return scalars_to_attrs(model)

    def annotate(self, model: GraphModule) -> GraphModule:
        names = list(self.module_name_config)
        types = list(self.module_type_config)
        for name, config in self.module_name_config.items():
            self._annotate_patterns(model, config, get_module_name_filter(name))
        for module_type, config in self.module_type_config.items():
            self._annotate_patterns(model, config, _module_type_filter(module_type))
        elsewhere = _outside(names, types)
        for op, config in self.operator_type_config.items():
            self._annotate_patterns(model, config, elsewhere, op)
        self._annotate_patterns(model, self.global_config, elsewhere)
        propagate_annotation(model)
        return model

    def validate(self, model: GraphModule) -> None:
        pass

    def _annotate_patterns(
        self,
        model: GraphModule,
        config: QuantizationConfig | None,
        filter_fn: Callable[[Node], bool] | None,
        operator: Any = None,
    ) -> None:
        if config is None:
            return
        filters = [f for f in (self.filter_fn, filter_fn) if f is not None]

        def combined(node: Node) -> bool:
            return all(f(node) for f in filters)

        for pattern in self.SUPPORTED_PATTERNS:
            if operator is not None and operator not in pattern.targets:
                continue
            if _serves(pattern, config):
                ANNOTATORS[pattern.name](model, config, combined)


def _outside(names: list[str], types: list[Callable]) -> Callable[[Node], bool]:
    filters = [get_module_name_filter(n) for n in names] + [_module_type_filter(t) for t in types]
    return lambda node: not any(f(node) for f in filters)


__all__ = ["XNNPACKQuantizer", "get_symmetric_quantization_config"]
