"""Outputs: torch or numpy, copies or views, aliases of inputs, Python values."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from pyexecutorch import portable_lib as pl
from pyexecutorch.runtime.outputs import convert_outputs


def raises(cls, message):
    return pytest.raises(cls, match="^" + re.escape(message) + "$")


def test_torch_outputs_when_torch_is_imported(mlp, mlp_input, mlp_expected):
    (out,) = mlp.forward([mlp_input])
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), mlp_expected, rtol=1e-5, atol=1e-6)


def test_environment_forces_the_kind(mlp, mlp_input, monkeypatch):
    monkeypatch.setenv("PYEXECUTORCH_TENSOR_OUTPUT", "numpy")
    assert type(mlp.forward([torch.from_numpy(mlp_input)])[0]) is np.ndarray
    monkeypatch.setenv("PYEXECUTORCH_TENSOR_OUTPUT", "torch")
    assert isinstance(mlp.forward([mlp_input])[0], torch.Tensor)
    monkeypatch.setenv("PYEXECUTORCH_TENSOR_OUTPUT", "jax")
    with raises(
        ValueError,
        "PYEXECUTORCH_TENSOR_OUTPUT must be either 'torch', 'executorch' or 'numpy', but was 'jax'",
    ):
        mlp.forward([mlp_input])


def test_results_without_torch(tmp_path, mlp_pte, mlp_input, mlp_expected):
    """Without torch imported, outputs are ExecuTorchResult objects (numpy arrays through
    np.asarray) and torch is never imported, whatever kind of input arrives."""
    (tmp_path / "m.pte").write_bytes(mlp_pte)
    np.save(tmp_path / "x.npy", mlp_input)
    np.save(tmp_path / "e.npy", mlp_expected)
    script = textwrap.dedent(
        f"""
        import array, sys
        sys.modules["torch"] = None  # any import of torch now fails
        import numpy as np
        from pyexecutorch import portable_lib as pl
        x, e = np.load({str(tmp_path / "x.npy")!r}), np.load({str(tmp_path / "e.npy")!r})
        m = pl._load_for_executorch({str(tmp_path / "m.pte")!r})
        for value in (x, memoryview(x), x.__dlpack__(), array.array("f", x.reshape(-1)).tolist()):
            if isinstance(value, list):
                value = memoryview(array.array("f", value)).cast("B").cast("f", x.shape)
            (out,) = m.forward([value])
            assert type(out) is pl.ExecuTorchResult, type(out)
            np.testing.assert_allclose(np.asarray(out), e, rtol=1e-5, atol=1e-6)
        method = pl._load_program({str(tmp_path / "m.pte")!r}).load_method("forward")
        assert type(method.call([x])[0]) is pl.ExecuTorchResult
        assert pl._tensor_output == "executorch" and pl._uses_aten is False
        assert not any(n == "torch" or n.startswith("torch.") for n, v in sys.modules.items() if v is not None)
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_clone_outputs_false_views_planned_memory(mlp, mlp_input):
    first = mlp.forward([mlp_input], clone_outputs=False)[0]
    kept = first.clone()
    second = mlp.forward([mlp_input * 2], clone_outputs=False)[0]
    # Zero-copy views of the same planned memory: the next run overwrites them.
    assert first.data_ptr() == second.data_ptr()
    assert torch.equal(first, second) and not torch.equal(first, kept)
    copied = mlp.forward([mlp_input])[0]
    assert copied.data_ptr() != second.data_ptr() and torch.equal(copied, kept)
    assert torch.equal(second, copied)  # the view moved on with the run


def test_clone_outputs_false_numpy(mlp, mlp_input, numpy_outputs):
    a = mlp.forward([mlp_input], clone_outputs=False)[0]
    b = mlp.forward([mlp_input], clone_outputs=False)[0]
    c = mlp.forward([mlp_input])[0]
    assert np.shares_memory(a, b) and not np.shares_memory(a, c)


def test_output_aliasing_an_input_is_a_view_of_it(program):
    """An output that is an input the method does not plan memory for."""
    x, y = torch.rand(2, 3), torch.rand(2, 3)
    m = pl._load_for_executorch_from_buffer(program("alias"))
    same, total = m.forward([x, y], clone_outputs=False)
    assert same.data_ptr() == x.data_ptr()
    assert same.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    x.add_(1)
    assert torch.equal(same, x)
    assert torch.allclose(total, x - 1 + y)
    cloned, _ = m.forward([x, y])
    assert cloned.data_ptr() != x.data_ptr() and torch.equal(cloned, x)


def test_output_aliasing_a_numpy_input(program, numpy_outputs):
    x, y = np.random.rand(2, 3).astype(np.float32), np.random.rand(2, 3).astype(np.float32)
    m = pl._load_program_from_buffer(program("alias")).load_method("forward")
    same, total = m.call([x, y], clone_outputs=False)
    assert np.shares_memory(same, x)
    np.testing.assert_allclose(total, x + y)
    assert not np.shares_memory(m.get_outputs()[0], x)


def test_aliased_input_storage_changed_before_outputs(program):
    x, y = torch.rand(2, 3), torch.rand(2, 3)
    m = pl._load_program_from_buffer(program("alias")).load_method("forward")
    m.set_inputs([x, y])
    m.execute()
    x.set_(torch.rand(2, 3))
    with raises(
        ValueError,
        "Input 0 of method 'forward': its storage changed before the output was read; pass it again",
    ):
        m.get_outputs(clone_outputs=False)


def test_python_values(case_pte):
    m = pl._load_for_executorch_from_buffer(case_pte("multi_method"))
    assert m.run_method("scale") == [0.5] and type(m.run_method("scale")[0]) is float
    assert m.run_method("use_cache") == [True]
    assert m.run_method("vocab_size") == [32] and type(m.run_method("vocab_size")[0]) is int
    values = [np.int64(3), np.float32(1.5), (1.0, 2.0), [np.zeros(2), None], "text", None, True]
    got = convert_outputs(values, clone=True)
    assert got[:3] == [3, 1.5, [1.0, 2.0]] and type(got[0]) is int and type(got[1]) is float
    assert isinstance(got[3][0], torch.Tensor) and got[3][1] is None
    assert got[4:] == ["text", None, True]


def test_zero_dim_output(program):
    m = pl._load_for_executorch_from_buffer(program("zero_dim"))
    _, total = m.forward([torch.tensor(1.0), torch.ones(3)])
    assert isinstance(total, torch.Tensor) and total.shape == () and total.item() == 3.0


def test_get_attribute(program, numpy_outputs):
    method = pl._load_program_from_buffer(program("counter")).load_method("forward")
    x = np.ones((2, 3), np.float32)
    method.call([x])
    total = method.get_attribute("total")
    np.testing.assert_array_equal(total, x)
    method.call([x])
    np.testing.assert_array_equal(total, 2 * x)  # a view of the method's state
    with raises(
        RuntimeError,
        "Failed to get attribute 'nope' for method 'forward', error: 0x20: method 'forward' has no tensor named 'nope'",
    ):
        method.get_attribute("nope")
    assert method.method_meta().num_attributes() == 1
    assert repr(method.method_meta().attribute_tensor_meta(0)) == (
        "TensorInfo(sizes=[2, 3], dtype=Float, is_memory_planned=True, nbytes=24)"
    )
