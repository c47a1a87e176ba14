"""The example backend's runtime half, on hand-built programs: loading, running,
named data, backend options and the errors of delegation at run time."""

from __future__ import annotations

import numpy as np
import pytest

from pyexecutorch.backends.example.format import FormatError, pack
from pyexecutorch.portable_lib import (
    _get_option,
    _get_registered_backend_names,
    _is_available,
    _load_for_executorch_from_buffer,
    _set_option,
)
from pyexecutorch.runtime import MissingBackendError, Runtime
from pyexecutorch.runtime import backend as backends
from pyexecutorch.schema import NamedBlob, decode_pte

from ._programs import W, delegate_program, expected, linear_relu_bytes

X = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)


@pytest.fixture
def example():
    """The registered runtime backend; its global options are restored afterwards."""
    backend = backends.get_backend("ExampleBackend")
    saved = dict(backends._OPTIONS.get("ExampleBackend", {}))
    yield backend
    backends._OPTIONS["ExampleBackend"] = saved


def _load(pte: bytes, **kw):
    return Runtime.get().load_program(pte, **kw).load_method("forward")


def test_registered_and_available():
    assert "ExampleBackend" in Runtime.get().backend_registry.registered_backend_names
    assert "ExampleBackend" in _get_registered_backend_names()
    assert _is_available("ExampleBackend")
    assert not _is_available("NoSuchBackend")


def test_runs_inline_weights():
    (out,) = _load(delegate_program(linear_relu_bytes())).execute([X])
    np.testing.assert_allclose(out, expected(X), rtol=1e-6, atol=1e-6)


def test_runs_named_weights_shared_by_two_delegates():
    named = {"weights/w": NamedBlob(W.tobytes(), 16)}
    pte = delegate_program(linear_relu_bytes("weights/w"), n_delegates=2, named_data=named)
    decoded = decode_pte(pte)
    assert list(decoded.named_data) == ["weights/w"]
    a, b = _load(pte).execute([X])
    np.testing.assert_allclose(a, expected(X), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(a, b)


def test_missing_named_data_fails_at_load():
    with pytest.raises(MissingBackendError, match=r"delegate 0.*'weights/w'"):
        _load(delegate_program(linear_relu_bytes("weights/w")))


def test_portable_lib_api():
    module = _load_for_executorch_from_buffer(delegate_program(linear_relu_bytes()))
    (out,) = module.forward([X])
    np.testing.assert_allclose(np.asarray(out), expected(X), rtol=1e-6, atol=1e-6)


def test_unknown_backend_fails_at_load_method_naming_it():
    pte = delegate_program(linear_relu_bytes(), backend_id="NoSuchBackend", n_delegates=1)
    program = Runtime.get().load_program(pte)  # loading the program itself is fine
    with pytest.raises(MissingBackendError) as info:
        program.load_method("forward")
    message = str(info.value)
    assert "'NoSuchBackend'" in message
    assert "delegate 0" in message
    assert "method 'forward'" in message
    assert "not registered" in message


def test_corrupt_processed_bytes_fail_at_load():
    with pytest.raises(MissingBackendError, match=r"ExampleBackend.*delegate 0.*magic"):
        _load(delegate_program(b"garbage!" * 4))
    with pytest.raises(FormatError, match="no 'ops'"):
        from pyexecutorch.backends.example.format import unpack

        unpack(memoryview(pack({"values": [], "inputs": [], "outputs": [], "constants": []}, b"")))


def test_per_program_options_reach_init(example):
    pte = delegate_program(linear_relu_bytes())
    method = _load(pte, backend_options={"ExampleBackend": {"trace": True}})
    handle = example.handles[-1]
    assert handle.options["trace"] is True
    method.execute([X])
    assert handle.trace == ["linear", "relu"]
    # Without options: the default (no trace).
    _load(pte)
    assert example.handles[-1].options["trace"] is False


def test_global_options_reach_init(example):
    _set_option("ExampleBackend", {"trace": True})
    assert _get_option("ExampleBackend", {"trace": False}) == {"trace": True}
    _load(delegate_program(linear_relu_bytes()))
    assert example.handles[-1].options["trace"] is True
    # Per-program options override the global ones.
    _load(
        delegate_program(linear_relu_bytes()), backend_options={"ExampleBackend": {"trace": False}}
    )
    assert example.handles[-1].options["trace"] is False


def test_option_errors(example):
    with pytest.raises((ValueError, RuntimeError), match=r"NoSuchBackend"):
        _set_option("NoSuchBackend", {"trace": True})
    with pytest.raises(TypeError, match=r"trace.*bool, int or str"):
        _set_option("ExampleBackend", {"trace": 1.5})
    with pytest.raises(TypeError, match="keys must be str"):
        _set_option("ExampleBackend", {1: True})
    # The runtime's own registry gives the same errors to programs using it directly.
    with pytest.raises(ValueError, match=r"unknown backend 'NoSuchBackend'.*ExampleBackend"):
        backends.set_options("NoSuchBackend", {"trace": True})
    # Per program: checked when the program loads (at the latest when the method does).
    with pytest.raises(TypeError, match=r"option 'trace' must be bool, int or str, got list"):
        _load(
            delegate_program(linear_relu_bytes()),
            backend_options={"ExampleBackend": {"trace": [1]}},
        )
    with pytest.raises(ValueError, match="unknown backend 'NoSuchBackend'"):
        _load(delegate_program(linear_relu_bytes()), backend_options={"NoSuchBackend": {"x": 1}})
    # Valid types the backend itself does not accept: its init names the option.
    with pytest.raises(MissingBackendError, match=r"delegate 0.*option 'trace' must be bool"):
        _load(
            delegate_program(linear_relu_bytes()),
            backend_options={"ExampleBackend": {"trace": "yes"}},
        )
    with pytest.raises(MissingBackendError, match=r"unknown option 'speed'"):
        _load(
            delegate_program(linear_relu_bytes()), backend_options={"ExampleBackend": {"speed": 3}}
        )


def test_destroy_releases_handles(example):
    import gc

    gc.collect()  # methods of earlier tests release their handles when collected
    before = list(example.handles)
    method = _load(delegate_program(linear_relu_bytes()))
    (handle,) = [h for h in example.handles if all(h is not b for b in before)]
    method._loaded.destroy()
    assert all(h is not handle for h in example.handles)


def test_shape_check(example):
    method = _load(delegate_program(linear_relu_bytes()))
    handle = example.handles[-1]
    with pytest.raises(ValueError, match=r"compiled for \(2, 3\)"):
        example.execute(handle, [np.zeros((3, 3), np.float32), np.zeros((3, 4), np.float32)])
    del method


def test_runtime_half_imports_no_torch(tmp_path):
    import subprocess
    import sys
    import textwrap

    pte = tmp_path / "d.pte"
    pte.write_bytes(delegate_program(linear_relu_bytes()))
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None
        import numpy as np
        from pyexecutorch.runtime import Runtime
        m = Runtime.get().load_program({str(pte)!r}).load_method("forward")
        (out,) = m.execute([np.ones((2, 3), np.float32)])
        assert out.shape == (2, 4)
        assert "pyexecutorch.backends.example.runtime" in sys.modules
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
