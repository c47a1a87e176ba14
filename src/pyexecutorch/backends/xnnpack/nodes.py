"""The node types of an XNNPACK graph, each as a builder of numpy steps.

A builder reads one node of the graph and its operands' shapes from the
:class:`~pyexecutorch.backends.xnnpack.interpreter.Builder`, allocates its
output, pre-packs what it can (weights in the layout its matmul wants, padded
and im2col buffers, tap views) and appends the closure(s) that compute the node
on every call. ``BUILDERS`` maps each supported ``XNodeUnion`` member name to its
builder; a node type missing there is refused when the delegate loads.

Activations of convolutions and pools are NHWC; filters are
``[out, kernel_h, kernel_w, in / groups]`` (depthwise: ``[1, kh, kw, channels]``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pyexecutorch.backends.xnnpack import exact_math
from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack.schema import XnnpackError
from pyexecutorch.kernels import get_kernel
from pyexecutorch.kernels.conv.nhwc import (
    Operand,
    Window,
    conv2d_steps,
    conv_transpose2d_steps,
    depthwise_steps,
    transposed_out_hw,
)
from pyexecutorch.kernels.pool.nhwc import pool2d_steps

if TYPE_CHECKING:
    from pyexecutorch.backends.xnnpack.interpreter import Builder

Step = Callable[[], None]
NDArray = np.ndarray
_F32 = np.dtype(np.float32)
_F16 = np.dtype(np.float16)
_INF = float("inf")

Builders = Callable[["Builder", Any, S.XNode], None]
BUILDERS: dict[str, Builders] = {}


def builder(*names: str) -> Callable[[Builders], Builders]:
    def register(fn: Builders) -> Builders:
        for name in names:
            BUILDERS[name] = fn
        return fn

    return register


def bounds(node: S.XNode) -> tuple[float, float]:
    mm = node.output_min_max
    return (-_INF, _INF) if mm is None else (float(mm.output_min), float(mm.output_max))


def clamp_into(x: NDArray, out: NDArray, lo: float, hi: float) -> None:
    """out = x clamped to [lo, hi] (a copy when both bounds are infinite)."""
    if lo != -_INF and hi != _INF:
        np.clip(x, lo, hi, out=out)
    elif lo != -_INF:
        np.maximum(x, lo, out=out)
    elif hi != _INF:
        np.minimum(x, hi, out=out)
    elif x is not out:
        np.copyto(out, x)


def clamp_array(o: NDArray, lo: float, hi: float) -> None:
    clamp_into(o, o, lo, hi)


def _bcast(b: Builder, a: tuple[int, ...], c: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a, c))
    except ValueError:
        raise XnnpackError(f"{b.where}: shapes {a} and {c} do not broadcast") from None


# elementwise ---------------------------------------------------------

_BINARY = {
    "XNNAdd": np.add,
    "XNNSubtract": np.subtract,
    "XNNMultiply": np.multiply,
    "XNNDiv": np.divide,
    "XNNMinimum": np.minimum,
    "XNNMaximum": np.maximum,
}


@builder(*_BINARY)
def _binary(b: Builder, n: S.Node2x1, node: S.XNode) -> None:
    ufunc = _BINARY[type(n).__name__]
    shape = _bcast(b, b.shape(n.input1_id), b.shape(n.input2_id))
    b.out(n.output_id, shape)
    x, y, o = b.getter(n.input1_id), b.getter(n.input2_id), b.getter(n.output_id)
    lo, hi = bounds(node)
    if lo == -_INF and hi == _INF:

        def run() -> None:
            ufunc(x(), y(), out=o())

    else:

        def run() -> None:
            out = o()
            ufunc(x(), y(), out=out)
            clamp_array(out, lo, hi)

    b.step(run)


@builder("XNNPReLU")
def _prelu(b: Builder, n: S.Node2x1, node: S.XNode) -> None:
    shape = b.shape(n.input1_id)
    slope = b.shape(n.input2_id)
    _bcast(b, shape, slope)
    b.out(n.output_id, shape)
    x, w, o = b.getter(n.input1_id), b.getter(n.input2_id), b.getter(n.output_id)
    tmp = np.empty(shape, b.dtype(n.output_id))

    def run() -> None:
        xv, out = x(), o()
        np.minimum(xv, 0, out=tmp)
        np.multiply(tmp, w(), out=tmp)
        np.maximum(xv, 0, out=out)
        np.add(out, tmp, out=out)

    b.step(run)


def _hardswish(x: NDArray, out: NDArray) -> None:
    t = np.add(x, 3.0, dtype=x.dtype)
    np.clip(t, 0.0, 6.0, out=t)
    np.multiply(t, x, out=t)
    np.multiply(t, 1.0 / 6.0, out=out)


# erf(z) = 1 - t (a1 + t (a2 + ... + t a5)) exp(-z^2), t = 1 / (1 + p z), z >= 0, to 1.5e-7
# (Abramowitz and Stegun 7.1.26); here with z = |x| / sqrt(2) folded into p.
_ERF_P = 0.3275911 / math.sqrt(2.0)
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_GELU_BLOCK = 16384


def _gelu_block(x: NDArray, out: NDArray, a: NDArray, t: NDArray, e: NDArray) -> None:
    # gelu(x) = x Phi(x) = relu(x) - |x| Phi(-|x|), Phi(-|x|) = erfc(|x| / sqrt 2) / 2.
    np.abs(x, out=a)
    np.multiply(a, _ERF_P, out=t)
    np.add(t, 1.0, out=t)
    np.divide(1.0, t, out=t)
    np.multiply(t, _ERF_A[4], out=e)
    for c in _ERF_A[3::-1]:
        np.add(e, c, out=e)
        np.multiply(e, t, out=e)
    np.multiply(x, x, out=t)
    np.multiply(t, -0.5, out=t)
    np.exp(t, out=t)
    np.multiply(e, t, out=e)
    np.multiply(e, a, out=e)
    np.multiply(e, 0.5, out=e)
    np.maximum(x, 0.0, out=out)
    np.subtract(out, e, out=out)


def _gelu() -> Callable[[NDArray, NDArray], None]:
    scratch = [np.empty(_GELU_BLOCK, _F32) for _ in range(3)]

    def gelu(x: NDArray, out: NDArray) -> None:
        xf = x.reshape(-1)
        direct = out.dtype == _F32 and out.flags.c_contiguous
        of = out.reshape(-1) if direct else np.empty(xf.size, _F32)
        for i in range(0, xf.size, _GELU_BLOCK):
            j = min(xf.size, i + _GELU_BLOCK)
            n = j - i
            _gelu_block(xf[i:j].astype(_F32, copy=False), of[i:j], *(s[:n] for s in scratch))
        if not direct:
            np.copyto(out, of.reshape(out.shape), casting="unsafe")

    return gelu


def _kernel_unary(name: str, *extra: Any) -> Callable[[NDArray, NDArray], Any]:
    fn = get_kernel(name).fn
    return lambda x, out: fn(x, *extra, out)


def _rsqrt(x: NDArray, out: NDArray) -> None:
    np.sqrt(x, out=out)
    np.divide(1.0, out, out=out)


# The numpy tier emulates XNNPACK's microkernels (fused multiply-adds included) with
# float64 array passes: about 100 ns a value against 3 for numpy's own functions, which a
# CNN's activations (EfficientNet-B0: 9x slower a call) cannot pay. Past this many values
# a node takes numpy's function (within an ulp of XNNPACK's); an LLM's per-token tensors,
# where an int8 quantization after the node keeps every ulp, stay under it. The compiled
# tier computes XNNPACK's arithmetic at every size.
EXACT_NUMPY_LIMIT = 1 << 15


def _exact(f32: Callable[[NDArray], NDArray], other: Callable[[], Any]) -> Callable[[], Any]:
    """A float32 node computed as the official delegate's microkernel (``exact_math``:
    not correctly rounded, and an int8 quantization after it keeps every ulp) up to
    :data:`EXACT_NUMPY_LIMIT` values; what ``other()`` gives past it and for other dtypes."""

    def make() -> Callable[[NDArray, NDArray], None]:
        fallback = other()

        def run(x: NDArray, out: NDArray) -> None:
            if x.dtype == _F32 and x.size <= EXACT_NUMPY_LIMIT:
                np.copyto(out, f32(x).reshape(out.shape), casting="unsafe")
            else:
                fallback(x, out)

        return run

    return make


_UNARY: dict[str, Callable[[], Callable[[NDArray, NDArray], Any]]] = {
    "XNNSigmoid": _exact(exact_math.sigmoid, lambda: _kernel_unary("aten::sigmoid.out")),
    "XNNTanh": lambda: np.tanh,
    "XNNGelu": _gelu,
    "XNNFloor": lambda: np.floor,
    "XNNCeiling": lambda: np.ceil,
    "XNNSquareRoot": lambda: np.sqrt,
    "XNNReciprocalSquareRoot": _exact(exact_math.rsqrt, lambda: _rsqrt),
    "XNNSquare": lambda: np.square,
    "XNNNegate": lambda: np.negative,
    "XNNAbs": lambda: np.abs,
    "XNNExp": lambda: np.exp,
    "XNNLog": lambda: np.log,
    "XNNSin": _exact(exact_math.sin, lambda: np.sin),
    "XNNCos": _exact(exact_math.cos, lambda: np.cos),
    "XNNHardswish": lambda: _hardswish,
    "XNNClamp": lambda: lambda x, out: np.copyto(out, x),  # the bounds: see _unary
    "XNNCopy": lambda: lambda x, out: np.copyto(out, x),
    "XNNConvert": lambda: lambda x, out: np.copyto(out, x, casting="unsafe"),
}


def _unary_fn(n: Any) -> Callable[[NDArray, NDArray], Any]:
    name = type(n).__name__
    if name == "XNNELU":
        return _kernel_unary("aten::elu.out", float(n.alpha), 1.0, 1.0)
    if name == "XNNLeakyReLU":
        return _kernel_unary("aten::leaky_relu.out", float(n.negative_slope))
    return _UNARY[name]()


@builder(*_UNARY, "XNNELU", "XNNLeakyReLU")
def _unary(b: Builder, n: Any, node: S.XNode) -> None:
    shape = b.shape(n.input_id)
    if type(n).__name__ == "XNNCopy" and b.dtype(n.input_id) == b.dtype(n.output_id):
        b.alias(n.output_id, n.input_id, shape)
        return
    b.out(n.output_id, shape)
    fn = _unary_fn(n)
    x, o = b.getter(n.input_id), b.getter(n.output_id)
    lo, hi = bounds(node)
    if type(n).__name__ == "XNNClamp":

        def clamp() -> None:
            clamp_into(x(), o(), lo, hi)

        b.step(clamp)
        return
    clamp = lo != -_INF or hi != _INF

    def run() -> None:
        out = o()
        fn(x(), out)
        if clamp:
            clamp_array(out, lo, hi)

    b.step(run)


@builder("XNNSoftmax")
def _softmax(b: Builder, n: S.Node1x1, node: S.XNode) -> None:
    shape = b.shape(n.input_id)
    if not shape:
        raise XnnpackError(f"{b.where}: softmax of a 0-d value")
    b.out(n.output_id, shape)
    x, o = b.getter(n.input_id), b.getter(n.output_id)
    row = np.empty(shape[:-1] + (1,), _F32)
    half = b.dtype(n.output_id) != _F32
    work = np.empty(shape, _F32) if half else None

    def softmax() -> None:
        out = o()
        t = out if work is None else work
        v = x()
        np.max(v, axis=-1, keepdims=True, out=row)
        np.subtract(v, row, out=t)
        np.exp(t, out=t)
        np.sum(t, axis=-1, keepdims=True, out=row)
        np.divide(t, row, out=t)
        if work is not None:
            np.copyto(out, work, casting="unsafe")

    b.step(softmax)


# shape operators -----------------------------------------------------


@builder("XNNStaticReshape")
def _reshape(b: Builder, n: S.XNNStaticReshape, node: S.XNode) -> None:
    src = b.shape(n.input_id)
    new = [int(d) for d in n.new_shape]
    total = math.prod(src)
    if new.count(0) > 1:
        raise XnnpackError(f"{b.where}: at most one inferred (0) dimension, got {new}")
    if 0 in new:
        rest = math.prod(d for d in new if d)
        if rest == 0 or total % rest:
            raise XnnpackError(f"{b.where}: cannot reshape {src} to {new}")
        new[new.index(0)] = total // rest
    if math.prod(new) != total:
        raise XnnpackError(f"{b.where}: cannot reshape {src} ({total} elements) to {new}")
    b.alias(n.output_id, n.input_id, tuple(new))


@builder("XNNStaticTranspose")
def _transpose(b: Builder, n: S.XNNStaticTranspose, node: S.XNode) -> None:
    src = b.shape(n.input_id)
    perm = tuple(int(p) for p in n.perm)
    if sorted(perm) != list(range(len(src))):
        raise XnnpackError(f"{b.where}: {list(perm)} is not a permutation of {len(src)} dims")
    b.out(n.output_id, tuple(src[p] for p in perm))
    if b.fixed(n.input_id) and b.fixed(n.output_id):
        dst, view = b.env[n.output_id], b.env[n.input_id].transpose(perm)

        def run() -> None:
            np.copyto(dst, view)

    else:
        x, o = b.getter(n.input_id), b.getter(n.output_id)

        def run() -> None:
            np.copyto(o(), x().transpose(perm))

    b.step(run)


@builder("XNNStaticSlice")
def _slice(b: Builder, n: S.XNNStaticSlice, node: S.XNode) -> None:
    src = b.shape(n.input_id)
    offsets, sizes = list(n.offsets), list(n.sizes)
    if len(offsets) != len(src) or len(sizes) != len(src):
        raise XnnpackError(f"{b.where}: offsets {offsets} / sizes {sizes} for a {len(src)}-d input")
    index = []
    for d, (off, size) in enumerate(zip(offsets, sizes, strict=True)):
        stop = src[d] if size == 0 else off + size
        if stop > src[d]:
            raise XnnpackError(f"{b.where}: slice [{off}, {stop}) of a dimension of size {src[d]}")
        index.append(slice(off, stop))
    key = tuple(index)
    b.out(n.output_id, tuple(s.stop - s.start for s in index))
    x, o = b.getter(n.input_id), b.getter(n.output_id)

    def run() -> None:
        np.copyto(o(), x()[key])

    b.step(run)


@builder("XNNConcatenate2", "XNNConcatenate3", "XNNConcatenate4", "XNNConcatenate5")
def _concat(b: Builder, n: S.Cat, node: S.XNode) -> None:
    count = int(type(n).__name__[-1])
    ids = [n.input1_id, n.input2_id, n.input3_id, n.input4_id, n.input5_id][:count]
    shapes = [b.shape(i) for i in ids]
    rank = len(shapes[0])
    axis = n.axis
    if axis >= rank or any(len(s) != rank for s in shapes):
        raise XnnpackError(f"{b.where}: cannot concatenate {shapes} along axis {axis}")
    for s in shapes:
        if s[:axis] + s[axis + 1 :] != shapes[0][:axis] + shapes[0][axis + 1 :]:
            raise XnnpackError(f"{b.where}: cannot concatenate {shapes} along axis {axis}")
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    b.out(n.output_id, tuple(out_shape))
    getters = [b.getter(i) for i in ids]
    o = b.getter(n.output_id)
    cuts = []
    start = 0
    for s in shapes:
        cuts.append((slice(None),) * axis + (slice(start, start + s[axis]),))
        start += s[axis]
    parts = list(zip(getters, cuts, strict=True))

    def run() -> None:
        out = o()
        for get, cut in parts:
            out[cut] = get()

    b.step(run)


@builder("XNNStaticConstantPad")
def _pad(b: Builder, n: S.XNNStaticConstantPad, node: S.XNode) -> None:
    src = b.shape(n.input_id)
    pre, post = list(n.pre_paddings), list(n.post_paddings)
    if len(pre) < len(src) or len(post) < len(src):
        raise XnnpackError(f"{b.where}: paddings {pre} / {post} for a {len(src)}-d input")
    shape = tuple(s + a + c for s, a, c in zip(src, pre, post, strict=False))
    out = b.out(n.output_id, shape)
    inner = tuple(slice(a, a + s) for s, a in zip(src, pre, strict=False))
    value = float(n.padding_value)
    x, o = b.getter(n.input_id), b.getter(n.output_id)
    if b.fixed(n.output_id):
        out.fill(value)
        view = out[inner]

        def run() -> None:
            np.copyto(view, x())

    else:

        def run() -> None:
            dst = o()
            dst.fill(value)
            dst[inner] = x()

    b.step(run)


# matrix products -----------------------------------------------------


# XNNPACK's float32 GEMM microkernels (the broadcast ones it picks on x86-64, AVX2 and
# AVX-512 alike) start each output at its bias and add the depth's products one at a time,
# each a fused multiply-add: a BLAS sums in another order, some ulps apart (an LLM's logits
# ~10 ulps, past 1e-5 at |12|). The numpy tier follows that order up to this many
# multiply-adds a product (a numpy pass per depth step is slow past it); the compiled
# tier's products are BLAS's.
EXACT_GEMM_LIMIT = 1 << 20


def sequential_fma_product(a: NDArray, w: NDArray, bias: NDArray | None) -> NDArray:
    """float32 ``a @ w + bias`` as XNNPACK's GEMM computes it: from the bias, the depth's
    products added in order, each rounded once (``a`` [m, k], ``w`` [k, n])."""
    m, n = a.shape[0], w.shape[1]
    acc = np.zeros((m, n), _F32) if bias is None else np.broadcast_to(bias, (m, n))
    for k in range(a.shape[1]):
        acc = exact_math.fma(a[:, k : k + 1], w[k], acc)
    return np.asarray(acc, _F32)


def _matmul_into(
    out2d: NDArray, a: NDArray, w: NDArray, bias: NDArray | None, lo: float, hi: float
) -> None:
    """out2d = a @ w (+ bias), clamped; computed in float32 for half-precision outputs."""
    if (
        out2d.dtype == _F32
        and a.dtype == w.dtype == _F32
        and a.size * w.shape[1] <= EXACT_GEMM_LIMIT
    ):
        np.copyto(out2d, sequential_fma_product(a, w, bias))
        clamp_array(out2d, lo, hi)
    elif out2d.dtype == _F32:
        np.matmul(a, w, out=out2d)
        if bias is not None:
            np.add(out2d, bias, out=out2d)
        clamp_array(out2d, lo, hi)
    else:
        t = np.matmul(a.astype(_F32, copy=False), w.astype(_F32, copy=False))
        if bias is not None:
            t += bias.astype(_F32, copy=False)
        clamp_array(t, lo, hi)
        np.copyto(out2d, t, casting="unsafe")


@builder("XNNFullyConnected")
def _fully_connected(b: Builder, n: S.XNNFullyConnected, node: S.XNode) -> None:
    xs = b.shape(n.input1_id)
    ws = b.shape(n.filter_id)
    transposed = bool(n.flags & S.FLAG_TRANSPOSE_WEIGHTS)
    if len(ws) != 2 or not xs:
        raise XnnpackError(f"{b.where}: input {xs} and filter {ws} (2-d) do not fit")
    k, units = (ws[0], ws[1]) if transposed else (ws[1], ws[0])
    if xs[-1] != k:
        raise XnnpackError(
            f"{b.where}: input {xs} has {xs[-1]} features, the filter {ws} takes {k}"
        )
    has_bias = n.bias_id != S.INVALID_ID
    # A bias of one row per output channel; ``addmm``'s (1, units) row is the same
    # vector (the official delegate takes it as is).
    bias_shape = b.shape(n.bias_id) if has_bias else ()
    if has_bias and (not bias_shape or bias_shape[-1] != units or math.prod(bias_shape) != units):
        raise XnnpackError(f"{b.where}: bias {bias_shape} for {units} outputs")
    out_shape = xs[:-1] + (units,)
    b.out(n.output_id, out_shape)
    m = math.prod(xs[:-1])
    lo, hi = bounds(node)
    wconst = b.const(n.filter_id)
    half = b.dtype(n.output_id) != _F32
    if wconst is not None:
        # Pre-pack a constant filter as the contiguous [in, out] matrix the matmul wants.
        wmat = np.ascontiguousarray(
            wconst if transposed else wconst.T, dtype=_F32 if half else None
        )
        getw = lambda: wmat  # noqa: E731
    else:
        wget = b.getter(n.filter_id)
        getw = wget if transposed else (lambda: wget().T)
    bconst = b.const(n.bias_id) if has_bias else None
    if not has_bias:
        getb = lambda: None  # noqa: E731
    elif bconst is not None:
        bvec = (bconst.astype(_F32) if half else bconst).reshape(units)
        getb = lambda: bvec  # noqa: E731
    else:
        bget = b.getter(n.bias_id)
        getb = (lambda: bget().reshape(units)) if len(bias_shape) > 1 else bget
    if (
        b.fixed(n.input1_id)
        and b.fixed(n.output_id)
        and wconst is not None
        and (bconst is not None or not has_bias)
    ):
        a2, o2, bv = b.env[n.input1_id].reshape(m, k), b.env[n.output_id].reshape(m, units), getb()

        def run() -> None:
            _matmul_into(o2, a2, wmat, bv, lo, hi)

    else:
        x, o = b.getter(n.input1_id), b.getter(n.output_id)

        def run() -> None:
            _matmul_into(o().reshape(m, units), x().reshape(m, k), getw(), getb(), lo, hi)

    b.step(run)


@builder("XNNBatchMatrixMultiply")
def _bmm(b: Builder, n: S.Node2x1, node: S.XNode) -> None:
    a_s, b_s = b.shape(n.input1_id), b.shape(n.input2_id)
    trans = bool(n.flags & S.FLAG_TRANSPOSE_B)
    if len(a_s) < 2 or len(b_s) < 2:
        raise XnnpackError(f"{b.where}: operands {a_s} and {b_s} must be at least 2-d")
    kb, nb = (b_s[-1], b_s[-2]) if trans else (b_s[-2], b_s[-1])
    if a_s[-1] != kb:
        raise XnnpackError(
            f"{b.where}: cannot multiply {a_s} by {b_s}{' (transposed)' if trans else ''}"
        )
    batch = _bcast(b, a_s[:-2], b_s[:-2])
    b.out(n.output_id, batch + (a_s[-2], nb))
    x, y, o = b.getter(n.input1_id), b.getter(n.input2_id), b.getter(n.output_id)
    yconst = b.const(n.input2_id)
    if yconst is not None:
        ym = np.ascontiguousarray(yconst.swapaxes(-1, -2) if trans else yconst)
        y = lambda: ym  # noqa: E731
        trans = False
    half = b.dtype(n.output_id) != _F32

    def run() -> None:
        rhs = y()
        if trans:
            rhs = rhs.swapaxes(-1, -2)
        if half:
            np.copyto(o(), np.matmul(x().astype(_F32), rhs.astype(_F32)), casting="unsafe")
        else:
            np.matmul(x(), rhs, out=o())

    b.step(run)


# convolutions and pools (NHWC): the conv and pool families' channels-last forms ------


def _window(
    b: Builder, xs: tuple[int, ...], n: Any, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int
) -> Window:
    if len(xs) != 4:
        raise XnnpackError(f"{b.where}: input {xs} must be 4-d NHWC")
    if n.flags & S.FLAG_TENSORFLOW_SAME_PADDING:
        raise NotImplementedError(
            f"XNNPACK delegate: {b.where}: TensorFlow SAME padding is not supported"
        )
    if min(kh, kw, sh, sw, dh, dw) < 1:
        raise XnnpackError(
            f"{b.where}: window {kh}x{kw}, stride {sh}x{sw}, dilation {dh}x{dw} must be positive"
        )
    pads = (n.padding_top, n.padding_right, n.padding_bottom, n.padding_left)
    win = Window(*xs, pads, kh, kw, sh, sw, dh, dw)
    if not win.fits():
        _, hp, wp, _ = win.padded_shape
        raise XnnpackError(
            f"{b.where}: a {kh}x{kw} window (dilation {dh}x{dw}) does not fit the padded {hp}x{wp} input"
        )
    return win


def _operand(b: Builder, vid: int) -> Operand:
    return Operand(b.getter(vid), b.env[vid] if b.fixed(vid) else None)


def _float32_operands(
    b: Builder, in_id: int, out_id: int, in_shape: tuple[int, ...], out_shape: tuple[int, ...]
) -> tuple[Operand, Operand, list[Callable[[], None]], list[Callable[[], None]]]:
    """A convolution's or pooling's input and output, with the steps before and after its
    own: for float16 values it runs in float32 (XNNPACK's float16 kernels convert to
    float32 on CPUs without float16 arithmetic; a max is exact either way) between a
    widening of the input and a rounding of the output, in arrays made here."""
    dtypes = {b.dtype(in_id), b.dtype(out_id)}
    if dtypes == {_F32}:
        return _operand(b, in_id), _operand(b, out_id), [], []
    if dtypes != {_F16}:
        names = sorted(d.name for d in dtypes)
        raise NotImplementedError(
            f"XNNPACK delegate: {b.where}: {' and '.join(names)} values (float32 or float16 only)"
        )
    x, o = b.getter(in_id), b.getter(out_id)
    wide_in, wide_out = np.empty(in_shape, _F32), np.empty(out_shape, _F32)
    return (
        Operand(lambda: wide_in, wide_in),
        Operand(lambda: wide_out, wide_out),
        [lambda: np.copyto(wide_in, x())],
        [lambda: np.copyto(o(), wide_out, casting="same_kind")],
    )


def _clamp(node: S.XNode) -> Callable[[NDArray], None]:
    lo, hi = bounds(node)
    return lambda o: clamp_array(o, lo, hi)


def _bias(b: Builder, n: Any, units: int) -> NDArray | None:
    if n.bias_id == S.INVALID_ID:
        return None
    bias = b.const(n.bias_id)
    if bias is None:
        raise NotImplementedError(
            f"XNNPACK delegate: {b.where}: a non-constant bias is not supported"
        )
    if bias.shape != (units,):
        raise XnnpackError(f"{b.where}: bias {bias.shape} for {units} output channels")
    return bias.astype(_F32)


def _filter(b: Builder, n: Any, expected: tuple[int, ...]) -> NDArray:
    w = b.const(n.filter_id)
    if w is None:
        raise NotImplementedError(
            f"XNNPACK delegate: {b.where}: a non-constant filter is not supported"
        )
    if w.shape != expected:
        raise XnnpackError(f"{b.where}: filter {w.shape}, expected {expected}")
    return w.astype(_F32)


def _conv_window(b: Builder, n: S.Conv) -> Window:
    return _window(
        b,
        b.shape(n.input1_id),
        n,
        n.kernel_height,
        n.kernel_width,
        n.subsampling_height,
        n.subsampling_width,
        n.dilation_height,
        n.dilation_width,
    )


def _groups(b: Builder, n: S.Conv, channels: int) -> tuple[int, int, int]:
    g, cin, cout = n.groups, n.group_input_channels, n.group_output_channels
    if g < 1 or g * cin != channels:
        raise XnnpackError(
            f"{b.where}: {g} groups of {cin} channels for an input of {channels} channels"
        )
    return g, cin, cout


@builder("XNNConv2d")
def _conv2d(b: Builder, n: S.Conv, node: S.XNode) -> None:
    win = _conv_window(b, n)
    g, cin, cout = _groups(b, n, win.c)
    w = _filter(b, n, (g * cout, win.kh, win.kw, cin))
    bias = _bias(b, n, g * cout)
    shape = (win.n, win.oh, win.ow, g * cout)
    b.out(n.output_id, shape)
    x, out, before, after = _float32_operands(
        b, n.input1_id, n.output_id, b.shape(n.input1_id), shape
    )
    for step in [*before, *conv2d_steps(win, w, g, bias, x, out, _clamp(node)), *after]:
        b.step(step)


@builder("XNNDepthwiseConv2d")
def _depthwise(b: Builder, n: S.Conv, node: S.XNode) -> None:
    win = _conv_window(b, n)
    channels = win.c
    if n.groups != channels or n.group_input_channels != 1:
        raise XnnpackError(f"{b.where}: depthwise over {channels} channels with {n.groups} groups")
    mult = n.group_output_channels
    units = channels * mult
    w = _filter(b, n, (1, win.kh, win.kw, units))
    bias = _bias(b, n, units)
    shape = (win.n, win.oh, win.ow, units)
    b.out(n.output_id, shape)
    x, out, before, after = _float32_operands(
        b, n.input1_id, n.output_id, b.shape(n.input1_id), shape
    )
    for step in [*before, *depthwise_steps(win, w, mult, bias, x, out, _clamp(node)), *after]:
        b.step(step)


@builder("XNNMaxPooling2d", "XNNAvgPooling2d")
def _pool(b: Builder, n: S.Pooling2D, node: S.XNode) -> None:
    is_max = type(n).__name__ == "XNNMaxPooling2d"
    xs = b.shape(n.input_id)
    dh, dw = n.dilation_height or 1, n.dilation_width or 1
    win = _window(
        b, xs, n, n.pooling_height, n.pooling_width, n.stride_height, n.stride_width, dh, dw
    )
    shape = (win.n, win.oh, win.ow, win.c)
    b.out(n.output_id, shape)
    x, out, before, after = _float32_operands(b, n.input_id, n.output_id, xs, shape)
    for step in [*before, *pool2d_steps(win, is_max, _F32, x, out, _clamp(node)), *after]:
        b.step(step)


@builder("XNNConvTranspose2d")
def _deconv(b: Builder, n: S.Conv, node: S.XNode) -> None:
    xs = b.shape(n.input1_id)
    if len(xs) != 4:
        raise XnnpackError(f"{b.where}: input {xs} must be 4-d NHWC")
    pads = (n.padding_top, n.padding_right, n.padding_bottom, n.padding_left)
    win = Window(
        *xs,
        pads,
        n.kernel_height,
        n.kernel_width,
        n.subsampling_height,
        n.subsampling_width,
        n.dilation_height,
        n.dilation_width,
    )
    g, cin, cout = _groups(b, n, win.c)
    w = _filter(b, n, (g * cout, win.kh, win.kw, cin))
    bias = _bias(b, n, g * cout)
    adjust = (n.adjustment_height, n.adjustment_width)
    oh, ow = transposed_out_hw(win, adjust)
    if oh < 1 or ow < 1:
        raise XnnpackError(f"{b.where}: padding leaves an empty {oh}x{ow} output")
    shape = (win.n, oh, ow, g * cout)
    b.out(n.output_id, shape)
    x, out, before, after = _float32_operands(b, n.input1_id, n.output_id, xs, shape)
    steps = conv_transpose2d_steps(win, w, g, adjust, bias, x, out, _clamp(node))
    for step in [*before, *steps, *after]:
        b.step(step)


@builder("XNNGlobalAvgPooling2d")
def _global_avg_pool(b: Builder, n: S.Node1x1, node: S.XNode) -> None:
    xs = b.shape(n.input_id)
    if len(xs) < 3:
        raise XnnpackError(f"{b.where}: input {xs} must be at least 3-d (N..., H, W, C)")
    declared = b.value(n.output_id).dims
    keep = bool(n.flags & S.FLAG_KEEP_DIMS) or len(declared) == len(xs)
    red = xs[:-3] + (1, 1, xs[-1])
    shape = red if keep else xs[:-3] + (xs[-1],)
    b.out(n.output_id, shape)
    x, o = b.getter(n.input_id), b.getter(n.output_id)
    lo, hi = bounds(node)
    area = xs[-3] * xs[-2]
    half = b.dtype(n.output_id) != _F32

    def run() -> None:
        out = o()
        if half:
            r = np.mean(x(), axis=(-3, -2), dtype=_F32)
            np.copyto(out.reshape(r.shape), r, casting="unsafe")
        else:
            v = x()
            flat = v.reshape(v.shape[:-3] + (area, v.shape[-1]))
            np.sum(flat, axis=-2, out=out.reshape(flat.shape[:-2] + (flat.shape[-1],)))
            np.multiply(out, 1.0 / area, out=out)
        clamp_array(out, lo, hi)

    b.step(run)


@builder("XNNStaticResizeBilinear2D")
def _resize_bilinear(b: Builder, n: S.XNNStaticResizeBilinear2D, node: S.XNode) -> None:
    xs = b.shape(n.input_id)
    if len(xs) != 4:
        raise XnnpackError(f"{b.where}: input {xs} must be 4-d NHWC")
    nb, h, w, c = xs
    oh, ow = n.new_height, n.new_width
    b.out(n.output_id, (nb, oh, ow, c))
    align = bool(n.flags & S.FLAG_ALIGN_CORNERS)
    legacy = bool(
        n.flags & S.FLAG_TENSORFLOW_SAME_PADDING
    )  # XNN_FLAG_TENSORFLOW_LEGACY_MODE has the same bit

    def axis(size_in: int, size_out: int) -> tuple[NDArray, NDArray, NDArray]:
        # XNNPACK's indirection: float32 source positions and weights
        f32 = np.float32
        dst = np.arange(size_out, dtype=f32)
        if align:
            scale = f32(size_in - 1) / f32(size_out - 1) if size_out > 1 else f32(0)
            src = dst * scale
        elif legacy:
            src = dst * (f32(size_in) / f32(size_out))
        else:  # half-pixel centers: the offset folded into one constant, then clamped
            scale = f32(size_in) / f32(size_out)
            src = dst * scale + (f32(0.5) * scale - f32(0.5))
            src = np.clip(src, f32(0), f32(size_in - 1))
        i0 = np.minimum(src.astype(np.intp), size_in - 1)
        i1 = np.minimum(i0 + 1, size_in - 1)
        lam = (src - i0.astype(_F32)).astype(_F32)
        return i0, i1, lam

    y0, y1, ly = axis(h, oh)
    x0, x1, lx = axis(w, ow)
    ly = ly[:, None, None]
    lx = lx[:, None]
    x, o = b.getter(n.input_id), b.getter(n.output_id)

    def run() -> None:
        # across first (the top and bottom rows), then down, as XNNPACK's ibilinear
        v = x()
        top_l, top_r = v[:, y0][:, :, x0], v[:, y0][:, :, x1]
        bot_l, bot_r = v[:, y1][:, :, x0], v[:, y1][:, :, x1]
        top = top_l + (top_r - top_l) * lx
        bot = bot_l + (bot_r - bot_l) * lx
        np.copyto(o(), top + (bot - top) * ly, casting="unsafe")

    b.step(run)
