"""Scalar types with the official numbering, and their numpy dtypes."""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

# The float dtypes kernels name most (one definition for every layer above).
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)


class ScalarType(enum.IntEnum):
    """The program format's ``ScalarType`` enum (c10 numbering)."""

    BYTE = 0
    CHAR = 1
    SHORT = 2
    INT = 3
    LONG = 4
    HALF = 5
    FLOAT = 6
    DOUBLE = 7
    # 8-10 are c10's complex types; the schema file leaves them out but
    # programs using FFT kernels carry them.
    COMPLEX32 = 8
    COMPLEX64 = 9
    COMPLEX128 = 10
    BOOL = 11
    QINT8 = 12
    QUINT8 = 13
    QINT32 = 14
    BFLOAT16 = 15
    QUINT4X2 = 16
    QUINT2X4 = 17
    BITS16 = 22
    FLOAT8E5M2 = 23
    FLOAT8E4M3FN = 24
    FLOAT8E5M2FNUZ = 25
    FLOAT8E4M3FNUZ = 26
    UINT16 = 27
    UINT32 = 28
    UINT64 = 29


# bfloat16 and the float8 types are ml_dtypes' numpy dtypes (the library JAX uses),
# added to the tables below the first time one may be asked for: importing ml_dtypes
# costs about 0.7 s of CPU, most of a bare ``import pyexecutorch.runtime``, and few
# programs hold such a tensor. Types without a numpy equivalent (complex32, quantized)
# are absent: callers raise a clear error naming the type instead of misreading bytes.
_ML_DTYPES_NAMES: dict[ScalarType, str] = {
    ScalarType.BFLOAT16: "bfloat16",
    ScalarType.FLOAT8E5M2: "float8_e5m2",
    ScalarType.FLOAT8E4M3FN: "float8_e4m3fn",
    ScalarType.FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
    ScalarType.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
}


class _LazyTable(dict):
    """A dict whose ml_dtypes entries are added (ml_dtypes imported) on the first lookup
    that misses where one of them may be the answer, and before any whole-table view."""

    def __init__(self, entries: dict, add: Any, may_need: Any) -> None:
        super().__init__(entries)
        self._add = add  # (table) -> None: puts the ml_dtypes entries in
        self._may_need = may_need  # (key) -> bool: a miss on key may be an ml_dtypes entry
        self._complete = False

    def _fill(self) -> bool:
        if self._complete:
            return False
        self._complete = True
        self._add(self)
        return True

    def __missing__(self, key: Any) -> Any:
        if self._may_need(key) and self._fill():
            return self[key]
        raise KeyError(key)

    def get(self, key: Any, default: Any = None) -> Any:
        if not dict.__contains__(self, key) and self._may_need(key):
            self._fill()
        return dict.get(self, key, default)

    def __contains__(self, key: object) -> bool:
        if not dict.__contains__(self, key) and self._may_need(key):
            self._fill()
        return dict.__contains__(self, key)

    def __iter__(self) -> Iterator:
        self._fill()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._fill()
        return dict.__len__(self)

    def keys(self) -> Any:
        self._fill()
        return dict.keys(self)

    def values(self) -> Any:
        self._fill()
        return dict.values(self)

    def items(self) -> Any:
        self._fill()
        return dict.items(self)

    def copy(self) -> dict:
        self._fill()
        return dict(dict.items(self))

    def __eq__(self, other: object) -> bool:
        self._fill()
        return dict.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        return dict, (self.copy(),)


def _ml_dtypes_entries() -> dict[ScalarType, np.dtype]:
    import ml_dtypes  # noqa: PLC0415 - costly; imported when a low-precision type is asked for

    return {st: np.dtype(getattr(ml_dtypes, name)) for st, name in _ML_DTYPES_NAMES.items()}


def _maybe_low_precision_type(key: Any) -> bool:
    try:
        return ScalarType(key) in _ML_DTYPES_NAMES
    except (ValueError, TypeError):
        return False


def _maybe_low_precision_dtype(key: Any) -> bool:
    # (an ml_dtypes dtype exists only once ml_dtypes has imported)
    return "ml_dtypes" in sys.modules


_NUMPY_DTYPES: dict[ScalarType, np.dtype] = {
    ScalarType.BYTE: np.dtype(np.uint8),
    ScalarType.CHAR: np.dtype(np.int8),
    ScalarType.SHORT: np.dtype(np.int16),
    ScalarType.INT: np.dtype(np.int32),
    ScalarType.LONG: np.dtype(np.int64),
    ScalarType.HALF: np.dtype(np.float16),
    ScalarType.FLOAT: np.dtype(np.float32),
    ScalarType.DOUBLE: np.dtype(np.float64),
    ScalarType.COMPLEX64: np.dtype(np.complex64),
    ScalarType.COMPLEX128: np.dtype(np.complex128),
    ScalarType.BOOL: np.dtype(np.bool_),
    ScalarType.UINT16: np.dtype(np.uint16),
    ScalarType.UINT32: np.dtype(np.uint32),
    ScalarType.UINT64: np.dtype(np.uint64),
    ScalarType.BITS16: np.dtype(np.uint16),
}

SCALAR_TYPE_TO_DTYPE: dict[ScalarType, np.dtype] = _LazyTable(
    _NUMPY_DTYPES,
    lambda table: dict.update(table, _ml_dtypes_entries()),
    _maybe_low_precision_type,
)

