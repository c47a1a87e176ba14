"""What the runtime's compiled lowering may rely on about reductions (see
:class:`pyexecutorch.kernels.registry.OperatorFacts`)."""

from __future__ import annotations

from typing import Any

from pyexecutorch.kernels.pool.facts import nhwc
from pyexecutorch.kernels.reduce.reduction_steps import ANY, MEAN, SUM
from pyexecutorch.kernels.registry import declare


def _spatial_mean(x: Any, dims: Any, keepdim: Any, dtype: Any, out: Any) -> Any:
    """A mean over H and W on channels-last arrays: the pooling family's step."""
    if dtype is not None and dtype != x.dtype:
        return None
    if not isinstance(dims, (tuple, list)) or sorted(d % 4 for d in dims) != [2, 3]:
        return None
    return nhwc().mean_hw_step(x, out)


# A mean over H and W may take its input channels-last (a CNN's global average pool).
declare("aten::mean.out", layout="spatial_mean", channels_last_step=_spatial_mean)
# Reductions the compiled tier fuses with the elementwise runs around them.
declare("aten::mean.out", fused_reduction=MEAN)
declare("aten::sum.IntList_out", fused_reduction=SUM)
declare("aten::any.out", fused_reduction=ANY)
