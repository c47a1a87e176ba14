"""The XNNPACK backend's runtime half (``pyexecutorch.backends.xnnpack``).

- Programs the official exporter lowered to XNNPACK (the model suite) load and run
  on our runtime and match torch eager.
- Small hand-built XNNPACK graphs cover the node types and options the suite does
  not reach (grouped and depth-multiplier convolutions, average pooling with
  padding, transposed matmul operands, ...) against torch.
- Unsupported payloads are refused at load with an error naming what is missing.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pyexecutorch.backends.xnnpack import nodes
from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack.runtime import XnnpackBackend
from pyexecutorch.runtime import Runtime
from pyexecutorch.runtime.backend import BackendInitContext, get_backend
from pyexecutorch.runtime.errors import MissingBackendError
from pyexecutorch.schema.errors import FormatError
from tests import models, official

# Outputs where the official XNNPACK delegate itself computes something other than
# eager; there our runtime is compared with the official runtime instead.
OFFICIAL_DIFFERS = {
    # The partitioner lowers gelu(approximate="tanh") to XNNGelu, which is the erf form.
    ("activations", 1): "official XNNPACK computes gelu(approximate='tanh') as exact gelu",
}


def _large_cases() -> list[models.ModelCase]:
    from benchmarks.models_large import LARGE_CASES

    return list(LARGE_CASES)


def _xnnpack_cases() -> list[models.ModelCase]:
    return [c for c in models.CASES + _large_cases() if c.official_exportable]


def _expected(case, pte, method, module, inputs):
    expected = official.eager_outputs(case, inputs, method=method, module=module)
    differing = [i for (name, i) in OFFICIAL_DIFFERS if name == case.name]
    if differing:
        ref = official.official_runner(pte).run(inputs, method)
        for i in differing:
            expected[i] = ref[i]
    return expected


def test_backend_is_registered():
    assert isinstance(get_backend("XnnpackBackend"), XnnpackBackend)
    assert "XnnpackBackend" in Runtime.get().backend_registry.registered_backend_names


# The official XNNPACK partitioner cannot lower these; a test below keeps that true.
_OFFICIAL_XNNPACK_FAILS = {"cond"}


def test_official_xnnpack_exporter_still_fails_where_excluded():
    for case in _xnnpack_cases():
        if case.name in _OFFICIAL_XNNPACK_FAILS:
            assert official.official_export_xnnpack(case) is None, case.name


@pytest.mark.parametrize(
    "case",
    [c for c in _xnnpack_cases() if c.name not in _OFFICIAL_XNNPACK_FAILS],
    ids=lambda c: c.name,
)
def test_official_xnnpack_program_matches_eager(case):
    pte = official.official_export_xnnpack(case)
    assert pte is not None, f"{case.name}: the official XNNPACK export failed"
    program = Runtime.get().load_program(pte)
    if case.stateful:
        method = program.load_method("forward")
        for k, (inputs, expected) in enumerate(
            zip(case.call_sequence(), official.eager_call_outputs(case), strict=True)
        ):
            official.assert_close(case, method.execute(list(inputs)), expected, what=f"call {k}")
        return
    for name, (module, inputs, _) in case.programs().items():
        method = program.load_method(name)
        calls = [inputs] + (case.alt_inputs() if case.alt_inputs and name == "forward" else [])
        for k, call in enumerate(calls):
            got = method.execute(list(call))
            official.assert_close(
                case, got, _expected(case, pte, name, module, call), what=f"{name} inputs {k}"
            )


@pytest.mark.parametrize("name", ["small_cnn", "gpt_block_sdpa"])
def test_repeated_calls_reuse_the_plan(name):
    case = models.CASES_BY_NAME[name]
    method = (
        Runtime.get().load_program(official.official_export_xnnpack(case)).load_method("forward")
    )
    expected = official.eager_outputs(case)
    for _ in range(3):
        official.assert_close(case, method.execute(list(case.inputs())), expected)


def test_unsupported_node_type_fails_at_load(monkeypatch):
    monkeypatch.delitem(nodes.BUILDERS, "XNNDepthwiseConv2d")
    pte = official.official_export_xnnpack(models.CASES_BY_NAME["small_cnn"])
    with pytest.raises(MissingBackendError, match="XNNDepthwiseConv2d"):
        Runtime.get().load_program(pte).load_method("forward")


def test_runs_with_torch_blocked(tmp_path):
    case = models.CASES_BY_NAME["small_cnn"]
    pte = tmp_path / "small_cnn.pte"
    pte.write_bytes(official.official_export_xnnpack(case))
    (x,) = case.inputs()
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "expected.npy", official.eager_outputs(case, (x,))[0])
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None
        import numpy as np
        from pyexecutorch.runtime import Runtime
        program = Runtime.get().load_program({str(pte)!r})
        (out,) = program.load_method("forward").execute([np.load({str(tmp_path / "x.npy")!r})])
        np.testing.assert_allclose(out, np.load({str(tmp_path / "expected.npy")!r}), rtol=1e-4, atol=1e-5)
        assert "pyexecutorch.backends.xnnpack.runtime" in sys.modules
        assert not any(n == "torch" or n.startswith("torch.") for n, m in sys.modules.items() if m is not None)
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# --------------------------------------------------------------------------------------
# Hand-built graphs


class GraphBuilder:
    """Builds an XNNPACK payload: values, nodes, constants (inline or named)."""

    def __init__(self) -> None:
        self.values: list[S.XValue] = []
        self.nodes: list[S.XNode] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.constants = [S.ConstantDataOffset(0, 0, "")]
        self.blob = bytearray()
        self.named: dict[str, bytes] = {}

    def _value(self, dims, datatype, const=0, ext=S.INVALID_ID, flags=0) -> int:
        vid = len(self.values)
        t = S.XNNTensorValue(datatype, len(dims), list(dims), const, ext, flags, vid)
        self.values.append(S.XValue(t))
        return vid

    def input(self, dims, datatype=S.XNNDatatype.fp32) -> int:
        vid = self._value(dims, datatype, ext=len(self.inputs), flags=S.VALUE_FLAG_EXTERNAL_INPUT)
        self.inputs.append(vid)
        return vid

    def tensor(self, dims, datatype=S.XNNDatatype.fp32) -> int:
        return self._value(dims, datatype)

    def const(self, array: np.ndarray, *, named: bool = False) -> int:
        data = np.ascontiguousarray(array).tobytes()
        if named:
            key = f"w{len(self.constants)}"
            self.named[key] = data
            self.constants.append(S.ConstantDataOffset(0xFFFFFFFFFFFFFFFF, len(data), key))
        else:
            self.blob += b"\0" * (-len(self.blob) % 16)
            self.constants.append(S.ConstantDataOffset(len(self.blob), len(data), None))
            self.blob += data
        datatype = S.XNNDatatype.fp16 if array.dtype == np.float16 else S.XNNDatatype.fp32
        return self._value(array.shape, datatype, const=len(self.constants) - 1)

    def node(self, table, min_max=None) -> None:
        mm = S.OutputMinMax(*min_max) if min_max else None
        self.nodes.append(S.XNode(table, len(self.nodes), mm))

    def output_all(self, *vids: int) -> None:
        for vid in vids:
            t = self.values[vid].tensor
            t.external_id = len(self.inputs) + len(self.outputs)
            t.flags |= S.VALUE_FLAG_EXTERNAL_OUTPUT
            self.outputs.append(vid)

    def payload(self) -> bytes:
        graph = S.XNNGraph(
            version="0",
            xnodes=self.nodes,
            xvalues=self.values,
            num_externs=len(self.inputs) + len(self.outputs),
            input_ids=self.inputs,
            output_ids=self.outputs,
            constant_data=self.constants,
        )
        return S.encode_payload(graph, bytes(self.blob))

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        backend = XnnpackBackend()
        named = {k: memoryview(v) for k, v in self.named.items()}
        handle = backend.init(
            memoryview(self.payload()), {}, BackendInitContext("forward", 0, named)
        )
        plan = next(iter(handle.plans.values()))
        outs = [
            np.full(plan.outputs[k][2], np.nan, plan.outputs[k][3])
            for k in range(len(self.outputs))
        ]
        args = [np.ascontiguousarray(x) for x in inputs] + outs
        result = backend.execute(handle, args)
        return (result or args)[len(inputs) :]


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _nhwc(t: torch.Tensor) -> np.ndarray:
    return t.permute(0, 2, 3, 1).contiguous().numpy()


def _nchw(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2)))


def _conv_table(
    kind, x, w, b, out, *, k, stride=1, pad=(0, 0, 0, 0), dil=1, groups=1, cin=1, cout=1, adj=0
):
    return kind(
        padding_top=pad[0],
        padding_right=pad[1],
        padding_bottom=pad[2],
        padding_left=pad[3],
        kernel_height=k,
        kernel_width=k,
        subsampling_height=stride,
        subsampling_width=stride,
        dilation_height=dil,
        dilation_width=dil,
        group_input_channels=cin,
        group_output_channels=cout,
        groups=groups,
        adjustment_height=adj,
        adjustment_width=adj,
        input1_id=x,
        filter_id=w,
        bias_id=b,
        output_id=out,
    )


NODE = S.NODE_TYPES


@pytest.mark.parametrize(
    "n,h,c,o,k,stride,pad,dil,groups",
    [
        (1, 9, 6, 4, 3, 1, 1, 1, 2),  # grouped
        (2, 8, 3, 5, 3, 2, 1, 1, 1),  # batch 2, stride 2
        (1, 10, 4, 4, 3, 1, 2, 2, 1),  # dilated
        (1, 7, 8, 6, 1, 2, 0, 1, 1),  # strided 1x1
        (1, 6, 4, 8, 1, 1, 0, 1, 1),  # pointwise
    ],
)
def test_conv2d(n, h, c, o, k, stride, pad, dil, groups):
    x = _rand(n, c, h, h)
    w = _rand(o, c // groups, k, k, seed=1)
    bias = _rand(o, seed=2)
    g = GraphBuilder()
    xi = g.input((n, h, h, c))
    wi = g.const(w.transpose(0, 2, 3, 1), named=True)
    bi = g.const(bias)
    oh = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    out = g.tensor((n, oh, oh, o))
    g.node(
        _conv_table(
            NODE["XNNConv2d"],
            xi,
            wi,
            bi,
            out,
            k=k,
            stride=stride,
            pad=(pad,) * 4,
            dil=dil,
            groups=groups,
            cin=c // groups,
            cout=o // groups,
        ),
        (0.0, 6.0),
    )
    g.output_all(out)
    (got,) = g.run(_nhwc(torch.from_numpy(x)))
    ref = F.conv2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias), stride, pad, dil, groups
    )
    np.testing.assert_allclose(got, _nhwc(ref.clamp(0, 6)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "h,c,mult,stride,pad,dil",
    [
        (9, 6, 1, 1, 1, 1),  # small: one einsum
        (9, 4, 2, 2, 1, 1),  # depth multiplier
        (130, 16, 1, 1, 1, 1),  # large: a product per tap
        (131, 16, 1, 2, 1, 1),  # large, strided: phase planes
        (100, 24, 1, 1, 2, 2),  # large, dilated
        (96, 16, 2, 2, 1, 1),  # large with a depth multiplier
    ],
)
def test_depthwise_conv2d(h, c, mult, stride, pad, dil):
    x = _rand(1, c, h, h)
    w = _rand(c * mult, 1, 3, 3, seed=1)
    bias = _rand(c * mult, seed=2)
    g = GraphBuilder()
    xi = g.input((1, h, h, c))
    wi = g.const(w.reshape(c * mult, 3, 3).transpose(1, 2, 0)[None])
    bi = g.const(bias)
    oh = (h + 2 * pad - dil * 2 - 1) // stride + 1
    out = g.tensor((1, oh, oh, c * mult))
    g.node(
        _conv_table(
            NODE["XNNDepthwiseConv2d"],
            xi,
            wi,
            bi,
            out,
            k=3,
            stride=stride,
            pad=(pad,) * 4,
            dil=dil,
            groups=c,
            cin=1,
            cout=mult,
        )
    )
    g.output_all(out)
    (got,) = g.run(_nhwc(torch.from_numpy(x)))
    ref = F.conv2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias), stride, pad, dil, groups=c
    )
    np.testing.assert_allclose(got, _nhwc(ref), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups,stride,pad,adj", [(1, 2, 0, 0), (2, 2, 1, 1), (1, 3, 1, 2)])
def test_conv_transpose2d(groups, stride, pad, adj):
    c, o, h, k = 4, 6, 5, 3
    x = _rand(1, c, h, h)
    w = _rand(c, o // groups, k, k, seed=1)  # torch's [in, out / groups, kh, kw]
    bias = _rand(o, seed=2)
    ref = F.conv_transpose2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias), stride, pad, adj, groups
    )
    # XNNPACK's filter: [groups * out/group, kh, kw, in/group]
    wx = (
        w.reshape(groups, c // groups, o // groups, k, k)
        .transpose(0, 2, 3, 4, 1)
        .reshape(o, k, k, c // groups)
    )
    g = GraphBuilder()
    xi = g.input((1, h, h, c))
    out = g.tensor(tuple(_nhwc(ref).shape))
    g.node(
        _conv_table(
            NODE["XNNConvTranspose2d"],
            xi,
            g.const(wx),
            g.const(bias),
            out,
            k=k,
            stride=stride,
            pad=(pad,) * 4,
            groups=groups,
            cin=c // groups,
            cout=o // groups,
            adj=adj,
        )
    )
    g.output_all(out)
    (got,) = g.run(_nhwc(torch.from_numpy(x)))
    np.testing.assert_allclose(got, _nhwc(ref), rtol=1e-4, atol=1e-5)


def _pool_table(kind, x, out, k, stride, pad):
    return kind(pad, pad, pad, pad, k, k, stride, stride, 1, 1, x, out, 0)


@pytest.mark.parametrize(
    "h,c,k,stride,pad", [(7, 3, 3, 2, 1), (9, 5, 2, 2, 0), (66, 16, 3, 2, 1), (64, 16, 3, 1, 1)]
)
def test_pooling(h, c, k, stride, pad):
    x = _rand(1, c, h, h)
    g = GraphBuilder()
    xi = g.input((1, h, h, c))
    oh = (h + 2 * pad - k) // stride + 1
    mx, av = g.tensor((1, oh, oh, c)), g.tensor((1, oh, oh, c))
    g.node(_pool_table(NODE["XNNMaxPooling2d"], xi, mx, k, stride, pad))
    g.node(_pool_table(NODE["XNNAvgPooling2d"], xi, av, k, stride, pad))
    g.output_all(mx, av)
    got_max, got_avg = g.run(_nhwc(torch.from_numpy(x)))
    t = torch.from_numpy(x)
    np.testing.assert_allclose(got_max, _nhwc(F.max_pool2d(t, k, stride, pad)), rtol=1e-6)
    ref_avg = F.avg_pool2d(t, k, stride, pad, count_include_pad=False)
    np.testing.assert_allclose(got_avg, _nhwc(ref_avg), rtol=1e-5, atol=1e-6)


def test_elementwise_and_shape_nodes():
    a, b3, slope = _rand(2, 3, 4), _rand(2, 3, 4, seed=1), _rand(4, seed=2)
    g = GraphBuilder()
    x, y = g.input((2, 3, 4)), g.input((2, 3, 4))
    s = g.const(slope)
    elu, prelu, mx, mn = (g.tensor((2, 3, 4)) for _ in range(4))
    cat3, cat4 = g.tensor((2, 3, 12)), g.tensor((8, 3, 4))
    half, pad, sl = (
        g.tensor((2, 3, 4), S.XNNDatatype.fp16),
        g.tensor((3, 5, 7)),
        g.tensor((1, 2, 3)),
    )
    g.node(NODE["XNNELU"](0.5, x, elu, 0))
    g.node(NODE["XNNPReLU"](x, s, prelu, 0))
    g.node(NODE["XNNMaximum"](x, y, mx, 0))
    g.node(NODE["XNNMinimum"](x, y, mn, 0))
    g.node(NODE["XNNConcatenate3"](2, x, y, x, S.INVALID_ID, cat3, 0, S.INVALID_ID))
    g.node(NODE["XNNConcatenate4"](0, x, y, y, x, cat4, 0, S.INVALID_ID))
    g.node(NODE["XNNConvert"](x, half, 0))
    g.node(NODE["XNNStaticConstantPad"]([1, 0, 2], [0, 2, 1], -1.5, y, pad, 0))
    g.node(NODE["XNNStaticSlice"](3, [1, 1, 0], [1, 2, 3], y, sl, 0))
    g.output_all(elu, prelu, mx, mn, cat3, cat4, half, pad, sl)
    got = g.run(a, b3)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b3)
    expected = [
        F.elu(ta, 0.5),
        torch.where(ta > 0, ta, ta * torch.from_numpy(slope)),
        torch.maximum(ta, tb),
        torch.minimum(ta, tb),
        torch.cat([ta, tb, ta], 2),
        torch.cat([ta, tb, tb, ta], 0),
        ta.half(),
        F.pad(tb, (2, 1, 0, 2, 1, 0), value=-1.5),
        tb[1:2, 1:3, 0:3],
    ]
    for i, (g_, e) in enumerate(zip(got, expected, strict=True)):
        e = e.numpy()
        assert g_.dtype == e.dtype and g_.shape == e.shape, i
        np.testing.assert_allclose(g_, e, rtol=1e-5, atol=1e-6, err_msg=f"output {i}")


def test_fully_connected_and_bmm_options():
    a, w_dyn, b = _rand(2, 3, 8), _rand(8, 5, seed=1), _rand(4, 6, 8, seed=2)
    g = GraphBuilder()
    x, wd, y = g.input((2, 3, 8)), g.input((8, 5)), g.input((4, 6, 8))
    lhs = g.input((4, 3, 8))
    fc_t, fc_b = g.tensor((2, 3, 5)), g.tensor((2, 3, 6))
    bm = g.tensor((4, 3, 6))
    wc = g.const(_rand(8, 6, seed=3))
    # FC with a non-constant [in, out] filter (XNN_FLAG_TRANSPOSE_WEIGHTS), no bias
    g.node(S.XNNFullyConnected(x, wd, S.INVALID_ID, fc_t, S.FLAG_TRANSPOSE_WEIGHTS))
    # FC with a constant [in, out] filter and a clamp
    g.node(S.XNNFullyConnected(x, wc, S.INVALID_ID, fc_b, S.FLAG_TRANSPOSE_WEIGHTS), (-0.5, 0.5))
    # batch matmul against a transposed second operand
    g.node(NODE["XNNBatchMatrixMultiply"](lhs, y, bm, S.FLAG_TRANSPOSE_B))
    g.output_all(fc_t, fc_b, bm)
    lhs_v = _rand(4, 3, 8, seed=4)
    got = g.run(a, w_dyn, b, lhs_v)
    wc_v = np.frombuffer(bytes(g.blob), np.float32)[: 8 * 6].reshape(8, 6)
    np.testing.assert_allclose(got[0], a @ w_dyn, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], np.clip(a @ wc_v, -0.5, 0.5), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], lhs_v @ b.transpose(0, 2, 1), rtol=1e-5, atol=1e-6)


def test_input_shape_change_builds_a_new_plan():
    w = _rand(6, 4)
    g = GraphBuilder()
    x = g.input((8, 4))
    h, r, out = g.tensor((8, 6)), g.tensor((8, 6)), g.tensor((16, 3))
    g.node(S.XNNFullyConnected(x, g.const(w), S.INVALID_ID, h, 0))
    g.node(NODE["XNNGelu"](h, r, 0))
    g.node(S.XNNStaticReshape(2, [0, 3], r, out, 0))
    g.output_all(out)
    backend = XnnpackBackend()
    handle = backend.init(memoryview(g.payload()), {}, BackendInitContext("forward", 0, {}))
    for rows in (8, 3, 8, 1):
        xv = _rand(rows, 4, seed=rows)
        cap = np.full((16, 3), np.nan, np.float32)  # the upper-bound storage
        res = backend.execute(handle, [xv, cap])
        got = res[1] if res is not None else cap
        ref = F.gelu(torch.from_numpy(xv @ w.T)).reshape(-1, 3).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert len(handle.plans) == 3


# --------------------------------------------------------------------------------------
# Refusals


def _init(payload: bytes, named=None):
    return XnnpackBackend().init(
        memoryview(payload), {}, BackendInitContext("forward", 0, named or {})
    )


def _quantized_value(g: GraphBuilder, datatype, dims, quant) -> int:
    t = S.XNNTensorValue(datatype, len(dims), list(dims), 0, S.INVALID_ID, 0, len(g.values))
    g.values.append(S.XValue(S.XNNQuantizedTensorValue(t, quant)))
    return len(g.values) - 1


def test_quantize_dequantize_round_trip():
    # fp32 -> qint8 -> fp32 through two XNNConvert nodes: XNNPACK's rounding
    # (ties to even) and saturation, then (q - zp) * scale.
    g = GraphBuilder()
    x = g.input((2, 5))
    q = _quantized_value(g, S.XNNDatatype.qint8, (2, 5), S.PerTensorQuant(0.5, 3))
    y = g.tensor((2, 5))
    g.node(NODE["XNNConvert"](x, q, 0))
    g.node(NODE["XNNConvert"](q, y, 0))
    g.output_all(y)
    xv = np.array([[0.25, 0.75, -0.25, 1.25, 100.0], [-100.0, 0.1, -0.76, 2.0, 0.0]], np.float32)
    (got,) = g.run(xv)
    expected = (np.clip(np.rint(xv / 0.5) + 3, -128, 127) - 3) * 0.5
    np.testing.assert_array_equal(got, expected.astype(np.float32))


def test_quantized_average_pool_and_pad():
    # qint8 NHWC: pad by one pixel with 0.0 (the zero point), 2x2 average pool;
    # XNNPACK sums the window less 4 * zp and requantizes with s / (s * 4).
    scale, zp = 0.25, -3
    g = GraphBuilder()
    x = g.input((1, 4, 4, 2))
    quant = S.PerTensorQuant(scale, zp)
    q = _quantized_value(g, S.XNNDatatype.qint8, (1, 4, 4, 2), quant)
    padded = _quantized_value(g, S.XNNDatatype.qint8, (1, 6, 6, 2), quant)
    pooled = _quantized_value(g, S.XNNDatatype.qint8, (1, 3, 3, 2), quant)
    y = g.tensor((1, 3, 3, 2))
    g.node(NODE["XNNConvert"](x, q, 0))
    g.node(NODE["XNNStaticConstantPad"]([0, 1, 1, 0], [0, 1, 1, 0], 0.0, q, padded, 0))
    g.node(_pool_table(NODE["XNNAvgPooling2d"], padded, pooled, 2, 2, 0))
    g.node(NODE["XNNConvert"](pooled, y, 0))
    g.output_all(y)
    xv = np.random.default_rng(0).uniform(-8, 8, (1, 4, 4, 2)).astype(np.float32)
    (got,) = g.run(xv)
    qx = np.clip(np.rint(xv / scale) + zp, -128, 127)
    qp = np.pad(qx, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=zp)
    sums = qp.reshape(1, 3, 2, 3, 2, 2).sum(axis=(2, 4)) - 4 * zp
    expected = (np.clip(np.rint(sums / 4) + zp, -128, 127) - zp) * scale
    np.testing.assert_array_equal(got, expected.astype(np.float32))


def test_refuses_unsupported_quantized_values():
    g = GraphBuilder()
    x = g.input((2, 4))
    q = _quantized_value(g, S.XNNDatatype.qpint8, (2, 4), S.PerTensorQuant(0.5, 0))
    g.node(NODE["XNNConvert"](x, q, 0))
    g.output_all(q)
    with pytest.raises(NotImplementedError, match="value 1 has datatype qpint8"):
        _init(g.payload())


def test_refuses_unsupported_node_types():
    g = GraphBuilder()
    q, k, v = g.input((1, 2, 4, 8)), g.input((1, 2, 4, 8)), g.input((1, 2, 4, 8))
    out = g.tensor((1, 2, 4, 8))
    g.node(S.XNNScaledDotProductAttention(q, k, v, S.INVALID_ID, S.INVALID_ID, out, 0))
    g.output_all(out)
    with pytest.raises(NotImplementedError, match="XNNScaledDotProductAttention"):
        _init(g.payload())


def test_refuses_bad_payloads():
    g = GraphBuilder()
    x = g.input((2,))
    out = g.tensor((2,))
    g.node(NODE["XNNAbs"](x, out, 0))
    g.output_all(out)
    good = g.payload()
    bad_id = bytearray(good)
    fb_off = S.XNNHeader.LAYOUT.unpack_from(good)[3]
    bad_id[fb_off + 4 : fb_off + 8] = b"ZZ99"
    with pytest.raises(FormatError, match="identifier"):
        _init(bytes(bad_id))
    with pytest.raises(FormatError, match="outside"):
        _init(good[:40])
    bad_root = bytearray(good)
    bad_root[fb_off : fb_off + 4] = (1 << 20).to_bytes(4, "little")
    with pytest.raises(FormatError, match="outside the"):
        _init(bytes(bad_root))


def test_missing_named_data_is_reported():
    g = GraphBuilder()
    x = g.input((2, 4))
    w = g.const(_rand(3, 4), named=True)
    out = g.tensor((2, 3))
    g.node(S.XNNFullyConnected(x, w, S.INVALID_ID, out, 0))
    g.output_all(out)
    with pytest.raises(S.XnnpackError, match="named data 'w1'"):
        _init(g.payload(), {})


def test_schema_round_trip():
    g = GraphBuilder()
    x = g.input((1, 4, 4, 2))
    out = g.tensor((1, 2, 2, 2))
    g.node(_pool_table(NODE["XNNAvgPooling2d"], x, out, 2, 2, 0), (-1.25, 3.5))
    g.node(NODE["XNNLeakyReLU"](0.125, out, out, 0))
    g.output_all(out)
    payload = S.decode_payload(g.payload())
    again = S.decode_payload(S.encode_payload(payload.graph, bytes(payload.constant_data)))
    assert again.graph == payload.graph
    node = again.graph.xnodes[0]
    assert type(node.xnode_union).__name__ == "XNNAvgPooling2d"
    assert (node.output_min_max.output_min, node.output_min_max.output_max) == (-1.25, 3.5)
    assert again.graph.xnodes[1].xnode_union.negative_slope == 0.125
    assert math.isclose(again.graph.xvalues[0].tensor.dims[1], 4)
