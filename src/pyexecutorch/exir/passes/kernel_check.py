"""Kernel check: every operator the program calls has a pyexecutorch kernel.

Operator names are the ones the emitter writes into the program
(``aten::add.out``, ``aten::copy_``, ``executorch_prim::add.Scalar``); they
are compared with :func:`pyexecutorch.kernels.operator_names`.
"""

from __future__ import annotations

import builtins
import math
import operator
import warnings
from typing import Any

import torch
from torch.fx import GraphModule

from pyexecutorch.exir import memory
from pyexecutorch.exir.dialects.quantized_ops import QUANT_NAMESPACES
from pyexecutorch.exir.error import (
    MissingKernelError,
    UnsupportedQuantizedOperatorError,
    source_location,
)
from pyexecutorch.exir.graph_utils import HOP_MAP, HOP_WHILE, nodes_with_owner
from pyexecutorch.exir.tensor_spec import TensorSpec

# Python symbolic-int operations and the program operators they become.
SYM_OPS: dict[Any, str] = {
    operator.add: "executorch_prim::add.Scalar",
    operator.sub: "executorch_prim::sub.Scalar",
    operator.mul: "executorch_prim::mul.Scalar",
    operator.floordiv: "executorch_prim::floordiv.Scalar",
    operator.truediv: "executorch_prim::truediv.Scalar",
    operator.mod: "executorch_prim::mod.Scalar",
    operator.eq: "executorch_prim::eq.Scalar",
    operator.gt: "executorch_prim::gt.Scalar",
    operator.lt: "executorch_prim::lt.Scalar",
    operator.ge: "executorch_prim::ge.Scalar",
    operator.le: "executorch_prim::le.Scalar",
    operator.neg: "executorch_prim::neg.Scalar",
    builtins.round: "executorch_prim::round.Scalar",
    math.ceil: "executorch_prim::ceil.Scalar",
    math.trunc: "executorch_prim::trunc.Scalar",
    torch.sym_float: "executorch_prim::sym_float.Scalar",
    torch.sym_int: "executorch_prim::sym_int.Scalar",
    torch.sym_max: "executorch_prim::sym_max.Scalar",
    torch.sym_min: "executorch_prim::sym_min.Scalar",
    torch.sym_not: "executorch_prim::sym_not.Scalar",
}


def program_operator_name(target: Any) -> str | None:
    """The ``name.overload`` key the runtime looks a call target up by."""
    if isinstance(target, torch._ops.OpOverload):
        overload = target._schema.overload_name
        return target._schema.name + (f".{overload}" if overload else "")
    return SYM_OPS.get(target)


def called_operators(gm: GraphModule) -> dict[str, str]:
    """Program operator name -> source location of its first use."""
    found: dict[str, str] = {}
    for _, node, owner in nodes_with_owner(gm):
        if node.op != "call_function":
            continue
        name = None
        if node.target is memory.view:
            spec = node.meta.get("spec")
            if isinstance(spec, TensorSpec) and not spec.is_static_shape_tensor:
                name = "executorch_prim::et_view.default"
        elif node.target is HOP_MAP:
            for extra in (
                "executorch_prim::et_copy_index.tensor",
                "executorch_prim::add.Scalar",
                "executorch_prim::eq.Scalar",
                "executorch_prim::sub.Scalar",
            ):
                found.setdefault(extra, source_location(node, owner))
        elif node.target is HOP_WHILE:
            continue
        else:
            name = program_operator_name(node.target)
        if name is not None and name not in found:
            found[name] = source_location(node, owner)
    return found


def check_kernels(methods: dict[str, GraphModule], strict: bool = False) -> list[str]:
    """Warn (or raise when ``strict``) naming each operator without a kernel.

    Returns the sorted missing names."""
    from pyexecutorch.kernels import operator_names

    have = set(operator_names())
    missing: dict[str, str] = {}
    for method, gm in methods.items():
        for name, where in called_operators(gm).items():
            if name not in have and name not in missing:
                missing[name] = f"{method}: {where}"
    if not missing:
        return []
    quantized = {n: w for n, w in missing.items() if n.split("::")[0] in QUANT_NAMESPACES}
    if quantized:
        # Always an error: a quantized program should fail here, never at load on a device.
        lines = [
            "the pyexecutorch runtime has no kernel for these quantization operators, so the "
            "program could not be loaded:"
        ]
        lines += [
            f"  - {name} (first used in {where})" for name, where in sorted(quantized.items())
        ]
        raise UnsupportedQuantizedOperatorError("\n".join(lines))
    lines = [
        f"the pyexecutorch runtime has no kernel for {len(missing)} operator(s) this program calls:"
    ]
    lines += [f"  - {name} (first used in {where})" for name, where in sorted(missing.items())]
    lines.append(
        "The program will fail to load in pyexecutorch.runtime (the official runtime may still run it). "
        "Delegate these operators to a backend, rewrite them with a transform pass, or add kernels "
        "to pyexecutorch.kernels."
    )
    message = "\n".join(lines)
    if strict:
        raise MissingKernelError(message)
    warnings.warn(message, stacklevel=3)
    return sorted(missing)
