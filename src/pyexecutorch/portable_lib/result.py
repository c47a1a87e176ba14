"""``ExecuTorchResult``: the torch-free tensor result of the official bindings, and the
choice between it and torch tensors (``EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT``).

The rules follow the official bindings: ``shape``, byte ``strides``, ``dtype`` as torch
spells it, ``nbytes``, ``device`` ("cpu"); ``__array__(dtype, copy)`` refuses a dtype
conversion with ``copy=False``; DLPack through ``__dlpack__``/``__dlpack_device__``;
``to_host()`` copies; ``from_host`` needs CUDA, which this runtime does not have. A
result holds a numpy view of the method's memory (or its own copy), so it keeps that
memory alive exactly as long as it lives.

The buffer protocol is ``__buffer__`` (PEP 688): ``memoryview(result)`` works on Python
3.12 and later; on 3.11, ``memoryview(np.asarray(result))`` reads the same memory.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from pyexecutorch.schema.scalar_type import torch_name_of

OFFICIAL_ENV = "EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT"
ALIAS_ENV = "PYEXECUTORCH_TENSOR_OUTPUT"  # ours; also takes "numpy"
_KINDS = {"torch": "torch", "executorch": "executorch", "numpy": "numpy"}
_KDL_CPU = 1


def tensor_output() -> str:
    """What tensor outputs of ``portable_lib`` are: "torch", "executorch"
    (``ExecuTorchResult``) or, through our alias only, "numpy".

    ``EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT=torch|executorch`` decides, then
    ``PYEXECUTORCH_TENSOR_OUTPUT=torch|executorch|numpy``; unset, torch tensors when
    torch is imported and ``ExecuTorchResult`` otherwise (the official bindings import
    torch when it is installed; ours never import it unasked)."""
    value = os.environ.get(OFFICIAL_ENV)
    if value is not None:
        if value not in ("torch", "executorch"):
            raise ValueError(
                f"{OFFICIAL_ENV} must be either 'torch' or 'executorch', but was '{value}'"
            )
        return value
    value = os.environ.get(ALIAS_ENV)
    if value is not None:
        if value not in _KINDS:
            raise ValueError(
                f"{ALIAS_ENV} must be either 'torch', 'executorch' or 'numpy', but was '{value}'"
            )
        return value
    torch = sys.modules.get("torch")
    return "torch" if torch is not None and hasattr(torch, "from_numpy") else "executorch"


class ExecuTorchResult:
    """A tensor result of a method, returned when torch is not used. Read it with numpy
    (``np.asarray``), DLPack (``np.from_dlpack``) or the buffer protocol."""

    __slots__ = ("_array", "_dtype")

    def __init__(self, array: np.ndarray) -> None:
        if not isinstance(array, np.ndarray):
            raise TypeError(f"ExecuTorchResult wraps a numpy array, got {type(array).__name__}")
        self._array = array
        self._dtype = torch_name_of(array.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        """Size of each dimension."""
        return tuple(self._array.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """Byte step of each dimension."""
        return tuple(self._array.strides)

    @property
    def dtype(self) -> str:
        """Name of the dtype, such as "float32" or "bfloat16", as torch spells it."""
        return self._dtype

    @property
    def nbytes(self) -> int:
        """Size of the data in bytes."""
        return int(self._array.nbytes)

    @property
    def device(self) -> str:
        """Where the data lives: always "cpu" here."""
        return "cpu"

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        array = self._array
        same = dtype is None or np.dtype(dtype) == array.dtype
        if copy is False and not same:
            raise ValueError("A dtype conversion requires a copy of the ExecuTorch result")
        if not same:
            return array.astype(dtype)
        return array.copy(order="K") if copy else array

    def __buffer__(self, flags: int) -> memoryview:
        array = self._array
        if array.dtype.isbuiltin == 2:  # ml_dtypes types have no buffer format
            raise BufferError(
                f"{self._dtype} results have no buffer format; read them with np.asarray"
            )
        return memoryview(array)

    def __release_buffer__(self, view: memoryview) -> None:
        view.release()

    def __dlpack__(
        self,
        stream: Any = None,
        *,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        if stream is not None:
            raise BufferError("stream must be None for a CPU ExecuTorchResult")
        if dl_device is not None and tuple(dl_device) != (_KDL_CPU, 0):
            raise BufferError(
                f"an ExecuTorchResult lives on the CPU, not DLPack device {dl_device}"
            )
        array = self._array
        if array.dtype.isbuiltin == 2:
            raise BufferError(f"DLPack export of {self._dtype} results is not supported")
        kwargs: dict[str, Any] = {}
        if max_version is not None:
            kwargs["max_version"] = max_version
        if copy is not None:
            kwargs["copy"] = copy
        if not array.flags.writeable and copy is not True:
            array = array.copy(order="K")  # numpy refuses to export read-only memory
        return array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_KDL_CPU, 0)

    def to_host(self) -> ExecuTorchResult:
        """A copy of this result in CPU memory."""
        return ExecuTorchResult(self._array.copy(order="K"))

    @staticmethod
    def from_host(source: Any, device_index: int = 0) -> ExecuTorchResult:
        """Copy a CPU buffer to a CUDA device: not available, pyexecutorch runs on the CPU."""
        raise RuntimeError(
            "ExecuTorchResult.from_host copies to a CUDA device, and pyexecutorch's runtime "
            "has no CUDA support (it runs on the CPU only); pass the CPU buffer itself"
        )

    def __result_array__(self) -> np.ndarray:
        """The numpy memory of this result (what the runtime reads it as an input)."""
        return self._array

    def _mark_read_only(self) -> None:
        view = self._array.view()
        view.flags.writeable = False
        self._array = view

    def __repr__(self) -> str:
        return (
            f"ExecuTorchResult(shape={list(self.shape)}, dtype={self._dtype}, "
            f"device={self.device}, nbytes={self.nbytes})"
        )


def wrap_outputs(values: list[Any]) -> list[Any]:
    """``values`` (numpy outputs) with every array, nested lists included, wrapped."""
    return [_wrap(v) for v in values]


def _wrap(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ExecuTorchResult(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value
