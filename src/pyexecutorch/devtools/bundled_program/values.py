"""Test case values <-> bundled ``Value`` tables, with numpy (torch tensors are read duck-typed)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pyexecutorch.schema.bundled_program import Bool, Double, Int, Tensor, Value
from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.scalar_type import dtype_of, scalar_type_of


def as_array(x: Any) -> np.ndarray | None:
    """``x`` as a numpy array when it is a tensor (numpy or torch), else None."""
    if isinstance(x, np.ndarray):
        return x
    if type(x).__module__.startswith("torch") and hasattr(x, "numpy"):
        return x.detach().cpu().contiguous().numpy()
    return None


def to_value(x: Any, what: str) -> Value:
    """A test case input or output as a bundled ``Value``."""
    arr = as_array(x)
    if arr is not None:
        data = np.asarray(arr, order="C")  # keeps 0-dim (ascontiguousarray makes it 1-dim)
        return Value(
            Tensor(
                scalar_type=scalar_type_of(data.dtype),
                sizes=list(data.shape),
                data=memoryview(data.reshape(-1).view(np.uint8)),
                dim_order=list(range(data.ndim)),
            )
        )
    # bool before int: bool is an int in Python.
    if isinstance(x, (bool, np.bool_)):
        return Value(Bool(bool(x)))
    if isinstance(x, (int, np.integer)):
        return Value(Int(int(x)))
    if isinstance(x, (float, np.floating)):
        return Value(Double(float(x)))
    raise TypeError(f"{what}: a {type(x).__name__} cannot be bundled (tensors, int, bool, float)")


def from_value(value: Value, what: str) -> Any:
    """A bundled ``Value`` as a numpy array in logical (row-major) order, or a Python scalar;
    :class:`FormatError` names a tensor whose type, sizes, dim order or bytes disagree."""
    v = value.val
    if isinstance(v, Tensor):
        try:
            dtype = dtype_of(v.scalar_type)
        except TypeError as e:
            raise FormatError(f"{what}: {e}") from None
        sizes = tuple(v.sizes)
        if any(s < 0 for s in sizes):
            raise FormatError(f"{what}: negative size in {list(sizes)}")
        order = list(v.dim_order) or list(range(len(sizes)))
        if sorted(order) != list(range(len(sizes))):
            raise FormatError(
                f"{what}: dim_order {order} is not a permutation of {len(sizes)} dims"
            )
        count = math.prod(sizes)
        if len(v.data) != count * dtype.itemsize:
            raise FormatError(
                f"{what}: {dtype.name}{list(sizes)} needs {count * dtype.itemsize} bytes, "
                f"the bundled tensor holds {len(v.data)}"
            )
        physical = np.frombuffer(v.data, dtype=dtype, count=count).reshape(
            [sizes[d] for d in order]
        )
        return np.asarray(physical.transpose(np.argsort(order)), order="C")
    if isinstance(v, Int):
        return v.int_val
    if isinstance(v, Bool):
        return v.bool_val
    if isinstance(v, Double):
        return v.double_val
    raise FormatError(f"{what}: empty value")
