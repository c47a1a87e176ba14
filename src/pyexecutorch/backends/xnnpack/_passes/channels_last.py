"""Which values XNNPACK keeps channels-last (NHWC).

Convolutions, poolings, spatial means, bilinear upsampling and PReLU read and
write NHWC. Elementwise nodes whose 4-D inputs are NHWC stay NHWC, so that a
run of convolutions, activations and residual adds has no transposes between
them; slices, pads, concatenations and batch norms follow their input with
their axes remapped. Everything else reads NCHW (the serializer inserts one
transpose per value and layout where a reader needs the other layout, and
transposes constants ahead of time). Graph inputs and outputs are NCHW.

The result is ``node.meta["xnn_nhwc"]`` (True: the value is stored NHWC).
"""

from __future__ import annotations

import operator

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers quantized_decomposed
from torch.fx import Node

from pyexecutorch.backends.xnnpack._passes.common import PassContext
from pyexecutorch.backends.xnnpack.partition.config import op_key, rank

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed
NHWC = "xnn_nhwc"

# NCHW <-> NHWC permutations: NHWC dim j holds NCHW dim TO_NHWC[j].
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)

_NHWC_OPS = {
    op_key(o)
    for o in (
        aten.max_pool2d.default,
        aten.avg_pool2d.default,
        aten.mean.dim,
        aten.upsample_bilinear2d.vec,
        aten.prelu.default,
        aten.max.dim,
    )
}
_FOLLOW_FIRST = {
    op_key(o)
    for o in (
        aten.slice_copy.Tensor,
        aten.constant_pad_nd.default,
        aten._native_batch_norm_legit_no_training.default,
        aten.clone.default,
    )
} | {"dim_order_ops::_clone_dim_order.default", "dim_order_ops::_to_dim_order_copy.default"}
_ELEMENTWISE = {
    op_key(o)
    for o in (
        aten.add.Tensor,
        aten.sub.Tensor,
        aten.mul.Tensor,
        aten.div.Tensor,
        aten.minimum.default,
        aten.maximum.default,
        aten.relu.default,
        aten.hardtanh.default,
        aten.clamp.default,
        aten.hardswish.default,
        aten.sigmoid.default,
        aten.tanh.default,
        aten.gelu.default,
        aten.leaky_relu.default,
        aten.elu.default,
        aten.abs.default,
        aten.neg.default,
        aten.exp.default,
        aten.log.default,
        aten.sqrt.default,
        aten.rsqrt.default,
        aten.ceil.default,
        aten.floor.default,
        aten.sin.default,
        aten.cos.default,
        aten.pow.Tensor_Scalar,
        aten.cat.default,
        # static quantize/dequantize left as XNNConvert nodes (around a float op)
        qd.quantize_per_tensor.default,
        qd.dequantize_per_tensor.default,
    )
}


def _single(node: Node) -> bool:
    shape = node.meta["val"].shape
    return all(isinstance(d, int) and d == 1 for d in shape)


def _is_conv2d(node: Node) -> bool:
    return node.target == aten.convolution.default and rank(node.args[1]) == 4


def needs_nhwc(node: Node) -> bool:
    """Whether ``node`` reads its first input and writes its output NHWC."""
    return _is_conv2d(node) or op_key(node.target) in _NHWC_OPS


def plan_layouts(ctx: PassContext) -> None:
    for node in ctx.gm.graph.nodes:
        node.meta[NHWC] = _layout(ctx, node)


def _layout(ctx: PassContext, node: Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return bool(node.args[0].meta.get(NHWC, False)) and rank(node) == 4
    if needs_nhwc(node):
        return True
    if node.target == qd.quantize_per_tensor.tensor and node.users:
        # a run-time quantization read by convolutions converts the NHWC image
        return all(_is_conv2d(u) for u in node.users)
    key = op_key(node.target)
    if key in _FOLLOW_FIRST:
        src = node.args[0]
        return rank(src) == 4 and bool(src.meta.get(NHWC, False))
    if key in _ELEMENTWISE:
        tensors = [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
        computed = [a for a in tensors if not ctx.is_constant(a)]
        if rank(node) != 4 or not any(a.meta.get(NHWC, False) for a in computed):
            return False
        # every input must be convertible: 4-D (constants are transposed ahead of time)
        # or a single element, which broadcasts the same in either layout
        return all(rank(a) == 4 or _single(a) for a in tensors)
    return False
