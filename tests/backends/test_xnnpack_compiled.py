"""XNNPACK delegates on the compiled tier (``backends/xnnpack/compiled.py``).

- Hand-built graphs: every node type with a compiled step against the numpy interpreter
  and torch (odd sizes, broadcasting, clamps, NaN and infinities), elementwise runs as
  one loop, a convolution reading NCHW input with its residual add folded in; node types
  and options without a step (grouped convolutions, depth multipliers, transposed
  convolutions, half precision) run on numpy between compiled calls.
- Binding: the caller's arrays are bound into the compiled calls, or copied where they
  do not fit (other layouts, read-only, overlapping outputs, upper-bound storage).
- The official XNNPACK exports of the suite's small models and of the architectures:
  every delegate one compiled function, matching eager.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pyexecutorch.backends.xnnpack import compiled_nodes, exact_math
from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack.runtime import Delegate, XnnpackBackend
from pyexecutorch.runtime import Runtime
from pyexecutorch.runtime.backend import BackendInitContext
from tests import models, official

from . import test_xnnpack_runtime as base
from .test_xnnpack_runtime import NODE, GraphBuilder, _conv_table, _nhwc, _rand

pytest.importorskip("numba")


@pytest.fixture
def plans(monkeypatch):
    """Every delegate made during the test compiles; the plans it made, in order."""
    made = []
    make_plan = Delegate.make_plan

    def compiled_plan(self, key, declared=False):
        self.jit = True
        plan = make_plan(self, key, declared)
        made.append(plan)
        return plan

    monkeypatch.setattr(Delegate, "make_plan", compiled_plan)
    return made


def _init(g: GraphBuilder, jit: bool):
    backend = XnnpackBackend()
    named = {k: memoryview(v) for k, v in g.named.items()}
    context = BackendInitContext("forward", 0, named, jit=jit)
    return backend, backend.init(memoryview(g.payload()), {}, context)


def _outputs(plan) -> list[np.ndarray]:
    return [np.full(o[2], np.nan, o[3]) for o in plan.outputs]


def run_both(g: GraphBuilder, *inputs: np.ndarray):
    """(compiled outputs, numpy interpreter outputs, the compiled plan)."""
    results, plans = [], []
    for jit in (True, False):
        backend, handle = _init(g, jit)
        plans.append(next(iter(handle.plans.values())))
        args = [np.ascontiguousarray(x) for x in inputs] + _outputs(plans[-1])
        result = backend.execute(handle, args)
        results.append((result or args)[len(inputs) :])
    assert plans[0].compiled and not plans[1].compiled
    return results[0], results[1], plans[0]


def _same(got, ref, rtol=2e-6, atol=1e-7):
    for k, (a, b) in enumerate(zip(got, ref, strict=True)):
        assert a.shape == b.shape and a.dtype == b.dtype, k
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {k}")


def _specials(shape, seed=0) -> np.ndarray:
    """Random values with NaN, infinities and signed zeros among them."""
    a = np.array(_rand(*shape, seed=seed) * 3, np.float32)
    flat = a.reshape(-1)
    flat[: min(6, flat.size)] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30][: min(6, flat.size)]
    return a


def _kinds(plan) -> list[str]:
    return [getattr(s.function, "name", None) or s.function.py_func.__name__ for s in plan.steps]


# --------------------------------------------------------------------------------------
# elementwise


UNARY = [
    ("XNNSigmoid", torch.sigmoid),
    ("XNNTanh", torch.tanh),
    ("XNNGelu", F.gelu),
    ("XNNFloor", torch.floor),
    ("XNNCeiling", torch.ceil),
    ("XNNSquareRoot", torch.sqrt),
    ("XNNReciprocalSquareRoot", torch.rsqrt),
    ("XNNSquare", torch.square),
    ("XNNNegate", torch.neg),
    ("XNNAbs", torch.abs),
    ("XNNExp", torch.exp),
    ("XNNLog", torch.log),
    ("XNNSin", torch.sin),
    ("XNNCos", torch.cos),
    ("XNNHardswish", F.hardswish),
]


# The XNNPACK kernels this CPU's official delegate runs (both tiers emulate those)
_SIGMOID_OF_HUGE_IS_NAN = exact_math.VARIANT == "avx512f"


@pytest.mark.parametrize("name,reference", UNARY, ids=[u[0] for u in UNARY])
def test_unary_nodes_match_numpy_and_torch(name, reference):
    x = _specials((3, 37), seed=1)
    if name in ("XNNSin", "XNNCos"):
        x[0, 5] = 5.0  # (not 1e30: float32 sin of huge arguments differs between libraries)
    g = GraphBuilder()
    xi = g.input(x.shape)
    out = g.tensor(x.shape)
    g.node(NODE[name](xi, out, 0))
    g.output_all(out)
    got, ref, plan = run_both(g, x)
    assert plan.declined == [] and len(plan.steps) == 1
    expected = reference(torch.from_numpy(x)).numpy()
    if name == "XNNGelu":
        # GELU(+inf): the formula gives inf; the numpy interpreter's erfc form and torch's
        # vectorized CPU path give NaN
        assert got[0][0, 1] == np.inf
        got, ref, expected = [got[0][:, 2:]], [ref[0][:, 2:]], expected[:, 2:]
    if name == "XNNSigmoid" and _SIGMOID_OF_HUGE_IS_NAN:
        # sigmoid(1e30): the official delegate's AVX-512F kernel (which both tiers compute
        # on such a CPU, see backends/xnnpack/exact_math.py) gives NaN, torch 1 (as its
        # AVX2 kernel does)
        assert np.isnan(got[0][0, 5]) and np.isnan(ref[0][0, 5])
        expected[0, 5] = np.nan
    if name == "XNNReciprocalSquareRoot":
        # 1/sqrt(+-0): the official delegate's Newton step gives NaN (0 * inf), torch +-inf
        assert np.isnan(got[0][0, 3:5]).all() and np.isnan(ref[0][0, 3:5]).all()
        expected[0, 3:5] = np.nan
    _same(got, ref, atol=1e-6 if name == "XNNGelu" else 1e-7)
    np.testing.assert_allclose(got[0], expected, rtol=1e-5, atol=1e-6)
    if name in ("XNNNegate", "XNNAbs", "XNNFloor", "XNNCeiling", "XNNSquare"):
        np.testing.assert_array_equal(np.signbit(got[0]), np.signbit(ref[0]))


def test_elementwise_run_is_one_loop_with_clamps_and_broadcasting():
    # ((x + bias) * sigmoid(x + bias)) clamped, an ELU, max with y, a leaky ReLU: the
    # intermediates only later members read stay in registers, the others are stored
    x, y = _specials((2, 5, 37)), _rand(5, 1, seed=3)
    bias, three = _rand(37, seed=2), np.array([3.0], np.float32)
    g = GraphBuilder()
    xi, yi = g.input(x.shape), g.input(y.shape)
    bi, ti = g.const(bias), g.const(three)
    s, sig, silu, elu, mx, lr, sub = (g.tensor(x.shape) for _ in range(7))
    g.node(NODE["XNNAdd"](xi, bi, s, 0))
    g.node(NODE["XNNSigmoid"](s, sig, 0))
    g.node(NODE["XNNMultiply"](s, sig, silu, 0), (-0.5, 2.5))
    g.node(NODE["XNNELU"](0.75, silu, elu, 0))
    g.node(NODE["XNNMaximum"](elu, yi, mx, 0))
    g.node(NODE["XNNLeakyReLU"](0.125, mx, lr, 0))
    g.node(NODE["XNNSubtract"](lr, ti, sub, 0), (-np.inf, 1.0))
    g.output_all(silu, sub)
    got, ref, plan = run_both(g, x, y)
    assert plan.declined == [] and _kinds(plan) == ["fused"]
    _same(got, ref)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    t = tx + torch.from_numpy(bias)
    silu_t = (t * torch.sigmoid(t)).clamp(-0.5, 2.5)
    expected = (F.leaky_relu(torch.maximum(F.elu(silu_t, 0.75), ty), 0.125) - 3).clamp(max=1)
    silu_t, expected = silu_t.numpy(), expected.numpy()
    # the official delegate's sigmoid of 1e30 is NaN with AVX-512F (see
    # test_unary_nodes_match_numpy_and_torch), 1 with AVX2
    huge = np.isfinite(t.numpy()) & (np.abs(t.numpy()) > 1e29)
    assert huge.any() and np.isnan(got[0][huge]).all() == _SIGMOID_OF_HUGE_IS_NAN
    if _SIGMOID_OF_HUGE_IS_NAN:
        silu_t[huge], expected[huge] = np.nan, np.nan
    np.testing.assert_allclose(got[0], silu_t, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gated", [True, False], ids=["gate-broadcast", "flat"])
def test_large_elementwise_run_shares_its_loop_among_threads(gated):
    # a squeeze-excite gate (x * sigmoid(s), s broadcast over the pixels) plus a residual,
    # clamped, of PARALLEL_ELEMENTS elements; without the gate one flat loop: the loop is a
    # prange, and at one and at two threads, over calls with new values in the same arrays,
    # it gives the numpy interpreter's bits
    from pyexecutorch.jit.variants import can_thread  # noqa: PLC0415
    from pyexecutorch.runtime.fusion import PARALLEL_ELEMENTS  # noqa: PLC0415
    from pyexecutorch.runtime.threads import set_threads, thread_counts  # noqa: PLC0415

    shape = (1, 64, -(-PARALLEL_ELEMENTS // (64 * 48)), 48)
    x, y = _specials(shape, seed=6), _rand(*shape, seed=7)
    gate = _rand(1, 1, 1, shape[-1], seed=8)
    g = GraphBuilder()
    xi, yi, gi = g.input(shape), g.input(shape), g.input(gate.shape)
    sig, scaled, out = g.tensor(gate.shape), g.tensor(shape), g.tensor(shape)
    if gated:
        g.node(NODE["XNNSigmoid"](gi, sig, 0))
        g.node(NODE["XNNMultiply"](xi, sig, scaled, 0))
    else:
        g.node(NODE["XNNMultiply"](xi, xi, scaled, 0))
    g.node(NODE["XNNAdd"](scaled, yi, out, 0), (-2.0, 2.5))
    g.output_all(out)
    got, ref, plan = run_both(g, x, y, gate)
    loops = [s.function for s in plan.steps if getattr(s.function, "name", None) == "fused"]
    assert len(loops) == 1 + gated
    assert ("prange(" in loops[-1].source) == can_thread()
    assert "prange(" not in loops[0].source or not gated  # (the gate's 48 sigmoids: serial)
    _same(got, ref)
    backends = [_init(g, jit) for jit in (True, False)]
    before = thread_counts()
    try:
        for call, threads in enumerate([2, 1, 2]):
            set_threads(threads)
            inputs = [_specials(shape, seed=10 + call), _rand(*shape, seed=20 + call)]
            inputs.append(_rand(*gate.shape, seed=30 + call))
            results = []
            for backend, handle in backends:
                args = inputs + _outputs(next(iter(handle.plans.values())))
                results.append((backend.execute(handle, args) or args)[3])
            assert np.array_equal(results[0], results[1], equal_nan=True), (call, threads)
    finally:
        set_threads(before["numba"] or 1)


@pytest.mark.parametrize(
    "a_shape,b_shape", [((1, 7, 9, 13), (1, 1, 1, 13)), ((4, 1), (3,)), ((), (5,))]
)
def test_binary_broadcasting_shapes(a_shape, b_shape):
    a, b = _specials(a_shape, seed=4), _rand(*b_shape, seed=5)
    out_shape = np.broadcast_shapes(a_shape, b_shape)
    g = GraphBuilder()
    ai, bi = g.input(a_shape), g.input(b_shape)
    outs = [g.tensor(out_shape) for _ in range(4)]
    for kind, o in zip(("XNNDiv", "XNNMinimum", "XNNSubtract", "XNNAdd"), outs, strict=True):
        g.node(NODE[kind](ai, bi, o, 0), (0.0, 6.0) if kind == "XNNAdd" else None)
    g.output_all(*outs)
    got, ref, plan = run_both(g, a, b)
    assert plan.declined == []
    _same(got, ref)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    expected = [
        ta / tb,
        torch.minimum(ta, tb),
        ta - tb,
        (ta + tb).clamp(0, 6),
    ]
    for k, (o, e) in enumerate(zip(got, expected, strict=True)):
        np.testing.assert_allclose(o, e.numpy(), rtol=1e-6, atol=1e-7, err_msg=f"output {k}")


# --------------------------------------------------------------------------------------
# convolutions, pools, products


def test_convolution_reads_nchw_input_and_adds_its_residual():
    # an NCHW input transposed to NHWC for a 3x3 convolution, whose output plus a skip
    # tensor (relu6) is one convolution step; then a depthwise one with a clamp
    n, c, h, o = 1, 5, 11, 24
    x, skip = _rand(n, c, h, h), _rand(n, h, h, o, seed=1)
    w, bias = _rand(o, c, 3, 3, seed=2), _rand(o, seed=3)
    wd, bd = _rand(o, 1, 3, 3, seed=4), _rand(o, seed=5)
    g = GraphBuilder()
    xi, si = g.input((n, c, h, h)), g.input(skip.shape)
    nhwc, conv, summed, dw = (g.tensor(s) for s in [(n, h, h, c), *[(n, h, h, o)] * 3])
    g.node(S.XNNStaticTranspose(4, [0, 2, 3, 1], xi, nhwc, 0))
    table = _conv_table(NODE["XNNConv2d"], nhwc, g.const(w.transpose(0, 2, 3, 1)), g.const(bias),
                        conv, k=3, pad=(1,) * 4, cin=c, cout=o)  # fmt: skip
    g.node(table)
    g.node(NODE["XNNAdd"](conv, si, summed, 0), (0.0, 6.0))
    wx = g.const(wd.reshape(o, 3, 3).transpose(1, 2, 0)[None])
    table = _conv_table(NODE["XNNDepthwiseConv2d"], summed, wx, g.const(bd), dw, k=3,
                        stride=1, pad=(1,) * 4, groups=o, cin=1, cout=1)  # fmt: skip
    g.node(table, (-1.0, 1.0))
    g.output_all(summed, dw)
    got, ref, plan = run_both(g, x, skip)
    assert plan.declined == [] and _kinds(plan) == ["nhwc_dense", "nhwc_depthwise"]
    _same(got, ref, rtol=1e-5, atol=1e-5)
    tx = torch.from_numpy(x)
    s = F.conv2d(tx, torch.from_numpy(w), torch.from_numpy(bias), padding=1)
    s = (s + base._nchw(skip)).clamp(0, 6)
    d = F.conv2d(s, torch.from_numpy(wd), torch.from_numpy(bd), padding=1, groups=o).clamp(-1, 1)
    np.testing.assert_allclose(got[0], _nhwc(s), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], _nhwc(d), rtol=1e-5, atol=1e-5)


def _activation(g: GraphBuilder, name: str, x: int, out: int, shape, swapped: bool) -> None:
    """Nodes computing activation ``name`` of ``x`` (of ``shape``) into ``out``: SiLU as
    exported (a sigmoid, a multiply whose operands ``swapped`` or not), or a hardswish."""
    if name == "hardswish":
        g.node(NODE["XNNHardswish"](x, out, 0))
        return
    gate = g.tensor(shape)
    g.node(NODE["XNNSigmoid"](x, gate, 0))
    g.node(NODE["XNNMultiply"](*((gate, x) if swapped else (x, gate)), out, 0))


_TORCH_ACTIVATIONS = {"silu": F.silu, "hardswish": F.hardswish}


def _activation_graph(x_shape, o, name, conv_out_is_output=False):
    """On an NHWC input of ``x_shape``: a 3x3 convolution to ``o`` channels, the activation
    ``name``, a depthwise 3x3 convolution, the activation again (a SiLU's multiply with
    its operands the other way round); the weights, and torch's result on an NCHW x."""
    n, h, _, c = x_shape
    w, bias = _rand(o, c, 3, 3, seed=2), _rand(o, seed=3)
    wd, bd = _rand(o, 1, 3, 3, seed=4), _rand(o, seed=5)
    g = GraphBuilder()
    xi = g.input((n, h, h, c))
    conv, act, dw, out = (g.tensor((n, h, h, o)) for _ in range(4))
    g.node(_conv_table(NODE["XNNConv2d"], xi, g.const(w.transpose(0, 2, 3, 1)), g.const(bias),
                       conv, k=3, pad=(1,) * 4, cin=c, cout=o))  # fmt: skip
    _activation(g, name, conv, act, (n, h, h, o), False)
    wx = g.const(wd.reshape(o, 3, 3).transpose(1, 2, 0)[None])
    g.node(_conv_table(NODE["XNNDepthwiseConv2d"], act, wx, g.const(bd), dw, k=3, stride=1,
                       pad=(1,) * 4, groups=o, cin=1, cout=1))  # fmt: skip
    _activation(g, name, dw, out, (n, h, h, o), True)
    g.output_all(*((conv, out) if conv_out_is_output else (out,)))

    def torch_result(x):
        f = _TORCH_ACTIVATIONS[name]
        s = f(F.conv2d(x, torch.from_numpy(w), torch.from_numpy(bias), padding=1))
        return f(F.conv2d(s, torch.from_numpy(wd), torch.from_numpy(bd), padding=1, groups=o))

    return g, torch_result


