"""Converting caller inputs to numpy and outputs back, with precise errors.

Torch is never imported here: a torch tensor is recognised by its type's
module and converted through the object the caller handed in.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from pyexecutorch.runtime.method import InputSpec
from pyexecutorch.schema.scalar_type import DTYPE_TO_SCALAR_TYPE, SCALAR_TYPE_NAME

OUTPUT_ENV = "PYEXECUTORCH_TENSOR_OUTPUT"


def _is_torch_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "numpy")


def _dtype_name(dtype: np.dtype) -> str:
    st = DTYPE_TO_SCALAR_TYPE.get(np.dtype(dtype))
    return SCALAR_TYPE_NAME[st] if st is not None else str(dtype)


def to_array(value: Any, where: str) -> np.ndarray:
    """A numpy view (or copy when it must) of a tensor-like input."""
    if isinstance(value, np.ndarray):
        return value
    if _is_torch_tensor(value):
        t = value.detach()
        if str(t.device) != "cpu":
            t = t.cpu()
        if str(t.dtype) == "torch.bfloat16":
            # numpy has no bfloat16: hand over the raw 16-bit patterns.
            return t.view(dtype=__import__("torch").int16).numpy().view(np.uint16)
        return t.resolve_conj().resolve_neg().numpy()
    if isinstance(value, np.generic):
        return np.asarray(value)
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (TypeError, BufferError, RuntimeError) as e:
            raise BufferError(f"{where}: cannot read the DLPack tensor: {e}") from None
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(f"{where}: unsupported input type {type(value).__name__}") from None
    if view.format and view.format[0] in "><!" and view.format[0] != ("<" if sys.byteorder == "little" else ">"):
        raise BufferError(f"{where}: buffer is not in native byte order (format {view.format!r})")
    if not (view.c_contiguous or view.f_contiguous):
        raise BufferError(f"{where}: buffer is not dense")
    return np.asarray(view)


def convert_input(value: Any, spec: InputSpec, position: int, method: str) -> Any:
    """Check one input against the method's declaration and return what the method stores."""
    where = f"Input {position} of method '{method}'"
    if spec.kind == "tensor":
        arr = to_array(value, where)
        if arr.dtype != spec.dtype:
            if arr.dtype.byteorder not in "=|" and arr.dtype.newbyteorder("=") == spec.dtype:
                raise BufferError(f"{where}: buffer is not in native byte order")
            raise ValueError(
                f"{where} has dtype {_dtype_name(arr.dtype)} but the method expects {_dtype_name(spec.dtype)}"
            )
        if arr.ndim != len(spec.sizes):
            raise ValueError(f"{where} has rank {arr.ndim}, but the method expects rank {len(spec.sizes)}")
        if arr.shape != spec.sizes:
            if not spec.dynamic:
                raise ValueError(f"{where} has shape {list(arr.shape)}, but the method expects {list(spec.sizes)}")
            for d, (got, bound) in enumerate(zip(arr.shape, spec.sizes, strict=True)):
                if got > bound:
                    raise ValueError(
                        f"{where}: dimension {d} has size {got}, above its upper bound {bound} "
                        f"(the method accepts up to {list(spec.sizes)})"
                    )
        return arr
    if spec.kind == "int":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{where} expects an int, got {type(value).__name__}")
        return int(value)
    if spec.kind == "double":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{where} expects a float, got {type(value).__name__}")
        return float(value)
    if spec.kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{where} expects a bool, got {type(value).__name__}")
        return bool(value)
    if spec.kind == "string":
        if not isinstance(value, str):
            raise TypeError(f"{where} expects a str, got {type(value).__name__}")
        return value
    if value is not None:
        raise TypeError(f"{where} expects None, got {type(value).__name__}")
    return None


def output_kind() -> str:
    """'torch' or 'numpy': what tensor outputs are returned as."""
    forced = os.environ.get(OUTPUT_ENV)
    if forced is not None:
        if forced not in ("torch", "numpy"):
            raise ValueError(f"{OUTPUT_ENV} must be 'torch' or 'numpy', got {forced!r}")
        return forced
    torch = sys.modules.get("torch")
    return "torch" if torch is not None and hasattr(torch, "from_numpy") else "numpy"


def convert_outputs(values: list[Any], clone: bool) -> list[Any]:
    kind = output_kind()
    out = []
    torch = sys.modules.get("torch") if kind == "torch" else None
    if kind == "torch" and torch is None:
        import torch  # noqa: F811 - the caller asked for torch outputs explicitly
    for value in values:
        if isinstance(value, np.ndarray):
            if clone:
                value = value.copy()
            if torch is not None:
                value = torch.from_numpy(value) if value.flags.writeable else torch.from_numpy(value.copy())
        elif isinstance(value, list):
            value = convert_outputs(value, clone)
        out.append(value)
    return out
