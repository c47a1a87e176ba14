"""IR validity: every ATen operator left after decomposition is in Core ATen."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.fx import GraphModule

from pyexecutorch.exir.error import IRValidityError, op_name, source_location
from pyexecutorch.exir.graph_utils import nodes_with_owner

aten = torch.ops.aten

# Non-core ATen ops that the edge dialect still accepts (as the official
# exporter does): missing decompositions, symbolic-int helpers and asserts.
BUILTIN_EXCEPTIONS: frozenset[Any] = frozenset(
    {
        aten.mkldnn_rnn_layer.default,
        aten._upsample_bilinear2d_aa.default,
        aten.quantize_per_tensor.default,
        aten.dequantize.self,
        aten.max.default,
        aten.min.default,
        aten.full_like.default,
        aten.sym_size.int,
        aten.sym_stride.int,
        aten.sym_numel.default,
        aten._local_scalar_dense.default,
        aten.sym_constrain_range_for_size.default,
        aten.sym_constrain_range.default,
        aten._assert_scalar.default,
        aten._assert_async.msg,
        aten._assert_tensor_metadata.default,
        aten.scalar_tensor.default,
    }
)


def is_core(op: torch._ops.OpOverload) -> bool:
    tags = op.tags
    return torch.Tag.core in tags or torch.Tag.view_copy in tags


def check_ir_validity(
    gm: GraphModule, exceptions: Iterable[Any] = (), method: str = "forward"
) -> None:
    """Raise :class:`IRValidityError` naming every non-core ATen op, where it is
    used, and how to let it through."""
    allowed = set(BUILTIN_EXCEPTIONS)
    for op in exceptions:
        if isinstance(op, torch._ops.OpOverloadPacket):
            allowed.update(getattr(op, n) for n in op.overloads())
        else:
            allowed.add(op)
    bad: dict[Any, list[str]] = {}
    for _, node, owner in nodes_with_owner(gm):
        if node.op != "call_function":
            continue
        op = node.target
        if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
            continue
        if op in allowed or is_core(op):
            continue
        bad.setdefault(op, []).append(source_location(node, owner))
    if not bad:
        return
    lines = [f"method {method!r} uses operators outside the Core ATen opset:"]
    for op, places in bad.items():
        more = f" (and {len(places) - 1} more uses)" if len(places) > 1 else ""
        lines.append(f"  - {op_name(op)} at {places[0]}{more}")
    names = ", ".join(f"torch.ops.{op_name(op)}" for op in bad)
    lines.append(
        "If your runtime has kernels for them, let them through with "
        f"to_edge(..., compile_config=EdgeCompileConfig(_core_aten_ops_exception_list=[{names}])); "
        "to skip the check entirely use EdgeCompileConfig(_check_ir_validity=False). "
        "Exporting under torch.no_grad() also avoids training-only operators."
    )
    raise IRValidityError("\n".join(lines))
