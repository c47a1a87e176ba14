"""Per-tensor, per-channel, per-token and per-group quantize, dequantize and qparams.

Quantizing follows the official kernels bit for bit: ``q = clamp(zp +
rint(x * (1.0f / float(scale))), quant_min, quant_max)`` with the product in
float32 and ties rounded to even; the sum is converted to int64 before the
clamp, so out-of-range values (and NaN, which converts to the smallest int64)
saturate. Dequantizing computes ``(q - zp) * scale`` in the scale's float type
and converts to the output dtype. Per-group operators (the fused form of
groupwise weight-only quantization) follow torch's reference, which adds the
zero point before rounding.
"""

from __future__ import annotations

import math

import numpy as np

from pyexecutorch.kernels.common import fit, normalize_dim, quiet_fp
from pyexecutorch.kernels.registry import KernelError, kernel
from pyexecutorch.schema.scalar_type import F32, F64, dtype_of

_I64 = np.dtype(np.int64)

# The integer types a quantized tensor may have, with their full ranges.
QUANT_BOUNDS: dict[np.dtype, tuple[int, int]] = {
    np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max))
    for t in (np.uint8, np.int8, np.int16, np.uint16, np.int32)
}


def scalar_dtype(op: str, name: str, scalar_type: int) -> np.dtype:
    """The numpy dtype a ``ScalarType`` argument names, or a :class:`KernelError`."""
    try:
        return dtype_of(scalar_type)
    except TypeError as e:
        raise KernelError(f"{op}: {name}: {e}") from None


def check_qrange(op: str, quant_min: int, quant_max: int, dtype: np.dtype) -> None:
    """``quant_min <= quant_max``, both inside the range of the integer ``dtype``."""
    if dtype not in QUANT_BOUNDS:
        raise KernelError(
            f"{op}: quantized dtype must be one of uint8, int8, int16, uint16, int32, got {dtype}"
        )
    lo, hi = QUANT_BOUNDS[dtype]
    if not lo <= quant_min <= quant_max <= hi:
        raise KernelError(
            f"{op}: need {lo} <= quant_min <= quant_max <= {hi} for {dtype}, "
            f"got quant_min={quant_min}, quant_max={quant_max}"
        )


def _check_float(op: str, name: str, a: np.ndarray) -> None:
    _check_tensor_param(op, name, a, optional=False)
    if a.dtype.kind != "f":
        raise KernelError(f"{op}: {name} must be floating point, got {a.dtype}")


def _check_quant_out(op: str, x: np.ndarray, quant_min, quant_max, dtype: int, out) -> np.ndarray:
    _check_float(op, "input", x)
    qdtype = scalar_dtype(op, "dtype", dtype)
    _check_tensor_param(op, "out", out, optional=False)
    if out.dtype != qdtype:
        raise KernelError(f"{op}: out has dtype {out.dtype} but dtype says {qdtype}")
    check_qrange(op, int(quant_min), int(quant_max), qdtype)
    return fit(out, x.shape)


def _check_dequant(op: str, q: np.ndarray, quant_min, quant_max, dtype: int, out_dtype, out):
    qdtype = scalar_dtype(op, "dtype", dtype)
    _check_tensor_param(op, "input", q, optional=False)
    _check_tensor_param(op, "out", out, optional=False)
    if q.dtype != qdtype:
        raise KernelError(f"{op}: input has dtype {q.dtype} but dtype says {qdtype}")
    if q.dtype not in QUANT_BOUNDS:
        raise KernelError(f"{op}: input must be an integer tensor, got {q.dtype}")
    if int(quant_min) > int(quant_max):
        raise KernelError(f"{op}: quant_min {quant_min} is greater than quant_max {quant_max}")
    _check_out_dtype(op, out_dtype, out)
    return fit(out, q.shape)


def _check_out_dtype(op: str, out_dtype, out) -> None:
    if out.dtype.kind != "f":
        raise KernelError(f"{op}: out must be floating point, got {out.dtype}")
    if out_dtype is not None and scalar_dtype(op, "out_dtype", out_dtype) != out.dtype:
        raise KernelError(
            f"{op}: out has dtype {out.dtype} but out_dtype says {dtype_of(out_dtype)}"
        )


