"""bfloat16, float8, unsigned and complex tensors (ml_dtypes' numpy dtypes): programs of
either exporter load and run in our runtime as torch eager computes them (bfloat16
arithmetic rounds each operator's result), our programs run in the official runtime,
and inputs/outputs take ml_dtypes arrays, torch tensors and raw bytes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from pyexecutorch import portable_lib as pl
from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime
from tests import official

BF16 = np.dtype(ml_dtypes.bfloat16)


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = torch.nn.Linear(16, 16)
        self.n = torch.nn.LayerNorm(16)
        self.c = torch.nn.Conv1d(4, 4, 3, padding=1)

    def forward(self, x):
        y = torch.nn.functional.gelu(self.l(x)) * 1.5 + x
        z = self.c(y.view(2, 4, 16)).flatten(1)
        return torch.softmax(self.n(y), -1), y.sum(-1), z.amax(-1), y.to(torch.float32)


def _bf16_case():
    torch.manual_seed(0)
    m = _Block().to(torch.bfloat16).eval()
    x = torch.randn(8, 16).to(torch.bfloat16)
    with torch.no_grad():
        expected = [e.float().numpy() for e in m(x)]
    return m, x, expected


_PTES: dict[str, bytes] = {}


def _pte(exporter: str) -> bytes:
    if exporter not in _PTES:
        m, x, _ = _bf16_case()
        ep = torch.export.export(m, (x,))
        if exporter == "ours":
            _PTES[exporter] = to_edge(ep).to_executorch().buffer
        else:
            _PTES[exporter] = _cached_official(ep)
    return _PTES[exporter]


def _cached_official(ep) -> bytes:
    """The official export, cached on disk like tests/official.py's (keyed by the source
    of this model and the package versions)."""
    import hashlib
    import inspect

    key = hashlib.sha256(
        (inspect.getsource(_Block) + inspect.getsource(_bf16_case) + official.versions()).encode()
    ).hexdigest()[:20]
    path = official.cache_dir() / f"bf16_block.portable.{key}.pte"
    return official.cached_file(path, lambda: official.export_programs({"forward": ep}))


def _as_float(outs) -> list[np.ndarray]:
    return [
        (o.float().numpy() if isinstance(o, torch.Tensor) else np.asarray(o).astype(np.float32))
        for o in outs
    ]


@pytest.mark.parametrize("exporter", ["ours", "official"])
def test_bfloat16_model_in_our_runtime(exporter):
    _, x, expected = _bf16_case()
    method = Runtime.get().load_program(_pte(exporter)).load_method("forward")
    assert method.metadata.input_tensor_meta(0).dtype_name() == "bfloat16"
    outs = method.execute([x.view(torch.int16).numpy().view(BF16)])
    assert [o.dtype for o in outs] == [torch.bfloat16] * 3 + [torch.float32]
    for got, want in zip(_as_float(outs), expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_our_bfloat16_program_in_the_official_runtime():
    _, x, expected = _bf16_case()
    outs = official.OfficialRunner(_pte("ours")).module.run_method("forward", (x,))
    # The official kernels round partial sums to bfloat16 (a sum differs by a few ulps).
    for got, want in zip(_as_float(outs), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=2**-5, atol=2**-5)


class _Chain(torch.nn.Module):
    def forward(self, x, y):
        return ((x * 1.1 + y) * 3.3 - x) / 0.7


def test_each_operator_rounds_to_bfloat16():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4096, generator=g).to(torch.bfloat16)
    y = torch.randn(4096, generator=g).to(torch.bfloat16)
    pte = to_edge(torch.export.export(_Chain(), (x, y))).to_executorch().buffer
    (got,) = Runtime.get().load_program(pte).load_method("forward").execute([x, y])
    expected = _Chain()(x, y)
    assert got.dtype == torch.bfloat16 and torch.equal(got, expected)
    # Rounding only at the end would differ: the check can fail.
    once = _Chain()(x.float(), y.float()).to(torch.bfloat16)
    assert not torch.equal(once, expected)


class _Float8(torch.nn.Module):
    def forward(self, x):
        outs = []
        for dt in (
            torch.float8_e5m2,
            torch.float8_e4m3fn,
            torch.float8_e5m2fnuz,
            torch.float8_e4m3fnuz,
        ):
            outs.append(x.to(dt).to(torch.float32))
        return (*outs, x.to(torch.float8_e4m3fn), x.to(torch.bfloat16))


def test_float8_casts():
    x = torch.cat([torch.linspace(-300, 300, 257), torch.tensor([0.0, -0.0, 1e-4, 447.0])])
    pte = to_edge(torch.export.export(_Float8(), (x,))).to_executorch().buffer
    method = Runtime.get().load_program(pte).load_method("forward")
    got = method.execute([x.numpy()])
    expected = _Float8()(x)
    assert got[4].dtype == torch.float8_e4m3fn and got[5].dtype == torch.bfloat16
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g.float().numpy(), e.float().numpy())
    infos = [method.metadata.output_tensor_meta(i) for i in (4, 5)]
    assert [i.dtype_name() for i in infos] == ["float8_e4m3fn", "bfloat16"]


def test_inputs_and_outputs_in_every_form(monkeypatch):
    _, x, expected = _bf16_case()
    module = pl._load_for_executorch_from_buffer(_pte("ours"))
    bits = x.view(torch.int16).numpy()
    forms = {
        "ml_dtypes": bits.view(BF16),
        "torch": x,
        "raw bytes": memoryview(bits.tobytes()),  # a 1-D byte buffer, as the seed allows
    }
    for name, value in forms.items():
        outs = module.forward([value])
        for got, want in zip(_as_float(outs), expected, strict=True):
            np.testing.assert_array_equal(got, want, err_msg=name)
    monkeypatch.setenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT", "executorch")
    results = module.forward([x])
    assert [r.dtype for r in results] == ["bfloat16"] * 3 + ["float32"]
    assert np.asarray(results[0]).dtype == BF16
    with pytest.raises(BufferError, match="bfloat16 results have no buffer format"):
        results[0].__buffer__(0)
    monkeypatch.setenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT", "torch")
    again = module.forward([results[0]])[0]
    assert again.dtype == torch.bfloat16


class _Unsigned(torch.nn.Module):
    def forward(self, a, c):
        return a.to(torch.int64) * 3, a.to(torch.uint16), a.to(torch.uint64), c * c, c.abs()


def test_unsigned_and_complex():
    a = torch.tensor([0, 1, 7, 2**31 + 5], dtype=torch.int64).to(torch.uint32)
    c = torch.randn(3, dtype=torch.complex64)
    pte = to_edge(torch.export.export(_Unsigned(), (a, c))).to_executorch().buffer
    method = Runtime.get().load_program(pte).load_method("forward")
    names = [method.metadata.input_tensor_meta(i).dtype_name() for i in range(2)]
    assert names == ["uint32", "complex64"]
    got = method.execute([a.numpy(), c.numpy()])
    expected = [a.to(torch.int64) * 3, a.to(torch.uint16), a.to(torch.uint64), c * c, c.abs()]
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["float8_e5m2", "float8_e4m3fn", "bfloat16"])
@pytest.mark.parametrize("clone", [True, False])
def test_ml_dtypes_outputs_become_torch_tensors_of_their_type(name, clone):
    # float8_e5m2's numpy kind letter is "f", like a builtin float's: it must still cross
    # over as its bits, not through torch.from_numpy (which rejects it)
    from pyexecutorch.runtime.outputs import convert_outputs  # noqa: PLC0415

    values = np.array([0.5, -2.0, 3.0], dtype=getattr(ml_dtypes, name))
    (out,) = convert_outputs([values], clone=clone, kind="torch")
    assert out.dtype == getattr(torch, name)
    assert out.view(torch.uint8 if values.itemsize == 1 else torch.int16).tolist() == (
        values.view(np.uint8 if values.itemsize == 1 else np.int16).tolist()
    )
    assert out.float().tolist() == [0.5, -2.0, 3.0]