@pytest.mark.parametrize("name", ["silu", "hardswish"])
# (a channel tail of 8 lanes; a vector pair; a pair and an odd last vector, whole)
@pytest.mark.parametrize("o", [24, 32, 48])
def test_convolutions_apply_a_following_activation_in_their_stores(monkeypatch, o, name):
    from pyexecutorch.jit import xnnpack_math

    x = _specials((1, 9, 9, 5), seed=1)
    g, torch_result = _activation_graph(x.shape, o, name)
    got, ref, plan = run_both(g, x)
    assert plan.declined == []
    # fused (SiLU where the kernels have the delegate's sigmoid in vectors: AVX-512F)
    fused = ["nhwc_dense", "nhwc_depthwise"]
    assert (_kinds(plan) == fused) == (name == "hardswish" or xnnpack_math.SILU_VECTORS)
    # bit for bit the separate loops' result (the same arithmetic), near the numpy
    # interpreter's (another summation order) and torch's
    monkeypatch.setattr(compiled_nodes, "_ACTIVATIONS_AFTER", ())
    apart, _, plan_apart = run_both(g, x)
    assert len(plan_apart.steps) == 4
    np.testing.assert_array_equal(got[0], apart[0])
    _same(got, ref, rtol=1e-5, atol=1e-5)
    finite = np.isfinite(ref[0])
    expected = _nhwc(torch_result(base._nchw(x)))
    np.testing.assert_allclose(got[0][finite], expected[finite], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["silu", "hardswish"])