def reciprocal32(scale) -> np.ndarray:
    """``1.0f / float(scale)`` as the official kernels compute it."""
    with quiet_fp():
        return np.float32(1.0) / np.asarray(scale, dtype=F32)


def quantize_into(x, inv_scale, zero_point, quant_min: int, quant_max: int, out) -> np.ndarray:
    """``out = clamp(zp + rint(x * inv_scale), quant_min, quant_max)``, the product in float32.

    ``inv_scale`` and ``zero_point`` broadcast against ``x``.
    """
    with quiet_fp():
        t = np.multiply(x, inv_scale, dtype=F32)
        np.rint(t, out=t)
        t += np.asarray(zero_point, dtype=F32)
        q = t.astype(_I64)
    np.clip(q, quant_min, quant_max, out=q)
    np.copyto(out, q, casting="unsafe")
    return out


def dequantize_into(q, zero_point, scale, compute: np.dtype, out) -> np.ndarray:
    """``out = (q - zp) * scale`` computed in ``compute`` and converted to out's dtype."""
    d = np.asarray(q, dtype=compute)
    if zero_point is not None:
        d = d - np.asarray(zero_point, dtype=compute)
    with quiet_fp():
        np.multiply(d, np.asarray(scale, dtype=compute), out=out, casting="unsafe")
    return out


def _single(op: str, name: str, t: np.ndarray, kind: str) -> float | int:
    if t.size != 1:
        raise KernelError(f"{op}: {name} must have exactly one element, got shape {t.shape}")
    if t.dtype.kind not in kind:
        raise KernelError(f"{op}: {name} has dtype {t.dtype}")
    return t.reshape(-1)[0].item()


# ---------------------------------------------------------------------- per tensor


@kernel("quantized_decomposed::quantize_per_tensor.out")
def quantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype, out):
    o = _check_quant_out("quantize_per_tensor", input, quant_min, quant_max, dtype, out)
    return quantize_into(input, reciprocal32(scale), int(zero_point), quant_min, quant_max, o)


@kernel("quantized_decomposed::quantize_per_tensor.Tensor_out")
def quantize_per_tensor_tensor(input, scale, zero_point, quant_min, quant_max, dtype, out):
    op = "quantize_per_tensor.Tensor_out"
    s = _single(op, "scale", scale, "f")
    zp = _single(op, "zero_point", zero_point, "iu")
    return quantize_per_tensor(input, s, zp, quant_min, quant_max, dtype, out)


@kernel("quantized_decomposed::quantize_per_tensor.tensor2_out")
def quantize_per_tensor_tensor2(input, scale, zero_point, quant_min, quant_max, dtype, out):
    op = "quantize_per_tensor.tensor2_out"
    lo = _single(op, "quant_min", quant_min, "iu")
    hi = _single(op, "quant_max", quant_max, "iu")
    return quantize_per_tensor_tensor(input, scale, zero_point, lo, hi, dtype, out)


@kernel("quantized_decomposed::dequantize_per_tensor.out")
def dequantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype, out_dtype, out):
    o = _check_dequant("dequantize_per_tensor", input, quant_min, quant_max, dtype, out_dtype, out)
    return dequantize_into(input, int(zero_point), np.float32(scale), F32, o)


@kernel("quantized_decomposed::dequantize_per_tensor.Tensor_out")
def dequantize_per_tensor_tensor(
    input, scale, zero_point, quant_min, quant_max, dtype, out_dtype, out
):
    op = "dequantize_per_tensor.Tensor_out"
    s = _single(op, "scale", scale, "f")
    zp = _single(op, "zero_point", zero_point, "iu")
    return dequantize_per_tensor(input, s, zp, quant_min, quant_max, dtype, out_dtype, out)


@kernel("quantized_decomposed::dequantize_per_tensor.tensor2_out")
def dequantize_per_tensor_tensor2(
    input, scale, zero_point, quant_min, quant_max, dtype, out_dtype, out
):
    op = "dequantize_per_tensor.tensor2_out"
    lo = _single(op, "quant_min", quant_min, "iu")
    hi = _single(op, "quant_max", quant_max, "iu")
    return dequantize_per_tensor_tensor(input, scale, zero_point, lo, hi, dtype, out_dtype, out)


