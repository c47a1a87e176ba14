"""Quantized architectures through our exporter, in both runtimes.

For the static int8 CNNs of #11 (our XNNPACKQuantizer, per-channel weights), its
transformers quantized dynamically (GPT-2, BERT, ViT with its patch convolution,
Llama: int8 activations chosen at run time, per-channel int8 weights), and a
Llama-shaped decoder with 4-bit groupwise linears
and int8 embeddings (torchao ``quantize_``), each quantized once and shared by its
four tests:

(a) our XNNPACK ``.pte`` in the official runtime matches the official exporter's
    ``.pte`` of the same quantized graph within one quantum of the output;
(b) our runtime on our ``.pte`` matches the official runtime within one quantum;
(c) our portable ``.pte`` (no delegate) in our runtime matches the quantized graph
    run eagerly;
(d) the quantized outputs stay near the float model's (SNR in dB and top-1
    agreement, printed, with a floor per model), and our ``.pte`` is no bigger than
    the official one (beyond a bound per model).

The quantum of a statically quantized output is the scale of its last
dequantize; of a float output (dynamic quantization) one int8 step over the
official output's range.

Last, a quantization operator we cannot export fails at ``to_executorch`` with
``UnsupportedQuantizedOperatorError`` naming it and the model's source line, also
for the q/dq nodes ``convert_pt2e`` inserts without a stack trace.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from tests import official

official.silence_noise()
# The official package defines the quantized out variants and fused embedding operators
# (and refuses to import once they exist): import it before ours define them.
import executorch.exir  # noqa: E402, F401
import executorch.kernels.quantized  # noqa: E402, F401

from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import (  # noqa: E402
    XnnpackPartitioner,
)
from pyexecutorch.exir import (  # noqa: E402
    ExecutorchBackendConfig,
    to_edge,
    to_edge_transform_and_lower,
)
from pyexecutorch.runtime import Runtime  # noqa: E402

from ._quantized_models import (  # noqa: E402
    QuantizedCase,
    official_pte,
    quantized_case,
    snr_db,
    top1_agreement,
)

# (architecture, recipe, SNR floor in dB, top-1 agreement floor, size bound over the
# official exporter's .pte). The floors sit a few dB under what each case gives
# today. BERT's SNR is high because its small random-init layers add little to the
# (float) embeddings its last hidden state carries. ConvNeXt's SNR is low because its
# layer scales (1e-6) leave the output a small signal next to the head's quantization
# step; its top-1 agreement is still 1.
CASES = [
    ("resnet18", "static", 20.0, 0.99, 1.01),
    ("mobilenet_v2", "static", 30.0, 0.99, 1.01),
    ("mobilenet_v3", "static", 30.0, 0.99, 1.01),
    ("efficientnet", "static", 30.0, 0.99, 1.01),
    ("squeezenet", "static", 40.0, 0.99, 1.01),
    ("shufflenet_v2", "static", 30.0, 0.99, 1.01),
    ("convnext", "static", 6.0, 0.99, 1.01),
    ("gpt2", "dynamic", 30.0, 0.9, 1.01),
    ("bert", "dynamic", 70.0, 0.9, 1.01),
    ("vit", "dynamic", 28.0, 0.9, 1.01),
    ("llama", "dynamic", 36.0, 0.9, 1.01),
    ("llama", "llm4", 10.0, 0.5, 1.01),
]


@dataclass
class Built:
    case: QuantizedCase
    ours: bytes  # our exporter, XNNPACK-lowered
    portable: bytes  # our exporter, no delegate
    theirs: bytes  # the official exporter, XNNPACK-lowered
    official_ours: np.ndarray  # the official runtime's output on ours
    official_theirs: np.ndarray
    quantum: float


_BUILT: dict[str, Built] = {}


def _build(arch: str, recipe: str) -> Built:
    """One quantization and the three programs of a case, shared by its tests."""
    key = f"{arch}-{recipe}"
    if key not in _BUILT:
        q = quantized_case(arch, recipe)
        program = q.program()  # one export for both of ours (our exporter keeps its input)
        ours = to_edge_transform_and_lower(
            copy.deepcopy(program), partitioner=[XnnpackPartitioner()]
        ).to_executorch(ExecutorchBackendConfig(do_quant_fusion_and_const_prop=q.fuse))
        portable = to_edge(program).to_executorch()
        theirs = official_pte(q, "xnnpack")
        official_theirs = official.official_run(theirs, q.inputs)[0]
        _BUILT[key] = Built(
            q,
            ours.buffer,
            portable.buffer,
            theirs,
            official.official_run(ours.buffer, q.inputs)[0],
            official_theirs,
            _output_quantum(q, official_theirs),
        )
    return _BUILT[key]


def _run_ours(pte: bytes, inputs) -> np.ndarray:
    method = Runtime.get().load_program(pte).load_method("forward")
    return np.asarray(method.execute([x.numpy() for x in inputs])[0])


def _output_quantum(q, reference: np.ndarray) -> float:
    out = q.graph.graph.output_node().args[0][0] if hasattr(q.graph, "graph") else None
    if (
        isinstance(out, torch.fx.Node)
        and out.target == torch.ops.quantized_decomposed.dequantize_per_tensor.default
    ):
        return float(out.args[1])
    return float(reference.max() - reference.min()) / 255


_IDS = [f"{c[0]}-{c[1]}" for c in CASES]


@pytest.fixture(scope="module", params=CASES, ids=_IDS)
def case(request) -> tuple[Built, tuple]:
    arch, recipe, *floors = request.param
    return _build(arch, recipe), tuple(floors)


def _quanta(got: np.ndarray, want: np.ndarray, quantum: float) -> float:
    return float(np.abs(got.astype(np.float64) - want).max()) / quantum


def test_official_runtime_ours_vs_official_exporter(case):
    """(a) our lowering computes what the official one does, in the official runtime."""
    b, _ = case
    diff = _quanta(b.official_ours, b.official_theirs, b.quantum)
    print(f"\n{b.case.name} (a): {diff:.3g} quanta")
    assert diff <= 1.001, f"{b.case.name}: {diff:.3g} quanta (quantum {b.quantum:.3g})"


def test_our_runtime_vs_official_runtime(case):
    """(b) our runtime agrees with the official runtime on our program."""
    b, _ = case
    diff = _quanta(_run_ours(b.ours, b.case.inputs), b.official_ours, b.quantum)
    print(f"\n{b.case.name} (b): {diff:.3g} quanta")
    assert diff <= 1.001, f"{b.case.name}: {diff:.3g} quanta (quantum {b.quantum:.3g})"


def test_portable_program_vs_eager_quantized_graph(case):
    """(c) the portable program in our runtime computes the quantized graph."""
    b, _ = case
    eager = b.case.graph(*b.case.inputs).detach().numpy()
    diff = _quanta(_run_ours(b.portable, b.case.inputs), eager, b.quantum)
    print(f"\n{b.case.name} (c): {diff:.3g} quanta")
    assert diff <= 1.001, f"{b.case.name}: {diff:.3g} quanta (quantum {b.quantum:.3g})"


def test_quantization_error_vs_float_model(case, capsys):
    """(d) the quantized program stays near the float model; our .pte stays as small as
    the official exporter's."""
    b, (min_snr, min_agree, size_bound) = case
    reference = b.case.float_model(*b.case.inputs).detach().numpy()
    snr = snr_db(reference, b.official_ours)
    agree = top1_agreement(reference, b.official_ours)
    ratio = len(b.ours) / len(b.theirs)
    with capsys.disabled():
        print(
            f"\n{b.case.name} (d): SNR {snr:.1f} dB, top-1 agreement {agree:.2f}, "
            f"quantum {b.quantum:.3g}, size {ratio:.3f}x official"
        )
    assert snr > min_snr, f"{b.case.name}: SNR {snr:.1f} dB"
    assert agree >= min_agree, f"{b.case.name}: top-1 agreement {agree:.2f}"
    assert len(b.ours) <= len(b.theirs) * size_bound + 256, (len(b.ours), len(b.theirs))