def test_an_activation_whose_input_is_read_elsewhere_stays_a_loop(name):
    x = _specials((1, 7, 7, 5), seed=2)
    g, _ = _activation_graph(x.shape, 16, name, conv_out_is_output=True)
    got, ref, plan = run_both(g, x)
    kinds = _kinds(plan)
    assert plan.declined == [] and kinds[0] == "nhwc_dense" and len(kinds) >= 3
    _same(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "params,compiled",
    [
        ((1, 9, 6, 4, 3, 1, 1, 1, 2), False),  # grouped: numpy (the delegate's only node)
        ((2, 8, 3, 5, 3, 2, 1, 1, 1), True),
        ((1, 10, 4, 4, 3, 1, 2, 2, 1), True),
        ((1, 7, 8, 6, 1, 2, 0, 1, 1), True),
        ((1, 6, 4, 8, 1, 1, 0, 1, 1), True),
    ],
)
def test_conv2d(plans, params, compiled):
    base.test_conv2d(*params)
    assert [p.compiled for p in plans] == [compiled]


def test_grouped_convolution_between_compiled_nodes():
    # an NCHW input transposed for two convolutions: the 1x1 one compiled (reading NCHW),
    # the grouped one on numpy (the transpose made for it), then relu6(a + b) compiled
    x = _rand(1, 6, 7, 7)
    w1, w2 = _rand(6, 6, 1, 1, seed=1), _rand(6, 3, 3, 3, seed=2)
    g = GraphBuilder()
    xi = g.input((1, 6, 7, 7))
    t, a, b_, c = g.tensor((1, 7, 7, 6)), *(g.tensor((1, 7, 7, 6)) for _ in range(3))
    g.node(S.XNNStaticTranspose(4, [0, 2, 3, 1], xi, t, 0))
    g.node(_conv_table(NODE["XNNConv2d"], t, g.const(w1.transpose(0, 2, 3, 1)), S.INVALID_ID,
                       a, k=1, cin=6, cout=6))  # fmt: skip
    g.node(_conv_table(NODE["XNNConv2d"], t, g.const(w2.transpose(0, 2, 3, 1)), S.INVALID_ID,
                       b_, k=3, pad=(1,) * 4, groups=2, cin=3, cout=3))  # fmt: skip
    g.node(NODE["XNNAdd"](a, b_, c, 0), (0.0, 6.0))
    g.output_all(c)
    got, ref, plan = run_both(g, x)
    assert plan.declined == [(2, "XNNConv2d")]
    # the 1x1 convolution and the transpose, the numpy builder's pad copy and conv, the add
    assert [c.compiled for c in plan.calls] == [True, False, False, True]
    _same(got, ref, rtol=1e-5, atol=1e-5)
    tx = torch.from_numpy(x)
    expected = F.conv2d(tx, torch.from_numpy(w1)) + F.conv2d(
        tx, torch.from_numpy(w2), padding=1, groups=2
    )
    np.testing.assert_allclose(got[0], _nhwc(expected.clamp(0, 6)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "params,compiled",
    [
        ((9, 6, 1, 1, 1, 1), True),
        ((9, 4, 2, 2, 1, 1), False),  # a depth multiplier: numpy (the delegate's only node)
        ((131, 16, 1, 2, 1, 1), True),
        ((100, 24, 1, 1, 2, 2), True),
    ],
)
def test_depthwise_conv2d(plans, params, compiled):
    base.test_depthwise_conv2d(*params)
    assert [p.compiled for p in plans] == [compiled]


def test_transposed_convolution_runs_on_numpy(plans):
    base.test_conv_transpose2d(2, 2, 1, 1)
    assert [p.compiled for p in plans] == [False]  # no compiled step: numpy's plan


@pytest.mark.parametrize("params", [(7, 3, 3, 2, 1), (9, 5, 2, 2, 0), (66, 16, 3, 2, 1)])
def test_pooling(plans, params):
    base.test_pooling(*params)
    assert plans[0].declined == []
    # (serial or parallel by their work: pool.compiled_nhwc.PARALLEL_ELEMENTS)
    kinds = [k.removesuffix("_parallel") for k in _kinds(plans[0])]
    assert kinds == ["max_pool_nhwc", "window_average_nhwc"]


def test_pool_clamp_and_global_average():
    x = _specials((1, 9, 9, 19), seed=6)
    g = GraphBuilder()
    xi = g.input(x.shape)
    mx, gap, flat = g.tensor((1, 5, 5, 19)), g.tensor((1, 1, 1, 19)), g.tensor((1, 19))
    g.node(base._pool_table(NODE["XNNMaxPooling2d"], xi, mx, 3, 2, 1), (-0.25, 0.5))
    g.node(NODE["XNNGlobalAvgPooling2d"](mx, gap, 0), (0.0, 0.125))
    g.node(S.XNNStaticReshape(2, [1, 19], gap, flat, 0))
    g.output_all(mx, flat)
    got, ref, plan = run_both(g, x)
    assert plan.declined == []
    _same(got, ref)
    t = F.max_pool2d(base._nchw(x), 3, 2, 1).clamp(-0.25, 0.5)
    np.testing.assert_allclose(got[0], _nhwc(t), rtol=1e-6)
    np.testing.assert_allclose(got[1], t.mean((2, 3)).clamp(0, 0.125).numpy(), rtol=1e-5, atol=1e-7)


def test_fully_connected_and_bmm_options(plans):
    base.test_fully_connected_and_bmm_options()
    # the non-constant filter's product stays on numpy
    assert [name for _, name in plans[0].declined] == ["XNNFullyConnected"]


def test_products_softmax_and_data_movement():
    # an attention-like block: FC, heads by reshape and transpose, Q @ K^T (a transposed
    # operand), softmax, @ V, a concatenation along the last axis, a pad
    x = _rand(1, 7, 12)
    wq, bq = _rand(36, 12, seed=1), _rand(36, seed=2)
    g = GraphBuilder()
    xi = g.input(x.shape)
    qkv, heads, perm = g.tensor((1, 7, 36)), g.tensor((1, 7, 3, 3, 4)), g.tensor((3, 1, 3, 7, 4))
    q, k, v = (g.tensor((1, 1, 3, 7, 4)) for _ in range(3))
    scores, probs = g.tensor((1, 1, 3, 7, 7)), g.tensor((1, 1, 3, 7, 7))
    att, cat = g.tensor((1, 1, 3, 7, 4)), g.tensor((1, 1, 3, 7, 8))
    padded, absolute = g.tensor((1, 1, 3, 9, 8)), g.tensor((1, 1, 3, 9, 8))
    g.node(S.XNNFullyConnected(xi, g.const(wq), g.const(bq), qkv, 0))
    g.node(S.XNNStaticReshape(5, [1, 7, 3, 3, 4], qkv, heads, 0))
    g.node(S.XNNStaticTranspose(5, [2, 0, 3, 1, 4], heads, perm, 0))
    for i, t in enumerate((q, k, v)):
        g.node(S.XNNStaticSlice(5, [i, 0, 0, 0, 0], [1, 1, 3, 7, 4], perm, t, 0))
    g.node(NODE["XNNBatchMatrixMultiply"](q, k, scores, S.FLAG_TRANSPOSE_B))
    g.node(NODE["XNNSoftmax"](scores, probs, 0))
    g.node(NODE["XNNBatchMatrixMultiply"](probs, v, att, 0))
    g.node(NODE["XNNConcatenate2"](4, att, q, S.INVALID_ID, S.INVALID_ID, cat, 0, S.INVALID_ID))
    g.node(NODE["XNNStaticConstantPad"]([0, 0, 0, 1, 0], [0, 0, 0, 1, 0], -2.0, cat, padded, 0))
    g.node(NODE["XNNAbs"](padded, absolute, 0))
    g.output_all(probs, absolute)
    got, ref, plan = run_both(g, x)
    assert plan.declined == []
    _same(got, ref, rtol=1e-5, atol=1e-6)
    t = torch.from_numpy(x) @ torch.from_numpy(wq).T + torch.from_numpy(bq)
    tq, tk, tv = t.reshape(1, 7, 3, 3, 4).permute(2, 0, 3, 1, 4)[:, None]
    p = torch.softmax(tq @ tk.transpose(-1, -2), -1)
    c = F.pad(torch.cat([p @ tv, tq], -1), (0, 0, 1, 1), value=-2.0).abs()
    np.testing.assert_allclose(got[0], p.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], c.numpy(), rtol=1e-5, atol=1e-6)


