"""``ExecuTorchResult`` and the choice of output kind, against the rules of the official
bindings (``/work/shared/reference/pybindings.cpp.txt``: ``portable_tensor_result``,
``configure_portable_tensor_output`` and the ``ExecuTorchResult`` class definition).
The installed executorch 1.5.1 wheel predates these names, so the rules are the oracle."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from pyexecutorch import portable_lib as pl
from pyexecutorch.portable_lib import ExecuTorchResult


@pytest.fixture
def results(monkeypatch):
    monkeypatch.setenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT", "executorch")


def test_environment_variable_rules(monkeypatch, mlp, mlp_input):
    monkeypatch.delenv("PYEXECUTORCH_TENSOR_OUTPUT", raising=False)
    monkeypatch.setenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT", "executorch")
    assert pl._tensor_output == "executorch" and pl._uses_aten is False
    assert type(mlp.forward([mlp_input])[0]) is ExecuTorchResult
    monkeypatch.setenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT", "torch")
    assert pl._tensor_output == "torch"
    assert isinstance(mlp.forward([mlp_input])[0], torch.Tensor)
    monkeypatch.setenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT", "numpy")
    with pytest.raises(
        ValueError,
        match="EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT must be either 'torch' or 'executorch', "
        "but was 'numpy'",
    ):
        mlp.forward([mlp_input])
    # Our alias, which also takes numpy; the official variable wins over it.
    monkeypatch.delenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT")
    monkeypatch.setenv("PYEXECUTORCH_TENSOR_OUTPUT", "executorch")
    assert type(mlp.forward([mlp_input])[0]) is ExecuTorchResult
    monkeypatch.setenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT", "torch")
    assert isinstance(mlp.forward([mlp_input])[0], torch.Tensor)


def test_attributes(results, mlp, mlp_input, mlp_expected):
    (out,) = mlp.forward([mlp_input])
    expected = np.asarray(mlp_expected, dtype=np.float32)
    assert out.shape == expected.shape
    assert out.strides == tuple(s for s in np.empty_like(expected).strides)  # bytes
    assert out.dtype == "float32" and out.device == "cpu"
    assert out.nbytes == expected.nbytes
    assert repr(out) == (
        f"ExecuTorchResult(shape={list(expected.shape)}, dtype=float32, device=cpu, "
        f"nbytes={expected.nbytes})"
    )
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-6)


def test_array_rules(results, mlp, mlp_input):
    (out,) = mlp.forward([mlp_input])
    same = out.__array__()
    assert same is out.__array__(copy=None) or np.shares_memory(same, out.__array__())
    copied = out.__array__(copy=True)
    assert not np.shares_memory(copied, same) and np.array_equal(copied, same)
    assert out.__array__(dtype=np.float64).dtype == np.float64
    assert np.shares_memory(out.__array__(dtype=np.float32, copy=False), same)
    with pytest.raises(
        ValueError, match="A dtype conversion requires a copy of the ExecuTorch result"
    ):
        out.__array__(dtype=np.float64, copy=False)
    with pytest.raises(ValueError, match="requires a copy"):
        np.array(out, dtype=np.float64, copy=False)


def test_dlpack_buffer_and_host(results, mlp, mlp_input):
    (out,) = mlp.forward([mlp_input])
    assert out.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(np.from_dlpack(out), np.asarray(out))
    np.testing.assert_array_equal(torch.from_dlpack(out).numpy(), np.asarray(out))
    with pytest.raises(BufferError, match="DLPack device"):
        out.__dlpack__(dl_device=(2, 0))
    view = out.__buffer__(0)
    assert view.format == "f" and view.shape == out.shape
    host = out.to_host()
    assert type(host) is ExecuTorchResult and host.shape == out.shape
    assert not np.shares_memory(np.asarray(host), np.asarray(out))
    with pytest.raises(RuntimeError, match="no CUDA support"):
        ExecuTorchResult.from_host(np.zeros(3, np.float32))


def test_views_keep_memory_alive_and_feed_methods(results, mlp, mlp_input):
    first = mlp.forward([mlp_input], clone_outputs=False)[0]
    before = np.asarray(first).copy()
    second = mlp.forward([mlp_input * 2], clone_outputs=False)[0]
    # A view of planned memory: the next run writes it (as the official bindings say).
    assert np.shares_memory(np.asarray(first), np.asarray(second))
    assert not np.array_equal(np.asarray(first), before)
    kept = mlp.forward([mlp_input])[0]
    del mlp  # a cloned result owns its memory
    assert np.asarray(kept).sum() == pytest.approx(before.sum(), rel=1e-5)


def test_results_are_inputs(results, tmp_path):
    from pyexecutorch.exir import to_edge

    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2

    pte = to_edge(torch.export.export(Double(), (torch.ones(3),))).to_executorch().buffer
    module = pl._load_for_executorch_from_buffer(pte)
    (once,) = module.forward([np.arange(3, dtype=np.float32)])
    (twice,) = module.forward([once])
    np.testing.assert_array_equal(np.asarray(twice), [0, 4, 8])


def test_without_torch_installed_path():
    script = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None
        from pyexecutorch import portable_lib as pl
        assert pl._tensor_output == "executorch", pl._tensor_output
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