def _delegate_graphs(pte: bytes) -> list:
    """The XNNPACK graphs of the program's delegates, in program order."""
    from pyexecutorch.backends.xnnpack import schema as S
    from pyexecutorch.schema.pte import decode_pte

    p = decode_pte(pte)
    return [
        S.decode_payload(p.delegate_segments[d.processed.index]).graph
        for d in p.program.execution_plan[0].delegates
    ]


_DYNAMIC = [arch for arch, recipe, *_ in CASES if recipe == "dynamic"]


@pytest.mark.parametrize("arch", _DYNAMIC)
def test_dynamic_delegates_as_the_official_partitioner_cuts_them(arch):
    """Each shared run-time quantization stays with the linears reading it, and the
    delegates hold what the official exporter's hold (node types, delegate by delegate)."""
    import collections

    def histograms(pte: bytes) -> list[collections.Counter]:
        return [
            collections.Counter(type(n.xnode_union).__name__ for n in g.xnodes)
            for g in _delegate_graphs(pte)
        ]

    b = _build(arch, "dynamic")
    assert histograms(b.ours) == histograms(b.theirs)


def _delegate_nodes(pte: bytes) -> tuple[list[str], list[tuple]]:
    """Node types and quantized values (datatype, parameters kind, per-token rows) of the
    program's first XNNPACK delegate."""
    from pyexecutorch.backends.xnnpack import schema as S

    g = _delegate_graphs(pte)[0]
    values = [
        (
            v.xvalue_union.tensor_value.datatype,
            type(v.xvalue_union.quant_params).__name__,
            getattr(v.xvalue_union.quant_params, "num_nonbatch_dims", None),
        )
        for v in g.xvalues
        if isinstance(v.xvalue_union, S.XNNQuantizedTensorValue)
    ]
    return [type(n.xnode_union).__name__ for n in g.xnodes], values


