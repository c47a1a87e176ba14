"""What the runtime's compiled lowering may rely on about shape operators (see
:class:`pyexecutorch.kernels.registry.OperatorFacts`)."""

from __future__ import annotations

from typing import Any

from pyexecutorch.kernels.pool.facts import nhwc
from pyexecutorch.kernels.registry import declare


def _cat(tensors: Any, dim: Any, out: Any) -> Any:
    return nhwc().cat_channels_step(tensors, out) if dim % 4 == 1 else None


def _split(x: Any, sizes: Any, dim: Any, outs: Any) -> Any:
    return nhwc().split_channels_step(x, outs) if dim % 4 == 1 else None


# cat and split along channels: every piece and the whole may be channels-last together.
declare("aten::cat.out", layout="channel_pieces", channels_last_step=_cat)
declare(
    "aten::split_with_sizes_copy.out",
    "aten::split_copy.Tensor_out",
    layout="channel_pieces",
    channels_last_step=_split,
)

# Copies whose output holds the source's elements in the same order (a view's copy, a
# clone, a same-dtype conversion): the argument position of the source.
declare(
    "aten::view_copy.out",
    "aten::clone.out",
    "aten::_to_copy.out",
    "aten::alias_copy.out",
    "aten::squeeze_copy.dims_out",
    "aten::squeeze_copy.dim_out",
    "aten::unsqueeze_copy.out",
    copy_source=0,
)
declare("aten::copy_", copy_source=1)  # (in place: the destination is the first argument)
