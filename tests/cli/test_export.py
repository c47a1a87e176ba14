"""``pyexecutorch export`` with our exporter, and its argument parsing."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from pyexecutorch.cli.common import DynamicDim, TensorSpec, UsageError, parse_dynamic, parse_spec
from pyexecutorch.cli.export import parse_inputs, parse_methods
from pyexecutorch.runtime import Runtime

# --------------------------------------------------------------------------------------
# Specs


def test_parse_spec():
    assert parse_spec("1x3x224x224:float32,8:int64") == [
        TensorSpec((1, 3, 224, 224), "float32"),
        TensorSpec((8,), "int64"),
    ]
    assert parse_spec("4x16") == [TensorSpec((4, 16), "float32")]
    assert parse_spec("scalar:int64, 2:bool") == [TensorSpec((), "int64"), TensorSpec((2,), "bool")]
    assert parse_spec("batchx16:half") == [TensorSpec(("batch", 16), "float16")]
    assert parse_spec("1*ctx*8:long") == [TensorSpec((1, "ctx", 8), "int64")]
    assert str(parse_spec("2x3:f32")[0]) == "2x3:float32"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "bad --inputs spec '': it is empty"),
        (
            "1x3:float33",
            "bad --inputs spec '1x3:float33': input 0 ('1x3:float33'): unknown dtype 'float33'; use one of "
            "bfloat16, bool, float16, float32, float64, int16, int32, int64, int8, uint8",
        ),
        (
            "4,1x-3",
            "bad --inputs spec '4,1x-3': input 1 ('1x-3'): dimension '-3' is neither a size nor a name",
        ),
        ("1x", "bad --inputs spec '1x': input 0 ('1x'): dimension '' is neither a size nor a name"),
    ],
)
def test_parse_spec_errors(spec, message):
    with pytest.raises(UsageError) as e:
        parse_spec(spec)
    assert str(e.value) == message


def test_parse_dynamic():
    assert parse_dynamic("seq=1:128") == DynamicDim("seq", 1, 128)
    assert parse_dynamic("0.1=2:64") == DynamicDim("0.1", 2, 64, 0, 1)
    for text, message in [
        (
            "seq",
            "bad --dynamic 'seq': expected NAME=MIN:MAX or INPUT.DIM=MIN:MAX (e.g. seq=1:128 or 0.1=1:128)",
        ),
        ("seq=a:3", "bad --dynamic 'seq=a:3': MIN and MAX must be integers"),
        ("seq=5:3", "bad --dynamic 'seq=5:3': need 0 <= MIN <= MAX"),
        ("1-x=1:3", "bad --dynamic '1-x=1:3': '1-x' is neither a dimension name nor INPUT.DIM"),
    ]:
        with pytest.raises(UsageError) as e:
            parse_dynamic(text)
        assert str(e.value) == message


def test_parse_methods_and_inputs():
    assert parse_methods([]) == {"forward": "forward"}
    assert parse_methods(["predict"]) == {"predict": "forward"}
    methods = parse_methods(["forward", "twice=double"])
    assert methods == {"forward": "forward", "twice": "double"}
    specs = parse_inputs(["2x16", "twice=3x16"], methods)
    assert specs == {
        "forward": [TensorSpec((2, 16), "float32")],
        "twice": [TensorSpec((3, 16), "float32")],
    }
    with pytest.raises(UsageError, match="bad --method 'a=b=c'"):
        parse_methods(["a=b=c"])
    with pytest.raises(UsageError, match="--inputs is given twice"):
        parse_inputs(["2x16", "3x16"], methods)


# --------------------------------------------------------------------------------------
# Exporting files


def _eager(model_file, x, method="forward"):
    import importlib.util

    spec = importlib.util.spec_from_file_location("net_for_test", model_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with torch.no_grad():
        return getattr(mod.Net(), method)(torch.from_numpy(x)).numpy()


def _run(pte, x, method="forward", data_files=()):
    program = Runtime.get().load_program(str(pte), data_files=list(data_files))
    (out,) = program.load_method(method).execute([x])
    return np.asarray(out.numpy() if hasattr(out, "numpy") else out)


def test_export_file_target(cli, model_file, tmp_path):
    out = tmp_path / "net.pte"
    r = cli("export", f"{model_file}:Net", "--inputs", "2x16", "-o", out)
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    assert re.fullmatch(r"\[1/5\] export        forward\(2x16:float32\)  \S+ \S+", lines[0])
    assert re.fullmatch(r"\[2/5\] to_edge       \S+ \S+", lines[1])
    assert lines[2] == "[3/5] lowering      skipped (no --backend)"
    assert re.fullmatch(r"\[4/5\] to_executorch \S+ \S+", lines[3])
    assert re.fullmatch(rf"\[5/5\] write         {re.escape(str(out))}  \S+ \S+", lines[4])
    assert re.fullmatch(
        rf"{re.escape(str(out))}: \d+\.\d KB, 1 method \(forward\), arenas forward=\[\d+ B\], delegated 0%",
        lines[5],
    )
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _eager(model_file, x), rtol=1e-5, atol=1e-6)


def test_export_module_target_with_factory_inputs(cli, model_file, tmp_path, monkeypatch):
    monkeypatch.chdir(model_file.parent)  # MODULE:NAME imports from the current directory
    out = tmp_path / "net.pte"
    r = cli("export", "net:make_with_inputs", "-o", out)
    assert r.rc == 0, r.err
    assert r.out.startswith("[1/5] export        forward(2x16:float32)")
    assert out.stat().st_size > 0


def test_export_dynamic_and_two_methods(cli, model_file, tmp_path):
    out = tmp_path / "dyn.pte"
    r = cli(
        "export", f"{model_file}:make", "--inputs", "batchx16", "--dynamic", "batch=1:8",
        "--method", "forward", "--method", "twice=double", "-o", out,
    )  # fmt: skip
    assert r.rc == 0, r.err
    assert r.out.startswith("[1/5] export        forward(4x16:float32), twice(4x16:float32)")
    assert "2 methods (forward, twice)" in r.out or "2 methods (twice, forward)" in r.out
    for n in (1, 3, 8):
        x = np.random.default_rng(n).standard_normal((n, 16)).astype(np.float32)
        np.testing.assert_allclose(_run(out, x), _eager(model_file, x), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            _run(out, x, "twice"), _eager(model_file, x, "double"), rtol=1e-5, atol=1e-6
        )


def test_export_by_input_dimension(cli, model_file, tmp_path):
    out = tmp_path / "dyn.pte"
    r = cli("export", f"{model_file}:Net", "--inputs", "2x16", "--dynamic", "0.0=1:4", "-o", out)
    assert r.rc == 0, r.err
    meta = Runtime.get().load_program(str(out)).metadata("forward")
    assert meta.input_tensor_meta(0).sizes() == (4, 16)


@pytest.mark.parametrize(
    ("args", "rc", "message"),
    [
        (
            ["{file}:Net", "--inputs", "2x16:float33"],
            2,
            "bad --inputs spec '2x16:float33': input 0 ('2x16:float33'): unknown dtype",
        ),
        (["{file}:Nope", "--inputs", "2x16"], 1, "{file} has no attribute 'Nope'"),
        (
            ["{file}:NOT_A_MODULE", "--inputs", "2x16"],
            1,
            "{file}:NOT_A_MODULE is a int, not a torch.nn.Module, a class or a factory",
        ),
        (
            ["{file}:broken", "--inputs", "2x16"],
            1,
            "calling {file}:broken() failed: RuntimeError: no weights here",
        ),
        (["{dir}/missing.py:Net", "--inputs", "2x16"], 1, "model file not found: {dir}/missing.py"),
        (
            ["no_such_module_xyz:Net", "--inputs", "2x16"],
            1,
            "cannot import 'no_such_module_xyz': No module named 'no_such_module_xyz'",
        ),
        (
            ["justaname", "--inputs", "2x16"],
            2,
            "bad TARGET 'justaname': expected MODULE:NAME or FILE.py:NAME",
        ),
        (
            ["{file}:Net"],
            2,
            "method 'forward' needs example inputs: pass --inputs SPEC (e.g. --inputs 1x16:float32)",
        ),
        (
            ["{file}:Net", "--inputs", "seqx16"],
            2,
            "dimension 'seq' of input 0 of 'forward' has no bounds: add --dynamic seq=MIN:MAX",
        ),
        (
            ["{file}:Net", "--inputs", "2x16", "--dynamic", "seq=1:4"],
            2,
            "--dynamic seq: no dimension of the inputs of 'forward' is named 'seq'",
        ),
        (
            ["{file}:Net", "--inputs", "2x16", "--dynamic", "0.0=3:4"],
            2,
            "--dynamic 0.0=3:4: input 0 has size 2 there, outside the bounds",
        ),
        (["{file}:Net", "--inputs", "2x15"], 1, "export failed: RuntimeError: "),
        (
            ["{file}:Net", "--inputs", "2x16", "--method", "twice=triple"],
            1,
            "Net has no method 'triple'",
        ),
    ],
)
def test_export_errors(cli, model_file, tmp_path, args, rc, message):
    fmt = {"file": str(model_file), "dir": str(tmp_path)}
    r = cli("export", *[a.format(**fmt) for a in args], "-o", tmp_path / "x.pte")
    assert r.rc == rc
    assert r.err.startswith(f"pyexecutorch export: error: {message.format(**fmt)}")
    assert r.err.count("\n") == 1
    assert not (tmp_path / "x.pte").exists()


def test_export_with_the_xnnpack_backend(cli, model_file, tmp_path):
    out = tmp_path / "xnn.pte"
    r = cli("export", f"{model_file}:Net", "--inputs", "2x16", "--backend", "xnnpack", "-o", out)
    assert r.rc == 0, r.err
    assert re.fullmatch(r"\[3/5\] lowering      xnnpack  \S+ \S+", r.out.splitlines()[2])
    assert r.out.splitlines()[-1].endswith(", delegated 100%")
    x = np.random.default_rng(2).standard_normal((2, 16)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _eager(model_file, x), rtol=1e-5, atol=1e-6)
    r = cli("inspect", out)
    assert r.rc == 0, r.err
    assert "XnnpackBackend" in r.out
    assert "XNNFullyConnected" in r.out


def test_export_backend_that_does_not_exist_is_a_usage_error(cli, model_file, tmp_path):
    r = cli(
        "export",
        f"{model_file}:Net",
        "--inputs",
        "2x16",
        "--backend",
        "npu",
        "-o",
        tmp_path / "x.pte",
    )
    assert r.rc == 2
    assert "invalid choice: 'npu'" in r.err


def test_export_external_constants(cli, model_file, tmp_path):
    out = tmp_path / "ext.pte"
    r = cli("export", f"{model_file}:Net", "--inputs", "2x16", "--external-constants", "-o", out)
    assert r.rc == 0, r.err
    ptds = sorted(tmp_path.glob("*.ptd"))
    assert ptds, r.out
    assert "external data" in r.out.splitlines()[-1]
    x = np.ones((2, 16), np.float32)
    np.testing.assert_allclose(
        _run(out, x, data_files=ptds), _eager(model_file, x), rtol=1e-5, atol=1e-6
    )
    r = cli("run", out, "--data", *ptds)
    assert r.rc == 0, r.err
    r = cli("inspect", ptds[0])
    assert r.rc == 0, r.err
    assert "flat tensor data" in r.out


def test_export_with_the_example_backend(cli, model_file, tmp_path):
    out = tmp_path / "ex.pte"
    r = cli("export", f"{model_file}:Net", "--inputs", "2x16", "--backend", "example", "-o", out)
    assert r.rc == 0, r.err
    assert re.fullmatch(r"\[3/5\] lowering      example  \S+ \S+", r.out.splitlines()[2])
    assert r.out.splitlines()[-1].endswith(", delegated 100%")
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _eager(model_file, x), rtol=1e-5, atol=1e-6)
    r = cli("inspect", out)
    assert r.rc == 0, r.err
    assert "ExampleBackend" in r.out
    assert "0 kernel call(s) of 0 operator(s), 1 delegate call(s)" in r.out


_WHILE_FILE = """
import torch
from torch._higher_order_ops.while_loop import while_loop


class Halve(torch.nn.Module):
    def forward(self, x):
        def cond_fn(i, acc):
            return i < 3

        def body_fn(i, acc):
            return i + 1, acc * 0.5 + 1.0

        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))[1]
"""


def test_export_while_loop_only_when_asked(cli, tmp_path):
    model = tmp_path / "halve.py"
    model.write_text(_WHILE_FILE)
    out = tmp_path / "halve.pte"
    r = cli("export", f"{model}:Halve", "--inputs", "2x3", "-o", out)
    assert r.rc == 1 and not out.exists()
    assert r.err.startswith(
        "pyexecutorch export: error: to_executorch failed: InternalError: Failed with error: "
        "Unsupported control flow operator: while_loop (node while_loop of method 'forward')."
    )
    assert "emit_while_loop=True" in r.err
    r = cli("export", f"{model}:Halve", "--inputs", "2x3", "--emit-while-loop", "-o", out)
    assert r.rc == 0, r.err
    for seed in (0, 1):
        x = np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32)
        np.testing.assert_allclose(_run(out, x), ((x * 0.5 + 1) * 0.5 + 1) * 0.5 + 1, rtol=1e-6)
