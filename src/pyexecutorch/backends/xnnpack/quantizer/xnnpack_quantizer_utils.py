"""The XNNPACK quantizer's building blocks under the official
``backends.xnnpack.quantizer.xnnpack_quantizer_utils`` path: the configuration types
(torchao's PT2E ones, which ``XNNPACKQuantizer.set_global`` takes), the annotators
by pattern name and the annotation propagation (ours, in :mod:`.annotators`)."""

from torchao.quantization.pt2e.quantizer import (
    OperatorConfig,
    OperatorPatternType,
    QuantizationConfig,
    QuantizationSpec,
    get_bias_qspec,
    get_input_act_qspec,
    get_output_act_qspec,
    get_weight_qspec,
)

from pyexecutorch.backends.xnnpack.quantizer.annotators import (
    ANNOTATORS as OP_TO_ANNOTATOR,
)
from pyexecutorch.backends.xnnpack.quantizer.annotators import propagate_annotation

__all__ = [
    "OP_TO_ANNOTATOR",
    "OperatorConfig",
    "OperatorPatternType",
    "QuantizationConfig",
    "QuantizationSpec",
    "get_bias_qspec",
    "get_input_act_qspec",
    "get_output_act_qspec",
    "get_weight_qspec",
    "propagate_annotation",
]