def test_elementwise_and_shape_nodes(plans):
    base.test_elementwise_and_shape_nodes()
    # half precision, and a pad whose border would have to be written into the caller's output
    declined = [name for _, name in plans[0].declined]
    assert declined == ["XNNConvert", "XNNStaticConstantPad"]


def test_half_precision_values_move_on_numpy(caplog):
    # float16 (numba has none): the conversion and the half transpose and slice run on
    # numpy, the float32 absolute value between them is compiled
    x = _specials((2, 3, 5))
    x[x == 1e30] = 7.0  # (beyond float16)
    x = x.astype(np.float16)
    g = GraphBuilder()
    xi = g.input(x.shape, S.XNNDatatype.fp16)
    f32, ab = g.tensor(x.shape), g.tensor(x.shape)
    half_t, half_s = (
        g.tensor((5, 2, 3), S.XNNDatatype.fp16),
        g.tensor((2, 2, 3), S.XNNDatatype.fp16),
    )
    g.node(NODE["XNNConvert"](xi, f32, 0))
    g.node(NODE["XNNAbs"](f32, ab, 0))
    g.node(S.XNNStaticTranspose(3, [2, 0, 1], xi, half_t, 0))
    g.node(S.XNNStaticSlice(3, [1, 0, 0], [2, 2, 3], half_t, half_s, 0))
    g.output_all(ab, half_s)
    with caplog.at_level(logging.WARNING):
        got, ref, plan = run_both(g, x)
    assert caplog.text == ""
    assert [name for _, name in plan.declined] == [
        "XNNConvert",
        "XNNStaticTranspose",
        "XNNStaticSlice",
    ]
    _same(got, ref, rtol=0, atol=0)
    np.testing.assert_array_equal(got[0], np.abs(x.astype(np.float32)))
    np.testing.assert_array_equal(got[1], x.transpose(2, 0, 1)[1:3])


