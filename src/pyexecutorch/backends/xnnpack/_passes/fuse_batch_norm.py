"""An eval batch norm after a convolution or linear folds into that node.

Per output channel ``s = gamma / sqrt(var + eps)``; the weight is scaled by
``s`` and the bias becomes ``(bias - mean) * s + beta``, computed in float64
and stored in the weight's dtype. Batch norms that cannot fold are left for
their own visitor (a per-channel multiply and add).
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Node

from pyexecutorch.backends.xnnpack._passes.common import PassContext, absorb

aten = torch.ops.aten
BATCH_NORM = aten._native_batch_norm_legit_no_training.default


def _scale_shift(ctx: PassContext, bn: Node) -> tuple[torch.Tensor, torch.Tensor] | None:
    gamma, beta, mean, var = (ctx.constant(a) if a is not None else None for a in bn.args[1:5])
    if mean is None or var is None:
        return None
    eps = float(bn.args[6])
    mean, var = mean.double(), var.double()
    scale = torch.rsqrt(var + eps) * (gamma.double() if gamma is not None else 1.0)
    shift = (beta.double() if beta is not None else 0.0) - mean * scale
    return scale, shift


def batch_norm_scale_shift(ctx: PassContext, bn: Node) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(scale, shift)`` in float64 with ``bn(x) = x * scale + shift`` per channel."""
    return _scale_shift(ctx, bn)


def _fold(ctx: PassContext, producer: Node, bn: Node) -> bool:
    weight = ctx.constant(producer.args[1])
    bias_node = producer.args[2] if len(producer.args) > 2 else None
    bias = ctx.constant(bias_node) if bias_node is not None else None
    if weight is None or (bias_node is not None and bias is None):
        return False
    found = _scale_shift(ctx, bn)
    if found is None:
        return False
    scale, shift = found
    w = weight.double()
    if producer.target == aten.convolution.default and producer.args[6]:
        groups = int(producer.args[8])
        cin, per_group = w.shape[0], w.shape[1]
        if scale.numel() != per_group * groups:
            return False
        w = w.reshape(groups, cin // groups, per_group, *w.shape[2:])
        w = w * scale.reshape(groups, 1, per_group, *[1] * (weight.dim() - 2))
        w = w.reshape(weight.shape)
    else:
        if scale.numel() != w.shape[0]:
            return False
        w = w * scale.reshape(-1, *[1] * (weight.dim() - 1))
    b = (bias.double() if bias is not None else torch.zeros_like(scale)) * scale + shift
    new_w = ctx.new_constant(w.to(weight.dtype), producer, producer.args[1])
    new_b = ctx.new_constant(
        b.to(bias.dtype if bias is not None else weight.dtype), producer, bias_node or bn
    )
    args = list(producer.args)
    args[1] = new_w
    if len(args) > 2:
        args[2] = new_b
    else:
        args.append(new_b)
    producer.args = tuple(args)
    return True


def fuse_batch_norm(ctx: PassContext) -> None:
    graph = ctx.gm.graph
    for bn in list(graph.nodes):
        if bn.op != "call_function" or bn.target != BATCH_NORM:
            continue
        producer = bn.args[0]
        readers = list(bn.users)
        if (
            not isinstance(producer, Node)
            or producer.target not in (aten.convolution.default, aten.linear.default)
            or len(producer.users) != 1
            or not all(u.target is operator.getitem and u.args[1] == 0 for u in readers)
        ):
            continue
        if not _fold(ctx, producer, bn):
            continue
        absorb(producer, bn, *readers)
        for u in readers:
            u.replace_all_uses_with(producer)
            graph.erase_node(u)
        graph.erase_node(bn)
