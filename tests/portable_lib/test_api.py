"""Loaders, programs and methods, metadata, and the module-level functions."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from pyexecutorch import portable_lib as pl
from pyexecutorch.runtime import ExecutionError
from pyexecutorch.runtime import MethodMeta as RuntimeMethodMeta
from pyexecutorch.runtime import backend as backends
from pyexecutorch.schema.etdump import decode_etdump
from tests import models


def raises(cls, message):
    return pytest.raises(cls, match="^" + re.escape(message) + "$")


def close(got, expected):
    got = got.numpy() if isinstance(got, torch.Tensor) else got
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------- loaders


def test_loaders(tmp_path, mlp_pte, mlp_input, mlp_expected):
    path = tmp_path / "mlp.pte"
    path.write_bytes(mlp_pte)
    for module in (
        pl._load_for_executorch(str(path)),
        pl._load_for_executorch(path, program_verification=pl.Verification.Minimal),
        pl._load_for_executorch_from_buffer(mlp_pte, program_verification=0),
    ):
        close(module.forward([mlp_input])[0], mlp_expected)
        assert module.method_names() == ["forward"]
    for program in (
        pl._load_program(str(path)),
        pl._load_program_from_buffer(mlp_pte, backend_options={}),
    ):
        assert program.num_methods() == 1 and program.get_method_name(0) == "forward"
        close(program.load_method("forward")([mlp_input])[0], mlp_expected)


def test_load_errors(tmp_path):
    with raises(
        RuntimeError,
        f"Failed to create MmapDataLoader, error: 0x22: program file not found: '{tmp_path}/no.pte'",
    ):
        pl._load_for_executorch(str(tmp_path / "no.pte"))
    with pytest.raises(RuntimeError, match=r"^Failed to load program, error: 0x23: "):
        pl._load_for_executorch_from_buffer(b"garbage" * 10)
    with pytest.raises(RuntimeError, match=r"^Failed to load program, error: 0x23: "):
        pl._load_program_from_buffer(b"garbage" * 10)
    with raises(TypeError, "program_verification must be a Verification, got 7"):
        pl._load_program_from_buffer(b"", program_verification=7)
    with raises(TypeError, "buffer must be a bytes-like object, got str"):
        pl._load_for_executorch_from_buffer("model.pte")


def test_name_errors(mlp_pte):
    module = pl._load_for_executorch_from_buffer(mlp_pte)
    program = pl._load_program_from_buffer(mlp_pte)
    missing = "No method named 'nope' in program (it has: forward)"
    with raises(RuntimeError, f"Failed to get metadata for method nope: {missing}"):
        module.run_method("nope", [])
    with raises(
        RuntimeError, f"failed to retrieve method_meta for method nope, error 0x12: {missing}"
    ):
        module.method_meta("nope")
    with raises(RuntimeError, f"Failed to get method meta for method nope, error: 0x12: {missing}"):
        program.load_method("nope")
    with raises(RuntimeError, f"Failed to get method meta for method nope, error: 0x12: {missing}"):
        program.method_meta("nope")
    with raises(RuntimeError, "Failed get method name, error: 0x12: Plan index 5 >= num methods 1"):
        program.get_method_name(5)


# --------------------------------------------------------------------- methods


def test_method_state(mlp_pte, mlp_input, mlp_expected):
    method = pl._load_program_from_buffer(mlp_pte).load_method("forward")
    with raises(
        RuntimeError, "Method 'forward' has no inputs yet. Call set_inputs() before executing."
    ):
        method.execute()
    no_outputs = (
        "Method 'forward' has no outputs to return: it has not executed since its last set_inputs(), "
        "or that execution failed. Call execute() first."
    )
    with raises(RuntimeError, no_outputs):
        method.get_outputs()
    with raises(RuntimeError, "Method 'forward' takes 1 inputs, but got 0"):
        method.set_inputs([])
    method.set_inputs([mlp_input])
    method.execute()
    close(method.get_outputs()[0], mlp_expected)
    method.set_inputs(mlp_input)
    with raises(RuntimeError, no_outputs):
        method.get_outputs()  # the new inputs have not run yet
    with raises(
        RuntimeError,
        "method->set_inputs() for method 'forward' failed with error 0x10: "
        "Input 0 of method 'forward' has shape [4, 15], but the method expects [4, 16]",
    ):
        method.set_inputs([np.zeros((4, 15), np.float32)])
    with raises(
        RuntimeError,
        "The last set_inputs() for method 'forward' failed partway, so the method may hold a mix of new and "
        "old inputs. Call set_inputs() again with every input before executing.",
    ):
        method.execute()
    close(method.call([mlp_input])[0], mlp_expected)
    close(method([mlp_input], clone_outputs=False)[0], mlp_expected)
    assert repr(method.method_meta()) == repr(
        pl._load_program_from_buffer(mlp_pte).method_meta("forward")
    )


def test_methods_of_one_program_are_independent(mlp_pte, mlp_input, mlp_expected):
    program = pl._load_program_from_buffer(mlp_pte)
    a, b = program.load_method("forward"), program.load_method("forward")
    out_a = a.call([mlp_input], clone_outputs=False)[0]
    b.call([mlp_input * 0], clone_outputs=False)
    close(out_a, mlp_expected)  # b has memory of its own


def test_methods_without_inputs(case_pte):
    program = pl._load_program_from_buffer(case_pte("multi_method"))
    method = program.load_method("scale")
    method.execute()
    assert method.get_outputs() == [0.5]
    assert program.load_method("vocab_size").call() == [32]


def test_kernel_failure_names_method_instruction_and_operator(case_pte):
    case = models.CASES_BY_NAME["indexing"]
    module = pl._load_for_executorch_from_buffer(case_pte("indexing"))
    x, _, gidx = case.inputs()
    with raises(
        ExecutionError,
        "method 'forward' failed at instruction 0 (aten::index_select.out): "
        "KernelError: index_select: index 99 is out of bounds for dimension 1 with size 6",
    ):
        module.forward([x, torch.tensor([2, 0, 99]), gidx])
    assert issubclass(ExecutionError, RuntimeError)


# -------------------------------------------------------------------- metadata


def test_method_meta_and_tensor_info(case_pte):
    module = pl._load_for_executorch_from_buffer(case_pte("float16"))
    meta = module.method_meta("forward")
    assert (meta.name(), meta.num_inputs(), meta.num_outputs(), meta.num_attributes()) == (
        "forward",
        1,
        2,
        0,
    )
    info = meta.input_tensor_meta(0)
    assert info.sizes() == (4, 16) and info.dtype() == 5 and info.dtype_name() == "float16"
    assert info.nbytes() == 128 and info.is_memory_planned() and info.device() == "cpu"
    assert info.dim_order() == (0, 1)
    assert (
        repr(info)
        == str(info)
        == "TensorInfo(sizes=[4, 16], dtype=Half, is_memory_planned=True, nbytes=128)"
    )
    assert repr(meta) == (
        "MethodMeta(name='forward', num_inputs=1, input_tensor_meta=['TensorInfo(sizes=[4, 16], dtype=Half, "
        "is_memory_planned=True, nbytes=128)'], num_outputs=2, output_tensor_meta=['TensorInfo(sizes=[4, 8], "
        "dtype=Half, is_memory_planned=True, nbytes=64)', 'TensorInfo(sizes=[4, 32], dtype=Half, "
        "is_memory_planned=True, nbytes=256)'])"
    )
    with raises(IndexError, "Cannot get input tensor meta at 1: method 'forward' has 1 inputs"):
        meta.input_tensor_meta(1)
    with raises(IndexError, "Cannot get output tensor meta at -1: method 'forward' has 2 outputs"):
        meta.output_tensor_meta(-1)
    with raises(
        IndexError, "Cannot get attribute tensor meta at 0: method 'forward' has 0 attributes"
    ):
        meta.attribute_tensor_meta(0)


def test_method_meta_of_scalar_methods(case_pte):
    module = pl._load_for_executorch_from_buffer(case_pte("multi_method"))
    assert repr(module.method_meta("scale")) == (
        "MethodMeta(name='scale', num_inputs=0, input_tensor_meta=[], num_outputs=1, output_tensor_meta=['Double'])"
    )
    with raises(
        IndexError,
        "Cannot get output tensor meta at 0: output 0 of method 'scale' is Double, not a tensor",
    ):
        module.method_meta("scale").output_tensor_meta(0)
    meta = pl._load_for_executorch_from_buffer(case_pte("scalar_input")).method_meta("forward")
    # As in the official bindings, repr fails on a non-tensor input ...
    with raises(
        IndexError,
        "Cannot get input tensor meta at 1: input 1 of method 'forward' is Double, not a tensor",
    ):
        repr(meta)
    # ... while the runtime's MethodMeta names its tag.
    assert "'Double', 'Int'" in repr(RuntimeMethodMeta(meta._plan))


# ---------------------------------------------------------------------- etdump


def test_etdump(mlp_pte, mlp_input, tmp_path):
    module = pl._load_for_executorch_from_buffer(mlp_pte)
    assert not module.has_etdump()
    with raises(RuntimeError, "No etdump found"):
        module.write_etdump_result_to_file(str(tmp_path / "x.etdp"))
    traced = pl._load_program_from_buffer(mlp_pte, enable_etdump=True, debug_buffer_size=1 << 16)
    assert traced.has_etdump()
    traced.load_method("forward").call([mlp_input])
    traced.write_etdump_result_to_file(str(tmp_path / "x.etdp"), str(tmp_path / "debug.bin"))
    etdump = decode_etdump((tmp_path / "x.etdp").read_bytes())
    assert [r.name for r in etdump.run_data] == ["Default", "Execute"]
    names = [e.profile_event.name for e in etdump.run_data[1].events if e.profile_event]
    assert names[-1] == "Method::execute" and "OPERATOR_CALL" in names
    assert (tmp_path / "debug.bin").stat().st_size == 1 << 16


def test_no_output_on_file_descriptors(mlp_pte, mlp_input, capfd):
    module = pl._load_for_executorch_from_buffer(mlp_pte)
    module.forward([mlp_input])
    with pytest.raises(RuntimeError):
        module.forward([np.zeros((5, 16), np.float32)])
    with pytest.raises(RuntimeError):
        pl._load_program_from_buffer(b"garbage" * 10)
    assert capfd.readouterr() == ("", "")


# --------------------------------------------------------- options and backends


class _Backend(backends.BackendInterface):
    pass


@pytest.fixture
def test_backend(monkeypatch):
    monkeypatch.setattr(backends, "_OPTIONS", {})
    backends.get_backend("")  # load the built-in ones first
    monkeypatch.setitem(backends._BACKENDS, "TestBackend", _Backend())
    return "TestBackend"


def test_backend_options(test_backend):
    assert test_backend in pl._get_registered_backend_names()
    assert pl._is_available(test_backend) and not pl._is_available("Nope")
    pl._set_option(test_backend, {"threads": 4, "mode": "fast", "on": True})
    assert pl._get_option(test_backend, {"threads": 0, "mode": "", "other": 7}) == {
        "threads": 4,
        "mode": "fast",
        "other": 7,
    }
    with pytest.raises(
        RuntimeError, match=r"^Failed to set options for backend Nope, error: 0x20: "
    ):
        pl._set_option("Nope", {"a": 1})
    with pytest.raises(
        RuntimeError, match=r"^Failed to get options for backend Nope, error: 0x20: "
    ):
        pl._get_option("Nope", {"a": 1})
    with raises(TypeError, "Backend options must be a dict"):
        pl._set_option(test_backend, [("a", 1)])
    with raises(TypeError, "Backend option a must be a bool, int or str"):
        pl._set_option(test_backend, {"a": 1.5})
    with raises(ValueError, "Backend option a does not fit an int"):
        pl._set_option(test_backend, {"a": 2**31})
    with raises(ValueError, "Backend option key is too long: " + "k" * 64):
        pl._set_option(test_backend, {"k" * 64: 1})
    with raises(ValueError, "Backend option a is too long"):
        pl._set_option(test_backend, {"a": "v" * 256})


def test_operator_names():
    names = pl._get_operator_names()
    assert isinstance(names, list) and "aten::add.out" in names


# ------------------------------------------------------- threadpool and profile


def test_threadpool():
    before = pl._threadpool_get_thread_count()
    assert isinstance(before, int) and before >= 1
    try:
        pl._unsafe_reset_threadpool(1)
        assert pl._threadpool_get_thread_count() == 1
    finally:
        pl._unsafe_reset_threadpool(before)
    with raises(ValueError, "num_threads must be at least 1, got 0"):
        pl._unsafe_reset_threadpool(0)


def test_profile_blocks(mlp, mlp_input):
    pl._reset_profile_results()
    assert pl._dump_profile_results() == b""
    mlp.forward([mlp_input])  # not recorded: no block yet
    pl._create_profile_block("warmup")
    mlp.forward([mlp_input])
    pl._create_profile_block("steady")
    mlp.forward([mlp_input])
    mlp.forward([mlp_input])
    dump = pl._dump_profile_results().decode()
    assert re.fullmatch(
        r"block warmup\n  forward: 1 runs, [\d.]+ ms total, [\d.]+ ms mean\n"
        r"block steady\n  forward: 2 runs, [\d.]+ ms total, [\d.]+ ms mean\n",
        dump,
    ), dump
    pl._reset_profile_results()
    assert pl._dump_profile_results() == b""


def test_names_of_the_official_module():
    official_names = {
        "ExecuTorchMethod",
        "ExecuTorchModule",
        "ExecuTorchProgram",
        "MethodMeta",
        "TensorInfo",
        "Verification",
        "_create_profile_block",
        "_dump_profile_results",
        "_get_operator_names",
        "_get_registered_backend_names",
        "_is_available",
        "_load_for_executorch",
        "_load_for_executorch_from_buffer",
        "_load_program",
        "_load_program_from_buffer",
        "_reset_profile_results",
        "_threadpool_get_thread_count",
        "_unsafe_reset_threadpool",
        "_get_option",
        "_set_option",
    }
    assert official_names <= set(dir(pl))
