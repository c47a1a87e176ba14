"""Embedding lookups on quantized weights: ``embedding_byte``, ``embedding_4bit``, ``embedding_2bit``.

Rows are gathered first and only those are dequantized, group by group:
``(w - zp) * scale`` in the scales' float type, then converted to out's dtype.
Sub-byte weights are packed along each row: two 4-bit values per byte (the
even element in the high nibble) offset by 8, or four 2-bit values per byte
(element ``k`` in bits ``2k..2k+1``) offset by 2.
"""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.common import fit
from pyexecutorch.kernels.quantized.affine import scalar_dtype
from pyexecutorch.kernels.registry import KernelError, kernel

_U8 = np.dtype(np.uint8)
_I8 = np.dtype(np.int8)


def _unpack4(rows: np.ndarray) -> np.ndarray:
    b = rows.view(_U8)
    out = np.empty(b.shape[:-1] + (b.shape[-1] * 2,), _I8)
    out[..., 0::2] = b >> 4
    out[..., 1::2] = b & 15
    out -= 8
    return out


def _unpack2(rows: np.ndarray) -> np.ndarray:
    b = rows.view(_U8)
    out = np.empty(b.shape[:-1] + (b.shape[-1] * 4,), _I8)
    for k in range(4):
        out[..., k::4] = (b >> (2 * k)) & 3
    out -= 2
    return out


# bits -> (values per byte, unpacker, the quant range the format requires)
_FORMATS = {
    8: (1, None, None),
    4: (2, _unpack4, (-8, 7)),
    2: (4, _unpack2, (-2, 1)),
}


def _lookup(op, bits, weight, scales, zero_points, quant_min, quant_max, indices, dtype, out):
    per_byte, unpack, qrange = _FORMATS[bits]
    if weight.dtype not in (_U8, _I8) or weight.ndim != 2:
        raise KernelError(
            f"{op}: weight must be a 2-D int8 or uint8 tensor, got {weight.dtype} {weight.shape}"
        )
    if scales.dtype.kind != "f" or scales.ndim not in (1, 2) or scales.shape[0] != weight.shape[0]:
        raise KernelError(
            f"{op}: weight_scales must be a float tensor of rank 1 or 2 with {weight.shape[0]} rows, "
            f"got {scales.dtype} {scales.shape}"
        )
    if zero_points is not None and zero_points.shape != scales.shape:
        raise KernelError(
            f"{op}: weight_zero_points has shape {zero_points.shape}, expected {scales.shape}"
        )
    if qrange is not None and (int(quant_min), int(quant_max)) != qrange:
        raise KernelError(
            f"{op}: expects weight_quant_min, weight_quant_max = {qrange}, got {quant_min}, {quant_max}"
        )
    if indices.dtype.kind not in "iu":
        raise KernelError(f"{op}: indices must be integers, got {indices.dtype}")
    if dtype is not None and scalar_dtype(op, "dtype", dtype) != out.dtype:
        raise KernelError(f"{op}: out has dtype {out.dtype} but dtype says {np.dtype(out.dtype)}")
    if out.dtype.kind != "f":
        raise KernelError(f"{op}: out must be floating point, got {out.dtype}")
    rows_n = weight.shape[0]
    dim = weight.shape[1] * per_byte
    groups = scales.shape[1] if scales.ndim == 2 else 1
    if dim % groups:
        raise KernelError(f"{op}: embedding dimension {dim} is not a multiple of {groups} groups")
    if indices.size and (indices.min() < 0 or indices.max() >= rows_n):
        bad = indices[(indices < 0) | (indices >= rows_n)].reshape(-1)[0]
        raise KernelError(f"{op}: index {int(bad)} is out of range for {rows_n} rows")
    o = fit(out, indices.shape + (dim,))
    flat = indices.reshape(-1)
    w = weight[flat]
    if unpack is not None:
        w = unpack(w)
    cdt = scales.dtype
    w = w.reshape(flat.size, groups, dim // groups).astype(cdt)
    s = scales.reshape(rows_n, groups)[flat][..., None]
    if zero_points is not None:
        w -= zero_points.reshape(rows_n, groups)[flat][..., None].astype(cdt)
    np.multiply(w, s, out=o.reshape(w.shape), casting="unsafe")
    return o


def _register(bits: int, name: str) -> None:
    @kernel(f"quantized_decomposed::{name}.out")
    def lookup(
        weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices, out
    ):
        return _lookup(
            name, bits, weight, weight_scales, weight_zero_points,
            weight_quant_min, weight_quant_max, indices, None, out,
        )  # fmt: skip

    @kernel(f"quantized_decomposed::{name}.dtype_out")
    def lookup_dtype(
        weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices,
        dtype, out,
    ):  # fmt: skip
        return _lookup(
            name, bits, weight, weight_scales, weight_zero_points,
            weight_quant_min, weight_quant_max, indices, dtype, out,
        )  # fmt: skip


for _bits, _name in ((8, "embedding_byte"), (4, "embedding_4bit"), (2, "embedding_2bit")):
    _register(_bits, _name)
