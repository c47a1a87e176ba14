"""Quantized embeddings: ``embedding(dequantize(weight), indices)`` on constant weights
becomes one ``quantized_decomposed::embedding_byte`` / ``embedding_4bit`` /
``embedding_2bit`` call on the (packed) int8 weight, as the official quantized fusion
pass rewrites them (``ExecutorchBackendConfig(do_quant_fusion_and_const_prop=True)``).

Matched dequantizations: torchao's ``dequantize_affine`` with a ``[1, group]`` block
(int8 in [-128, 127], [-8, 7] or [-2, 1]) and ``quantized_decomposed``'s
``dequantize_per_channel_group``. Zero points become float (or are dropped when all
zero); 4- and 2-bit values are packed at export, the first value in the high nibble
for 4-bit and lowest for 2-bit, as the official kernels read them.
"""

from __future__ import annotations

import torch
from torch.export.graph_signature import ExportGraphSignature
from torch.fx import GraphModule, Node

from pyexecutorch.exir.dialects.quantized_ops import ensure_embedding_ops, pack_embedding_weight
from pyexecutorch.exir.passes.const_fold import add_constant, constant_inputs, drop_unused_constants

# (quant_min, quant_max) -> fused operator name and bits
_BY_RANGE = {(-128, 127): ("embedding_byte", 8), (-8, 7): ("embedding_4bit", 4)}
_BY_RANGE[(-2, 1)] = ("embedding_2bit", 2)


def _dequantization(node: object, known: dict[Node, torch.Tensor]) -> tuple | None:
    """``(int weight, scales, zero points or None, qmin, qmax, output dtype or None)``."""
    if not isinstance(node, Node) or node.op != "call_function":
        return None
    ao = getattr(torch.ops, "torchao", None)
    affine = getattr(ao, "dequantize_affine", None) if ao is not None else None
    if affine is not None and node.target == affine.default:
        args = list(node.args) + [None] * (8 - len(node.args))
        weight, block, scale, zero, dtype, qmin, qmax, out_dtype = args[:8]
        out_dtype = node.kwargs.get("output_dtype", out_dtype)
        if dtype != torch.int8 or len(block) != 2 or block[0] != 1:
            return None
    elif node.target == torch.ops.quantized_decomposed.dequantize_per_channel_group.default:
        weight, scale, zero, qmin, qmax, dtype, _group, out_dtype = node.args[:8]
    else:
        return None
    if any(n is not None and n not in known for n in (weight, scale, zero)):
        return None
    w, s = known[weight], known[scale]
    z = known[zero] if zero is not None else None
    if w.dim() != 2 or w.dtype != torch.int8:
        return None
    return w, s, z, qmin, qmax, out_dtype


def fuse_quantized_embeddings(
    gm: GraphModule, signature: ExportGraphSignature, fake_mode
) -> ExportGraphSignature:
    """Rewrite in place; returns the signature without the weights left unused."""
    known = constant_inputs(gm)
    fused = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target != torch.ops.aten.embedding.default:
            continue
        found = _dequantization(node.args[0], known)
        if found is None:
            continue
        w, s, z, qmin, qmax, out_dtype = found
        if (qmin, qmax) not in _BY_RANGE:
            continue
        name, bits = _BY_RANGE[(qmin, qmax)]
        ensure_embedding_ops()
        packet = getattr(torch.ops.quantized_decomposed, name)
        scales = s.reshape(w.shape[0], -1)
        zeros = None
        if z is not None and bool((z != 0).any()):
            zeros = z.reshape(scales.shape).to(scales.dtype)
        consts = [
            add_constant(gm, f"_fused_embedding{fused}_{part}", value, fake_mode, before=node)
            for part, value in (
                ("weight", pack_embedding_weight(w, bits).contiguous()),
                ("scales", scales.contiguous()),
                ("zero_points", zeros),
            )
            if value is not None
        ]
        weight_c, scales_c = consts[0], consts[1]
        zero_c = consts[2] if zeros is not None else None
        args = (weight_c, scales_c, zero_c, qmin, qmax, node.args[1])
        with gm.graph.inserting_before(node):
            if out_dtype is not None and out_dtype != scales.dtype:
                new = gm.graph.call_function(packet.dtype, args, {"dtype": out_dtype})
            else:
                new = gm.graph.call_function(packet.default, args)
        new.meta.update(node.meta)  # the same value, spec and source
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        fused += 1
    if not fused:
        return signature
    gm.graph.eliminate_dead_code()
    return drop_unused_constants(gm, signature)
