"""Operators partitioners keep whole, for ``to_edge_transform_and_lower``.

A partitioner's ``ops_to_not_decompose(program)`` names operators its backend
runs as they are (``aten.linear.default`` instead of ``permute_copy`` +
``addmm``), with an optional filter: only nodes the filter accepts are kept,
the others are decomposed as usual. Every kept node must then be delegated
by that partitioner: :func:`check_preserved_ops_consumed` raises otherwise.

The program manager's ``to_edge_transform_and_lower`` calls, per method::

    program, keep = prepare_preserved_ops(program, partitioners)   # before decomposition
    edge = <ATen -> edge with preserve_ops=[*config.preserve_ops, *keep]>
    ... transform passes, then to_backend with each partitioner in order ...
    check_preserved_ops_consumed(method, edge_program, partitioners)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._decomp
from torch.export import ExportedProgram

from pyexecutorch.exir.error import ExportError, op_name, source_location
from pyexecutorch.exir.graph_utils import copy_graph_module, graph_modules, rebuild


class PreservedOpError(ExportError):
    """An operator kept from decomposition for a partitioner was not delegated by it."""


def _filter_ops(ops: Sequence[Any], partitioner: Any) -> list[torch._ops.OpOverload]:
    """The operators of ``ops`` that can be kept: overloads that are functional and
    return fresh tensors (keeping mutating or aliasing operators would break the
    edge dialect's invariants)."""
    out = []
    for op in ops or ():
        if isinstance(op, torch._ops.OpOverloadPacket):
            candidates = [getattr(op, name) for name in op.overloads()]
        elif isinstance(op, torch._ops.OpOverload):
            candidates = [op]
        else:
            raise TypeError(
                f"partitioner {type(partitioner).__name__}: ops_to_not_decompose must return "
                f"operator overloads (torch.ops.aten.linear.default), got {op!r}"
            )
        for o in candidates:
            schema = o._schema
            if schema.is_mutable:
                continue
            if any(r.alias_info is not None for r in schema.returns):
                continue
            out.append(o)
    return out


def _ops_and_check(program: ExportedProgram, partitioner: Any) -> tuple[list[Any], Callable | None]:
    fn = getattr(partitioner, "ops_to_not_decompose", None)
    if fn is None:
        return [], None
    got = fn(program)
    if not (isinstance(got, tuple) and len(got) == 2):
        raise TypeError(
            f"partitioner {type(partitioner).__name__}: ops_to_not_decompose must return "
            f"(ops, check_op_support or None), got {got!r}"
        )
    ops, check = got
    return _filter_ops(ops, partitioner), check


class _DecomposeThis:
    """Call target of a node whose operator is kept elsewhere but not here: when the
    program is traced again for decomposition it runs the operator's
    decomposition, so the node is decomposed like any other."""

    def __init__(self, op: torch._ops.OpOverload) -> None:
        self.op = op
        self.__name__ = f"decompose_{op_name(op).replace('.', '_')}"
        self.__qualname__ = self.__name__
        self.__module__ = __name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from pyexecutorch.exir.passes.decompose import default_decomposition_table

        fn = default_decomposition_table().get(self.op)
        # torch's table maps composite operators to "run the composite kernel", which
        # goes through the kernel the exporter overrides to keep the operator.
        if fn is not None and not (isinstance(fn, functools.partial) and "kernel" in fn.keywords):
            return fn(*args, **kwargs)
        # torch's own Python decomposition, where it has one: it keeps symbolic sizes
        # symbolic, where the C++ composite kernel below may guard on them (an
        # upsample_bilinear2d.vec specialized every dynamic size of the program, the
        # caller's too, through their shared shape environment)
        python_decomposition = torch._decomp.decomposition_table.get(self.op)
        if python_decomposition is not None:
            return python_decomposition(*args, **kwargs)
        cia = torch._C.DispatchKey.CompositeImplicitAutograd
        if torch._C._dispatch_has_kernel_for_dispatch_key(self.op.name(), cia):
            # The C++ composite kernel itself: the Python one may be the exporter's
            # "keep this operator" override while the program is traced.
            with torch._C._DisablePythonDispatcher():
                return self.op._op_dk(cia, *args, **kwargs)
        return self.op(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<decompose {op_name(self.op)}>"


def prepare_preserved_ops(
    program: ExportedProgram, partitioners: Sequence[Any]
) -> tuple[ExportedProgram, list[torch._ops.OpOverload]]:
    """``(program, ops)``: the ATen ``program`` to decompose with ``preserve_ops=ops``.

    Runs each partitioner's ``transform_for_pre_decomposition`` in order. Where a
    partitioner gives a ``check_op_support`` filter, nodes of its operators that no
    partitioner accepts are marked to be decomposed anyway (the returned program
    is then a copy; ``program`` itself is not changed).
    """
    for p in partitioners:
        hook = getattr(p, "transform_for_pre_decomposition", None)
        if hook is not None:
            program = hook(program)
    wanted: list[tuple[list[Any], Callable | None]] = [
        _ops_and_check(program, p) for p in partitioners
    ]
    keep: list[Any] = []
    for ops, _ in wanted:
        keep.extend(op for op in ops if op not in keep)
    if not keep or all(check is None for _, check in wanted):
        return program, keep
    gm = copy_graph_module(program.graph_module)
    changed = False
    keep_set = set(keep)
    for g in graph_modules(gm):
        for node in g.graph.nodes:
            if node.op != "call_function" or node.target not in keep_set:
                continue
            accepted = any(
                node.target in ops and (check is None or check(node)) for ops, check in wanted
            )
            if not accepted:
                node.target = _DecomposeThis(node.target)
                changed = True
        g.recompile()
    if not changed:
        return program, keep
    return rebuild(program, gm, program.graph_signature), keep


def check_preserved_ops_consumed(
    method: str, program: ExportedProgram, partitioners: Sequence[Any]
) -> None:
    """Raise :class:`PreservedOpError` if a node that partitioner ``i`` asked to keep
    (its operators and those of the partitioners before it, where its filter accepts
    the node) is still in ``program`` after delegation."""
    ops_so_far: set[Any] = set()
    for p in partitioners:
        ops, check = _ops_and_check(program, p)
        ops_so_far.update(ops)
        if not ops_so_far:
            continue
        for g in graph_modules(program.graph_module):
            for node in g.graph.nodes:
                if node.op != "call_function" or node.target not in ops_so_far:
                    continue
                if check is not None and not check(node):
                    continue
                raise PreservedOpError(
                    f"method {method!r}: node {node.name} ({op_name(node.target)}) from "
                    f"{source_location(node)} was kept from decomposition because partitioner "
                    f"{type(p).__name__} asked for {op_name(node.target)} (ops_to_not_decompose), "
                    "but no partitioner delegated it. Make the partitioner tag every node it keeps "
                    "(or filter them with check_op_support), or stop preserving the operator"
                )


__all__ = ["PreservedOpError", "check_preserved_ops_consumed", "prepare_preserved_ops"]
