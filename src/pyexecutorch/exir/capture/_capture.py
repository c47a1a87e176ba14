"""``patch_forward``: export another method of a module as its ``forward``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch


@contextlib.contextmanager
def patch_forward(obj: torch.nn.Module, new_method: Callable[..., Any]) -> Iterator[None]:
    """Within the block, ``obj.forward`` is ``new_method`` (a bound method of ``obj``),
    so ``torch.export.export(obj, args)`` traces that method; restored on exit."""
    had_own = "forward" in vars(obj)
    original = vars(obj).get("forward")
    obj.forward = new_method
    try:
        yield
    finally:
        if had_own:
            obj.forward = original
        else:
            del obj.forward


__all__ = ["patch_forward"]
