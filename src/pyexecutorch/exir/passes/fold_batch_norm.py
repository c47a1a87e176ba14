"""Fold eval-mode batch norms into the convolutions that feed them.

``_native_batch_norm_legit_no_training(conv(x, w, b), gamma, beta, mean, var,
momentum, eps)[0]`` becomes ``conv(x, w', b')`` with, per output channel,
``s = gamma / sqrt(var + eps)``, ``w' = w * s`` and ``b' = (b - mean) * s + beta``
(the official XNNPACK partitioner fuses the same pattern).  Done only when the
convolution's weight, bias and every batch-norm parameter are constants, the
convolution feeds nothing else and only output 0 of the batch norm is read.  The
folded tensors are computed in float64 and cast back to the weight's dtype; they
become constants the same way ``const_fold`` creates them.
"""

from __future__ import annotations

import operator

import torch
from torch.export.graph_signature import ExportGraphSignature
from torch.fx import GraphModule, Node

from pyexecutorch.exir.passes.const_fold import (
    add_constant,
    constant_inputs,
    derived_name,
    drop_unused_constants,
    lifted_names,
    source_name,
)

aten = torch.ops.aten

_BN = aten._native_batch_norm_legit_no_training.default
_CONV = aten.convolution.default


def _getitem_zero(bn: Node) -> Node | None:
    """The single ``getitem(bn, 0)`` user when no other output of ``bn`` is read."""
    users = list(bn.users)
    if len(users) != 1:
        return None
    user = users[0]
    if user.op != "call_function" or user.target is not operator.getitem:
        return None
    if user.args[0] is not bn or user.args[1] != 0 or user.kwargs:
        return None
    return user


def _param(known: dict[Node, torch.Tensor], arg) -> tuple[bool, torch.Tensor | None]:
    """``(ok, value)``: ``None`` is allowed (value None); a node must be a constant."""
    if arg is None:
        return True, None
    if isinstance(arg, Node) and arg in known:
        return True, known[arg]
    return False, None


def _folded(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    gamma: torch.Tensor | None,
    beta: torch.Tensor | None,
    mean: torch.Tensor,
    var: torch.Tensor,
    eps: float,
    transposed: bool,
    groups: int,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    dtype = weight.dtype
    w = weight.detach().to(torch.float64)
    if transposed:
        # weight: [in, out / groups, *k]; output channel g * (out / groups) + j
        out_per_group = w.shape[1]
        out_channels = out_per_group * groups
    else:
        out_channels = w.shape[0]
    mean = mean.detach().to(torch.float64).reshape(-1)
    var = var.detach().to(torch.float64).reshape(-1)
    if mean.numel() != out_channels or var.numel() != out_channels:
        return None
    g = torch.ones_like(mean) if gamma is None else gamma.detach().to(torch.float64).reshape(-1)
    bt = torch.zeros_like(mean) if beta is None else beta.detach().to(torch.float64).reshape(-1)
    b = torch.zeros_like(mean) if bias is None else bias.detach().to(torch.float64).reshape(-1)
    if g.numel() != out_channels or bt.numel() != out_channels or b.numel() != out_channels:
        return None
    scale = g / torch.sqrt(var + eps)
    kdims = [1] * (w.dim() - 2)
    if transposed:
        in_channels = w.shape[0]
        if in_channels % groups:
            return None
        w = w.reshape(groups, in_channels // groups, out_per_group, *w.shape[2:])
        w = w * scale.reshape(groups, 1, out_per_group, *kdims)
        w = w.reshape(weight.shape)
    else:
        w = w * scale.reshape(out_channels, 1, *kdims)
    new_bias = (b - mean) * scale + bt
    bias_dtype = bias.dtype if bias is not None else dtype
    return w.to(dtype).contiguous(), new_bias.to(bias_dtype).contiguous()


def _free_name(gm: GraphModule, prefix: str, start: int) -> tuple[str, int]:
    i = start
    while hasattr(gm, f"{prefix}{i}"):
        i += 1
    return f"{prefix}{i}", i + 1


def fold_batch_norm(
    gm: GraphModule, signature: ExportGraphSignature, fake_mode
) -> ExportGraphSignature:
    """Fold in place; returns the signature without the inputs left unused."""
    known = constant_inputs(gm)
    lifted = lifted_names(signature)
    counter = 0
    fused = 0
    for bn in list(gm.graph.nodes):
        if bn.op != "call_function" or bn.target != _BN or bn.kwargs or len(bn.args) != 7:
            continue
        conv = bn.args[0]
        if (
            not isinstance(conv, Node)
            or conv.op != "call_function"
            or conv.target != _CONV
            or conv.kwargs
            or len(conv.args) != 9
            or len(conv.users) != 1
        ):
            continue
        out = _getitem_zero(bn)
        if out is None:
            continue
        _, weight_node, bias_node, _, _, _, transposed, _, groups = conv.args
        if not isinstance(weight_node, Node) or weight_node not in known:
            continue
        values = [_param(known, a) for a in (bias_node, *bn.args[1:3])]
        if not all(ok for ok, _ in values):
            continue
        bias, gamma, beta = (v for _, v in values)
        if bn.args[3] not in known or bn.args[4] not in known:
            continue
        weight = known[weight_node]
        if not weight.is_floating_point() or (bias is not None and not bias.is_floating_point()):
            continue
        try:
            res = _folded(
                weight,
                bias,
                gamma,
                beta,
                known[bn.args[3]],
                known[bn.args[4]],
                float(bn.args[6]),
                bool(transposed),
                int(groups),
            )
        except Exception:
            continue
        if res is None:
            continue
        new_w, new_b = res
        w_source = source_name(weight_node, lifted)
        b_source = source_name(bias_node, lifted) or source_name(bn.args[2], lifted)
        name, counter = _free_name(gm, "_folded_bn_weight", counter)
        w_fqn = derived_name([w_source] if w_source else [], "fold_batch_norm")
        w_const = add_constant(gm, name, new_w, fake_mode, before=conv, fqn=w_fqn)
        name, counter = _free_name(gm, "_folded_bn_bias", counter)
        b_fqn = derived_name([b_source] if b_source else [], "fold_batch_norm")
        b_const = add_constant(gm, name, new_b, fake_mode, before=conv, fqn=b_fqn)
        known[w_const] = new_w
        known[b_const] = new_b
        conv.args = (conv.args[0], w_const, b_const, *conv.args[3:])
        out.replace_all_uses_with(conv)
        gm.graph.erase_node(out)
        gm.graph.erase_node(bn)
        fused += 1
    if not fused:
        return signature
    gm.graph.eliminate_dead_code()
    return drop_unused_constants(gm, signature)