def test_input_shape_change_builds_a_new_plan(plans):
    base.test_input_shape_change_builds_a_new_plan()  # (outputs against torch, shapes changing)
    assert len(plans) == 3 and all(p.compiled and p.declined == [] for p in plans)
    # the plans (one per input shapes) read one copy of the weights laid out at load
    weights = [
        [a for s in p.steps for a in s.args if isinstance(a, np.ndarray) and a.size == 24]
        for p in plans
    ]
    assert all(len(w) == 1 and not w[0].flags.writeable for w in weights)
    assert all(np.shares_memory(weights[0][0], w[0]) for w in weights[1:])


# --------------------------------------------------------------------------------------
# binding the caller's arrays


def _small_graph() -> GraphBuilder:
    g = GraphBuilder()
    xi, yi = g.input((4, 33)), g.input((33,))
    s, r, flat = g.tensor((4, 33)), g.tensor((4, 33)), g.tensor((132,))
    g.node(NODE["XNNAdd"](xi, yi, s, 0))
    g.node(NODE["XNNTanh"](s, r, 0))
    g.node(S.XNNStaticReshape(1, [132], r, flat, 0))
    g.output_all(s, flat)
    return g


def _expected(x, y):
    s = x + y
    return s, np.tanh(s).reshape(-1)


