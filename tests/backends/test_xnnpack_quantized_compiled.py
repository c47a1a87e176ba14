"""Quantized XNNPACK nodes on the compiled tier (``backends/xnnpack/compiled_quantized.py``,
``kernels/quantized/compiled_linear.py``).

- The kernels: rows quantized bit-exactly as the numpy interpreter's ``DynamicRows``
  (zero rows, one-signed rows, odd sizes); 4-bit blockwise and int8 per-channel
  products against float64 on the same integers (outputs not a multiple of the tile,
  several rows, clamps), over several calls with changing inputs; bad arguments of
  :class:`DynamicLinear` refused by name.
- The official dynamic-int8 and 8da4w XNNPACK programs: every Convert and fully
  connected node a compiled step, against the official runtime.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

import torch  # noqa: E402

from pyexecutorch.backends.xnnpack.nodes_quantized import DynamicRows  # noqa: E402
from pyexecutorch.backends.xnnpack.runtime import Delegate  # noqa: E402
from pyexecutorch.jit.variants import choose  # noqa: E402
from pyexecutorch.kernels.quantized import compiled_linear as ql  # noqa: E402
from pyexecutorch.runtime import Runtime  # noqa: E402

from . import _quantized_programs as qp  # noqa: E402


def _rows(rng, m, k):
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10)).astype(np.float32)
    if m > 2:
        x[1] = 0.0  # an all-zero row: multiplier 1
        x[2] = np.abs(x[2])  # one-signed: the range widened to 0
    return x


def _reference_rows(x):
    m, k = x.shape
    rows, q = DynamicRows(m, k), np.empty((m, k), np.int8)
    rows.quantize(lambda: x, lambda: q)
    return q, rows.zps.astype(np.int32), rows.scales


@pytest.mark.parametrize("m, k", [(1, 7), (5, 64), (3, 257)])
def test_quantize_rows_bit_exact_with_numpy_interpreter(m, k):
    rng = np.random.default_rng(k)
    q, zps, scales = np.empty((m, k), np.int8), np.empty(m, np.int32), np.empty(m, np.float32)
    for _ in range(3):
        x = _rows(rng, m, k)
        ql.quantize_rows(x, q, zps, scales)
        ref_q, ref_zps, ref_scales = _reference_rows(x)
        np.testing.assert_array_equal(q, ref_q)
        np.testing.assert_array_equal(zps, ref_zps)
        np.testing.assert_array_equal(scales, ref_scales)


def _expected(x, w, scales, bias, low, high):
    """float64 on the integers the kernels see: dequantized rows times weights."""
    q, zps, xs = _reference_rows(x)
    centered = q.astype(np.float64) - zps[:, None]
    if scales.ndim == 2:
        block = w.shape[1] // scales.shape[1]
        wf = w.astype(np.float64) * np.repeat(scales.astype(np.float64), block, axis=1)
        y = (centered @ wf.T) * xs[:, None]
    else:
        y = (centered @ w.T.astype(np.float64)) * xs[:, None] * scales
    if bias is not None:
        y = y + bias
    return np.clip(y, low, high)


def _fold_error(x, w, scales, signed=ql.SIGNED_NIBBLES):
    """What XNNPACK's fold of the 4-bit zero point's share, ``zp * sum_b s_b * sum_k w``
    in float32, may lose per output: a few float32 roundings of that term (``signed``
    nibbles: of ``(zp + 128) * ...``, see compiled_linear.SIGNED_NIBBLES)."""
    if scales.ndim == 1:
        return 0.0  # (int8: exact integer sums)
    _, zps, xs = _reference_rows(x)
    if signed:  # (the rows' bytes plus 128 are the products' operands: 128 more of the fold)
        zps = zps + 128
    block = w.shape[1] // scales.shape[1]
    sums = w.reshape(w.shape[0], -1, block).sum(axis=2, dtype=np.int64)
    share = np.abs(sums * scales.astype(np.float64)).sum(axis=1)
    return 8 * np.finfo(np.float32).eps * np.abs(zps * xs)[:, None] * share


@pytest.mark.parametrize(
    "kind, m, k, n, block",
    [("int4", 1, 256, 100, 32), ("int4", 3, 384, 48, 128), ("int4", 2, 64, 5, 8),
     ("int4", 6, 128, 40, 32),  # rows four at a time, then two alone
     ("int8", 1, 260, 100, None), ("int8", 4, 64, 33, None),
     ("int8", 7, 260, 40, None)],  # (rows four a weight load, then three alone)
)  # fmt: skip
def test_dynamic_linear_against_float64(kind, m, k, n, block):
    rng = np.random.default_rng(n)
    if kind == "int4":
        w = rng.integers(-8, 8, (n, k)).astype(np.int8)
        scales = rng.uniform(1e-3, 2e-2, (n, k // block)).astype(np.float32)
        if block != 8:  # bfloat16 scales, as XNNPACK programs hold them (streamed as 2 bytes)
            scales = (scales.view(np.uint32) & 0xFFFF0000).view(np.float32)
    else:
        w = rng.integers(-128, 128, (n, k)).astype(np.int8)
        scales = rng.uniform(1e-3, 2e-2, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if m != 2 else None
    low, high = (-0.5, 0.75) if m == 3 else (-np.inf, np.inf)
    linear = ql.DynamicLinear(w, scales, bias, low, high)
    out = np.full((m, n), np.nan, np.float32)
    for call in range(3):  # packed once; new rows each call
        x = _rows(rng, m, k)
        got = linear(x, out if call else None)
        expected = _expected(x, w, scales, bias, low, high)
        assert got.shape == (m, n) and got.dtype == np.float32
        bound = 2e-5 * (np.abs(expected).max() + np.abs(expected)) + _fold_error(x, w, scales)
        err = np.abs(got - expected)
        assert (err <= bound).all(), (
            f"call {call}: worst {err.max():.3g}, over by {(err - bound).max():.3g}"
        )


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("m, k, n, block", [(1, 64, 20, 8), (3, 128, 40, 32), (10, 256, 33, 32),
                                            (11, 96, 16, 32), (2, 512, 5, 128)])  # fmt: skip
def test_int4_forms_against_float64(signed, m, k, n, block):
    """Both forms of 4-bit weights (signed nibbles on unsigned rows, as XNNPACK's VNNI
    kernels; unsigned nibbles on signed rows), whichever this CPU's products take: eight
    rows a pass (the last rows of a pass repeating, m 3, 10, 11), four, or one at a time,
    over three calls with new rows, against float64 on the same integers."""
    rng = np.random.default_rng(m * k + n)
    w = rng.integers(-8, 8, (n, k)).astype(np.int8)
    scales = rng.uniform(1e-3, 2e-2, (n, k // block)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    low, high = (-0.5, 0.75) if m == 3 else (-np.inf, np.inf)
    wp, bs, col = ql.pack_int4(w, scales, signed)
    padded_bias = ql.padded(bias, wp.shape[0] * ql.L)
    terms, tiles = ql.INT4_FORMS[signed]
    for call in range(3):
        x = _rows(rng, m, k)
        q, zps, xs = _reference_rows(x)
        scratch = ql.int4_scratch(m, k, k // block, signed)
        out = np.full((m, n), np.nan, np.float32)
        terms(q, q.view(np.int32), scratch)
        tiles(q.view(np.int32), scratch, zps, xs, wp, bs, col, padded_bias, low, high, out,
              0, wp.shape[0])  # fmt: skip
        expected = _expected(x, w, scales, bias, low, high)
        bound = 2e-5 * (np.abs(expected).max() + np.abs(expected))
        bound = bound + _fold_error(x, w, scales, signed)
        err = np.abs(out - expected)
        assert (err <= bound).all(), f"call {call}: worst {err.max():.3g}"


@pytest.mark.parametrize("kind", ["int4", "int8", "int8_flipped"])
def test_dynamic_split_over_the_threads_in_force_keeps_every_bit(kind):
    """The parallel kernels' tiles are jobs the threads in force take from a counter: at 2
    threads (jobs taken in whatever order) the same bits as at 1, call after call. The
    seven-row kernel takes two tiles a pass: its jobs are an even number of tiles (72
    tiles in 16 jobs would be 5 a job, the fifth computed twice)."""
    from pyexecutorch.jit.variants import can_thread  # noqa: PLC0415
    from pyexecutorch.runtime.threads import set_threads  # noqa: PLC0415

    if not can_thread():
        pytest.skip("numba runs one thread only")
    if kind == "int8_flipped" and not ql.SEVEN_ROWS:
        pytest.skip("the seven-row kernel is AVX-512's (16 lanes) only")
    rng = np.random.default_rng(7)
    m, k, n = 9, 256, 1000  # 125 tiles of 8 (or 63 of 16): 16 jobs at 2 threads
    if kind == "int8_flipped":
        n = 1150  # 72 tiles of 16, the last partial: 12 jobs of 6
    if kind == "int4":
        w = rng.integers(-8, 8, (n, k)).astype(np.int8)
        scales = rng.uniform(1e-3, 2e-2, (n, k // 32)).astype(np.float32)
    else:
        w = rng.integers(-128, 128, (n, k)).astype(np.int8)
        scales = rng.uniform(1e-3, 2e-2, n).astype(np.float32)
    linear = ql.DynamicLinear(w, scales, rng.standard_normal(n).astype(np.float32))
    forms = {"int4": ql.INT4_LINEAR, "int8": ql.INT8_LINEAR, "int8_flipped": ql.INT8_LINEAR_FLIPPED}
    parallel = forms[kind][1]
    assert choose(forms[kind], 1 << 30) is parallel
    unit = 2 if kind == "int8_flipped" else 1  # (tiles a pass)
    try:
        for call in range(3):
            x = _rows(rng, m, k)
            got = {}
            for threads in (2, 1):
                set_threads(threads)
                q, zps, xs = _reference_rows(x)
                out = np.full((m, n), np.nan, np.float32)
                jobs = np.zeros(1, np.int64)
                if kind == "int4":
                    wp, bs, col = linear.packed
                    terms = ql.int4_scratch(m, k, bs.shape[1])
                    parallel(q, q.view(np.int32), zps, xs, wp, bs, col, linear.bias,
                             -np.inf, np.inf, out, terms, jobs)  # fmt: skip
                else:
                    wp, sums = linear.packed
                    rows = q.view(np.int32)
                    if kind == "int8_flipped":
                        rows = np.empty_like(q)
                        ql.flip_rows(q, rows)
                    parallel(rows, zps, xs, wp, sums, linear.wscales, linear.bias,
                             -np.inf, np.inf, out, jobs)  # fmt: skip
                # every job taken once: the counter ends one past the jobs per thread
                jobs_made = min(wp.shape[0], ql.JOBS_PER_THREAD * threads) if threads > 1 else 1
                per = -(-wp.shape[0] // jobs_made)
                per = -(-per // unit) * unit  # (a whole number of the kernel's passes)
                count = -(-wp.shape[0] // per)
                assert jobs[0] == count + min(threads, count)
                if kind == "int8_flipped" and threads == 2:
                    assert (per, count) == (6, 12)
                got[threads] = out
            np.testing.assert_array_equal(got[1], got[2], err_msg=f"call {call}")
            np.testing.assert_array_equal(got[1], linear(x))  # the entry point's variant
    finally:
        set_threads(1)


def test_dynamic_linear_refuses_bad_arguments():
    w = np.zeros((4, 32), np.int8)
    with pytest.raises(ValueError, match="4-bit weights must lie in"):
        ql.DynamicLinear(np.full((4, 32), 9, np.int8), np.ones((4, 1), np.float32))
    with pytest.raises(ValueError, match="blocks of a multiple of 8"):
        ql.DynamicLinear(w, np.ones((4, 8), np.float32))
    with pytest.raises(ValueError, match="weight must be a 2-D int8"):
        ql.DynamicLinear(w.astype(np.int16), np.ones(4, np.float32))
    linear = ql.DynamicLinear(w, np.ones(4, np.float32))
    with pytest.raises(ValueError, match=r"input must be float32 \(\.\.\., 32\)"):
        linear(np.zeros((2, 31), np.float32))
    with pytest.raises(ValueError, match="out must be a C-contiguous float32"):
        linear(np.zeros((2, 32), np.float32), np.zeros((2, 5), np.float32))


@pytest.fixture
def plans(monkeypatch):
    """The plans the delegates made during the test, in order."""
    made = []
    make_plan = Delegate.make_plan

    def recorded(self, key, declared=False):
        plan = make_plan(self, key, declared)
        made.append(plan)
        return plan

    monkeypatch.setattr(Delegate, "make_plan", recorded)
    return made


@pytest.mark.parametrize(
    "model, recipe", [("mlp", "dynamic"), ("patch", "dynamic"), ("mlp", "int4")]
)
def test_official_dynamic_programs_compiled_match_official_runtime(plans, model, recipe):
    pte = qp.official_pte(qp.quantize(model, recipe), "xnnpack")
    method = Runtime.get().load_program(pte, jit=True).load_method("forward")
    for seed in (1, 2):
        inputs = qp.inputs_for(model, seed)
        got = np.asarray(method.execute([x.numpy() for x in inputs])[0])
        want = qp.official_run(pte, inputs)[0]
        if recipe == "dynamic":  # (int8 weights: XNNPACK's exact sums and fmadd epilogue)
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert plans and all(p.compiled and not p.declined for p in plans), [
        getattr(p, "declined", "numpy plan") for p in plans
    ]


_KERNEL_NODES = {"XNNConv2d", "XNNDepthwiseConv2d", "XNNFullyConnected", "XNNAdd",
                 "XNNMaxPooling2d", "XNNGlobalAvgPooling2d", "XNNConvert"}  # fmt: skip


@pytest.mark.parametrize("model", ["mlp"])
def test_official_static_programs_compiled_bit_exact(plans, model):
    """Static int8 on the compiled kernels: the same bytes as the numpy interpreter, over
    calls with changing inputs. (The CNN's convolutions, pools and additions run on the
    compiled tier in test_xnnpack_quantized_runtime against the official runtime, and
    alone against int64 sums below: its program here would only add compile time.)"""
    pte = qp.official_pte(qp.quantize(model, "static"), "xnnpack")
    compiled = Runtime.get().load_program(pte, jit=True).load_method("forward")
    reference = Runtime.get().load_program(pte, jit=False).load_method("forward")
    for seed in (1, 2, 3):
        args = [x.numpy() for x in qp.inputs_for(model, seed)]
        got = np.asarray(compiled.execute(args)[0])
        np.testing.assert_array_equal(got, np.asarray(reference.execute(args)[0]))
    taken = [p for p in plans if p.compiled]
    assert len(taken) == len(plans) // 2 and taken, "one compiled plan a delegate"
    assert not [d for p in taken for d in p.declined if d[1] in _KERNEL_NODES]


@pytest.mark.parametrize(
    "h, c, cout, k, stride, pad, dilation",
    [(16, 3, 20, 4, 4, 0, 1), (9, 3, 17, 7, 2, 3, 1), (7, 5, 16, 3, 1, 1, 2)],
)
def test_dynamic_convolution_rows_and_product_match_numpy_interpreter(
    h, c, cout, k, stride, pad, dilation
):
    """dynamic_im2col then the int8 product (both forms), for two images quantized each with its own
    zero point and scale (a patch embedding's kernel = stride; padding, filled with the
    image's zero point; dilation; K not a multiple of 4), against int64 sums and the numpy
    interpreter's float epilogue (times the image's scale, fused multiply-add of the
    channel scale and bias, clamp), over calls with new inputs."""
    from pyexecutorch.backends.xnnpack.nodes_quantized import _finish_dynamic

    rng = np.random.default_rng(h * c + k)
    nb, lo, hi = 2, -3.0, 2.5
    oh = (h + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    depth = k * k * c
    width = -(-depth // 4) * 4
    w = rng.integers(-127, 128, (cout, k, k, c)).astype(np.int8)
    full = np.zeros((cout, width), np.int8)
    full[:, :depth] = w.reshape(cout, depth)
    packed, sums = ql.pack_int8(full)
    ws = rng.uniform(1e-3, 1e-2, cout).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    size = packed.shape[0] * ql.L
    rows = nb * oh * oh
    cols = np.empty((rows, width), np.int8)
    row_zps, row_scales = np.empty(rows, np.int32), np.empty(rows, np.float32)
    out = np.empty((rows, cout), np.float32)
    for _ in range(2):
        x = rng.integers(-128, 128, (nb, h, h, c)).astype(np.int8)
        zps = rng.integers(-100, 100, nb).astype(np.int32)
        scales = rng.uniform(0.01, 0.1, nb).astype(np.float32)
        ql.dynamic_im2col(x, zps, scales, cols, row_zps, row_scales,
                          oh, oh, k, k, stride, stride, dilation, dilation, pad, pad)  # fmt: skip
        xp = np.zeros((nb, h + 2 * pad, h + 2 * pad, c), np.int64)
        xp[:, pad : pad + h, pad : pad + h] = x - zps.reshape(nb, 1, 1, 1)
        acc = np.zeros((nb, oh, oh, cout), np.int64)
        for i in range(k):
            for j in range(k):
                window = xp[:, i * dilation :, j * dilation :][:, ::stride, ::stride][:, :oh, :oh]
                acc += window @ w[:, i, j, :].T.astype(np.int64)
        y = acc.astype(np.float32).reshape(nb, oh * oh, cout)
        expected = np.empty_like(y)
        _finish_dynamic(y, scales.reshape(nb, 1, 1), ws, bias, lo, hi, expected)
        flipped = np.empty_like(cols)
        ql.flip_rows(cols, flipped)
        np.testing.assert_array_equal(flipped.view(np.uint8), cols.astype(np.int16) + 128)
        # four rows a pass on int32 quads; seven a pass on the flipped rows (rows and
        # tiles not multiples of 7 and 2: the last pass's rows and tile read twice)
        forms = [(f, cols.view(np.int32)) for f in ql.INT8_LINEAR]
        forms += [(f, flipped) for f in ql.INT8_LINEAR_FLIPPED]
        for variant, a in forms:  # (serial, and parallel on the threads in force)
            out.fill(np.nan)
            variant(a, row_zps, row_scales, packed, sums, ql.padded(ws, size),
                    ql.padded(bias, size), lo, hi, out, np.zeros(1, np.int64))  # fmt: skip
            np.testing.assert_array_equal(out, expected.reshape(rows, cout))


def _requantized(acc, scales, zy, lo, hi):
    """The numpy interpreter's requantization of int64 sums (float32 steps)."""
    f = np.rint(acc.astype(np.float32) * scales)
    return (np.clip(f, np.float32(lo - zy), np.float32(hi - zy)) + np.float32(zy)).astype(np.int8)