def test_dynamic_convolution_lowered_as_the_official_delegate():
    """ViT's patch convolution, dynamically quantized: the official delegate's nodes (a
    transpose to NHWC, a convert to qdint8 per image, the convolution on qcint8 weights)."""
    b = _build("vit", "dynamic")
    ours, theirs = _delegate_nodes(b.ours), _delegate_nodes(b.theirs)
    assert ours == theirs
    assert ours[0][:3] == ["XNNStaticTranspose", "XNNConvert", "XNNConv2d"]


# --------------------------------------------------------------------------------------
# A quantization operator we cannot handle fails at export, naming it and the model line.

# A quantize with quantize_per_tensor's schema but no out variant or kernel anywhere,
# standing for a quantization operator pyexecutorch does not cover.
_UNSUPPORTED = "quantize_per_tensor_unsupported_for_test"
_lib = torch.library.Library("quantized_decomposed", "FRAGMENT")  # noqa: TOR901
_lib.define(
    f"{_UNSUPPORTED}(Tensor input, float scale, int zero_point, int quant_min, "
    "int quant_max, ScalarType dtype) -> Tensor"
)
_lib.impl(
    _UNSUPPORTED,
    lambda x, scale, zp, qmin, qmax, dtype: torch.ops.quantized_decomposed.quantize_per_tensor(
        x, scale, zp, qmin, qmax, dtype
    ),
    "CompositeExplicitAutograd",
)
_lib.impl(
    _UNSUPPORTED, lambda x, scale, zp, qmin, qmax, dtype: torch.empty_like(x, dtype=dtype), "Meta"
)


# The same with an out variant, but no kernel in pyexecutorch (or the official runtime).
_NO_KERNEL = "quantize_per_tensor_no_kernel_for_test"
_SCHEMA_ARGS = "Tensor input, float scale, int zero_point, int quant_min, int quant_max"
_lib.define(f"{_NO_KERNEL}({_SCHEMA_ARGS}, ScalarType dtype) -> Tensor")
_lib.define(f"{_NO_KERNEL}.out({_SCHEMA_ARGS}, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)")
for _key in ("CompositeExplicitAutograd", "Meta"):
    _lib.impl(
        _NO_KERNEL, lambda x, scale, zp, qmin, qmax, dtype: torch.empty_like(x, dtype=dtype), _key
    )


