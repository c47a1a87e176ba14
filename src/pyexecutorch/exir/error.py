"""Exceptions the compiler raises, with the user's source line of the node."""

from __future__ import annotations

import re

import torch


class ExportError(Exception):
    """Base class of the compiler's errors."""


class IRValidityError(ExportError):
    """An operator outside the Core ATen opset reached the edge dialect."""


class MissingOutVariantError(ExportError):
    """A functional operator has no ``.out`` variant to call at run time."""


class DynamicShapeError(ExportError):
    """A dynamic dimension has no upper bound, so it cannot be planned."""


class MissingKernelError(ExportError):
    """The program calls operators that the pyexecutorch runtime has no kernel for."""


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def source_location(node: torch.fx.Node | None, owner: torch.fx.Node | None = None) -> str:
    """``file:line in fn: code`` of the user code that created ``node``.

    torch.export records a Python stack trace per node; its last frame in a
    real file is the line in the user's model.  Nodes inside control-flow
    branches only have generated frames; ``owner`` (the ``cond``/``while_loop``
    node running the branch) then gives the location.
    """
    if node is None:
        return "<unknown source>"
    trace = node.meta.get("stack_trace") or ""
    lines = trace.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        m = _FRAME.search(lines[i])
        if m and m.group(1).startswith("<"):
            continue
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.search(lines[i + 1]) else ""
            where = f"{m.group(1)}:{m.group(2)} in {m.group(3)}"
            return f"{where}: {code}" if code else where
    if owner is not None:
        return f"{source_location(owner)} (inside the branch/body, node {node.name})"
    from_node = node.meta.get("from_node")
    if from_node:
        return f"<no stack trace; node {node.name} from {from_node[-1].name}>"
    return f"<no stack trace for node {node.name}>"


def op_name(target) -> str:
    """``aten.foo.default`` style name of a call target."""
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._schema.name.split('::')[1]}.{target._overloadname}"
    return getattr(target, "__name__", str(target))
