"""What the runtime's compiled lowering may rely on about pooling (see
:class:`pyexecutorch.kernels.registry.OperatorFacts`): its input and values output may be
stored channels-last together, and then run as the channels-last compiled steps of
:mod:`pyexecutorch.kernels.pool.compiled_nhwc` (imported on first use: it needs numba)."""

from __future__ import annotations

from typing import Any

from pyexecutorch.kernels.registry import declare


def nhwc() -> Any:
    """kernels.pool.compiled_nhwc, the channels-last steps (imported when first asked)."""
    from pyexecutorch.kernels.pool import compiled_nhwc  # noqa: PLC0415 - needs numba

    return compiled_nhwc


def _max_pool(x: Any, kernel: Any, stride: Any, padding: Any, dilation: Any, ceil: Any,
              out: Any, indices: Any) -> Any:  # fmt: skip
    return nhwc().max_pool2d_step(x, out, kernel, stride, padding, dilation, ceil)


def _avg_pool(x: Any, kernel: Any, stride: Any, padding: Any, ceil: Any, count_pad: Any,
              divisor: Any, out: Any) -> Any:  # fmt: skip
    return nhwc().avg_pool2d_step(x, out, kernel, stride, padding, ceil, count_pad, divisor)


def _adaptive_avg_pool(x: Any, size: Any, out: Any) -> Any:
    return nhwc().adaptive_avg_pool2d_step(x, out)


declare("aten::max_pool2d_with_indices.out", layout="pooling", channels_last_step=_max_pool)
declare("aten::avg_pool2d.out", layout="pooling", channels_last_step=_avg_pool)
declare("aten::_adaptive_avg_pool2d.out", layout="pooling", channels_last_step=_adaptive_avg_pool)
