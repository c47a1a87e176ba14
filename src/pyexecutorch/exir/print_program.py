"""``print_program``: a program's methods, instructions and values, readable."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, TextIO

from pyexecutorch.schema.printer import format_program


def print_program(
    program: Any,
    show_meminfo: bool = True,
    mark_dynamic_shape_tensor: bool = False,
    out: TextIO | None = None,
) -> None:
    """Print ``program`` (a schema ``Program``, or a program manager holding one).

    ``show_meminfo`` adds each planned tensor's arena and offset;
    ``mark_dynamic_shape_tensor`` is accepted for the official signature (the
    listing always marks a dynamic tensor's bound)."""
    program = getattr(program, "executorch_program", program)
    print(format_program(program, verbose=show_meminfo), file=out or sys.stdout)


def pretty_print(obj: Any, indent: int = 0, out: TextIO | None = None) -> None:
    """Print a schema object (dataclasses, lists, scalars) as an indented tree."""
    out = out or sys.stdout
    pad = "  " * indent
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        print(f"{pad}{type(obj).__name__}(", file=out)
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value) or (isinstance(value, list) and value):
                print(f"{pad}  {f.name}=", file=out)
                pretty_print(value, indent + 2, out)
            else:
                print(f"{pad}  {f.name}={_short(value)},", file=out)
        print(f"{pad}),", file=out)
    elif isinstance(obj, list):
        print(f"{pad}[", file=out)
        for item in obj:
            pretty_print(item, indent + 1, out)
        print(f"{pad}],", file=out)
    else:
        print(f"{pad}{_short(obj)},", file=out)


def _short(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    return repr(value)


__all__ = ["pretty_print", "print_program"]
