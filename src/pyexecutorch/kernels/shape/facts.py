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


SPLITS = ("aten::split_with_sizes_copy.out", "aten::split_copy.Tensor_out")

# cat and split along channels: every piece and the whole may be channels-last together.
declare("aten::cat.out", layout="channel_pieces", channels_last_step=_cat)
declare(*SPLITS, layout="channel_pieces", channels_last_step=_split)
# split(x, sizes, dim, outs): an equal split's pieces may be read in place by a fused loop.
declare(*SPLITS, split_dim=2)

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
# copy(self, src, non_blocking, out): src's elements in self's shape and dtype (a copy in
# order where their sizes and dtypes agree, which the callers check)
declare("aten::copy.out", copy_source=1)
# Reshapes' copies: their bytes are their first argument's, as they are.
declare(
    "aten::view_copy.out",
    "aten::alias_copy.out",
    "aten::squeeze_copy.dim_out",
    "aten::squeeze_copy.dims_out",
    "aten::unsqueeze_copy.out",
    byte_copy=True,
)

# executorch_prim's view and indexed copy (copy.py): stack-style kernels; the view is
# made at run time, and a view_copy of the same arguments stands for it where shapes are
# fixed.
declare(
    "executorch_prim::et_view.default", "executorch_prim::et_copy_index.tensor", stack_style=True
)
declare("executorch_prim::et_view.default", run_time_view="aten::view_copy.out")

# Not functions of their arguments: random numbers, uninitialized memory.
declare(
    "aten::rand.out",
    "aten::randn.out",
    "aten::empty.out",
    "dim_order_ops::_empty_dim_order.out",
    impure=True,
)

# Static plans of dynamic-shape methods: repeat_interleave(repeats)'s length is the sum of
# its repeats; select's output shape does not depend on its index; a slice's length
# follows its bounds, clamped to the dimension.
declare("aten::repeat_interleave.Tensor_out", shape_from_data="always")
declare("aten::select_copy.int_out", shape_ignores_scalars=True)
declare("aten::slice_copy.Tensor_out", clamped_slice=True)
