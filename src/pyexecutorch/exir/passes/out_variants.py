"""Functional operators to their ``.out`` variants, with ``memory.alloc`` outputs.

``add.Tensor(a, b)`` becomes ``add.out(a, b, out=alloc(spec))``: the runtime
calls kernels that write into planned memory.  Each out argument is a
``memory.alloc`` node whose spec is the functional result's spec (the same
object), so memory planning sees one tensor.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import GraphModule, Node

from pyexecutorch.exir import memory
from pyexecutorch.exir.dialects.quantized_ops import (
    is_quant_op,
    overload_names,
    refresh_out_variants,
)
from pyexecutorch.exir.error import (
    MissingOutVariantError,
    UnsupportedQuantizedOperatorError,
    op_name,
    source_location,
)
from pyexecutorch.exir.graph_utils import is_control_flow, is_inplace, submodules
from pyexecutorch.exir.tensor_spec import TensorSpec

aten = torch.ops.aten

# Call targets that stay as they are: scalar (symbolic int) ops and helpers.
SKIP_TARGETS: set[Any] = {
    operator.getitem,
    memory.alloc,
    memory.view,
    memory.free,
    aten.sym_size.int,
    aten.sym_stride.int,
    aten.sym_numel.default,
    aten._local_scalar_dense.default,
}

_OUT_CACHE: dict[Any, tuple[Any, tuple[str, ...]] | None] = {}


def _sig(arg) -> tuple[str, str]:
    return arg.name, str(arg.type)


def is_out_variant(op: torch._ops.OpOverload) -> bool:
    return any(a.is_out for a in op._schema.arguments)


# Out variants drop the tensor-options arguments (the out tensor has them).
_TENSOR_OPTIONS = frozenset({"dtype", "layout", "device", "pin_memory"})


def out_variant(op: torch._ops.OpOverload) -> tuple[torch._ops.OpOverload, tuple[str, ...]] | None:
    """The ``.out`` overload of ``op`` and its out-argument names, or None."""
    if op in _OUT_CACHE:
        return _OUT_CACHE[op]
    found = None
    full = [_sig(a) for a in op._schema.arguments]
    wants = (full, [s for s in full if s[0] not in _TENSOR_OPTIONS])
    n_returns = len(op._schema.returns)
    packet = op._overloadpacket
    names = list(packet.overloads())
    names += [n for n in overload_names(op._schema.name) if n not in names]
    for name in names:
        try:
            cand = getattr(packet, name)
        except (AttributeError, RuntimeError):
            continue
        args = cand._schema.arguments
        outs = [a for a in args if a.is_out]
        if not outs:
            continue
        if [_sig(a) for a in args if not a.is_out] not in wants:
            continue
        tensor_list_out = len(outs) == 1 and isinstance(outs[0].type, torch.ListType)
        if not tensor_list_out and len(outs) != n_returns:
            continue
        found = (cand, tuple(a.name for a in outs))
        break
    _OUT_CACHE[op] = found
    return found


def _alloc_arg(spec: Any) -> Any:
    """The official ``memory.alloc`` argument: ``(shape, dtype)``, a list of them for a
    tensor list; plain values, so the graph's generated code runs (``.module()``)."""
    if isinstance(spec, (list, tuple)):
        return [_alloc_arg(s) for s in spec]
    return (tuple(int(d) for d in spec.shape), spec.dtype)


def _specs_of(val: Any) -> Any:
    """Tensor specs from a node's example value (a tensor, or a list/tuple of them)."""
    if isinstance(val, torch.Tensor):
        return TensorSpec.from_tensor(val)
    if isinstance(val, (list, tuple)):
        return [_specs_of(v) for v in val]
    return None


def _alloc(graph: torch.fx.Graph, spec: Any, val: Any) -> Node:
    node = graph.call_function(memory.alloc, (_alloc_arg(spec),))
    node.meta["spec"] = spec
    node.meta["val"] = val
    return node


def to_out_variants(gm: GraphModule, owner: Node | None = None, method: str = "forward") -> None:
    """Rewrite ``gm`` (and control-flow submodules) to out variants, in place."""
    missing: dict[Any, str] = {}
    refresh_out_variants()
    _convert(gm, owner, missing)
    quantized = {op: where for op, where in missing.items() if is_quant_op(op)}
    if quantized:
        lines = [
            f"method {method!r} calls quantization operators that pyexecutorch cannot export "
            "(no out variant, so no runtime could load the program):"
        ]
        lines += [f"  - {op_name(op)} at {where}" for op, where in quantized.items()]
        lines.append(
            "Fix: quantize with a configuration whose operators pyexecutorch supports "
            "(pyexecutorch.exir.dialects.quantized_ops lists them), or delegate the pattern "
            "to a backend that consumes it (to_edge_transform_and_lower with a partitioner)."
        )
        raise UnsupportedQuantizedOperatorError("\n".join(lines))
    if missing:
        lines = [
            f"method {method!r} calls operators that have no out variant, so the runtime cannot run them:"
        ]
        for op, where in missing.items():
            lines.append(f"  - {op_name(op)} at {where}")
        lines.append(
            "Fix: let torch decompose them (drop them from preserve_ops / _core_aten_ops_exception_list), "
            "rewrite them with a transform pass (EdgeProgramManager.transform), or delegate them to a backend "
            "(to_backend / to_edge_transform_and_lower with a partitioner)."
        )
        raise MissingOutVariantError("\n".join(lines))


def _convert(gm: GraphModule, owner: Node | None, missing: dict[Any, str]) -> None:
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        target = node.target
        if is_control_flow(node):
            for sub in submodules(gm, node):
                _convert(sub, owner or node, missing)
            continue
        if target in SKIP_TARGETS or not isinstance(target, torch._ops.OpOverload):
            continue
        if is_out_variant(target) or is_inplace(target):
            continue
        if getattr(target, "namespace", None) == "executorch_prim":
            continue
        found = out_variant(target)
        if found is None:
            missing.setdefault(target, source_location(node, owner))
            continue
        out_op, out_names = found
        val = node.meta.get("val")
        spec = node.meta.get("spec")
        if spec is None:  # run on a graph whose specs were not propagated yet
            spec = _specs_of(val)
        accepted = {a.name for a in out_op._schema.arguments}
        kwargs = {k: v for k, v in node.kwargs.items() if k in accepted}
        with graph.inserting_before(node):
            if len(out_names) == 1:
                alloc = _alloc(graph, spec, val)
                kwargs[out_names[0]] = alloc
                if not out_op._schema.returns:
                    # Ops returning () (split_copy.Tensor_out): users index the out list.
                    node.replace_all_uses_with(alloc)
            else:
                specs = spec if isinstance(spec, (list, tuple)) else (spec,)
                vals = val if isinstance(val, (list, tuple)) else (val,)
                for name, s, v in zip(out_names, specs, vals, strict=True):
                    kwargs[name] = _alloc(graph, s, v) if isinstance(s, TensorSpec) else None
        node.target = out_op
        node.kwargs = kwargs