# --------------------------------------------------------------------- per channel


def _check_tensor_param(op: str, name: str, p, optional: bool = True) -> None:  # noqa: ANN001
    """A per-channel or per-token parameter is a tensor (a corrupt program may pass a
    scalar or a list where the operator takes one)."""
    if not isinstance(p, np.ndarray) and not (optional and p is None):
        raise KernelError(f"{op}: {name} must be a tensor, got {type(p).__name__}")


def _channel_shape(op: str, x: np.ndarray, axis: int, params: dict) -> tuple[int, ...]:
    """The shape that lays one value per channel of ``axis`` along that axis."""
    if x.ndim == 0:
        raise KernelError(f"{op}: input must have at least one dimension")
    axis = normalize_dim(axis, x.ndim)
    for name, p in params.items():
        _check_tensor_param(op, name, p)
        if p is not None and p.size != x.shape[axis]:
            raise KernelError(
                f"{op}: {name} has {p.size} elements but input has {x.shape[axis]} "
                f"channels along axis {axis}"
            )
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return tuple(shape)


@kernel("quantized_decomposed::quantize_per_channel.out")
def quantize_per_channel(input, scales, zero_points, axis, quant_min, quant_max, dtype, out):
    op = "quantize_per_channel"
    o = _check_quant_out(op, input, quant_min, quant_max, dtype, out)
    shape = _channel_shape(op, input, axis, {"scales": scales, "zero_points": zero_points})
    inv = reciprocal32(scales).reshape(shape)
    return quantize_into(input, inv, zero_points.reshape(shape), quant_min, quant_max, o)


@kernel("quantized_decomposed::dequantize_per_channel.out")
def dequantize_per_channel(
    input, scales, zero_points, axis, quant_min, quant_max, dtype, out_dtype, out
):
    op = "dequantize_per_channel"
    o = _check_dequant(op, input, quant_min, quant_max, dtype, out_dtype, out)
    shape = _channel_shape(op, input, axis, {"scales": scales, "zero_points": zero_points})
    _check_float(op, "scales", scales)
    zp = None if zero_points is None else zero_points.reshape(shape)
    # float64 products of small integers and float32 scales round once to float32,
    # which is what both the official kernel and torch produce.
    return dequantize_into(input, zp, scales.reshape(shape), F64, o)


# ----------------------------------------------------------------------- per token


def _token_shape(op: str, x: np.ndarray, params: dict) -> tuple[int, ...]:
    if x.ndim == 0:
        raise KernelError(f"{op}: input must have at least one dimension")
    tokens = math.prod(x.shape[:-1])
    for name, p in params.items():
        _check_tensor_param(op, name, p, optional=False)
        if p.size != tokens:
            raise KernelError(f"{op}: {name} has {p.size} elements for {tokens} tokens")
    return x.shape[:-1] + (1,)


@kernel("quantized_decomposed::quantize_per_token.out")
def quantize_per_token(input, scales, zero_points, quant_min, quant_max, dtype, out):
    op = "quantize_per_token"
    o = _check_quant_out(op, input, quant_min, quant_max, dtype, out)
    shape = _token_shape(op, input, {"scales": scales, "zero_points": zero_points})
    inv = reciprocal32(scales).reshape(shape)
    return quantize_into(input, inv, zero_points.reshape(shape), quant_min, quant_max, o)


@kernel("quantized_decomposed::dequantize_per_token.out")
def dequantize_per_token(
    input, scales, zero_points, quant_min, quant_max, dtype, output_dtype, out
):
    op = "dequantize_per_token"
    o = _check_dequant(op, input, quant_min, quant_max, dtype, output_dtype, out)
    shape = _token_shape(op, input, {"scales": scales, "zero_points": zero_points})
    _check_float(op, "scales", scales)
    # The official kernel rounds the (double) scales to float32 first.
    scales32 = scales.reshape(shape).astype(F32)
    return dequantize_into(input, zero_points.reshape(shape), scales32, F32, o)


