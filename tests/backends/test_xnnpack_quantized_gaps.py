"""Quantized XNNPACK node types beyond the common CNN set, in our runtime against the official one.

Small graphs with explicit quantize/dequantize pairs (so that each case picks its own
scales and zero points), or quantized by the official ``XNNPACKQuantizer``, lowered by
the official exporter with its ``XnnpackPartitioner``:

- quantized subtract and clamp across differing parameters: bit-exact against the
  official runtime (XNNPACK's fixed-point arithmetic), within one quantum of eager;
- dynamically quantized grouped convolutions: float rounding of the official runtime;
- what the official runtime refuses at init (concatenation across differing
  parameters, uint8 quantization that the 1.5.1 serializer writes as qint8 with a
  zero point of 130) ours refuses at init too, naming the node or value, rather
  than computing wrong numbers;
- a quantized operand reaching a node type that only computes on floats is refused.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests import official

official.silence_noise()
import executorch.exir  # noqa: E402, F401 - before ours define the same operators
import executorch.kernels.quantized  # noqa: E402, F401 - the official quantized out variants

from pyexecutorch.backends.xnnpack import schema as S  # noqa: E402
from pyexecutorch.runtime import Runtime  # noqa: E402
from pyexecutorch.schema.pte import decode_pte, encode_pte  # noqa: E402

qd = torch.ops.quantized_decomposed


def _fq(x: torch.Tensor, scale: float, zp: int, dtype: torch.dtype = torch.int8) -> torch.Tensor:
    lo, hi = (-128, 127) if dtype == torch.int8 else (0, 255)
    q = qd.quantize_per_tensor.default(x, scale, zp, lo, hi, dtype)
    return qd.dequantize_per_tensor.default(q, scale, zp, lo, hi, dtype)


class Sub(nn.Module):
    def __init__(self, a: tuple, b: tuple, y: tuple) -> None:
        super().__init__()
        self.a, self.b, self.y = a, b, y

    def forward(self, x, z):
        return _fq(_fq(x, *self.a) - _fq(z, *self.b), *self.y)


class Clamp(nn.Module):
    def __init__(self, a: tuple, y: tuple) -> None:
        super().__init__()
        self.a, self.y = a, y

    def forward(self, x):
        return _fq(torch.clamp(_fq(x, *self.a), -1.0, 2.0), *self.y)


class Cat(nn.Module):
    def forward(self, x, z):
        return _fq(torch.cat([_fq(x, 0.05, 3), _fq(z, 0.02, -2)], 1), 0.06, 1)


class AddUint8(nn.Module):
    def forward(self, x, z):
        u = torch.uint8
        return _fq(_fq(x, 0.05, 130, u) + _fq(z, 0.04, 120, u), 0.07, 128, u)


class GroupedConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 12, 3, padding=1, groups=4)
        self.head = nn.Conv2d(12, 6, 1, groups=2)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)))


SHAPE = (2, 3, 4, 5)
# (a, b, y) parameters: (scale, zero point)
SUB_PARAMS = [
    ((0.05, 3), (0.04, -2), (0.07, 1)),
    ((0.013, -100), (0.2, 50), (0.1, -7)),
]
CLAMP_PARAMS = [((0.011, 40), (0.02, -90)), ((0.08, -1), (0.009, 0))]


def _inputs(shape, seed: int, scale: float = 2.0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=g) * scale for _ in range(2))


def _lowered(name: str, module: nn.Module | Callable[[], nn.Module], example) -> bytes:
    """The official exporter's lowered ``.pte`` of ``module`` (or of what a function
    builds), cached under this file's source."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(f"{name}|{official.versions()}".encode())
    path = official.cache_dir() / f"qgaps-{name}.{h.hexdigest()[:16]}.pte"

    def build() -> bytes:
        built = module if isinstance(module, nn.Module) else module()
        program = torch.export.export(built, example)
        return official.export_programs(
            {"forward": program}, partitioner=official._xnnpack_partitioner()
        )

    return official.cached_file(path, build)


def _node_types(pte: bytes) -> list[str]:
    p = decode_pte(pte)
    return [
        type(n.xnode_union).__name__
        for plan in p.program.execution_plan
        for d in plan.delegates
        for n in S.decode_payload(p.delegate_segments[d.processed.index]).graph.xnodes
    ]


def _ours(pte: bytes, inputs) -> np.ndarray:
    method = Runtime.get().load_program(pte).load_method("forward")
    return np.asarray(method.execute([x.numpy() for x in inputs])[0])


@pytest.mark.parametrize("a, b, y", SUB_PARAMS)
def test_subtract_is_bit_exact(a, b, y):
    m = Sub(a, b, y).eval()
    pte = _lowered(f"sub-{a}-{b}-{y}", m, _inputs(SHAPE, 0))
    assert "XNNSubtract" in _node_types(pte)
    for seed in (1, 2):
        inputs = _inputs(SHAPE, seed, scale=4.0)
        expected = official.official_run(pte, inputs)[0]
        np.testing.assert_array_equal(_ours(pte, inputs), expected)
        eager = m(*inputs).numpy()
        assert float(np.abs(expected - eager).max()) <= y[0] * 1.0001