@pytest.mark.parametrize(
    "h, c, cout, k, stride, pad, dilation",
    [(9, 3, 20, 7, 2, 3, 1), (6, 17, 33, 3, 1, 1, 1), (7, 8, 16, 3, 2, 2, 2), (5, 12, 40, 1, 1, 0, 1),
     (6, 16, 33, 3, 1, 1, 1), (7, 8, 20, 1, 2, 0, 1), (8, 5, 18, 3, 1, 1, 2)],
)  # fmt: skip
@pytest.mark.parametrize("rows_dtype", [np.int8, np.int16])
def test_static_convolution_kernels_bit_exact(h, c, cout, k, stride, pad, dilation, rows_dtype):
    """im2col (or the flip of a 1x1's rows) and the int8 product against int64 sums,
    requantized as the numpy interpreter does (odd channels, K not a multiple of 4,
    a partial last tile, padding, stride, dilation), over calls with new inputs; rows as
    bytes and as uint16 (the rows of CPUs without VNNI: compiled_int8_simd.WIDE_ROWS);
    the implicit form too (pad_flip, no im2col: kernel rows of any C as taps, or kernel
    positions where dilated columns and C a multiple of 4; none for the last case)."""
    from pyexecutorch.kernels.quantized import compiled_static as qs

    rng = np.random.default_rng(h * c)
    zx, zy, lo, hi = -7, 3, -100, 120
    oh = (h + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    w = rng.integers(-128, 128, (cout, k, k, c)).astype(np.int8)
    bias = rng.integers(-5000, 5000, cout).astype(np.int32)
    scales = rng.uniform(1e-4, 1e-3, cout).astype(np.float32)
    packed, folded = qs.pack_weights(w.reshape(cout, -1), bias, zx)
    rows = np.empty((oh * oh, -(-k * k * c // 4) * 4), rows_dtype)
    no_geometry = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    forms = [(rows.reshape(-1), packed, folded, no_geometry)]
    implicit = qs.conv_geometry(
        (1, h, h, c), oh, oh, k, k, stride, stride, dilation, dilation, (pad,) * 4
    )
    if implicit is not None:
        shape, bases, taps, span = implicit
        padded = qs.padded_input(shape, zx, rows_dtype)
        weights = qs.pack_weights(qs.implicit_weights(w, span), bias, zx)
        forms.append((padded, *weights, (bases, taps)))
    out = np.empty((oh * oh, cout), np.int8)
    for _ in range(2):
        x = rng.integers(-128, 128, (1, h, h, c)).astype(np.int8)
        qs.im2col(x, rows, oh, oh, k, k, stride, stride, dilation, dilation, pad, pad, zx)
        if implicit is not None:
            qs.pad_flip(x, padded, shape[1], shape[2], pad, pad)
        xp = np.full((1, h + 2 * pad, h + 2 * pad, c), zx, np.int64)
        xp[:, pad : pad + h, pad : pad + h] = x
        acc = np.broadcast_to(bias.astype(np.int64), (oh, oh, cout)).copy()
        for i in range(k):
            for j in range(k):
                window = xp[0, i * dilation :, j * dilation :][::stride, ::stride][:oh, :oh]
                acc += (window - zx) @ w[:, i, j, :].T.astype(np.int64)
        expected = _requantized(acc.reshape(-1, cout), scales, zy, lo, hi)
        for inputs, packed, folded, geometry in forms:
            args = (inputs, packed, folded, qs.padded(scales, folded.size, np.float32),
                    float(zy), float(lo - zy), float(hi - zy))  # fmt: skip
            for variant in qs.GEMM:  # (serial, and parallel on the threads in force)
                out.fill(0)
                variant(*args, out, qs.job_words(), *geometry)
                np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(
    "h, c, k, stride, pad, dilation",
    [(9, 19, 3, 2, 1, 1), (11, 40, 5, 1, 2, 1), (10, 33, 3, 1, 2, 2), (8, 32, 3, 1, 1, 1),
     (3, 16, 3, 1, 2, 1), (7, 128, 3, 1, 1, 1), (6, 136, 3, 2, 1, 1)],
    # (the fifth: no output column has its whole window inside; the last two: whole and
    # partial blocks of channel quads)
)  # fmt: skip
def test_static_depthwise_kernel_bit_exact(h, c, k, stride, pad, dilation):
    """Depthwise int8 (the 3x3 unrolled interior and the edges' taps; where the CPU has
    AVX-512 VNNI, the channel-quads form too: masked blocks, padding bytes) against int64."""
    from pyexecutorch.kernels.quantized import compiled_static as qs

    rng = np.random.default_rng(h + c)
    zx, zy, lo, hi = 5, -2, -128, 100
    oh = (h + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    width = -(-c // qs.L) * qs.L
    taps = np.zeros((k * k, width), np.int32)
    taps[:, :c] = rng.integers(-128, 128, (k * k, c))
    bias = np.zeros(width, np.int32)
    bias[:c] = rng.integers(-3000, 3000, c)
    scales = np.zeros(width, np.float32)
    scales[:c] = rng.uniform(1e-3, 4e-3, c)
    out = np.empty((1, oh, oh, c), np.int8)
    for _ in range(2):
        x = rng.integers(-128, 128, (1, h, h, c)).astype(np.int8)
        results = []
        for variant in qs.DEPTHWISE:  # (serial, and parallel on the threads in force)
            out.fill(0)
            variant(x, taps, bias, scales, -zx, float(zy), float(lo - zy), float(hi - zy),
                    out, k, k, stride, stride, dilation, dilation, pad, pad,
                    qs.job_words())  # fmt: skip
            results.append(out.copy())
        if qs.QUADS:
            packed = qs.pack_depthwise_quads(taps[:, :c], bias[:c], scales, zx)
            for variant in qs.DEPTHWISE_QUADS:
                out.fill(0)
                variant(x, *packed, float(zy), float(lo - zy), float(hi - zy), out,
                        k, k, stride, stride, dilation, dilation, pad, pad, qs.job_words())  # fmt: skip
                results.append(out.copy())
        for other in results[1:]:
            np.testing.assert_array_equal(other, results[0])
        xp = np.full((h + 2 * pad, h + 2 * pad, c), zx, np.int64)
        xp[pad : pad + h, pad : pad + h] = x[0]
        acc = np.broadcast_to(bias[:c].astype(np.int64), (oh, oh, c)).copy()
        for i in range(k):
            for j in range(k):
                window = xp[i * dilation :, j * dilation :][::stride, ::stride][:oh, :oh]
                acc += (window - zx) * taps[i * k + j, :c]
        expected = _requantized(acc, scales[:c], zy, lo, hi)
        np.testing.assert_array_equal(out[0], expected)


def test_shared_element_steps_bit_exact_with_serial():
    """The element steps between static convolutions shared over the threads (each
    thread's range of the image first, then the others' from the back) write the serial
    forms' bytes, at 2 threads and 1, call after call with new inputs (odd sizes: ranges
    that split images, rows and vectors unevenly)."""
    from pyexecutorch.kernels.quantized import compiled_static as qs
    from pyexecutorch.runtime.threads import set_threads

    rng = np.random.default_rng(11)
    x4 = np.empty((2, 37, 29, 24), np.int8)
    hp, wp, pt, pl = 40, 31, 2, 1
    a, b = np.empty(40_003, np.int8), np.empty(40_003, np.int8)
    image = np.empty((2, 3, 57, 61), np.float32)
    jobs = qs.job_words()
    try:
        for threads in (2, 1, 2):
            set_threads(threads)
            x4[:] = rng.integers(-128, 128, x4.shape)
            a[:], b[:] = rng.integers(-128, 128, a.size), rng.integers(-128, 128, b.size)
            image[:] = rng.normal(0, 3, image.shape)
            pads = [qs.padded_input((2, hp, wp, 24), 5, np.int8) for _ in range(2)]
            qs.pad_flip(x4, pads[0], hp, wp, pt, pl)
            qs.PAD_FLIP_SHARED(x4, pads[1], hp, wp, pt, pl, jobs)
            flips = [np.zeros(a.size, np.int8) for _ in range(2)]
            qs.flip(a, flips[0])
            qs.FLIP_SHARED(a, flips[1], jobs)
            sums = [np.zeros(a.size, np.int8) for _ in range(2)]
            add_args = (9011, -7013, 123_457, 16, -3, -120, 101)
            qs.add(a, b, sums[0], *add_args)
            qs.ADD_SHARED(a, b, sums[1], *add_args, jobs)
            # the addition that also writes its sum's rows (a 1x1 convolution's input)
            both = [(np.zeros(a.size, np.int8), np.zeros(a.size, np.int8)) for _ in range(2)]
            qs.add_flip(a, b, *both[0], *add_args)
            qs.ADD_FLIP_SHARED(a, b, *both[1], *add_args, jobs)
            for out, rows in both:
                np.testing.assert_array_equal(out, sums[0])
                np.testing.assert_array_equal(rows, sums[0] ^ np.int8(-128))
            nhwc = [np.zeros((2, 57, 61, 3), np.int8) for _ in range(2)]
            qs.quantize_to_nhwc(image, nhwc[0], np.float32(7.5), -4)
            qs.QUANTIZE_TO_NHWC_SHARED(image, nhwc[1], np.float32(7.5), -4, jobs)
            for serial, shared in (pads, flips, sums, nhwc):
                np.testing.assert_array_equal(shared, serial)
            expected = (a.astype(np.int64) * 9011 + b.astype(np.int64) * -7013 + 123_457) >> 16
            np.testing.assert_array_equal(sums[1], np.clip(expected - 3, -120, 101))
            np.testing.assert_array_equal(flips[1], a ^ np.int8(-128))
            # the products' ranges: run by their threads, or all by one thread (the
            # serial form at 2 threads takes the other range from the back)
            packed, folded = qs.pack_weights(rng.integers(-128, 128, (40, 96), np.int8), None, 3)
            scales = np.full(folded.size, 1e-3, np.float32)
            products = [np.zeros((61, 40), np.int8) for _ in qs.GEMM]
            for variant, out in zip(qs.GEMM, products, strict=True):
                variant(flips[1][: 61 * 96], packed, folded, scales, 1.0, -100.0, 90.0, out,
                        jobs, np.zeros(0, np.int64), np.zeros(0, np.int64))  # fmt: skip
            np.testing.assert_array_equal(products[1], products[0])
            taps = rng.integers(-128, 128, (9, 32), np.int32)
            lines = [np.zeros((2, 19, 15, 24), np.int8) for _ in qs.DEPTHWISE]
            for variant, out in zip(qs.DEPTHWISE, lines, strict=True):
                variant(x4, taps, folded[:32], scales[:32], -3, 2.0, -100.0, 90.0, out,
                        3, 3, 2, 2, 1, 1, 1, 1, jobs)  # fmt: skip
            np.testing.assert_array_equal(lines[1], lines[0])
            assert np.abs(lines[0].astype(int)).max() > 20 and np.abs(products[0]).max() > 20
    finally:
        set_threads(1)


def test_static_clamp_kernels_match_numpy_builder():
    """A clamp within one quantization (bounds) and across two (the 256-code table,
    reordered from bytes to codes), against the numpy builder's arithmetic."""
    from pyexecutorch.backends.xnnpack.nodes_quantized import Quant, lookup_table
    from pyexecutorch.kernels.quantized import compiled_static as qs

    rng = np.random.default_rng(7)
    out = np.empty(1000, np.int8)
    table = lookup_table(Quant("tensor", 0.05, 3), Quant("tensor", 0.02, -10),
                         lambda v: np.clip(v, np.float32(0.0), np.float32(6.0)))  # fmt: skip
    codes = np.concatenate([table[128:], table[:128]])
    for _ in range(2):
        x = rng.integers(-128, 128, 1000).astype(np.int8)
        qs.clamp(x, out, -20, 90)
        np.testing.assert_array_equal(out, np.clip(x, -20, 90))
        qs.lookup(x, out, codes)
        np.testing.assert_array_equal(out, np.take(table, x.view(np.uint8)))


class _ConvClamps(torch.nn.Module):
    """Convolutions each followed by a clamp of their own (ReLU6, a clamp the quantizer does
    not fuse), one of them read by a second node too (not folded)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 12, 3, padding=1)
        self.dw = torch.nn.Conv2d(12, 12, 3, padding=1, groups=12)
        self.b = torch.nn.Conv2d(12, 12, 1)

    def forward(self, x):
        a = torch.nn.functional.hardtanh(self.a(x), 0.0, 6.0)
        d = torch.nn.functional.hardtanh(self.dw(a), -1.0, 1.5)
        b = self.b(d)
        return torch.nn.functional.hardtanh(b, 0.0, 6.0) + b


def _static_program(model: torch.nn.Module, shape: tuple, name: str) -> bytes:
    """The official exporter's static int8 XNNPACK program of ``model`` (calibrated on 4
    seeded inputs of ``shape``), cached by ``name`` and the model's forward."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from tests import official

    official.silence_noise()
    torch.manual_seed(0)
    model = model.eval()
    inputs = [torch.randn(shape, generator=torch.Generator().manual_seed(s)) for s in range(4)]

    def build() -> bytes:
        import executorch.kernels.quantized  # noqa: F401 - the out variants of quantized ops

        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(True))
        prepared = prepare_pt2e(torch.export.export(model, (inputs[0],)).module(), quantizer)
        for x in inputs:
            prepared(x)
        program = torch.export.export(convert_pt2e(prepared), (inputs[0],))
        partitioner = official._xnnpack_partitioner()
        return official.export_programs({"forward": program}, partitioner=partitioner)

    key = f"{official.versions()}|{type(model).forward.__code__.co_code.hex()}"
    path = official.cache_dir() / f"quant-{name}.{hash_text(key)}.pte"
    return official.cached_file(path, build)


def test_static_clamps_fold_into_their_convolutions(plans):
    """A clamp that alone reads a convolution's int8 output on the same quantization is
    folded into the convolution's requantization (no step of its own), the others stay;
    the bytes are the numpy interpreter's, over calls with changing inputs."""
    from pyexecutorch.kernels.quantized import compiled_static as qs

    shape = (1, 3, 12, 12)
    pte = _static_program(_ConvClamps(), shape, "convclamps")
    compiled = Runtime.get().load_program(pte, jit=True).load_method("forward")
    reference = Runtime.get().load_program(pte, jit=False).load_method("forward")
    for seed in (5, 6, 7):
        x = (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * seed).numpy()
        np.testing.assert_array_equal(compiled.execute([x])[0], reference.execute([x])[0])
    plan = next(p for p in plans if p.compiled)
    # of the three clamps two folded (after the first convolution and the depthwise one),
    # one left: b is read twice
    functions = [s.function for s in plan.steps]
    assert functions.count(qs.clamp) == 1
    # the depthwise output, read by b alone (1x1, 12 channels), is stored sign-flipped as
    # b's rows: no flip step; b's own output, read twice, is not
    assert qs.flip not in functions and qs.DEPTHWISE[0] in functions
    # the input quantized straight into NHWC (its transpose taken), the output's transpose
    # a compiled copy: no numpy step is left
    assert qs.quantize_to_nhwc in functions and not plan.numpy_steps


class _InvertedResiduals(torch.nn.Module):
    """Two MobileNetV2 blocks at 32x32 (expansion 4, 64 channels: the depthwise's whole
    blocks of channel quads), the second reading the first's sum, then a 1x1 head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.Conv2d(16, 64, 1),
                torch.nn.ReLU6(),
                torch.nn.Conv2d(64, 64, 3, padding=1, groups=64),
                torch.nn.ReLU6(),
                torch.nn.Conv2d(64, 16, 1),
            )  # fmt: skip
            for _ in range(2)
        )
        self.head = torch.nn.Conv2d(16, 32, 1)

    def forward(self, x):
        x = torch.nn.functional.relu6(self.stem(x))
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def test_static_shared_steps_in_a_network_bit_exact(plans):
    """A network whose steps are large enough to be shared over the threads (products,
    depthwise, the additions and flips): the numpy
    interpreter's bytes at 2 threads and 1, over calls with changing inputs; the sum the
    second block's expansion reads is written with its rows (no flip step after it), and
    the depthwise takes the channel-quads form where the CPU has AVX-512 VNNI."""
    from pyexecutorch.kernels.quantized import compiled_static as qs
    from pyexecutorch.runtime.threads import set_threads

    shape = (1, 3, 32, 32)
    pte = _static_program(_InvertedResiduals(), shape, "inverted-residuals")
    compiled = Runtime.get().load_program(pte, jit=True).load_method("forward")
    reference = Runtime.get().load_program(pte, jit=False).load_method("forward")
    try:
        for threads, seed in ((2, 5), (1, 6), (2, 7), (2, 8)):
            set_threads(threads)
            x = (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 2).numpy()
            np.testing.assert_array_equal(compiled.execute([x])[0], reference.execute([x])[0])
    finally:
        set_threads(1)
    plan = next(p for p in plans if p.compiled)
    functions = [s.function for s in plan.steps]
    assert qs.ADD_FLIP_SHARED in functions and qs.ADD_SHARED not in functions
    # one flip left: the stem's output, read by the first expansion and the first sum
    assert functions.count(qs.FLIP_SHARED) == 1 and qs.flip not in functions
    depthwise = qs.DEPTHWISE_QUADS[1] if qs.QUADS else qs.DEPTHWISE[1]
    assert functions.count(depthwise) == 2 and not plan.numpy_steps


def hash_text(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize("shape", [(1, 3, 20, 20), (2, 3, 5, 7), (1, 5, 6, 6)])
def test_quantize_to_nhwc_is_quantize_then_transpose(shape):
    """The input's quantization written straight in NHWC (three channels a vector step,
    others and the tail pixel by pixel) has the bytes of quantize then a transpose,
    saturations and ties included, over calls with new inputs."""
    from pyexecutorch.kernels.quantized import compiled_static as qs

    rng = np.random.default_rng(sum(shape))
    inv = np.float32(1.0) / np.float32(0.02)
    out = np.empty((shape[0], shape[2], shape[3], shape[1]), np.int8)
    for _ in range(2):
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        x.flat[::7], x.flat[1::11], x.flat[2::13] = 1e9, -1e9, np.float32(0.01)  # (0.5 q)
        expected = np.empty(x.size, np.int8)
        qs.quantize(x.reshape(-1), expected, inv, 3)
        qs.quantize_to_nhwc(x, out, inv, 3)
        np.testing.assert_array_equal(out, expected.reshape(shape).transpose(0, 2, 3, 1))


class _StridedConvBatchNorms(torch.nn.Module):
    """The official test_conv2d's Conv2dBatchNorm: 2x2 convolutions at stride 4 (a 1x1
    output), each with a batch norm and a hardtanh."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(2, 2, 2, stride=4, padding=1, bias=False)
        self.conv2 = torch.nn.Conv2d(2, 2, 2, stride=4, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(2)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        y = torch.nn.functional.hardtanh(self.bn(self.conv1(x)))
        return torch.nn.functional.hardtanh(self.bn(self.conv2(y)))


def test_static_steps_rebound_on_bytes_of_another_dtype():
    """A step whose argument lies in a delegate output's bytes as another dtype (here our
    exporter's static int8 program with a 1x1 output) is rebound onto the caller's array
    in its own dtype (it was remade in the caller's float32: 'strides is incompatible with
    shape'); the numpy interpreter's bytes over calls with changing inputs."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from pyexecutorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from pyexecutorch.exir import to_edge_transform_and_lower

    shape = (2, 2, 4, 4)
    torch.manual_seed(0)
    model, x = _StridedConvBatchNorms().eval(), torch.randn(shape)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    prepared(x)
    program = torch.export.export(convert_pt2e(prepared), (x,))
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    pte = lowered.to_executorch().buffer
    compiled = Runtime.get().load_program(pte, jit=True).load_method("forward")
    reference = Runtime.get().load_program(pte, jit=False).load_method("forward")
    for seed in (5, 6, 7):
        x = (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 2).numpy()
        np.testing.assert_array_equal(compiled.execute([x])[0], reference.execute([x])[0])
