"""PT2E quantization for the XNNPACK delegate (ahead of time; needs torch and torchao)."""

from pyexecutorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)

__all__ = ["XNNPACKQuantizer", "get_symmetric_quantization_config"]