def _token_rows(op: str, x: np.ndarray, scale_out, zero_point_out):
    _check_float(op, "input", x)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise KernelError(f"{op}: input needs a non-empty last dimension, got shape {x.shape}")
    shape = x.shape[:-1] + (1,)
    return (
        x.reshape(-1, x.shape[-1]).astype(F32, copy=False),
        fit(scale_out, shape),
        fit(zero_point_out, shape),
    )


@kernel(
    "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
    n_outs=2,
)
def choose_qparams_per_token_asymmetric(input, dtype, scale_out, zero_point_out):
    op = "choose_qparams_per_token_asymmetric"
    rows, s_out, z_out = _token_rows(op, input, scale_out, zero_point_out)
    scale, zp = nudged_qparams(rows.min(axis=1), rows.max(axis=1), -128, 127)
    np.copyto(s_out, scale.reshape(s_out.shape), casting="unsafe")
    np.copyto(z_out, zp.reshape(z_out.shape), casting="unsafe")
    return s_out, z_out


@kernel("quantized_decomposed::choose_qparams_per_token.out", n_outs=2)
def choose_qparams_per_token(input, dtype, scale_out, zero_point_out):
    op = "choose_qparams_per_token"
    if scalar_dtype(op, "dtype", dtype) != np.dtype(np.int8):
        raise KernelError(f"{op}: only int8 is supported, got {dtype_of(dtype)}")
    rows, s_out, z_out = _token_rows(op, input, scale_out, zero_point_out)
    scale = np.maximum(np.abs(rows).max(axis=1), np.float32(1e-5)) / np.float32(127)
    np.copyto(s_out, scale.reshape(s_out.shape), casting="unsafe")
    z_out[...] = 0
    return s_out, z_out


# ---------------------------------------------------------------------- per tensor qparams

_SMALL_SCALE = float(np.float32(6.1e-5))  # the official kernels' floor for a chosen scale