@pytest.mark.parametrize("a, y", CLAMP_PARAMS)
def test_clamp_across_differing_parameters_is_bit_exact(a, y):
    m = Clamp(a, y).eval()
    pte = _lowered(f"clamp-{a}-{y}", m, _inputs((4, 64), 0)[:1])
    assert "XNNClamp" in _node_types(pte)
    # every int8 code of the input, then random values
    codes = (torch.arange(-128, 128, dtype=torch.float32) - a[1]) * a[0]
    for inputs in [(codes.reshape(4, 64),), _inputs((4, 64), 1)[:1]]:
        expected = official.official_run(pte, inputs)[0]
        np.testing.assert_array_equal(_ours(pte, inputs), expected)
        eager = m(*inputs).numpy()
        assert float(np.abs(expected - eager).max()) <= y[0] * 1.0001


@pytest.mark.parametrize(
    "module, message",
    [
        (Cat(), r"node 2 \(XNNConcatenate2\): values \[1, 3, 4\] are quantized differently"),
        (AddUint8(), r"value 0: qint8 zero point 130 is outside \[-128, 127\]"),
    ],
    ids=["cat-differing-parameters", "uint8-as-qint8"],
)
def test_programs_the_official_runtime_refuses_are_refused_at_init(module, message):
    pte = _lowered(type(module).__name__, module, _inputs(SHAPE, 0))
    inputs = _inputs(SHAPE, 1)
    with pytest.raises(RuntimeError, match="Failed to execute method forward"):
        official.official_run(pte, inputs)
    program = Runtime.get().load_program(pte)
    with pytest.raises(Exception, match=message) as info:
        program.load_method("forward")
    assert "failed to initialize delegate 0" in str(info.value)


def _with_node_type(pte: bytes, old: str, new: type) -> bytes:
    """``pte`` with each ``old`` node of its delegates rewritten as ``new`` (same fields)."""
    p = decode_pte(pte)
    for plan in p.program.execution_plan:
        for d in plan.delegates:
            k = d.processed.index
            payload = S.decode_payload(p.delegate_segments[k])
            for n in payload.graph.xnodes:
                if type(n.xnode_union).__name__ == old:
                    n.xnode_union = new(**vars(n.xnode_union))
            data = payload.constant_data
            p.delegate_segments[k] = S.encode_payload(
                payload.graph, b"" if data is None else bytes(data)
            )
    return encode_pte(p)


def test_quantized_operands_of_a_float_only_node_are_refused():
    # XNNMaximum has subtract's fields; XNNPACK's maximum takes no quantized operands
    # from the official exporter, and computing it on the stored int8 numbers is wrong
    pte = _lowered(f"sub-{SUB_PARAMS[0]}", Sub(*SUB_PARAMS[0]), _inputs(SHAPE, 0))
    forged = _with_node_type(pte, "XNNSubtract", S.NODE_TYPES["XNNMaximum"])
    assert "XNNMaximum" in _node_types(forged)
    program = Runtime.get().load_program(forged)
    with pytest.raises(Exception, match=r"node 2 \(XNNMaximum\): quantized operands are not"):
        program.load_method("forward")


def test_dynamic_grouped_convolution_matches_official_runtime():
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    example = (torch.randn(1, 8, 6, 6, generator=torch.Generator().manual_seed(0)),)

    def quantized() -> nn.Module:
        torch.manual_seed(0)
        model = GroupedConv().eval()
        config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
        captured = torch.export.export(copy.deepcopy(model), example).module()
        prepared = prepare_pt2e(captured, XNNPACKQuantizer().set_global(config))
        prepared(*example)
        return convert_pt2e(prepared)

    pte = _lowered("grouped-conv-dynamic", quantized, example)
    types = _node_types(pte)
    assert types.count("XNNConv2d") == 2 and "XNNConvert" in types
    for seed in (1, 2):
        x = (torch.randn(1, 8, 6, 6, generator=torch.Generator().manual_seed(seed)),)
        expected = official.official_run(pte, x)[0]
        np.testing.assert_allclose(_ours(pte, x), expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ our lowering


class Linear3d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x):
        return self.fc(x)


class Conv1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 3, padding=1)
        self.dw = nn.Conv1d(6, 6, 3, stride=2, groups=6)

    def forward(self, x):
        return self.dw(torch.relu(self.conv(x)))


LOWERED = {"linear-rank3": (Linear3d, (2, 5, 16)), "conv1d": (Conv1d, (2, 4, 10))}


@pytest.mark.parametrize("name", LOWERED)
def test_static_lowering_matches_official_exporter(name):
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from pyexecutorch.exir import to_edge_transform_and_lower

    cls, shape = LOWERED[name]
    example = (torch.randn(shape, generator=torch.Generator().manual_seed(0)),)
    torch.manual_seed(0)
    model = cls().eval()
    config = get_symmetric_quantization_config(is_per_channel=True)
    prepared = prepare_pt2e(
        torch.export.export(model, example).module(), XNNPACKQuantizer().set_global(config)
    )
    prepared(*example)
    graph = convert_pt2e(prepared)
    theirs = _lowered(f"static-{name}", graph, example)
    ours = to_edge_transform_and_lower(
        torch.export.export(graph, example), partitioner=[XnnpackPartitioner()]
    ).to_executorch()
    assert _node_types(ours.buffer) == _node_types(theirs)
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(1)),)
    expected = official.official_run(theirs, x)[0]
    quantum = float(graph.graph.output_node().args[0][0].args[1])
    got = official.official_run(ours.buffer, x)[0]
    assert float(np.abs(got - expected).max()) <= quantum * 1.0001
    np.testing.assert_array_equal(_ours(ours.buffer, x), got)
