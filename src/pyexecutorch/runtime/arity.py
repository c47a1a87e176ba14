"""Argument counts of kernel calls, checked when a method loads.

A kernel is a plain function called with an instruction's arguments in order
(see :mod:`pyexecutorch.kernels.registry`). An instruction whose argument list
does not fit its kernel's signature, whose trailing outputs are fewer than the
kernel writes, or that passes a non-tensor where the operator's schema has a
tensor (or the reverse; :mod:`pyexecutorch.kernels.signatures`) is a malformed
program: it fails at load naming the instruction, the operator and the argument,
rather than deep inside folding or a kernel.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cache
from typing import Any

from pyexecutorch.kernels.signatures import TENSOR_ARGUMENTS
from pyexecutorch.runtime.errors import InvalidProgramError
from pyexecutorch.schema.program import Null, OptionalTensorList, Tensor, TensorList

# What each letter of a signature accepts.
_KINDS: dict[str, tuple[type, ...]] = {
    "T": (Tensor,),
    "t": (Tensor, Null),
    "L": (TensorList,),
    "O": (OptionalTensorList, TensorList),
}
_TENSORISH = (Tensor, TensorList, OptionalTensorList)
_KIND_NAME = {
    "T": "a Tensor",
    "t": "a Tensor or None",
    "L": "a TensorList",
    "O": "a list of optional tensors",
    "-": "not a tensor",
}
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@cache
def positional_range(fn: Callable[..., Any]) -> tuple[int, int | None]:
    """(fewest, most) positional arguments ``fn`` accepts; most is None for ``*args``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: accept any count
        return 0, None
    lo = hi = 0
    for p in params:
        if p.kind == inspect.Parameter.VAR_POSITIONAL:
            return lo, None
        if p.kind in _POSITIONAL:
            hi += 1
            if p.default is inspect.Parameter.empty:
                lo += 1
    return lo, hi


def check_kernel_call(
    method: str, where: str, kernel: Any, args: list[int], outs: list[int], values: list[Any]
) -> None:
    """Raise :class:`InvalidProgramError` unless ``args`` (outputs included) fit ``kernel``;
    ``values`` are the plan's values."""
    if len(outs) != kernel.n_outs:
        raise InvalidProgramError(
            f"method '{method}': {where} ({kernel.name}) has {len(args)} arguments, "
            f"too few for the {kernel.n_outs} output(s) the operator writes"
        )
    lo, hi = positional_range(kernel.fn)
    if len(args) < lo or (hi is not None and len(args) > hi):
        expected = f"{lo}" if lo == hi else f"{lo} to {hi}" if hi is not None else f"at least {lo}"
        raise InvalidProgramError(
            f"method '{method}': {where} ({kernel.name}) passes {len(args)} arguments "
            f"(outputs included), but the operator takes {expected}"
        )
    signature = TENSOR_ARGUMENTS.get(kernel.name)
    if signature is None or len(signature) != len(args):
        return  # no schema (executorch_prim), or a return-slot convention of its own
    for n, (letter, j) in enumerate(zip(signature, args, strict=True)):
        val = values[j].val
        fits = isinstance(val, _KINDS[letter]) if letter != "-" else not isinstance(val, _TENSORISH)
        if not fits:
            raise InvalidProgramError(
                f"method '{method}': {where} ({kernel.name}) argument {n} is value {j}, "
                f"a {type(val).__name__}, but the operator expects {_KIND_NAME[letter]}"
            )