def test_caller_arrays_are_bound_or_copied():
    backend, handle = _init(_small_graph(), jit=True)
    x, y = _rand(4, 33), _rand(33, seed=1)
    plan = handle.last_plan or next(iter(handle.plans.values()))
    s_out, flat_out = np.empty((4, 33), np.float32), np.empty(132, np.float32)
    for _ in range(2):  # bound once, then only the compiled call
        assert backend.execute(handle, [x, y, s_out, flat_out]) is None
        np.testing.assert_allclose(s_out, x + y, rtol=1e-6)
        np.testing.assert_allclose(flat_out, np.tanh(x + y).reshape(-1), rtol=1e-6, atol=1e-7)
        assert plan.copy_in == [] and plan.copy_out == []
    # an input of other strides, a read-only one, an output with a leading 1
    xt = np.asfortranarray(_rand(4, 33, seed=2))
    yr = _rand(33, seed=3)
    yr.flags.writeable = False
    s2, flat2 = np.empty((4, 33), np.float32), np.empty((1, 132), np.float32)
    assert backend.execute(handle, [xt, yr, s2, flat2]) is None
    assert {e.ext for e in plan.copy_in} == {0, 1} and plan.copy_out == []
    es, ef = _expected(xt, yr)
    np.testing.assert_allclose(s2, es, rtol=1e-6)
    np.testing.assert_allclose(flat2.reshape(-1), ef, rtol=1e-6, atol=1e-7)
    # an output that is an input's memory: computed apart, then copied
    x3 = _rand(4, 33, seed=4)
    expected = _expected(x3.copy(), y)
    flat3 = np.empty(132, np.float32)
    assert backend.execute(handle, [x3, y, x3, flat3]) is None
    assert [e.ext for e in plan.copy_out] == [2]
    np.testing.assert_allclose(x3, expected[0], rtol=1e-6)
    np.testing.assert_allclose(flat3, expected[1], rtol=1e-6, atol=1e-7)
    # upper-bound storage for an output, and an output that is not an array
    big = np.full(200, np.nan, np.float32)
    result = backend.execute(handle, [x, y, [0.0], big])
    np.testing.assert_allclose(result[2], x + y, rtol=1e-6)
    np.testing.assert_allclose(big[:132], np.tanh(x + y).reshape(-1), rtol=1e-6, atol=1e-7)
    assert np.isnan(big[132:]).all()


