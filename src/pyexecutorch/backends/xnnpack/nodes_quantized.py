"""Quantized XNNPACK values and the node types that compute on them.

Quantized values carry :class:`Quant` parameters: per tensor (``qint8``
activations), per channel (``qcint8`` and 4-bit ``qcint4`` weights, ``qcint32``
biases), per channel and group of input channels (``qbint4`` weights, scales
stored as bfloat16), or per row decided at run time (``qdint8`` activations).

The arithmetic is XNNPACK's:

- convolutions and fully connected layers accumulate ``(x - zx) * w`` exactly
  (float64 products of small integers, then int32), add the int32 bias and
  requantize with the float32 scale ``x_scale * w_scale[c] / y_scale``:
  ``y = clamp(rint(float(acc) * scale) + zy)``, ties to even;
- ``add`` uses XNNPACK's fixed point: 21-bit multipliers of ``a_scale /
  y_scale`` and ``b_scale / y_scale``, a rounding bias, an arithmetic shift;
- ``multiply`` requantizes ``(a - za) * (b - zb)`` with ``a_scale * b_scale /
  y_scale``; the global average pool the sum less ``n * zx`` with ``x_scale /
  (y_scale * n)``;
- fused output bounds become ``clamp(rint(bound / y_scale + zy), -128, 127)``;
- dynamic rows get XNNPACK's asymmetric parameters: the multiplier ``255 /
  (max - min)`` of a range widened to contain zero, the zero point from
  whichever end has the smaller error; dynamic fully connected layers compute
  ``float(acc) * x_scale[row] * w_scale[c] (+ bias)`` in float32 (4-bit
  blockwise weights: one accumulator per block, scaled and summed); 4-bit
  per-channel weights of an odd number of inputs read the rows as XNNPACK does,
  one value wider (:func:`odd_qc4w_width`).

Each builder here is registered in front of the float builder of its node
type and takes over when the node's operands are quantized.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack.exact_math import fma
from pyexecutorch.backends.xnnpack.nodes import BUILDERS, bounds
from pyexecutorch.backends.xnnpack.quant_arithmetic import (
    EXACT_F32,
    exact_dtype,
    may_wrap,
    qbounds,
    quantize_bound,
    requantize,
    wrap_int32,
)
from pyexecutorch.backends.xnnpack.schema import XnnpackError
from pyexecutorch.kernels.conv.nhwc import (
    Operand,
    Window,
    conv_transpose2d_steps,
    transposed_out_hw,
)
from pyexecutorch.schema.scalar_type import F32, F64

if TYPE_CHECKING:
    from pyexecutorch.backends.xnnpack.interpreter import Builder

NDArray = np.ndarray
_I8 = np.dtype(np.int8)
_I64 = np.dtype(np.int64)
_BF16 = "bfloat16"  # (ml_dtypes' dtype compares equal to its name; no import needed)
_INF = float("inf")

QUANT_DTYPES = {
    S.XNNDatatype.qint8: _I8,
    S.XNNDatatype.qcint8: _I8,
    S.XNNDatatype.qdint8: _I8,
    S.XNNDatatype.quint8: np.dtype(np.uint8),
    S.XNNDatatype.qint32: np.dtype(np.int32),
    S.XNNDatatype.qcint32: np.dtype(np.int32),
    S.XNNDatatype.qbint4: _I8,  # unpacked at load
    S.XNNDatatype.qcint4: _I8,
}
_PACKED4 = {S.XNNDatatype.qbint4, S.XNNDatatype.qcint4}
_INT8_RANGE = {S.XNNDatatype.qint8, S.XNNDatatype.qcint8, S.XNNDatatype.qdint8}


@dataclass
class Quant:
    """The quantization of one value."""

    kind: str  # "tensor", "channel", "group" or "token"
    scale: Any = None  # float (tensor); float32 array (channel: (C,), group: (C, groups))
    zero_point: int = 0
    channel_dim: int = 0
    packed4: bool = False

    def unpack4(self, raw: memoryview, dims: tuple[int, ...], vid: int) -> NDArray:
        """Two 4-bit values per byte along the last dimension, low nibble first, offset by 8."""
        rows, cols = math.prod(dims[:-1]), dims[-1]
        per_row = (cols + 1) // 2
        b = np.frombuffer(raw, dtype=np.uint8, count=rows * per_row).reshape(rows, per_row)
        out = np.empty((rows, per_row * 2), _I8)
        out[:, 0::2] = b & 15
        out[:, 1::2] = b >> 4
        out -= 8
        return np.ascontiguousarray(out[:, :cols]).reshape(dims)


def _scales(qp: Any, constant: Callable[[int], memoryview], bf16: bool, vid: int) -> NDArray:
    if qp.scale_buffer_idx:
        raw = constant(qp.scale_buffer_idx)
        n = qp.num_scales
        if bf16:
            bits = np.frombuffer(raw, dtype=np.uint16, count=n).astype(np.uint32) << 16
            return bits.view(F32)
        return np.frombuffer(raw, dtype=F32, count=n).copy()
    if bf16 and qp.scale_bf16:
        return (np.asarray(qp.scale_bf16, np.uint16).astype(np.uint32) << 16).view(F32)
    if not qp.scale:
        raise XnnpackError(f"value {vid}: quantization parameters hold no scales")
    return np.asarray(qp.scale, F32)


def load_quant(
    vid: int, t: S.XNNTensorValue, qp: Any, constant: Callable[[int], memoryview]
) -> Quant:
    """The :class:`Quant` of a quantized value, its scales read from the payload."""
    packed = t.datatype in _PACKED4
    if t.datatype == S.XNNDatatype.quint8:
        # 1.5.1's serializer writes uint8 quantization as qint8 (which XNNPACK then refuses
        # for its zero point), so no program to check unsigned arithmetic against exists
        raise NotImplementedError(
            f"XNNPACK delegate: value {vid} is quint8, which pyexecutorch does not support"
        )
    if isinstance(qp, S.PerTensorQuant):
        zp = int(qp.zero_point)
        if t.datatype in _INT8_RANGE and not -128 <= zp <= 127:
            raise XnnpackError(
                f"value {vid}: {t.datatype.name} zero point {zp} is outside [-128, 127]"
            )
        return Quant("tensor", float(np.float32(qp.scale)), zp)
    if isinstance(qp, S.PerChannelQuant):
        return Quant("channel", _scales(qp, constant, False, vid), 0, qp.channel_dim, packed)
    if isinstance(qp, S.PerChannelGroupQuant):
        dims = tuple(int(d) for d in t.dims)
        if qp.channel_dim != 0 or len(dims) != 2 or qp.group_size <= 0:
            raise NotImplementedError(
                f"XNNPACK delegate: value {vid}: blockwise quantization of a {list(dims)} tensor "
                f"along dim {qp.channel_dim} is not supported by pyexecutorch"
            )
        s = _scales(qp, constant, True, vid)
        groups = -(-dims[1] // qp.group_size)
        if s.size != dims[0] * groups:
            raise XnnpackError(f"value {vid}: {s.size} scales for {dims[0]} x {groups} blocks")
        return Quant("group", s.reshape(dims[0], groups), 0, 0, packed)
    if isinstance(qp, S.PerTokenDynamicQuant):
        return Quant("token", None, 0, int(qp.num_nonbatch_dims))
    raise NotImplementedError(
        f"XNNPACK delegate: value {vid} has quantization {type(qp).__name__}, "
        "which pyexecutorch does not support"
    )


def _quant(b: Builder, vid: int, kinds: tuple[str, ...]) -> Quant:
    q = b.value(vid).quant
    if q is None or q.kind not in kinds:
        got = "a float value" if q is None else f"{q.kind} quantization"
        raise NotImplementedError(
            f"XNNPACK delegate: {b.where}: value {vid} has {got}; pyexecutorch expects "
            f"{' or '.join(kinds)} quantization here"
        )
    return q


def _is_quantized(b: Builder, *vids: int) -> bool:
    return any(b.value(v).quant is not None for v in vids)


_QUANTIZED_BUILDERS: set[str] = set()


def _in_front_of(name: str, quantized: Callable[..., None], *fields: str) -> None:
    """Register ``quantized`` for node type ``name`` when any of ``fields`` is quantized."""
    _QUANTIZED_BUILDERS.add(name)
    fallback = BUILDERS.get(name)

    def dispatch(b: Builder, n: Any, node: S.XNode) -> None:
        if _is_quantized(b, *(getattr(n, f) for f in fields)):
            quantized(b, n, node)
        elif fallback is not None:
            fallback(b, n, node)
        else:
            raise NotImplementedError(f"XNNPACK delegate: {b.where} is not supported")

    BUILDERS[name] = dispatch


# ------------------------------------------------------------------ convert

# (lower, upper) ends of the int8 range, as a column against (2, rows) arrays
_QENDS = np.array([[-128.0], [127.0]], F32)


class DynamicRows:
    """Rows of a float value quantized at run time with XNNPACK's asymmetric parameters.

    Per row: the range ``[min(0, lo), max(0, hi)]``, the multiplier ``255 / span``
    (1 for an all-zero row), the zero point from the end with the smaller error,
    rounded; ``scales`` holds ``1 / multiplier``. ``centered`` keeps ``q - zero_point``
    as float32 (exact integers) so that the matmuls reading it skip a conversion.
    Small models spend their time in numpy's per-call cost, so the per-row steps run
    on (2, rows) arrays against constant arrays (a Python scalar operand costs a
    conversion per call), one call per step.
    """

    def __init__(self, rows: int, row: int) -> None:
        self.rows, self.row = rows, row
        self.scales = np.empty(rows, F32)
        self.zps = np.empty(rows, F32)
        self.centered = np.empty((rows, row), F32)
        f32 = partial(np.empty, dtype=F32)
        self._ends, self._work = f32((2, rows)), f32((2, rows))  # per row: (low, high) pairs
        self._span, self._mult, self._bump = f32(rows), f32(rows), f32(rows)
        self._zero, self._one, self._full = (np.full(rows, v, F32) for v in (0, 1, 255))
        self._qends = np.broadcast_to(_QENDS, (2, rows)).copy()
        self._cond = np.empty(rows, bool)
        self._views = (self._ends[0], self._ends[1], self._work[0], self._work[1])
        self._qlow, self._qhigh = self._qends[0], self._qends[1]
        self._mult_col, self._zps_col = self._mult[:, None], self.zps[:, None]
        self._low_col, self._high_col = self._work[0][:, None], self._work[1][:, None]

    def quantize(self, x: Callable[[], NDArray], o: Callable[[], NDArray]) -> None:
        v = x().reshape(self.rows, self.row)
        ends, work, span, mult, bump = self._ends, self._work, self._span, self._mult, self._bump
        low, high, low_work, high_work = self._views
        cond, qends, full, zero = self._cond, self._qends, self._full, self._zero
        np.minimum.reduce(v, axis=1, out=low)
        np.maximum.reduce(v, axis=1, out=high)
        np.minimum(low, zero, out=low)
        np.maximum(high, zero, out=high)
        np.subtract(high, low, out=span)
        # an all-zero row's span becomes 255, for a multiplier of 1
        np.equal(span, zero, out=cond)
        np.multiply(cond, full, out=bump)
        np.add(span, bump, out=span)
        np.divide(full, span, out=mult)
        np.multiply(ends, mult, out=ends)  # min * mult, max * mult
        np.add(ends, qends, out=work)  # the two zero points' errors
        np.add(low_work, high_work, out=span)
        np.greater(span, zero, out=cond)
        np.subtract(qends, ends, out=work)  # the two candidate zero points
        np.copyto(high_work, low_work, where=cond)
        np.maximum(high_work, self._qlow, out=high_work)
        np.minimum(high_work, self._qhigh, out=high_work)
        np.rint(high_work, out=self.zps)
        np.divide(self._one, mult, out=self.scales)
        # q - zp = clamp(rint(v * mult), -128 - zp, 127 - zp): the clamp of q, less zp
        c = self.centered
        np.multiply(v, self._mult_col, out=c)
        np.rint(c, out=c)
        np.subtract(qends, self.zps, out=work)
        np.maximum(c, self._low_col, out=c)
        np.minimum(c, self._high_col, out=c)
        np.add(c, self._zps_col, out=o().reshape(self.rows, self.row), casting="unsafe")


def odd_qc4w_width(b: Builder, vid: int, row: int) -> int:
    """The width of the rows XNNPACK quantizes for dynamic value ``vid``: ``row + 1`` where
    a fully connected layer on 4-bit per-channel weights (``qcint4``) reads it and ``row``
    is odd, else ``row``.

    XNNPACK stores such weights in rows of whole bytes and its qd8-qc4w layer takes that
    even count as its number of inputs: the rows of the float input are read (and their
    parameters chosen) ``row + 1`` values at a time, each one starting where the last
    stopped, so every row but the first is shifted by its index (1.5.1's runtime; the
    official exporter writes these programs for any odd count, and its results then lie
    far from the model's, as the official test_linear_qd8_f32_per_channel_int4 finds).
    The last rows run past the input by one value each: the official reads whatever
    memory follows there (zeros in a freshly loaded method's planned input); we read zeros.
    """
    if row % 2 == 0:
        return row
    for node in b.graph.nodes:
        u = node.xnode_union
        if type(u).__name__ == "XNNFullyConnected" and u.input1_id == vid:
            wq = b.value(u.filter_id).quant
            if wq is not None and wq.packed4 and wq.kind == "channel":
                return row + 1
    return row


def _convert(b: Builder, n: S.Node1x1, node: S.XNode) -> None:
    qi, qo = b.value(n.input_id).quant, b.value(n.output_id).quant
    shape = b.shape(n.input_id)
    b.out(n.output_id, shape)
    x, o = b.getter(n.input_id), b.getter(n.output_id)
    if qi is None and qo.kind == "tensor":
        inv = np.float32(1.0) / np.float32(qo.scale)
        zp = qo.zero_point

        def run() -> None:
            requantize(x(), inv, zp, -128, 127, o())

    elif qi is None and qo.kind == "token":
        row = math.prod(shape[len(shape) - qo.channel_dim :]) if qo.channel_dim else shape[-1]
        rows = math.prod(shape) // max(row, 1)
        width = odd_qc4w_width(b, n.output_id, row)
        rowsq = DynamicRows(rows, width)
        b.dynamic[n.output_id] = rowsq
        if b.dtype(n.input_id) == _BF16:  # read as float32, exactly: the same parameters
            wide = np.empty(shape, F32)
            bf16 = x

            def x() -> NDArray:
                np.copyto(wide, bf16())
                return wide

        if width != row:
            run = _quantize_wider_rows(rowsq, x, o, rows * row)
        else:
            run = partial(rowsq.quantize, x, o)

    elif qi is not None and qi.kind == "tensor" and qo is None:
        scale, zp = np.float32(qi.scale), np.int32(qi.zero_point)

        def run() -> None:
            d = np.subtract(x(), zp, dtype=np.int32)
            np.multiply(d, scale, out=o(), casting="unsafe")

    else:
        raise NotImplementedError(f"XNNPACK delegate: {b.where}: this conversion is not supported")
    b.step(run)


def _quantize_wider_rows(
    rowsq: DynamicRows, x: Callable[[], NDArray], o: Callable[[], NDArray], size: int
) -> Callable[[], None]:
    """A step quantizing the flat input followed by zeros in ``rowsq``'s wider rows (see
    :func:`odd_qc4w_width`); the first ``size`` int8 values go to the output value, as
    the official's buffer holds them (the fully connected layer reads ``rowsq``)."""
    flat = np.zeros(rowsq.rows * rowsq.row, F32)  # the tail stays zero
    quantized = np.empty(flat.size, _I8)

    def run() -> None:
        np.copyto(flat[:size], x().reshape(-1))
        rowsq.quantize(lambda: flat, lambda: quantized)
        np.copyto(o().reshape(-1), quantized[:size])

    return run


# ------------------------------------------------------------------ matmuls


def channel_scales(xq: Quant, wq: Quant, yq: Quant, units: int) -> NDArray:
    """The requantization scales ``x_scale * w_scale[c] / y_scale`` (float32)."""
    s = np.asarray(wq.scale, F32).reshape(-1)
    if s.size == 1:
        s = np.full(units, s[0], F32)
    if s.size != units:
        raise XnnpackError(f"{s.size} weight scales for {units} output channels")
    return (np.float32(xq.scale) * s) / np.float32(yq.scale)


def _fully_connected(b: Builder, n: S.XNNFullyConnected, node: S.XNode) -> None:
    xq = b.value(n.input1_id).quant
    xs, w = b.shape(n.input1_id), b.const(n.filter_id)
    if w is None:
        raise NotImplementedError(
            f"XNNPACK delegate: {b.where}: quantized weights must be constant"
        )
    wq = _quant(b, n.filter_id, ("channel", "group", "tensor"))
    if w.ndim != 2 or not xs:
        raise XnnpackError(f"{b.where}: input {xs} and filter {w.shape} (2-d) do not fit")
    if n.flags & S.FLAG_TRANSPOSE_WEIGHTS:
        w = w.T
    units, k = w.shape
    if xs[-1] != k:
        raise XnnpackError(f"{b.where}: input {xs} has {xs[-1]} features, the filter takes {k}")
    out_shape = xs[:-1] + (units,)
    b.out(n.output_id, out_shape)
    m = math.prod(xs[:-1])
    x, o = b.getter(n.input1_id), b.getter(n.output_id)
    bias = None if n.bias_id == S.INVALID_ID else b.const(n.bias_id)
    if n.bias_id != S.INVALID_ID and bias is None:
        raise NotImplementedError(f"XNNPACK delegate: {b.where}: the bias must be constant")
    w64 = np.ascontiguousarray(w.T, dtype=F64)
    if xq.kind == "tensor":
        yq = _quant(b, n.output_id, ("tensor",))
        scale = channel_scales(xq, wq, yq, units)
        lo, hi = qbounds(node, yq)
        zx = float(xq.zero_point)
        cdt = exact_dtype(k, 255, bias)
        wrap = may_wrap(k, 255, bias)
        wc = w64.astype(cdt)
        bc = np.zeros(units, cdt) if bias is None else bias.astype(cdt)
        xbuf = np.empty((m, k), cdt)
        acc = np.empty((m, units), cdt)
        f = acc if cdt == F32 else np.empty((m, units), F32)
        zy = yq.zero_point

        def run() -> None:
            np.subtract(x().reshape(m, k), zx, out=xbuf)
            np.dot(xbuf, wc, out=acc)
            np.add(acc, bc, out=acc)
            if wrap:
                wrap_int32(acc)
            requantize(acc, scale, zy, lo, hi, o().reshape(m, units), f)

        b.step(run)
        return
    b.step(_dynamic_fully_connected(b, n, node, w, wq, bias, m, units, k))


def _dynamic_fully_connected(
    b: Builder, n: S.XNNFullyConnected, node: S.XNode, w: NDArray, wq: Quant,
    bias: NDArray | None, m: int, units: int, k: int,
) -> Callable[[], None]:  # fmt: skip
    """Rows quantized at run time against int8 per-channel or 4-bit blockwise weights.

    ``float32(acc) * row_scale * w_scale[c] (+ bias)``, XNNPACK's order (the weight scale
    and the bias in one fused multiply-add). The integer
    product is exact: a float32 matmul when no partial sum can pass 2**24, else float64.
    Blockwise weights are scaled at load into float64 weights (8-bit by 4-bit by float32
    products are exact there), so that all blocks take one matmul, rounded once.
    """
    rowsq = b.dynamic.get(n.input1_id)
    if rowsq is None:
        raise XnnpackError(f"{b.where}: dynamic input {n.input1_id} has no row parameters")
    if rowsq.row == k + 1 and wq.packed4 and wq.kind == "channel":
        # the rows XNNPACK reads for odd 4-bit inputs (see odd_qc4w_width); the extra
        # input meets the padding nibble, the kernel's zero point: a zero weight
        w, k = np.pad(w, ((0, 0), (0, 1))), k + 1
    if rowsq.rows * rowsq.row != m * k or rowsq.rows != m:
        raise NotImplementedError(
            f"XNNPACK delegate: {b.where}: {rowsq.rows} dynamic rows of {rowsq.row} "
            f"for {m} rows of {k} inputs"
        )
    lo, hi = bounds(node)
    clamp = (lo, hi) != (-_INF, _INF)
    fbias = None if bias is None else bias.astype(F32)
    centered, row_scales = rowsq.centered.reshape(m, k), rowsq.scales[:, None]
    y = np.empty((m, units), F32)
    if wq.kind == "group":
        groups = wq.scale.shape[1]
        g = -(-k // groups)
        if g * groups != k:
            raise NotImplementedError(f"XNNPACK delegate: {b.where}: {k} inputs in blocks of {g}")
        scales = np.repeat(wq.scale.astype(F64), g, axis=1)
        wmat = np.ascontiguousarray((w.astype(F64) * scales).T)
        w_scales = None
    else:
        w_scales = np.broadcast_to(np.asarray(wq.scale, F32).reshape(-1), (units,)).copy()
        largest = 255 * int(np.abs(w.astype(np.int64)).sum(axis=1).max(initial=0))
        wmat = np.ascontiguousarray(w.T, dtype=F32 if largest < EXACT_F32 else F64)
    if wmat.dtype == F32:
        product = partial(np.dot, centered, wmat, out=y)
    else:
        wide_rows, acc = np.empty((m, k), F64), np.empty((m, units), F64)

        def product() -> None:
            np.copyto(wide_rows, centered)
            np.dot(wide_rows, wmat, out=acc)
            np.copyto(y, acc, casting="same_kind")

    o = b.getter(n.output_id)  # the rows are read from their Convert's centered values
    # XNNPACK's qd8-bf16 kernels compute in float32 and round each output once
    narrow = o if b.dtype(n.output_id) == _BF16 else None
    wide = np.empty((m, units), F32) if narrow is not None else None

    def run() -> None:
        product()
        out = wide if wide is not None else o().reshape(m, units)
        if w_scales is None and fbias is None:
            np.multiply(y, row_scales, out=out)
        else:
            np.multiply(y, row_scales, out=y)
            if fbias is None:
                np.multiply(y, w_scales, out=out)
            elif w_scales is None:
                np.add(y, fbias, out=out)
            else:  # one fused multiply-add, as XNNPACK's x86 kernels
                out[...] = fma(y, w_scales, fbias)
        if clamp:
            np.clip(out, lo, hi, out=out)
        if narrow is not None:
            np.copyto(narrow().reshape(m, units), out, casting="unsafe")

    return run


# ------------------------------------------------------------------ convolutions


def _windows(b: Builder, n: S.Conv, xs: tuple[int, ...], kh: int, kw: int, dtype: np.dtype):
    nb, h, w, c = xs
    pt, pr, pbm, pl = n.padding_top, n.padding_right, n.padding_bottom, n.padding_left
    sh, sw = n.subsampling_height or 1, n.subsampling_width or 1
    dh, dw = n.dilation_height or 1, n.dilation_width or 1
    hp, wp = h + pt + pbm, w + pl + pr
    oh = (hp - dh * (kh - 1) - 1) // sh + 1
    ow = (wp - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise XnnpackError(f"{b.where}: the window does not fit the padded input {xs}")
    padded = np.zeros((nb, hp, wp, c), dtype)
    inner = padded[:, pt : pt + h, pl : pl + w]
    s = padded.strides
    view = as_strided(
        padded,
        (nb, oh, ow, kh, kw, c),
        (s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]),
        writeable=False,
    )
    return inner, view, (nb, oh, ow)


def _conv(b: Builder, n: S.Conv, node: S.XNode) -> None:
    depthwise = type(n).__name__ == "XNNDepthwiseConv2d"
    xq = _quant(b, n.input1_id, ("tensor", "token"))
    dynamic = xq.kind == "token"  # rows (images) quantized at run time, float output
    yq = None if dynamic else _quant(b, n.output_id, ("tensor",))
    wq = _quant(b, n.filter_id, ("channel", "tensor"))
    w = b.const(n.filter_id)
    bias = None if n.bias_id == S.INVALID_ID else b.const(n.bias_id)
    if dynamic and bias is not None:
        bias = bias.astype(F32)
    if w is None or (n.bias_id != S.INVALID_ID and bias is None):
        raise NotImplementedError(f"XNNPACK delegate: {b.where}: weights and bias must be constant")
    xs = b.shape(n.input1_id)
    if len(xs) != 4:
        raise XnnpackError(f"{b.where}: input {xs} must be NHWC")
    kh, kw = n.kernel_height, n.kernel_width
    cout = w.shape[3] if depthwise else w.shape[0]
    k = kh * kw * (1 if depthwise else xs[3] // (n.groups or 1))
    cdt = exact_dtype(k, 255, None if dynamic else bias)
    wrap = not dynamic and may_wrap(k, 255, bias)
    inner, view, (nb, oh, ow) = _windows(b, n, xs, kh, kw, cdt)
    b.out(n.output_id, (nb, oh, ow, cout))
    x, o = b.getter(n.input1_id), b.getter(n.output_id)
    if dynamic:
        return _dynamic_conv(b, n, node, xq, wq, bias, cdt, inner, view, cout, depthwise, w)
    scale = channel_scales(xq, wq, yq, cout)
    lo, hi = qbounds(node, yq)
    zx, zy = float(xq.zero_point), yq.zero_point
    bc = np.zeros(cout, cdt) if bias is None else bias.astype(cdt)
    rows = nb * oh * ow
    acc = np.empty((nb, oh, ow, cout), cdt)
    f = acc if cdt == F32 else np.empty(acc.shape, F32)
    if depthwise:
        mult = cout // xs[3]
        taps = w.reshape(kh, kw, cout).astype(cdt)
        chan = np.arange(cout) // mult
        tmp = np.empty_like(acc)
        tap_list = [(i, j, taps[i, j]) for i in range(kh) for j in range(kw)]

        def compute() -> None:
            v = view if mult == 1 else view[..., chan]
            np.copyto(acc, bc)
            for i, j, t in tap_list:
                np.multiply(v[:, :, :, i, j], t, out=tmp)
                np.add(acc, tmp, out=acc)

    else:
        groups = n.groups or 1
        cin = xs[3] // groups
        og = cout // groups
        wmats = [
            np.ascontiguousarray(w[g * og : (g + 1) * og].reshape(og, -1).T, dtype=cdt)
            for g in range(groups)
        ]
        flat = acc.reshape(rows, cout)
        direct = kh == kw == 1 and view.shape[1:3] == inner.shape[1:3] and groups == 1
        cols = None if direct else np.empty((rows, k * groups), cdt)

        def compute() -> None:
            if direct:  # a 1x1 convolution without stride or padding: one product
                np.dot(inner.reshape(rows, -1), wmats[0], out=flat)
            elif groups == 1:
                np.copyto(cols.reshape(view.shape), view)
                np.dot(cols, wmats[0], out=flat)
            else:
                for g in range(groups):
                    part = view[..., g * cin : (g + 1) * cin].reshape(rows, -1)
                    flat[:, g * og : (g + 1) * og] = part @ wmats[g]
            np.add(flat, bc, out=flat)

    def run() -> None:
        np.subtract(x(), zx, out=inner)
        compute()
        if wrap:
            wrap_int32(acc)
        requantize(acc, scale, zy, lo, hi, o(), f)

    b.step(run)


def scale_and_bias(y: NDArray, w_scales: NDArray, bias: NDArray | None) -> None:
    """``y = y * w_scales (+ bias)`` in place, per output channel (the last axis): with a
    bias one fused multiply-add, rounded once, as XNNPACK's x86 dynamic convolution
    kernels (``fmadd``) compute it."""
    if bias is None:
        np.multiply(y, w_scales, out=y)
    else:
        y[...] = fma(y, w_scales, bias)


def _finish_dynamic(
    y: NDArray, row_scales: NDArray, w_scales: NDArray, bias: NDArray | None,
    lo: float, hi: float, out: NDArray,
) -> None:  # fmt: skip
    """A dynamic convolution's float epilogue, in place on ``y`` (the int32 sums as
    float32): times each image's input scale, then :func:`scale_and_bias`, clamped into
    ``out`` (copied where there are no bounds)."""
    np.multiply(y, row_scales, out=y)
    scale_and_bias(y, w_scales, bias)
    if (lo, hi) != (-_INF, _INF):
        np.clip(y, lo, hi, out=out)
    else:
        np.copyto(out, y)


def _dynamic_conv(b, n, node, xq, wq, bias, cdt, inner, view, cout, depthwise, w) -> None:
    # float(acc) * x_scale[image] * w_scale[c] (+ bias), clamped in float; groups take
    # their slice of the input channels and of the filters
    rowsq = b.dynamic.get(n.input1_id)
    nb = view.shape[0]
    if rowsq is None or rowsq.rows != nb:
        raise NotImplementedError(
            f"XNNPACK delegate: {b.where}: dynamic convolution input must be quantized per image"
        )
    if depthwise:
        raise NotImplementedError(
            f"XNNPACK delegate: {b.where}: dynamic depthwise convolutions are not supported"
        )
    scales, zps = rowsq.scales, rowsq.zps
    groups = n.groups or 1
    cin, og = view.shape[-1] // groups, cout // groups
    rows = view.shape[0] * view.shape[1] * view.shape[2]
    wmats = [
        np.ascontiguousarray(w[g * og : (g + 1) * og].reshape(og, -1).T, dtype=cdt)
        for g in range(groups)
    ]
    cols = np.empty((rows, wmats[0].shape[0]), cdt)
    cols_view = cols.reshape(view.shape[:-1] + (cin,))
    acc = np.empty((rows, cout), cdt)
    parts = [(view[..., g * cin : (g + 1) * cin], wmats[g], acc[:, g * og : (g + 1) * og])
             for g in range(groups)]  # fmt: skip
    ws = np.broadcast_to(np.asarray(wq.scale, F32).reshape(-1), (cout,)).copy()
    lo, hi = bounds(node)
    x, o = b.getter(n.input1_id), b.getter(n.output_id)
    per_image = rows // nb

    def run() -> None:
        np.subtract(x(), zps.reshape(nb, 1, 1, 1), out=inner)
        for part, wmat, dest in parts:
            np.copyto(cols_view, part)
            if groups == 1:
                np.dot(cols, wmat, out=acc)
            else:
                dest[...] = cols @ wmat
        y = acc.astype(F32).reshape(nb, per_image, cout)
        _finish_dynamic(y, scales.reshape(nb, 1, 1), ws, bias, lo, hi, o().reshape(y.shape))

    b.step(run)


def _deconv(b: Builder, n: S.Conv, node: S.XNode) -> None:
    """A transposed convolution on int8 values: static (int8 out, XNNPACK's requantization
    of the exact int32 sums) or on rows quantized per image at run time (float out:
    ``float(acc) * x_scale[image] * w_scale[c] (+ bias)``, as the dynamic convolution)."""
    xq = _quant(b, n.input1_id, ("tensor", "token"))
    dynamic = xq.kind == "token"
    yq = None if dynamic else _quant(b, n.output_id, ("tensor",))
    wq = _quant(b, n.filter_id, ("channel", "tensor"))
    w = b.const(n.filter_id)
    bias = None if n.bias_id == S.INVALID_ID else b.const(n.bias_id)
    if w is None or (n.bias_id != S.INVALID_ID and bias is None):
        raise NotImplementedError(f"XNNPACK delegate: {b.where}: weights and bias must be constant")
    xs = b.shape(n.input1_id)
    if len(xs) != 4:
        raise XnnpackError(f"{b.where}: input {xs} must be NHWC")
    g, cin, cout_g = n.groups or 1, n.group_input_channels, n.group_output_channels
    kh, kw = n.kernel_height, n.kernel_width
    cout = g * cout_g
    if g * cin != xs[3] or w.shape != (cout, kh, kw, cin):
        raise XnnpackError(
            f"{b.where}: filter {w.shape} and {g} groups of {cin} -> {cout_g} channels do not "
            f"fit input {xs}"
        )
    if bias is not None and bias.shape != (cout,):
        raise XnnpackError(f"{b.where}: bias {bias.shape} for {cout} output channels")
    pads = (n.padding_top, n.padding_right, n.padding_bottom, n.padding_left)
    win = Window(*xs, pads, kh, kw, n.subsampling_height or 1, n.subsampling_width or 1,
                 n.dilation_height or 1, n.dilation_width or 1)  # fmt: skip
    adjust = (n.adjustment_height, n.adjustment_width)
    oh, ow = transposed_out_hw(win, adjust)
    if oh < 1 or ow < 1:
        raise XnnpackError(f"{b.where}: padding leaves an empty {oh}x{ow} output")
    nb = xs[0]
    b.out(n.output_id, (nb, oh, ow, cout))
    k = kh * kw * cin  # the most products one output sums
    cdt = exact_dtype(k, 255, None if dynamic else bias)
    wrap = not dynamic and may_wrap(k, 255, bias)
    centered = np.empty(xs, cdt)
    acc = np.empty((nb, oh, ow, cout), cdt)
    sums = conv_transpose2d_steps(
        win, w, g, adjust, None, Operand(lambda: centered, centered),
        Operand(lambda: acc, acc), lambda a: None, cdt,
    )  # fmt: skip
    x, o = b.getter(n.input1_id), b.getter(n.output_id)
    if dynamic:
        rowsq = b.dynamic.get(n.input1_id)
        if rowsq is None or rowsq.rows != nb:
            raise NotImplementedError(
                f"XNNPACK delegate: {b.where}: dynamic transposed convolution input must be "
                "quantized per image"
            )
        ws = np.broadcast_to(np.asarray(wq.scale, F32).reshape(-1), (cout,)).copy()
        fbias = None if bias is None else bias.astype(F32)
        lo, hi = bounds(node)
        zps, scales = rowsq.zps.reshape(nb, 1, 1, 1), rowsq.scales.reshape(nb, 1, 1)
        y = np.empty((nb, oh * ow, cout), F32)

        def run_dynamic() -> None:
            np.subtract(x(), zps, out=centered)
            for step in sums:
                step()
            np.copyto(y, acc.reshape(y.shape), casting="unsafe")
            _finish_dynamic(y, scales, ws, fbias, lo, hi, o().reshape(y.shape))

        b.step(run_dynamic)
        return
    scale = channel_scales(xq, wq, yq, cout)
    lo, hi = qbounds(node, yq)
    zx, zy = float(xq.zero_point), yq.zero_point
    bc = np.zeros(cout, cdt) if bias is None else bias.astype(cdt)
    f = acc if cdt == F32 else np.empty(acc.shape, F32)

    def run() -> None:
        np.subtract(x(), zx, out=centered)
        for step in sums:
            step()
        np.add(acc, bc, out=acc)
        if wrap:
            wrap_int32(acc)
        requantize(acc, scale, zy, lo, hi, o(), f)

    b.step(run)


# ------------------------------------------------------------------ elementwise


def add_parameters(where: str, aq: Quant, bq: Quant, yq: Quant, sign: int) -> tuple[int, ...]:
    """XNNPACK's fixed point for ``a + sign * b``: (am, bm, bias, shift)."""
    a_out = np.float32(aq.scale) / np.float32(yq.scale)
    b_out = np.float32(bq.scale) / np.float32(yq.scale)
    exponent = int((np.maximum(a_out, b_out).view(np.uint32) >> 23) & 0xFF) - 127
    shift = 20 - exponent
    if not 12 <= shift <= 30:
        raise NotImplementedError(
            f"XNNPACK delegate: {where}: scale ratios {a_out}, {b_out} are outside XNNPACK's range"
        )
    am = int(np.rint(np.ldexp(a_out, shift)))
    bm = sign * int(np.rint(np.ldexp(b_out, shift)))
    bias = (1 << (shift - 1)) - am * aq.zero_point - bm * bq.zero_point
    return am, bm, bias, shift


def _add(b: Builder, n: S.Node2x1, node: S.XNode, sign: int = 1) -> None:
    """``a + sign * b``: XNNPACK subtracts by negating the second multiplier."""
    aq = _quant(b, n.input1_id, ("tensor",))
    bq = _quant(b, n.input2_id, ("tensor",))
    yq = _quant(b, n.output_id, ("tensor",))
    shape = tuple(np.broadcast_shapes(b.shape(n.input1_id), b.shape(n.input2_id)))
    b.out(n.output_id, shape)
    am, bm, bias, shift = add_parameters(b.where, aq, bq, yq, sign)
    lo, hi = qbounds(node, yq)
    x, y, o = b.getter(n.input1_id), b.getter(n.input2_id), b.getter(n.output_id)

    def run() -> None:
        acc = x().astype(_I64) * am + y().astype(_I64) * bm + bias
        acc >>= shift
        acc += yq.zero_point
        np.clip(acc, lo, hi, out=acc)
        np.copyto(o(), acc, casting="unsafe")

    b.step(run)


def _multiply(b: Builder, n: S.Node2x1, node: S.XNode) -> None:
    aq = _quant(b, n.input1_id, ("tensor",))
    bq = _quant(b, n.input2_id, ("tensor",))
    yq = _quant(b, n.output_id, ("tensor",))
    shape = tuple(np.broadcast_shapes(b.shape(n.input1_id), b.shape(n.input2_id)))
    b.out(n.output_id, shape)
    scale = (np.float32(aq.scale) * np.float32(bq.scale)) / np.float32(yq.scale)
    lo, hi = qbounds(node, yq)
    x, y, o = b.getter(n.input1_id), b.getter(n.input2_id), b.getter(n.output_id)
    za, zb = aq.zero_point, bq.zero_point

    def run() -> None:
        acc = (x().astype(np.int32) - za) * (y().astype(np.int32) - zb)
        requantize(acc, scale, yq.zero_point, lo, hi, o())

    b.step(run)


def _same_params(b: Builder, i: int, o: int) -> Quant:
    qi, qo = _quant(b, i, ("tensor",)), _quant(b, o, ("tensor",))
    if (qi.scale, qi.zero_point) != (qo.scale, qo.zero_point):
        raise NotImplementedError(
            f"XNNPACK delegate: {b.where}: input and output quantization differ "
            f"({qi.scale}, {qi.zero_point}) vs ({qo.scale}, {qo.zero_point})"
        )
    return qo


def _clamp(b: Builder, n: S.Node1x1, node: S.XNode) -> None:
    """Bounds in the output's domain; across differing parameters, a lookup table."""
    qi, qo = _quant(b, n.input_id, ("tensor",)), _quant(b, n.output_id, ("tensor",))
    b.out(n.output_id, b.shape(n.input_id))
    x, o = b.getter(n.input_id), b.getter(n.output_id)
    if (qi.scale, qi.zero_point) == (qo.scale, qo.zero_point):
        lo, hi = qbounds(node, qo)

        def run() -> None:
            np.clip(x(), lo, hi, out=o())

    else:
        flo, fhi = (np.float32(v) for v in bounds(node))
        table = lookup_table(qi, qo, lambda v: np.clip(v, flo, fhi))

        def run() -> None:
            np.take(table, x().view(np.uint8), out=o())

    b.step(run)


_CODES = np.arange(256, dtype=np.uint8).view(_I8)  # every int8, indexed by its byte


def lookup_table(qi: Quant, qo: Quant, f: Callable[[NDArray], NDArray]) -> NDArray:
    """XNNPACK's quantized unary operators: ``f`` on each dequantized int8 code in
    float32, requantized ``rint(y / y_scale) + zy`` and saturated; indexed by the byte."""
    v = (_CODES.astype(F32) - np.float32(qi.zero_point)) * np.float32(qi.scale)
    y = np.rint(f(v).astype(F32) / np.float32(qo.scale)) + np.float32(qo.zero_point)
    return np.clip(y, -128, 127).astype(_I8)


# ------------------------------------------------------------------ pooling


def _max_pool(b: Builder, n: S.Pooling2D, node: S.XNode) -> None:
    q = _same_params(b, n.input_id, n.output_id)
    xs = b.shape(n.input_id)
    nb, h, w, c = xs
    kh, kw = n.pooling_height, n.pooling_width
    pt, pr, pbm, pl = n.padding_top, n.padding_right, n.padding_bottom, n.padding_left
    sh, sw = n.stride_height or 1, n.stride_width or 1
    dh, dw = n.dilation_height or 1, n.dilation_width or 1
    hp, wp = h + pt + pbm, w + pl + pr
    oh = (hp - dh * (kh - 1) - 1) // sh + 1
    ow = (wp - dw * (kw - 1) - 1) // sw + 1
    padded = np.full((nb, hp, wp, c), -128, _I8)
    inner = padded[:, pt : pt + h, pl : pl + w]
    s = padded.strides
    view = as_strided(
        padded,
        (nb, oh, ow, kh, kw, c),
        (s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]),
        writeable=False,
    )
    b.out(n.output_id, (nb, oh, ow, c))
    lo, hi = qbounds(node, q)
    x, o = b.getter(n.input_id), b.getter(n.output_id)

    def run() -> None:
        np.copyto(inner, x())
        out = o()
        np.max(view, axis=(3, 4), out=out)
        np.clip(out, lo, hi, out=out)

    b.step(run)


def _avg_pool(b: Builder, n: S.Pooling2D, node: S.XNode) -> None:
    # The window's sum less count * zx, requantized per output pixel with
    # x_scale / (y_scale * count); padded taps are not counted.
    xq = _quant(b, n.input_id, ("tensor",))
    yq = _quant(b, n.output_id, ("tensor",))
    nb, h, w, c = b.shape(n.input_id)
    kh, kw = n.pooling_height, n.pooling_width
    pt, pr, pbm, pl = n.padding_top, n.padding_right, n.padding_bottom, n.padding_left
    sh, sw = n.stride_height or 1, n.stride_width or 1
    hp, wp = h + pt + pbm, w + pl + pr
    oh, ow = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    padded = np.zeros((nb, hp, wp, c), np.int32)
    inner = padded[:, pt : pt + h, pl : pl + w]
    s = padded.strides
    view = as_strided(
        padded, (nb, oh, ow, kh, kw, c), (s[0], s[1] * sh, s[2] * sw, s[1], s[2], s[3]),
        writeable=False,
    )  # fmt: skip
    ones = np.zeros((1, hp, wp, 1), np.int32)
    ones[:, pt : pt + h, pl : pl + w] = 1
    so = ones.strides
    counts = as_strided(
        ones, (1, oh, ow, kh, kw, 1), (so[0], so[1] * sh, so[2] * sw, so[1], so[2], so[3])
    ).sum(axis=(3, 4))
    scale = np.float32(xq.scale) / (np.float32(yq.scale) * counts.astype(F32))
    bias = counts * xq.zero_point
    b.out(n.output_id, (nb, oh, ow, c))
    lo, hi = qbounds(node, yq)
    x, o = b.getter(n.input_id), b.getter(n.output_id)

    def run() -> None:
        np.copyto(inner, x())
        acc = view.sum(axis=(3, 4)) - bias
        requantize(acc, scale, yq.zero_point, lo, hi, o())

    b.step(run)


def _pad(b: Builder, n: S.XNNStaticConstantPad, node: S.XNode) -> None:
    # the float builder, with the padding value in the quantized domain
    q = _same_params(b, n.input_id, n.output_id)
    value = quantize_bound(float(n.padding_value), q)
    _FLOAT_PAD(b, dataclasses.replace(n, padding_value=value), node)


_FLOAT_PAD = BUILDERS["XNNStaticConstantPad"]


def _global_avg_pool(b: Builder, n: S.Node1x1, node: S.XNode) -> None:
    xq = _quant(b, n.input_id, ("tensor",))
    yq = _quant(b, n.output_id, ("tensor",))
    xs = b.shape(n.input_id)
    if len(xs) < 3:
        raise XnnpackError(f"{b.where}: input {xs} must be at least 3-d (N..., H, W, C)")
    declared = b.value(n.output_id).dims
    keep = bool(n.flags & S.FLAG_KEEP_DIMS) or len(declared) == len(xs)
    shape = xs[:-3] + (1, 1, xs[-1]) if keep else xs[:-3] + (xs[-1],)
    b.out(n.output_id, shape)
    area = xs[-3] * xs[-2]
    scale = np.float32(xq.scale) / (np.float32(yq.scale) * np.float32(area))
    lo, hi = qbounds(node, yq)
    x, o = b.getter(n.input_id), b.getter(n.output_id)
    bias = area * xq.zero_point

    def run() -> None:
        acc = x().sum(axis=(-3, -2), dtype=_I64) - bias
        requantize(acc, scale, yq.zero_point, lo, hi, o().reshape(acc.shape))

    b.step(run)


_in_front_of("XNNConvert", _convert, "input_id", "output_id")
_in_front_of("XNNFullyConnected", _fully_connected, "input1_id")
_in_front_of("XNNConv2d", _conv, "input1_id")
_in_front_of("XNNDepthwiseConv2d", _conv, "input1_id")
_in_front_of("XNNConvTranspose2d", _deconv, "input1_id")
_in_front_of("XNNAdd", _add, "output_id")
_in_front_of("XNNSubtract", partial(_add, sign=-1), "output_id")
_in_front_of("XNNMultiply", _multiply, "output_id")
_in_front_of("XNNClamp", _clamp, "output_id")
_in_front_of("XNNMaxPooling2d", _max_pool, "output_id")
_in_front_of("XNNGlobalAvgPooling2d", _global_avg_pool, "output_id")
_in_front_of("XNNAvgPooling2d", _avg_pool, "output_id")
_in_front_of("XNNStaticConstantPad", _pad, "output_id")


# ------------------------------------------------------------------ the other node types

# Node types that move values without computing on them: quantized, they need one set of
# parameters in and out (XNNPACK refuses differing ones when it defines the node).
_MOVES = {
    "XNNCopy", "XNNStaticReshape", "XNNStaticSlice", "XNNStaticTranspose",
    "XNNConcatenate2", "XNNConcatenate3", "XNNConcatenate4", "XNNConcatenate5",
}  # fmt: skip


def _tensor_ids(n: Any) -> list[int]:
    return [
        v
        for f in dataclasses.fields(n)
        if f.name.endswith("_id") and (v := getattr(n, f.name)) != S.INVALID_ID
    ]


def _refuse_quantized(name: str) -> None:
    """Float builders compute on the stored numbers: a quantized operand must not reach them."""
    fallback = BUILDERS[name]
    moves = name in _MOVES

    def build(b: Builder, n: Any, node: S.XNode) -> None:
        ids = _tensor_ids(n)
        quants = [b.value(v).quant for v in ids]
        if any(q is not None for q in quants):
            if not moves:
                raise NotImplementedError(
                    f"XNNPACK delegate: {b.where}: quantized operands are not supported "
                    "by pyexecutorch for this node type"
                )
            params = {None if q is None else (q.kind, q.scale, q.zero_point) for q in quants}
            if len(params) != 1:
                raise XnnpackError(
                    f"{b.where}: values {ids} are quantized differently "
                    f"({', '.join(sorted(map(str, params)))}); XNNPACK needs one set of "
                    "parameters across this node"
                )
        fallback(b, n, node)

    BUILDERS[name] = build


for _name in sorted(set(BUILDERS) - _QUANTIZED_BUILDERS):
    _refuse_quantized(_name)
