"""``print_program``: a program's methods, instructions and values, readable."""

from __future__ import annotations

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


__all__ = ["print_program"]