class _QuantizesSelf(torch.nn.Module):
    def forward(self, x):
        return torch.ops.quantized_decomposed.quantize_per_tensor_unsupported_for_test(
            x, 0.1, 0, -128, 127, torch.int8
        )  # the line the error names


class _OneLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x)  # the line the error names for the q/dq nodes of the linear


def _line_of(cls, marker: str) -> str:
    import inspect

    lines, start = inspect.getsourcelines(cls.forward)
    offset = next(i for i, text in enumerate(lines) if marker in text)
    return f"{__file__}:{start + offset}"


def test_unsupported_quantization_op_named_with_model_line():
    """A quantization operator called in model code: the error names it and that line."""
    from pyexecutorch.exir import UnsupportedQuantizedOperatorError

    ep = torch.export.export(_QuantizesSelf(), (torch.randn(2, 8),))
    edge = to_edge(ep)  # stays whole: the edge dialect keeps non-aten operators
    with pytest.raises(UnsupportedQuantizedOperatorError) as info:
        edge.to_executorch()
    message = str(info.value)
    assert f"quantized_decomposed.{_UNSUPPORTED}.default at " in message
    # The call spans lines; torch records the statement's first line.
    assert _line_of(_QuantizesSelf, "quantize_per_tensor_unsupported") in message


class _QuantizesWithoutKernel(torch.nn.Module):
    def forward(self, x):
        return torch.ops.quantized_decomposed.quantize_per_tensor_no_kernel_for_test(
            x, 0.1, 0, -128, 127, torch.int8
        )  # the line the error names


def test_quantization_op_without_kernel_fails_at_export():
    """An out variant but no kernel: to_executorch raises (not a warning, not at load)."""
    from pyexecutorch.exir import UnsupportedQuantizedOperatorError

    ep = torch.export.export(_QuantizesWithoutKernel(), (torch.randn(2, 8),))
    with pytest.raises(UnsupportedQuantizedOperatorError) as info:
        to_edge(ep).to_executorch()
    message = str(info.value)
    assert f"quantized_decomposed::{_NO_KERNEL}.out (first used in forward: " in message
    assert _line_of(_QuantizesWithoutKernel, "no_kernel_for_test") in message


def test_unsupported_quantize_from_convert_pt2e_names_the_quantized_op_line():
    """convert_pt2e's q/dq nodes have no stack trace: the error names the line of the op
    they quantize (here the linear), not a generated frame."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from pyexecutorch.backends.xnnpack.quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from pyexecutorch.exir import UnsupportedQuantizedOperatorError

    x = (torch.randn(2, 8),)
    captured = torch.export.export(_OneLinear().eval(), x).module()
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    prepared = prepare_pt2e(captured, quantizer)
    prepared(*x)
    graph = convert_pt2e(prepared)
    ep = torch.export.export(graph, x)
    quantizes = [
        n
        for n in ep.graph.nodes
        if n.target == torch.ops.quantized_decomposed.quantize_per_tensor.default
    ]
    assert quantizes, "the quantizer inserted no quantize node"
    # The quantize of the model input: convert_pt2e gave it no stack trace.
    out_q = next(n for n in quantizes if n.args[0].op == "placeholder")
    assert not out_q.meta.get("stack_trace")
    out_q.target = getattr(torch.ops.quantized_decomposed, _UNSUPPORTED).default
    with pytest.raises(UnsupportedQuantizedOperatorError) as info:
        to_edge(ep).to_executorch()
    message = str(info.value)
    assert f"quantized_decomposed.{_UNSUPPORTED}.default at " in message
    assert _line_of(_OneLinear, "self.fc(x)") in message
    # The node's name as to_edge left it, and the (decomposed) linear lending its line.
    assert re.search(
        rf"\(node quantized_decomposed_{_UNSUPPORTED}\w* quantizes aten_(addmm|linear)\w*\)",
        message,
    )
