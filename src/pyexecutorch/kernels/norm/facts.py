"""What the runtime may rely on about normalizations (see
:class:`pyexecutorch.kernels.registry.OperatorFacts`)."""

from pyexecutorch.kernels.norm.reduction_steps import LAYER_NORM, LOG_SOFTMAX, SOFTMAX
from pyexecutorch.kernels.registry import declare

# Reductions the compiled tier fuses with the elementwise runs around them.
declare("aten::_softmax.out", fused_reduction=SOFTMAX)
declare("aten::_log_softmax.out", fused_reduction=LOG_SOFTMAX)
declare("aten::native_layer_norm.out", fused_reduction=LAYER_NORM)
# Dropout draws random numbers: never computed once at load.
declare("aten::native_dropout.out", impure=True)
# An inference batch norm: folded into the convolution before it at load where it can be.
declare("aten::_native_batch_norm_legit_no_training.out", batch_norm_fold="batch_norm")
