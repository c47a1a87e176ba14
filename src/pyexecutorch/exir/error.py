"""Exceptions the compiler raises, with the user's source line of the node."""

from __future__ import annotations

import enum
import operator
import os
import re

import torch
from torch._export.verifier import SpecViolationError


class ExportErrorType(enum.Enum):
    """The official exporter's error categories (its ``ExportError`` takes one first)."""

    INVALID_INPUT_TYPE = 1
    INVALID_OUTPUT_TYPE = 2
    VIOLATION_OF_SPEC = 3
    NOT_SUPPORTED = 4
    MISSING_PROPERTY = 5
    UNINITIALIZED = 6


class ExportError(Exception):
    """Base class of the compiler's errors.

    Raised with a message; the official form ``ExportError(ExportErrorType.X, message)``
    is accepted too (the message is then prefixed with the category)."""

    def __init__(self, *args: object) -> None:
        if len(args) == 2 and isinstance(args[0], ExportErrorType):
            args = (f"[{args[0]}]: {args[1]}",)
        super().__init__(*args)

    @property
    def msg(self) -> str:
        return str(self)


class InternalError(Exception):
    """An invariant of the compiler itself was broken: a bug to report, not a user error."""


def internal_assert(pred: bool, assert_msg: str) -> None:
    """Raise :class:`InternalError` with ``assert_msg`` unless ``pred`` holds."""
    if not pred:
        raise InternalError(assert_msg)


class IRValidityError(ExportError, SpecViolationError):
    """An operator outside the Core ATen opset reached the edge dialect (a
    ``SpecViolationError``, as the official verifier raises, so code catching that
    keeps working)."""


class MissingOutVariantError(ExportError):
    """A functional operator has no ``.out`` variant to call at run time."""


class UnsupportedQuantizedOperatorError(MissingOutVariantError):
    """A quantization operator (``quantized_decomposed``, ``torchao``) that pyexecutorch
    cannot export: it has no ``.out`` variant, or no kernel, so no runtime could load it."""


class DynamicShapeError(ExportError):
    """A dynamic dimension has no upper bound, so it cannot be planned."""


class MissingKernelError(ExportError):
    """The program calls operators that the pyexecutorch runtime has no kernel for."""


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
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
    if not _user_frames(trace) and _is_quantization(node):
        lender = _quantized_node(node)
        if lender is not None:
            return f"{source_location(lender, owner)} (node {node.name} quantizes {lender.name})"
    frames = []  # (file, line, function, code), outermost first
    lines = trace.rstrip().splitlines()
    for i, line in enumerate(lines):
        m = _FRAME.search(line)
        if m is None or m.group(1).startswith("<"):
            continue
        code = (
            lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.search(lines[i + 1]) else ""
        )
        frames.append((m.group(1), m.group(2), m.group(3), code))
    if frames:
        # The innermost frame in the user's code, not in torch's own modules.
        user = [f for f in frames if not f[0].startswith(_TORCH_DIR)]
        best = user[-1] if user else frames[-1]
        text = f"{best[0]}:{best[1]} in {best[2]}" + (f": {best[3]}" if best[3] else "")
        if user and frames[-1] is not best:
            inner = frames[-1]
            text += f" (in {os.path.basename(inner[0])}:{inner[1]})"
        return text
    if owner is not None:
        return f"{source_location(owner)} (inside the branch/body, node {node.name})"
    from_node = node.meta.get("from_node")
    if from_node:
        return f"<no stack trace; node {node.name} from {from_node[-1].name}>"
    return f"<no stack trace for node {node.name}>"


def _user_frames(trace: str) -> bool:
    return any(not m.group(1).startswith("<") for m in _FRAME.finditer(trace))


def _is_quantization(node: torch.fx.Node) -> bool:
    from pyexecutorch.exir.dialects.quantized_ops import is_quant_op

    return node.op == "call_function" and is_quant_op(node.target)


def _quantized_node(node: torch.fx.Node) -> torch.fx.Node | None:
    """The nearest node with a user stack trace that ``node`` quantizes or dequantizes.

    ``convert_pt2e`` inserts quantize/dequantize/choose_qparams nodes without a stack
    trace.  A dequantize stands for the op reading it, a quantize for the op producing
    its input: search that way first, then the other, through the chain of
    quantization nodes (a quantize of a model input leads through its dequantize to
    the op that reads it)."""
    readers_first = "dequantize" in node.target._schema.name
    seen = {node}
    frontier = [node]
    while frontier:
        step = []
        for n in frontier:
            producers = [a for a in n.all_input_nodes if a.op == "call_function"]
            readers = list(n.users)
            for m in (readers + producers) if readers_first else (producers + readers):
                if m in seen:
                    continue
                seen.add(m)
                if _is_quantization(m) or m.target is operator.getitem:
                    step.append(m)  # dequantize -> its reader, choose_qparams -> its quantize
                elif _user_frames(m.meta.get("stack_trace") or ""):
                    return m
        frontier = step
    return None


def op_name(target) -> str:
    """``aten.foo.default`` style name of a call target."""
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._schema.name.split('::')[1]}.{target._overloadname}"
    return getattr(target, "__name__", str(target))
