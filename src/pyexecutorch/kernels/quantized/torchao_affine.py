"""torchao's block-wise affine quantization: ``quantize_affine``, ``dequantize_affine``,
``choose_qparams_affine``.

A ``block_size`` gives, per dimension, how many consecutive elements share one
scale and zero point. Splitting each dimension ``s`` into ``(s // b, b)`` lays
the parameters out as an array of shape ``(s0 // b0, 1, s1 // b1, 1, ...)``
that broadcasts over the blocks, so one numpy pass handles per-tensor,
per-channel, per-token and per-group layouts alike. Arithmetic follows
torchao's reference: ``clamp(round(x * (1 / scale)) + zp)`` in the input's
float type, and ``(q - zp) * scale`` in the output type.
"""

from __future__ import annotations

import numpy as np

from pyexecutorch.kernels.common import fit, quiet_fp
from pyexecutorch.kernels.quantized.affine import QUANT_BOUNDS, check_qrange, scalar_dtype
from pyexecutorch.kernels.registry import KernelError, kernel

_I64 = np.dtype(np.int64)
_MAPPINGS = ("SYMMETRIC", "SYMMETRIC_NO_CLIPPING_ERR", "ASYMMETRIC")


def _blocks(op: str, shape: tuple[int, ...], block_size) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(split shape, parameter shape): each dim ``s`` as ``(s // b, b)`` and ``(s // b, 1)``."""
    if len(block_size) != len(shape):
        raise KernelError(
            f"{op}: block_size {tuple(block_size)} has {len(block_size)} entries for an input of rank {len(shape)}"
        )
    split: list[int] = []
    params: list[int] = []
    for dim, (s, b) in enumerate(zip(shape, block_size, strict=True)):
        if b <= 0 or s % b:
            raise KernelError(f"{op}: block size {b} does not divide dimension {dim} of size {s}")
        split += [s // b, b]
        params += [s // b, 1]
    return tuple(split), tuple(params)


def _param(op: str, name: str, p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if p.size != np.prod(shape, dtype=np.int64):
        raise KernelError(
            f"{op}: {name} has {p.size} elements but block_size gives {int(np.prod(shape))} blocks"
        )
    return p.reshape(shape)


def _qrange(op: str, qdtype: np.dtype, quant_min, quant_max) -> tuple[int, int]:
    if qdtype not in QUANT_BOUNDS:
        raise KernelError(f"{op}: quantized dtype must be an integer type, got {qdtype}")
    lo, hi = QUANT_BOUNDS[qdtype]
    qmin = lo if quant_min is None else int(quant_min)
    qmax = hi if quant_max is None else int(quant_max)
    check_qrange(op, qmin, qmax, qdtype)
    return qmin, qmax


def _zero_point(zero_point):
    # torchao treats an empty zero point tensor like a missing one.
    return None if zero_point is None or zero_point.size == 0 else zero_point


@kernel("torchao::quantize_affine.out")
def quantize_affine(input, block_size, scale, zero_point, output_dtype, quant_min, quant_max, out):
    op = "quantize_affine"
    if input.dtype.kind != "f":
        raise KernelError(f"{op}: input must be floating point, got {input.dtype}")
    qdtype = scalar_dtype(op, "output_dtype", output_dtype)
    if out.dtype != qdtype:
        raise KernelError(f"{op}: out has dtype {out.dtype} but output_dtype says {qdtype}")
    qmin, qmax = _qrange(op, qdtype, quant_min, quant_max)
    o = fit(out, input.shape)
    split, pshape = _blocks(op, input.shape, block_size)
    s = _param(op, "scale", scale, pshape)
    cdt = np.result_type(input.dtype, s.dtype)
    with quiet_fp():
        t = np.multiply(input.reshape(split), (1.0 / s).astype(s.dtype), dtype=cdt)
        np.rint(t, out=t)
        zp = _zero_point(zero_point)
        if zp is not None:
            t = t + _param(op, "zero_point", zp, pshape)
        q = t.astype(_I64)
    np.clip(q, qmin, qmax, out=q)
    np.copyto(o, q.reshape(o.shape), casting="unsafe")
    return o


@kernel("torchao::dequantize_affine.out")
def dequantize_affine(
    input, block_size, scale, zero_point, input_dtype, quant_min, quant_max, output_dtype, out
):
    op = "dequantize_affine"
    qdtype = scalar_dtype(op, "input_dtype", input_dtype)
    if input.dtype != qdtype:
        raise KernelError(f"{op}: input has dtype {input.dtype} but input_dtype says {qdtype}")
    _qrange(op, qdtype, quant_min, quant_max)
    odt = scalar_dtype(op, "output_dtype", output_dtype)
    if out.dtype != odt or odt.kind != "f":
        raise KernelError(f"{op}: out has dtype {out.dtype}, expected floating {odt}")
    o = fit(out, input.shape)
    split, pshape = _blocks(op, input.shape, block_size)
    s = _param(op, "scale", scale, pshape)
    d = input.reshape(split).astype(odt)
    zp = _zero_point(zero_point)
    with quiet_fp():
        if zp is not None:
            d = d - _param(op, "zero_point", zp, pshape).astype(odt)
        np.multiply(d, s, out=o.reshape(split), casting="unsafe")
    return o


def _reduced_shape(shape, block_size, keepdim: bool) -> tuple[int, ...]:
    # torchao drops the dimensions a block covers whole (unless keepdim).
    if keepdim:
        return tuple(s // b for s, b in zip(shape, block_size, strict=True))
    return tuple(s // b for s, b in zip(shape, block_size, strict=True) if not (b == s and b > 1))


@kernel("torchao::choose_qparams_affine.out", n_outs=2)
def choose_qparams_affine(
    input,
    mapping_type,
    block_size,
    target_dtype,
    quant_min,
    quant_max,
    eps,
    scale_dtype,
    zero_point_dtype,
    keepdim,
    scale_out,
    zero_point_out,
):
    op = "choose_qparams_affine"
    if input.dtype.kind != "f":
        raise KernelError(f"{op}: input must be floating point, got {input.dtype}")
    if mapping_type not in _MAPPINGS:
        raise KernelError(f"{op}: mapping_type must be one of {_MAPPINGS}, got {mapping_type!r}")
    qmin, qmax = _qrange(op, scalar_dtype(op, "target_dtype", target_dtype), quant_min, quant_max)
    split, _ = _blocks(op, input.shape, block_size)
    if input.size == 0:
        raise KernelError(f"{op}: input is empty")
    shape = _reduced_shape(input.shape, block_size, bool(keepdim))
    s_out, z_out = fit(scale_out, shape), fit(zero_point_out, shape)
    cdt = input.dtype
    x = input.reshape(split)
    axes = tuple(range(1, len(split), 2))
    zero = cdt.type(0)
    lo = np.minimum(x.min(axis=axes), zero)
    hi = np.maximum(x.max(axis=axes), zero)
    floor = np.finfo(cdt).smallest_normal if eps is None else eps
    with quiet_fp():
        if mapping_type == "ASYMMETRIC":
            scale = np.maximum((hi - lo) / cdt.type(qmax - qmin), cdt.type(floor))
            zp = np.clip(qmin - np.rint(lo / scale), qmin, qmax)
        else:
            if mapping_type == "SYMMETRIC":
                scale = np.maximum(-lo, hi) / cdt.type((qmax - qmin) / 2)
            else:
                from_min = lo / cdt.type(qmin)
                from_max = hi / cdt.type(qmax)
                scale = np.where(from_min > from_max, from_min, from_max)
            scale = np.maximum(scale, cdt.type(floor))
            zp = np.full_like(scale, int((qmax + qmin + 1) / 2))
    np.copyto(s_out, scale.reshape(shape), casting="unsafe")
    np.copyto(z_out, zp.reshape(shape), casting="unsafe")
    return s_out, z_out
