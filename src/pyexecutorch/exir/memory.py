"""Memory markers that appear as ``call_function`` targets in executorch graphs.

- ``alloc(spec)``: a planned buffer for an out-variant argument; ``spec`` is
  ``(shape, dtype)`` as the official exporter writes it (a list of them for
  ``Tensor[] out`` arguments); the node's ``meta["spec"]`` holds its :class:`TensorSpec`.
- ``view(base, size)``: a non-copying reshape of ``base``; emitted as
  ``executorch_prim::et_view.default``.
- ``free(spec)``: end of life of a runtime-allocated tensor (unused while every
  tensor is planned).

The functions also run, so an executorch graph module stays executable in
Python for debugging.
"""

from __future__ import annotations

from typing import Any

import torch

from pyexecutorch.exir.tensor_spec import TensorSpec


def _empty(spec: Any) -> torch.Tensor:
    if isinstance(spec, TensorSpec):
        return torch.empty(spec.shape, dtype=spec.dtype)
    shape, dtype = spec  # the official (shape, dtype) form
    return torch.empty(tuple(int(s) for s in shape), dtype=dtype)


def alloc(spec: Any) -> Any:
    """Allocate the tensor(s) that ``spec`` describes (at the upper-bound shape): one
    ``(shape, dtype)`` pair or TensorSpec, or a list of them (a tensor list)."""
    if isinstance(spec, list) or (
        isinstance(spec, tuple) and spec and isinstance(spec[0], TensorSpec)
    ):
        return [_empty(s) for s in spec]
    return _empty(spec)


def view(base: torch.Tensor, size: list[int]) -> torch.Tensor:
    """``base.view(size)``: shares storage with ``base``."""
    return base.view(size)


def free(spec: TensorSpec) -> None:
    """No-op marker: the runtime may release ``spec``'s memory here."""
    return None


__all__ = ["alloc", "free", "view"]