DTYPE_TO_SCALAR_TYPE: dict[np.dtype, ScalarType] = _LazyTable(
    {dtype: st for st, dtype in _NUMPY_DTYPES.items() if st is not ScalarType.BITS16},
    lambda table: dict.update(table, {dt: st for st, dt in _ml_dtypes_entries().items()}),
    _maybe_low_precision_dtype,
)

# Element sizes of every scalar type, including those numpy lacks, so sizes
# and bounds can be checked for any program.
SCALAR_TYPE_ITEMSIZE: dict[ScalarType, int] = {
    **{st: dt.itemsize for st, dt in _NUMPY_DTYPES.items()},
    ScalarType.COMPLEX32: 4,
    ScalarType.QINT8: 1,
    ScalarType.QUINT8: 1,
    ScalarType.QINT32: 4,
    ScalarType.BFLOAT16: 2,
    ScalarType.QUINT4X2: 1,
    ScalarType.QUINT2X4: 1,
    ScalarType.FLOAT8E5M2: 1,
    ScalarType.FLOAT8E4M3FN: 1,
    ScalarType.FLOAT8E5M2FNUZ: 1,
    ScalarType.FLOAT8E4M3FNUZ: 1,
}

# The names the official bindings print for dtypes (``TensorInfo.dtype_name``).
SCALAR_TYPE_NAME: dict[ScalarType, str] = {
    ScalarType.BYTE: "Byte",
    ScalarType.CHAR: "Char",
    ScalarType.SHORT: "Short",
    ScalarType.INT: "Int",
    ScalarType.LONG: "Long",
    ScalarType.HALF: "Half",
    ScalarType.FLOAT: "Float",
    ScalarType.DOUBLE: "Double",
    ScalarType.COMPLEX32: "ComplexHalf",
    ScalarType.COMPLEX64: "ComplexFloat",
    ScalarType.COMPLEX128: "ComplexDouble",
    ScalarType.BOOL: "Bool",
    ScalarType.QINT8: "QInt8",
    ScalarType.QUINT8: "QUInt8",
    ScalarType.QINT32: "QInt32",
    ScalarType.BFLOAT16: "BFloat16",
    ScalarType.QUINT4X2: "QUInt4x2",
    ScalarType.QUINT2X4: "QUInt2x4",
    ScalarType.BITS16: "Bits16",
    ScalarType.FLOAT8E5M2: "Float8_e5m2",
    ScalarType.FLOAT8E4M3FN: "Float8_e4m3fn",
    ScalarType.FLOAT8E5M2FNUZ: "Float8_e5m2fnuz",
    ScalarType.FLOAT8E4M3FNUZ: "Float8_e4m3fnuz",
    ScalarType.UINT16: "UInt16",
    ScalarType.UINT32: "UInt32",
    ScalarType.UINT64: "UInt64",
}


# How torch spells each dtype (``str(torch_dtype)`` without ``torch.``).
SCALAR_TYPE_TORCH_NAME: dict[ScalarType, str] = {
    ScalarType.BYTE: "uint8",
    ScalarType.CHAR: "int8",
    ScalarType.SHORT: "int16",
    ScalarType.INT: "int32",
    ScalarType.LONG: "int64",
    ScalarType.HALF: "float16",
    ScalarType.FLOAT: "float32",
    ScalarType.DOUBLE: "float64",
    ScalarType.COMPLEX32: "complex32",
    ScalarType.COMPLEX64: "complex64",
    ScalarType.COMPLEX128: "complex128",
    ScalarType.BOOL: "bool",
    ScalarType.QINT8: "qint8",
    ScalarType.QUINT8: "quint8",
    ScalarType.QINT32: "qint32",
    ScalarType.BFLOAT16: "bfloat16",
    ScalarType.QUINT4X2: "quint4x2",
    ScalarType.QUINT2X4: "quint2x4",
    ScalarType.BITS16: "bits16",
    ScalarType.FLOAT8E5M2: "float8_e5m2",
    ScalarType.FLOAT8E4M3FN: "float8_e4m3fn",
    ScalarType.FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
    ScalarType.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
    ScalarType.UINT16: "uint16",
    ScalarType.UINT32: "uint32",
    ScalarType.UINT64: "uint64",
}


def torch_name_of(dtype: np.dtype) -> str:
    """torch's spelling of a numpy dtype ("float32", "bfloat16"); ``TypeError`` otherwise."""
    return SCALAR_TYPE_TORCH_NAME[scalar_type_of(dtype)]


def dtype_of(scalar_type: int) -> np.dtype:
    """The numpy dtype for a ScalarType code; ``TypeError`` names an unsupported one."""
    try:
        return SCALAR_TYPE_TO_DTYPE[ScalarType(scalar_type)]
    except (KeyError, ValueError):
        name = SCALAR_TYPE_NAME.get(scalar_type, str(scalar_type))  # type: ignore[call-overload]
        raise TypeError(
            f"scalar type {name} ({int(scalar_type)}) has no numpy equivalent"
        ) from None


def scalar_type_of(dtype: np.dtype) -> ScalarType:
    """The ScalarType for a numpy dtype; ``TypeError`` names an unsupported one."""
    try:
        return DTYPE_TO_SCALAR_TYPE[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"numpy dtype {np.dtype(dtype)} has no ExecuTorch scalar type") from None
