"""Comparators of intermediate outputs, AOT against runtime: a subclass defines
``element_compare(a, b) -> float``; ``compare`` runs it over a mapping of debug
handles and tabulates the gaps. Numpy only (torch tensors are read through
``numpy()``), so the reading side of the devtools stays torch-free."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

DebugHandle = tuple[int, ...]
IntermediateOutputMapping = dict[tuple[DebugHandle, Any], tuple[DebugHandle, Any]]


def as_float_array(x: Any) -> np.ndarray:
    """``x`` (a tensor, an array or a Python number) as float64, NaNs set to zero
    (a NaN on either side would make every distance NaN)."""
    if hasattr(x, "detach"):  # a torch tensor, read without importing torch
        x = x.detach().cpu()
        x = x.float().numpy() if str(x.dtype) == "torch.bfloat16" else x.numpy()
    arr = np.asarray(x, dtype=np.float64)
    return np.nan_to_num(arr, nan=0.0, posinf=np.inf, neginf=-np.inf)


def same_shape(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    fa, fb = as_float_array(a), as_float_array(b)
    if fa.shape != fb.shape:
        raise ValueError(f"cannot compare outputs of shapes {fa.shape} and {fb.shape}")
    return fa, fb


def _op_names(handle: DebugHandle, names: dict[DebugHandle, list[str]]) -> list[str]:
    """The operator names of the handles ``handle`` covers (one or several)."""
    if handle in names:
        return list(names[handle])
    return [n for h in handle for n in names.get((h,), [])]


class NumericalComparatorBase(ABC):
    """Override ``element_compare`` (and ``preprocessing`` to transform outputs
    first, e.g. to dequantize them); ``inspector`` is the Inspector using it."""

    def __init__(self, inspector: Any = None) -> None:
        self.inspector = inspector

    def preprocessing(self, mapping: IntermediateOutputMapping) -> IntermediateOutputMapping:
        return mapping

    @abstractmethod
    def element_compare(self, a: Any, b: Any) -> float:
        """A scalar distance between two outputs."""

    @staticmethod
    def _check_mapping(mapping: Any) -> None:
        if not isinstance(mapping, dict):
            raise TypeError(f"preprocessing() must return a dict, got {type(mapping).__name__}")
        for side, pairs in (("key", mapping.keys()), ("value", mapping.values())):
            for pair in pairs:
                ok = isinstance(pair, tuple) and len(pair) == 2
                handle = pair[0] if ok else None
                if not (isinstance(handle, tuple) and all(isinstance(h, int) for h in handle)):
                    raise ValueError(
                        f"preprocessed mapping: {side} {pair!r} is not "
                        "(debug handle tuple of ints, output)"
                    )

    def _gaps(self, a: Any, b: Any) -> list[float]:
        seq_a, seq_b = isinstance(a, Sequence), isinstance(b, Sequence)
        if seq_a != seq_b:
            raise ValueError("both outputs must be sequences, or neither")
        if not seq_a:
            return [self.element_compare(a, b)]
        if len(a) != len(b):
            raise ValueError(f"output sequences of lengths {len(a)} and {len(b)} differ")
        return [self.element_compare(x, y) for x, y in zip(a, b, strict=True)]

    def compare(
        self,
        mapping: IntermediateOutputMapping,
        aot_debug_handle_to_op_names: dict[DebugHandle, list[str]],
        runtime_debug_handle_to_op_names: dict[DebugHandle, list[str]],
    ) -> Any:
        """One row per mapped pair (AOT handle, ops and output; runtime handle, ops and
        output; the gaps), as a pandas DataFrame when pandas is installed."""
        mapping = self.preprocessing(mapping)
        self._check_mapping(mapping)
        rows = []
        for (aot_handle, aot_out), (rt_handle, rt_out) in mapping.items():
            if aot_out is None or rt_out is None:
                continue
            if isinstance(aot_out, Sequence) and len(aot_out) > 1:
                continue  # an undecomposed multi-output op: no runtime counterpart
            rows.append(
                {
                    "aot_debug_handle": aot_handle,
                    "aot_ops": _op_names(aot_handle, aot_debug_handle_to_op_names),
                    "aot_intermediate_output": aot_out,
                    "runtime_ops": _op_names(rt_handle, runtime_debug_handle_to_op_names),
                    "runtime_debug_handle": rt_handle,
                    "runtime_intermediate_output": rt_out,
                    "gap": self._gaps(aot_out, rt_out),
                }
            )
        try:
            import pandas as pd  # noqa: PLC0415 - optional
        except ImportError:
            return rows
        return pd.DataFrame(rows)


__all__ = ["DebugHandle", "IntermediateOutputMapping", "NumericalComparatorBase"]