def nudged_qparams(lo, hi, qmin: int, qmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Scales (float64) and integer zero points for ranges ``[lo, hi]`` (float32 arrays).

    The official kernels' rule: widen the range to contain zero, take the scale
    in double precision (0.1 when it would be zero or have an infinite float
    reciprocal; floored at 6.1e-5 with the range widened to match), and take
    the zero point from whichever end adds the smaller terms, nudged to an
    integer inside ``[qmin, qmax]``.
    """
    lo = np.minimum(np.asarray(lo, F32), np.float32(0))
    hi = np.maximum(np.asarray(hi, F32), np.float32(0))
    with quiet_fp():
        scale = (hi.astype(F64) - lo) / (qmax - qmin)
        scale = np.where((scale.astype(F32) == 0) | np.isinf(reciprocal32(scale)), 0.1, scale)
        small = scale < _SMALL_SCALE
        if small.any():
            amplify = (np.float32(_SMALL_SCALE) / scale.astype(F32)).astype(F32)
            span = np.float32(_SMALL_SCALE * (qmax - qmin))
            new_lo = np.where(lo == 0, lo, np.where(hi == 0, -span, lo * amplify))
            new_hi = np.where(lo == 0, span, np.where(hi == 0, hi, hi * amplify))
            lo, hi = np.where(small, new_lo, lo), np.where(small, new_hi, hi)
            scale = np.where(small, _SMALL_SCALE, scale)
        below = lo / scale
        above = hi / scale
    from_min = qmin - below
    from_max = qmax - above
    use_min = (abs(qmin) - np.abs(below)) < (abs(qmax) - np.abs(above))
    initial = np.where(use_min, from_min, from_max)
    zp = np.where(initial < qmin, qmin, np.where(initial > qmax, qmax, np.rint(initial)))
    return scale, zp.astype(_I64)


@kernel("quantized_decomposed::choose_qparams.Tensor_out", n_outs=2)
def choose_qparams_tensor(input, quant_min, quant_max, eps, dtype, scale_out, zero_point_out):
    op = "choose_qparams.tensor"
    _check_float(op, "input", input)
    if input.size == 0:
        raise KernelError(f"{op}: input is empty")
    qmin, qmax = int(quant_min), int(quant_max)
    if qmin >= qmax:
        raise KernelError(f"{op}: quant_min {qmin} must be less than quant_max {qmax}")
    if scale_out.size != 1 or zero_point_out.size != 1:
        raise KernelError(f"{op}: scale_out and zero_point_out must have one element each")
    scale, zp = nudged_qparams(input.min(), input.max(), qmin, qmax)
    scale_out.reshape(-1)[0] = scale
    zero_point_out.reshape(-1)[0] = zp
    return scale_out, zero_point_out


@kernel("quantized_decomposed::choose_qparams_symmetric.Tensor_out", n_outs=2)
def choose_qparams_symmetric_tensor(
    input, quant_min, quant_max, eps, dtype, scale_out, zero_point_out
):
    # torch's symmetric rule in float32: the larger magnitude over half the
    # range, floored at eps; zero point 0 (128 for uint8).
    op = "choose_qparams_symmetric.tensor"
    _check_float(op, "input", input)
    qdtype = scalar_dtype(op, "dtype", dtype)
    check_qrange(op, int(quant_min), int(quant_max), qdtype)
    if scale_out.size != 1 or zero_point_out.size != 1:
        raise KernelError(f"{op}: scale_out and zero_point_out must have one element each")
    if input.size == 0:
        scale, zp = 1.0, 0
    else:
        x = input.astype(F32, copy=False)
        top = max(-min(np.float32(x.min()), np.float32(0)), max(np.float32(x.max()), np.float32(0)))
        half = np.float32((int(quant_max) - int(quant_min)) / 2)
        scale = max(np.float32(top) / half, np.float32(eps))
        zp = 128 if qdtype == np.dtype(np.uint8) else 0
    scale_out.reshape(-1)[0] = scale
    zero_point_out.reshape(-1)[0] = zp
    return scale_out, zero_point_out


# ----------------------------------------------------------------------- per group


def _group_rows(op: str, x: np.ndarray, scales: np.ndarray, group_size: int):
    if x.ndim != 2:
        raise KernelError(f"{op}: input must be 2-D, got shape {x.shape}")
    if group_size <= 1:
        raise KernelError(f"{op}: group_size must be greater than 1, got {group_size}")
    if group_size > x.shape[-1] and scales.shape[-1:] == (1,):
        group_size = x.shape[-1]
    if x.shape[-1] % group_size:
        raise KernelError(
            f"{op}: the last dimension {x.shape[-1]} is not a multiple of group_size {group_size}"
        )
    groups = x.size // group_size
    if scales.size != groups:
        raise KernelError(f"{op}: scales has {scales.size} elements for {groups} groups")
    return x.reshape(groups, group_size)


@kernel("quantized_decomposed::quantize_per_channel_group.out")
def quantize_per_channel_group(
    input, scales, zero_points, quant_min, quant_max, dtype, group_size, out
):
    op = "quantize_per_channel_group"
    o = _check_quant_out(op, input, quant_min, quant_max, dtype, out)
    _check_float(op, "scales", scales)
    rows = _group_rows(op, input, scales, group_size)
    # torch's reference adds the zero point before rounding, in the scale's type.
    cdt = np.result_type(rows.dtype, scales.dtype)
    with quiet_fp():
        inv = (1.0 / scales.reshape(-1, 1)).astype(scales.dtype)
        t = np.multiply(rows, inv, dtype=cdt)
        t += zero_points.reshape(-1, 1).astype(cdt)
        np.rint(t, out=t)
        q = t.astype(_I64)
    np.clip(q, int(quant_min), int(quant_max), out=q)
    np.copyto(o, q.reshape(o.shape), casting="unsafe")
    return o


@kernel("quantized_decomposed::dequantize_per_channel_group.out")
def dequantize_per_channel_group(
    input, scales, zero_points, quant_min, quant_max, dtype, group_size, output_dtype, out
):
    op = "dequantize_per_channel_group"
    o = _check_dequant(op, input, quant_min, quant_max, dtype, output_dtype, out)
    _check_float(op, "scales", scales)
    rows = _group_rows(op, input, scales, group_size)
    zp = None if zero_points is None else zero_points.reshape(-1, 1)
    dequantize_into(rows, zp, scales.reshape(-1, 1), scales.dtype, o.reshape(rows.shape))
    return o
