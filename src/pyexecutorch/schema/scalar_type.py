"""Scalar types with the official numbering, and their numpy dtypes."""

from __future__ import annotations

import enum

import ml_dtypes
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


# bfloat16 and the float8 types are ml_dtypes' numpy dtypes (the library JAX uses);
# types without a numpy equivalent (complex32, quantized) are absent: callers raise a
# clear error naming the type instead of misreading bytes.
SCALAR_TYPE_TO_DTYPE: dict[ScalarType, np.dtype] = {
    ScalarType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    ScalarType.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    ScalarType.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    ScalarType.FLOAT8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    ScalarType.FLOAT8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
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

DTYPE_TO_SCALAR_TYPE: dict[np.dtype, ScalarType] = {
    dtype: st for st, dtype in SCALAR_TYPE_TO_DTYPE.items() if st is not ScalarType.BITS16
}

# Element sizes of every scalar type, including those numpy lacks, so sizes
# and bounds can be checked for any program.
SCALAR_TYPE_ITEMSIZE: dict[ScalarType, int] = {
    **{st: dt.itemsize for st, dt in SCALAR_TYPE_TO_DTYPE.items()},
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