def test_outputs_sliced_from_other_outputs_or_inputs_are_bound_and_compile_whole():
    # an attention's split: its delegate outputs the permuted q, k, v and a slice of them,
    # and the next one slices an input into an output (a slice is a view of its source:
    # a view of another delegate input or output made both unbindable, copied every call)
    g = GraphBuilder()
    xi, keys = g.input((5, 3, 4)), g.input((3, 5, 4))
    permuted, k_out, sliced = g.tensor((3, 5, 4)), g.tensor((1, 5, 4)), g.tensor((1, 5, 4))
    g.node(S.XNNStaticTranspose(3, [1, 0, 2], xi, permuted, 0))
    g.node(S.XNNStaticSlice(3, [1, 0, 0], [1, 5, 4], permuted, k_out, 0))
    g.node(S.XNNStaticSlice(3, [2, 0, 0], [1, 5, 4], keys, sliced, 0))
    g.output_all(permuted, k_out, sliced)
    backend, handle = _init(g, jit=True)
    plan = handle.last_plan or next(iter(handle.plans.values()))
    outs = [np.empty((3, 5, 4), np.float32), np.empty((1, 5, 4), np.float32)]
    outs.append(np.empty((1, 5, 4), np.float32))
    for seed in (1, 2):  # bound once, then only the compiled call, on new values
        x, k = _rand(5, 3, 4, seed=seed), _rand(3, 5, 4, seed=seed + 10)
        assert backend.execute(handle, [x, k, *outs]) is None
        np.testing.assert_array_equal(outs[0], x.transpose(1, 0, 2))
        np.testing.assert_array_equal(outs[1], x.transpose(1, 0, 2)[1:2])
        np.testing.assert_array_equal(outs[2], k[2:3])
        assert plan.copy_in == [] and plan.copy_out == []
    assert backend.whole_steps(handle, [x, k, *outs]) is not None


def test_scalar_inputs_of_other_rank_share_the_plan():
    # a method passes 0-d scalars where the payload declares one element
    g = GraphBuilder()
    xi, si = g.input((2, 5)), g.input((1,))
    out = g.tensor((2, 5))
    g.node(NODE["XNNMultiply"](xi, si, out, 0))
    g.output_all(out)
    backend, handle = _init(g, jit=True)
    x = _rand(2, 5)
    for scale in (np.array(3.0, np.float32), np.array([0.5], np.float32)):
        out_v = np.empty((2, 5), np.float32)
        assert backend.execute(handle, [x, scale, out_v]) is None
        np.testing.assert_allclose(out_v, x * scale, rtol=1e-6)
    assert len({id(p) for p in handle.plans.values()}) == 1


def test_identity_delegate_copies():
    # the output is the input's memory (a reshape): both are copied, never bound
    g = GraphBuilder()
    xi = g.input((3, 4))
    out = g.tensor((12,))
    g.node(S.XNNStaticReshape(1, [12], xi, out, 0))
    g.output_all(out)
    backend, handle = _init(g, jit=True)
    x, o = _rand(3, 4), np.empty(12, np.float32)
    assert backend.execute(handle, [x, o]) is None
    np.testing.assert_array_equal(o, x.reshape(-1))


def test_whole_steps_are_the_plan_on_the_callers_arrays():
    from pyexecutorch.runtime.whole_method import compile_steps  # noqa: PLC0415

    backend, handle = _init(_small_graph(), jit=True)
    x, y = _rand(4, 33), _rand(33, seed=1)
    s_out, flat_out = np.empty((4, 33), np.float32), np.empty(132, np.float32)
    steps = backend.whole_steps(handle, [x, y, s_out, flat_out])
    assert steps is not None
    function, arrays, _ = compile_steps([*steps, *steps])
    function(*arrays)
    np.testing.assert_allclose(s_out, x + y, rtol=1e-6)
    np.testing.assert_allclose(flat_out, np.tanh(x + y).reshape(-1), rtol=1e-6, atol=1e-7)
    readonly = y.copy()
    readonly.flags.writeable = False
    assert backend.whole_steps(handle, [x, readonly, s_out, flat_out]) is None
    backend_np, handle_np = _init(_small_graph(), jit=False)
    assert backend_np.whole_steps(handle_np, [x, y, s_out, flat_out]) is None


