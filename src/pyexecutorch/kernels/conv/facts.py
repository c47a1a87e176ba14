"""What the runtime's compiled lowering may rely on about convolutions (see
:class:`pyexecutorch.kernels.registry.OperatorFacts`)."""

from pyexecutorch.kernels.conv.epilogue import channels_last_step, store_pass
from pyexecutorch.kernels.registry import Epilogue, declare

# Its input and output may be stored channels-last (dense or depthwise, constant
# weights: the runtime's "convolution" rule); in a method that may compile whole its numpy
# fast path (packed weights, generated code: milliseconds of a warm load) is made only if
# a line calls it, the compiled step doing the work inside the whole method.
declare("aten::convolution.out", layout="convolution", step_only_when_whole=True)
# Its channels-last step may apply a residual add, an activation and clamps after it as it
# stores (see kernels.conv.epilogue).
declare("aten::convolution.out", epilogue=Epilogue(store_pass, channels_last_step))
# An inference batch norm right after it may be folded into its weights at load.
declare("aten::convolution.out", batch_norm_fold="convolution")
