"""Our XNNPACKQuantizer annotates what the official one annotates.

Each configuration quantizes the same small model with both quantizers through
torchao's PT2E flow; the converted graphs must hold the same quantize and
dequantize nodes, in the same order, with the same parameters (scales and zero
points included), and compute the same outputs.
"""

from __future__ import annotations

import copy
import hashlib
import io
from pathlib import Path

import pytest
import torch
from torch import nn

from tests import official

official.silence_noise()

from executorch.backends.xnnpack.quantizer import xnnpack_quantizer as official_q  # noqa: E402
from torchao.quantization.pt2e.quantize_pt2e import (  # noqa: E402
    convert_pt2e,
    prepare_pt2e,
    prepare_qat_pt2e,
)

from pyexecutorch.backends.xnnpack.quantizer import (  # noqa: E402
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        z = self.dw(y) + y
        z = nn.functional.hardtanh(z * 2.0)
        z = nn.functional.max_pool2d(z, 2)
        z = torch.cat([z, torch.relu(z)], 1)
        z = nn.functional.adaptive_avg_pool2d(z, 1).flatten(1)
        return torch.relu(self.fc(z))


X = (torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0)),)


def _qdq(gm: torch.fx.GraphModule) -> list[tuple]:
    """(operator, parameters) of every quantize/dequantize, input names dropped."""
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and "quantize" in str(n.target):
            params = tuple(a.name if isinstance(a, torch.fx.Node) else a for a in n.args[1:])
            out.append((str(n.target), params))
    return out


def _quantize(quantizer, qat: bool) -> torch.fx.GraphModule:
    torch.manual_seed(0)
    model = Block()
    model.train() if qat else model.eval()
    captured = torch.export.export(copy.deepcopy(model), X).module()
    prepared = (prepare_qat_pt2e if qat else prepare_pt2e)(captured, quantizer)
    prepared(*X)
    return convert_pt2e(prepared)


def _configure(make_quantizer, get_config, how: str, **kw):
    config = get_config(**kw)
    q = make_quantizer()
    if how == "global":
        return q.set_global(config)
    if how == "module_name":
        return q.set_module_name("fc", config)
    if how == "module_type":
        return q.set_module_type(nn.Conv2d, config)
    if how == "operator_type":
        return q.set_operator_type(torch.ops.aten.linear.default, config)
    raise ValueError(how)


CONFIGS = [
    ("global", dict(is_per_channel=True), False),
    ("global", dict(), False),
    ("global", dict(is_per_channel=True, is_dynamic=True), False),
    ("global", dict(is_per_channel=True), True),
    ("module_name", dict(is_per_channel=True), False),
    ("module_type", dict(), False),
    ("operator_type", dict(is_dynamic=True), False),
]


@pytest.mark.parametrize(
    "how,kw,qat",
    CONFIGS,
    ids=[f"{h}-{'-'.join(k) or 'tensor'}-{'qat' if q else 'ptq'}" for h, k, q in CONFIGS],
)
def test_same_annotations_as_official(how, kw, qat):
    ours = _quantize(
        _configure(XNNPACKQuantizer, get_symmetric_quantization_config, how, **kw), qat
    )
    expected, expected_out = _official_result(how, kw, qat)
    got = _qdq(ours)
    assert got, "nothing was quantized"
    assert got == expected
    torch.testing.assert_close(ours(*X), expected_out, rtol=0, atol=0)


def _official_result(how: str, kw: dict, qat: bool) -> tuple[list[tuple], torch.Tensor]:
    """The official quantizer's q/dq list and output for a configuration, cached on disk
    (a QAT prepare and convert costs a minute, mostly torchao's conv-bn pattern tracing,
    whatever the model), keyed by this file and the package versions."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(f"{how}|{sorted(kw.items())}|{qat}|{official.versions()}".encode())
    path = official.cache_dir() / f"quantizer-{how}-{h.hexdigest()[:16]}.pt"

    def build() -> bytes:
        theirs = _quantize(
            _configure(
                official_q.XNNPACKQuantizer, official_q.get_symmetric_quantization_config, how, **kw
            ),
            qat,
        )
        buffer = io.BytesIO()
        torch.save((_qdq(theirs), theirs(*X).detach()), buffer)
        return buffer.getvalue()

    return torch.load(io.BytesIO(official.cached_file(path, build)), weights_only=False)


def test_config_matches_official_fields():
    for kw in (dict(), dict(is_per_channel=True, is_qat=True), dict(is_dynamic=True)):
        ours = get_symmetric_quantization_config(**kw)
        theirs = official_q.get_symmetric_quantization_config(**kw)
        for field in ("input_activation", "output_activation", "weight"):
            a, b = getattr(ours, field), getattr(theirs, field)
            assert (a is None) == (b is None), field
            if a is not None:
                for attr in ("dtype", "quant_min", "quant_max", "qscheme", "ch_axis", "is_dynamic"):
                    assert getattr(a, attr) == getattr(b, attr), (kw, field, attr)
                assert a.observer_or_fake_quant_ctr.p.func is b.observer_or_fake_quant_ctr.p.func
        assert ours.bias is None and ours.is_qat == theirs.is_qat
    assert get_symmetric_quantization_config() is get_symmetric_quantization_config()


def test_module_name_needs_a_config():
    with pytest.raises(ValueError, match=r"set_module_name\('fc', None\)"):
        XNNPACKQuantizer().set_module_name("fc", None)