def test_a_failing_compiled_plan_falls_back_to_numpy(monkeypatch, caplog):
    def broken(b, k):
        raise RuntimeError("a defect")

    monkeypatch.setitem(compiled_nodes.MAKERS, "XNNAdd", broken)
    with caplog.at_level(logging.WARNING):
        backend, handle = _init(_small_graph(), jit=True)
    assert not next(iter(handle.plans.values())).compiled
    assert "numpy interpreter" in caplog.text
    x, y = _rand(4, 33), _rand(33, seed=1)
    s_out, flat_out = np.empty((4, 33), np.float32), np.empty(132, np.float32)
    backend.execute(handle, [x, y, s_out, flat_out])
    np.testing.assert_allclose(flat_out, np.tanh(x + y).reshape(-1), rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------------------
# official exports


def _delegate_plans(method) -> list:
    return [p for _, handle in method._loaded.facts.delegates for p in handle.plans.values()]


def _check_program(case, pte):
    program = Runtime.get().load_program(pte, jit=True)
    numpy_tier = Runtime.get().load_program(pte, jit=False).load_method("forward")
    method = program.load_method("forward")
    for k, inputs in enumerate(case.all_inputs()):
        got = [official.to_numpy(x) for x in method.execute(list(inputs))]
        ref = [official.to_numpy(x) for x in numpy_tier.execute(list(inputs))]
        for g_, r in zip(got, ref, strict=True):
            np.testing.assert_allclose(g_, r, rtol=1e-4, atol=1e-5, err_msg=f"{case.name} {k}")
        official.assert_close(case, got, official.eager_outputs(case, inputs), what=case.name)
    for _, handle in method._loaded.facts.delegates:
        kinds = {type(n.xnode_union).__name__ for n in handle.graph.nodes}
        for plan in handle.plans.values():
            if kinds <= {"XNNStaticReshape", "XNNCopy"}:
                assert not plan.compiled  # nothing to compute: numpy's views
            else:  # one compiled function per delegate, no numpy closure
                assert plan.compiled and len(plan.calls) == 1 and not plan.numpy_steps
    assert not any(p.compiled for p in _delegate_plans(numpy_tier))


# (gru: a split between its delegates outputs a list of tensors)
SMALL = ["small_cnn", "conv_bn", "depthwise_conv", "pooling", "mlp", "gpt_block_sdpa",
         "transformer_encoder", "elementwise", "lstm", "gru", "kv_cache"]  # fmt: skip


@pytest.mark.parametrize("name", SMALL)
def test_official_xnnpack_exports_compile_per_delegate(name):
    case = models.CASES_BY_NAME[name]
    _check_program(case, official.official_export_xnnpack(case))


ARCHITECTURES = ["resnet18", "mobilenet_v2", "mobilenet_v3", "efficientnet", "squeezenet",
                 "shufflenet_v2", "convnext", "vit", "gpt2", "llama", "bert"]  # fmt: skip


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_architectures_compile_per_delegate_and_match_eager(name):
    from tests import architectures  # noqa: PLC0415

    case = architectures.get_arch(name)
    _check_program(case, official.official_export_xnnpack(case))


# --------------------------------------------------------------------------------------
# quantized payloads: their quantized nodes compile (kernels/quantized/compiled_*)

# The nodes each program's delegate still runs on the numpy interpreter: quantized
# multiplies and concatenations (the CNN; its int8 transposes compile). The patch
# embedding's dynamically quantized convolution compiles (6ec6e22).
STILL_ON_NUMPY = {
    ("cnn", "static"): {"XNNMultiply", "XNNConcatenate3"},
}


def _quantized_cases():
    from . import _quantized_programs as qp  # noqa: PLC0415

    return [(model, recipe) for recipe, names in qp.RECIPES.items() for model in names]


@pytest.mark.parametrize("model, recipe", _quantized_cases())
def test_quantized_programs_compile_their_quantized_nodes(model, recipe):
    # Bit-exact with the numpy interpreter (the compiled kernels follow its integer
    # arithmetic), over calls with changing inputs.
    from . import _quantized_programs as qp  # noqa: PLC0415
    from .test_xnnpack_quantized_runtime import quantized  # noqa: PLC0415

    pte = qp.official_pte(quantized(model, recipe), "xnnpack")
    compiled_tier = Runtime.get().load_program(pte, jit=True).load_method("forward")
    numpy_tier = Runtime.get().load_program(pte, jit=False).load_method("forward")
    for seed in (1, 2):
        inputs = [x.numpy() for x in qp.inputs_for(model, seed)]
        got, ref = compiled_tier.execute(list(inputs)), numpy_tier.execute(list(inputs))
        np.testing.assert_array_equal(got[0], ref[0])
    plans = _delegate_plans(compiled_tier)
    assert plans and all(p.compiled for p in plans)
    declined = {kind for p in plans for _, kind in p.declined}
    assert declined == STILL_ON_NUMPY.get((model, recipe), set())


def test_a_method_compiles_whole_with_its_delegates_inside():
    # ShuffleNetV2's six delegates and the channel shuffles between them: one function
    from tests import architectures  # noqa: PLC0415

    case = architectures.get_arch("shufflenet_v2")
    method = Runtime.get().load_program(official.official_export_xnnpack(case), jit=True)
    method = method.load_method("forward")
    source = method.plan.whole_source
    assert source is not None and "compiled_nhwc_depthwise:DEPTHWISE" in source
    for inputs in case.all_inputs():
        got = [official.to_numpy(x) for x in method.execute(list(inputs))]
        official.assert_close(case, got, official.eager_outputs(case, inputs), what=case.name)
