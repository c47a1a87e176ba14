"""Method outputs out: numpy arrays or torch tensors, copies or views.

Outputs are torch tensors when torch is already imported and numpy arrays
otherwise; ``PYEXECUTORCH_TENSOR_OUTPUT=torch|numpy`` forces one. Without
``clone`` a tensor output is a view of the method's memory, valid until it runs
again, and a torch output whose memory lies in a torch input the method read is
a view of that input. Torch is imported here only when the caller asks for torch
outputs and it is not imported yet.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from pyexecutorch.runtime.io import (
    OUTPUT_ENV,
    TORCH_BITS,
    Input,
    address_of,
    foreign,
    is_torch_tensor,
)
from pyexecutorch.schema.scalar_type import DTYPE_TO_SCALAR_TYPE, SCALAR_TYPE_TORCH_NAME


def torch_from_array(torch: Any, arr: np.ndarray) -> Any:
    """A torch tensor sharing ``arr``'s memory (ml_dtypes arrays included)."""
    if not foreign(arr.dtype):
        return torch.from_numpy(arr)
    name = SCALAR_TYPE_TORCH_NAME[DTYPE_TO_SCALAR_TYPE[arr.dtype]]
    bits = arr.view(np.dtype(TORCH_BITS[arr.dtype.itemsize]))
    return torch.from_numpy(bits).view(getattr(torch, name))


# os.environ.get re-encodes the key on every call; outputs are converted on
# every execute, so read the process environment's mapping directly where
# CPython exposes it (os.environ stays the one source of truth).
_ENV_DATA = getattr(os.environ, "_data", None)
try:
    _ENV_KEY = os.environ.encodekey(OUTPUT_ENV)  # type: ignore[attr-defined]
    _ENV_DECODE = os.environ.decodevalue  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - not CPython's os._Environ
    _ENV_DATA = None


def forced_output_kind() -> str | None:
    if _ENV_DATA is None:  # pragma: no cover
        return os.environ.get(OUTPUT_ENV)
    raw = _ENV_DATA.get(_ENV_KEY)
    return None if raw is None else _ENV_DECODE(raw)


def tensor_output_kind() -> str:
    """``"torch"`` or ``"numpy"``: what tensor outputs are returned as."""
    forced = forced_output_kind()
    if forced:
        if forced not in ("torch", "numpy", "executorch"):
            raise ValueError(
                f"{OUTPUT_ENV} must be either 'torch', 'executorch' or 'numpy', but was '{forced}'"
            )
        # The runtime's own API has no ExecuTorchResult: "executorch" is numpy here.
        return "numpy" if forced == "executorch" else forced
    return "torch" if _loaded_torch() is not None else "numpy"


def _loaded_torch() -> Any:
    torch = sys.modules.get("torch")
    return torch if torch is not None and hasattr(torch, "from_numpy") else None


def _torch_for_outputs() -> Any:
    torch = _loaded_torch()
    if torch is None:
        try:
            import torch  # noqa: PLC0415 - the caller asked for torch outputs explicitly
        except ImportError:
            raise RuntimeError(
                f"PyTorch tensor output was requested ({OUTPUT_ENV}=torch), but torch is not installed"
            ) from None
    return torch


def convert_outputs(
    values: Sequence[Any],
    *,
    clone: bool = True,
    inputs: Sequence[Input] = (),
    method: str = "",
    kind: str | None = None,
) -> list[Any]:
    """Outputs as the caller receives them.

    Tensors are copies with ``clone``; without it they are views of the
    method's memory, valid until the method runs again, and a torch output
    whose memory lies in a torch input is a view of that input. ``kind``
    ("torch" or "numpy") overrides :func:`tensor_output_kind`.
    """
    forced = forced_output_kind() if kind is None else kind
    if kind is not None:
        torch = _torch_for_outputs() if kind == "torch" else None
    elif forced is None:  # the usual case, decided without the checks below
        torch = sys.modules.get("torch")
        if torch is not None and not hasattr(torch, "from_numpy"):
            torch = None  # blocked (sys.modules["torch"] = None) or not torch
    else:
        torch = _torch_for_outputs() if tensor_output_kind() == "torch" else None
    if torch is None and not clone and all(type(v) is np.ndarray for v in values):
        return list(values)
    # Only torch inputs whose memory the method reads can hold an output.
    borrowed = (
        [(p, inp) for p, inp in enumerate(inputs) if inp.storage is not None] if inputs else ()
    )
    if torch is not None and not borrowed:
        # The common torch cases, inlined (a small model's outputs cost more here than
        # its kernels): copies wrap as they are, and so do writable arrays without clone.
        from_numpy = torch.from_numpy
        if clone:
            return [
                from_numpy(v.copy(order="K"))
                if type(v) is np.ndarray and v.dtype.isbuiltin != 2
                else _output(v, clone, torch, borrowed, method)
                for v in values
            ]
        return [
            from_numpy(v)
            if type(v) is np.ndarray and v.flags.writeable and v.dtype.isbuiltin != 2
            else _output(v, clone, torch, borrowed, method)
            for v in values
        ]
    return [_output(v, clone, torch, borrowed, method) for v in values]


def _output(
    value: Any, clone: bool, torch: Any, borrowed: Sequence[tuple[int, Input]], method: str
) -> Any:

    if isinstance(value, np.ndarray):
        if torch is None:
            return value.copy(order="K") if clone else value
        if borrowed and not clone:
            alias = _torch_alias(value, borrowed, method)
            if alias is not None:
                return alias
        if clone or not value.flags.writeable:
            value = value.copy(order="K")  # torch tensors cannot be read-only
        return torch_from_array(torch, value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_output(v, clone, torch, borrowed, method) for v in value]
    return value


def _torch_alias(out: np.ndarray, borrowed: Sequence[tuple[int, Input]], method: str) -> Any:
    """A view of the torch input (position, input) whose memory holds ``out``, or None."""
    if out.size == 0:
        return None
    address, nbytes = address_of(out), out.nbytes
    for position, inp in borrowed:
        if not is_torch_tensor(inp.source):
            continue
        start, size = inp.storage
        if inp.value.dtype != out.dtype or not (
            start <= address and address + nbytes <= start + size
        ):
            continue
        offset = address - start
        if offset % out.itemsize or any(s % out.itemsize for s in out.strides):
            continue
        source = inp.source.detach()
        if source.data_ptr() != start:
            raise ValueError(
                f"Input {position} of method '{method}': its storage changed before the output was read; pass it again"
            )
        return source.as_strided(
            out.shape,
            [s // out.itemsize for s in out.strides],
            source.storage_offset() + offset // out.itemsize,
        )
    return None
