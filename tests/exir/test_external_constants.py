"""``external_constants``: every weight goes to the ``.ptd`` (weights that constant
folding rewrote included, under names derived from their parameters), the ``.pte``
keeps none of their bytes, and both runtimes run the pair as eager does."""

from __future__ import annotations

import numpy as np
import torch

from pyexecutorch.exir import ExecutorchBackendConfig, to_edge
from pyexecutorch.runtime import Runtime
from pyexecutorch.schema.flat_tensor import decode_ptd, encode_ptd
from tests import official


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.l = torch.nn.Linear(256, 256)
        self.register_buffer("scale", torch.rand(256) + 0.5)

    def forward(self, x, y):
        c = self.bn(self.conv(x)).mean((2, 3))
        return self.l(y) * self.scale + torch.tensor([1.0, 2.0]).sum(), c


def _model() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    m = _Net().eval()
    with torch.no_grad():  # non-trivial batch-norm statistics
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2)
        m.bn.weight.uniform_(0.5, 2)
        m.bn.bias.uniform_(-1, 1)
    return m, (torch.randn(2, 3, 8, 8), torch.randn(4, 256))


def _compile(m, inputs, external):
    ep = torch.export.export(m, inputs)
    return to_edge(ep).to_executorch(ExecutorchBackendConfig(external_constants=external))


def _holds(blob: bytes, t: torch.Tensor) -> bool:
    """Whether ``blob`` contains the first 64 bytes of ``t`` in any of its layouts."""
    arr = t.detach().numpy()
    layouts = [arr] + ([arr.T] if arr.ndim == 2 else [])
    return any(np.ascontiguousarray(a).tobytes()[:64] in blob for a in layouts)


def test_pte_of_an_externalized_model_holds_no_weight_bytes():
    m, inputs = _model()
    et = _compile(m, inputs, True)
    pte = et.buffer
    inline = _compile(m, inputs, False).buffer
    weights = {k: v for k, v in m.state_dict().items() if v.dtype.is_floating_point}
    # The check can fail: the inline program holds them (the linear weight permuted).
    assert _holds(inline, m.l.weight) and _holds(inline, m.l.bias)
    for name, w in weights.items():
        assert not _holds(pte, w), name
    assert len(pte) < 8192 < len(inline)

    (tag,) = et.data_files
    assert tag == "_default_external_constant"
    names = set(et.data_files[tag].entries)
    # Folded weights are named after their parameters; a second export agrees.
    assert {"l.bias", "scale"} < names
    assert any(n.startswith("l.weight:permute_copy") for n in names)
    assert any(n.startswith("conv.weight:fold_batch_norm") for n in names)
    assert any(n.startswith("conv.bias:fold_batch_norm") for n in names)
    again = _compile(*_model(), True)
    assert set(again.data_files[tag].entries) == names

    ptd = encode_ptd(et.data_files[tag])
    permuted = next(n for n in names if n.startswith("l.weight:"))
    np.testing.assert_array_equal(decode_ptd(ptd).array(permuted), m.l.weight.detach().numpy().T)

    with torch.no_grad():
        expected = official.flatten_outputs(m(*inputs))
    ours = Runtime.get().load_program(pte, data_files=[ptd]).load_method("forward")
    got = [np.asarray(o) for o in ours.execute([x.numpy() for x in inputs])]
    official.assert_close("externalized", got, expected, rtol=1e-4, atol=1e-4, what="ours")

    official.silence_noise()
    from executorch.extension.pybindings import portable_lib

    module = portable_lib._load_for_executorch_from_buffer(pte, ptd)
    theirs = [o.numpy().copy() for o in module.run_method("forward", inputs)]
    official.assert_close("externalized", theirs, expected, rtol=1e-4, atol=1e-4, what="official")


def test_tag_function_sees_folded_weights_by_their_names():
    m, inputs = _model()
    et = _compile(m, inputs, lambda node: "weights" if "weight" in node.name else None)
    files = et.data_files
    assert set(files) == {"weights"}
    names = set(files["weights"].entries)
    assert "l.bias" not in names and "scale" not in names
    assert any(n.startswith("l.weight:permute_copy") for n in names)
    assert any(n.startswith("conv.weight:fold_batch_norm") for n in names)
    assert not _holds(et.buffer, m.l.weight)
    assert _holds(et.buffer, m.l.bias)


class _TwoFolds(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 3, 3))

    def forward(self, x):
        return x * self.w.permute(1, 0, 2).sum(1)

    def other(self, x):
        return x * self.w.permute(2, 0, 1).sum(1)


def test_one_weight_folded_two_ways_in_two_methods():
    torch.manual_seed(1)
    m = _TwoFolds().eval()
    x = torch.randn(3, 3)
    programs = {k: torch.export.export(_Bound(m, k), (x,)) for k in ("forward", "other")}
    et = to_edge(programs).to_executorch(ExecutorchBackendConfig(external_constants=True))
    (ptd_file,) = et.data_files.values()
    names = sorted(ptd_file.entries)
    # One derived name, two values: the second gets a digest of its bytes.
    assert names[0] == "m.w:permute_copy:sum.dim_IntList", names
    assert len(names) == 2 and names[1].startswith(names[0] + "@"), names
    program = Runtime.get().load_program(et.buffer, data_files=[encode_ptd(ptd_file)])
    with torch.no_grad():
        for method, fn in (("forward", m.forward), ("other", m.other)):
            (got,) = program.load_method(method).execute([x.numpy()])
            np.testing.assert_allclose(np.asarray(got), fn(x).numpy(), rtol=1e-5, atol=1e-6)


class _Bound(torch.nn.Module):
    def __init__(self, m: torch.nn.Module, name: str) -> None:
        super().__init__()
        self.m, self.name = m, name

    def forward(self, x):
        return getattr(self.m, self.name)(x)
