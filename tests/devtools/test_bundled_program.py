"""Bundled programs: interop both ways with the official tools, verification errors, the CLI."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch import portable_lib as pl
from pyexecutorch.cli.main import main
from pyexecutorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
from pyexecutorch.devtools.bundled_program.core import BundledProgram
from pyexecutorch.devtools.bundled_program.runtime import BundledVerificationError
from pyexecutorch.devtools.bundled_program.serialize import (
    deserialize_from_flatbuffer_to_bundled_program,
    serialize_from_bundled_program_to_flatbuffer,
)
from pyexecutorch.schema.bundled_program import PROGRAM_ALIGNMENT, Tensor
from tests import models, official
from tests.cli.conftest import run_blocked_torch


@pytest.fixture(scope="module")
def mlp():
    case = models.CASES_BY_NAME["mlp"]
    model = case.make().eval()
    inputs = [case.inputs(), (models.randn(4, 16, seed=1),)]
    return official.official_export(case), model, inputs


def ours(pte, model, inputs, **kw):
    suite = MethodTestSuite("forward", [MethodTestCase(list(x)) for x in inputs])
    return serialize_from_bundled_program_to_flatbuffer(
        BundledProgram(pte, [suite], eager_model=model, **kw)
    )


def theirs(pte, model, inputs, expected=None):
    """The official tools' bundled program of ``pte`` (read from a file, as they allow)."""
    import tempfile

    from executorch.devtools import BundledProgram as OfficialBundledProgram
    from executorch.devtools.bundled_program.config import MethodTestCase as Case
    from executorch.devtools.bundled_program.config import MethodTestSuite as Suite
    from executorch.devtools.bundled_program.serialize import (
        serialize_from_bundled_program_to_flatbuffer as serialize,
    )

    with torch.no_grad():
        cases = [
            Case(list(x), expected[i] if expected else [model(*x)]) for i, x in enumerate(inputs)
        ]
    with tempfile.NamedTemporaryFile(suffix=".pte") as f:
        f.write(pte)
        f.flush()
        return serialize(
            OfficialBundledProgram(None, [Suite("forward", cases)], pte_file_path=f.name)
        )


def test_ours_verifies_in_the_official_runtime(mlp):
    from executorch.extension.pybindings import portable_lib as official_pl

    pte, model, inputs = mlp
    data = ours(pte, model, inputs)
    program = deserialize_from_flatbuffer_to_bundled_program(data)
    # The embedded program keeps its alignment and bytes.
    assert bytes(program.program) == pte
    assert data.find(pte) % PROGRAM_ALIGNMENT == 0
    bundled = official_pl._load_bundled_program_from_buffer(data)
    for i, x in enumerate(inputs):
        [out] = bundled.verify_result_with_bundled_expected_output("forward", i)
        np.testing.assert_allclose(out.numpy(), model(*x).detach().numpy(), rtol=1e-5, atol=1e-6)
    module = official_pl._load_for_executorch_from_bundled_program(bundled, None, False, 0)
    assert module.forward(list(inputs[0]))[0].shape == (4, 8)


def test_theirs_verifies_in_ours(mlp):
    pte, model, inputs = mlp
    bundled = pl._load_bundled_program_from_buffer(theirs(pte, model, inputs))
    assert bundled.method_names == ["forward"] and bundled.num_test_cases("forward") == 2
    for i, x in enumerate(inputs):
        [out] = bundled.verify_result_with_bundled_expected_output("forward", i)
        np.testing.assert_allclose(
            np.asarray(out), model(*x).detach().numpy(), rtol=1e-5, atol=1e-6
        )
    module = pl._load_for_executorch_from_bundled_program(bundled, enable_etdump=True)
    module.forward([inputs[0][0].numpy()])
    assert module.has_etdump()


def test_same_tables_as_the_official_serializer(mlp):
    pte, model, inputs = mlp
    ours_tables = deserialize_from_flatbuffer_to_bundled_program(ours(pte, model, inputs))
    theirs_tables = deserialize_from_flatbuffer_to_bundled_program(theirs(pte, model, inputs))
    for a, b in zip(
        ours_tables.method_test_suites[0].test_cases,
        theirs_tables.method_test_suites[0].test_cases,
        strict=True,
    ):
        for x, y in zip(a.inputs + a.expected_outputs, b.inputs + b.expected_outputs, strict=True):
            assert isinstance(x.val, Tensor)
            assert (x.val.scalar_type, x.val.sizes, x.val.dim_order) == (
                y.val.scalar_type,
                y.val.sizes,
                y.val.dim_order,
            )
            np.testing.assert_allclose(
                np.frombuffer(x.val.data, np.float32),
                np.frombuffer(y.val.data, np.float32),
                rtol=1e-6,
            )


def test_mismatch_names_the_output_and_the_worst_element(mlp):
    from executorch.extension.pybindings import portable_lib as official_pl

    pte, model, inputs = mlp
    with torch.no_grad():
        wrong = model(*inputs[0]).clone()
    wrong[2, 5] += 0.5
    wrong[1, 1] += 0.01
    data = theirs(pte, model, inputs[:1], expected=[[wrong]])
    bundled = pl._load_bundled_program_from_buffer(data)
    with pytest.raises(BundledVerificationError) as info:
        bundled.verify_result_with_bundled_expected_output("forward", 0, rtol=1e-5, atol=1e-8)
    message = str(info.value)
    assert message.startswith(
        "method 'forward' test case 0: output 0 differs from the bundled expected output: "
        "2 of 32 elements differ; the worst at index (2, 5): got "
    )
    assert f"expected {np.float32(wrong[2, 5])!r}" in message
    assert "> atol 1e-08 + rtol 1e-05 * |expected|" in message
    # The official runtime refuses it too.
    with pytest.raises(RuntimeError, match="Result verification failed"):
        official_pl._load_bundled_program_from_buffer(
            data
        ).verify_result_with_bundled_expected_output("forward", 0)
    # A loose enough tolerance accepts it.
    bundled.verify_result_with_bundled_expected_output("forward", 0, rtol=0, atol=0.6)


def test_bad_test_cases(mlp):
    pte, model, inputs = mlp
    with pytest.raises(
        ValueError,
        match=r"test suite for method 'nope': the program has no such method \(it has \['forward'\]\)",
    ):
        BundledProgram(pte, [MethodTestSuite("nope", [MethodTestCase(list(inputs[0]))])])
    with pytest.raises(
        ValueError, match="method 'forward' test case 0: 2 inputs given, the method takes 1"
    ) as caught:
        BundledProgram(pte, [MethodTestSuite("forward", [MethodTestCase([inputs[0][0]] * 2)])])
    assert isinstance(caught.value, AssertionError)  # what the official BundledProgram raises
    with pytest.raises(
        TypeError, match="method 'forward' test case 0: input 0 is Long, the method declares Float"
    ) as caught:
        BundledProgram(
            pte,
            [MethodTestSuite("forward", [MethodTestCase([torch.zeros(4, 16, dtype=torch.int64)])])],
        )
    assert isinstance(caught.value, AssertionError)
    with pytest.raises(
        TypeError, match="input 0 is a str; a test case holds tensors, int, bool and float"
    ):
        MethodTestCase(["x"])
    bundled = pl._load_bundled_program_from_buffer(ours(pte, model, inputs))
    with pytest.raises(
        IndexError, match="method 'forward' has 2 bundled test cases; no test case 5"
    ):
        bundled.verify_result_with_bundled_expected_output("forward", 5)
    with pytest.raises(RuntimeError, match="not a bundled program: file identifier b'ET12'"):
        pl._load_bundled_program_from_buffer(pte)


def test_cli_verify(mlp, tmp_path, capsys):
    pte, model, inputs = mlp
    good, bad = tmp_path / "good.bpte", tmp_path / "bad.bpte"
    good.write_bytes(ours(pte, model, inputs))
    with torch.no_grad():
        wrong = model(*inputs[1]) + 1.0
    bad.write_bytes(theirs(pte, model, inputs, expected=[[model(*inputs[0])], [wrong]]))
    assert main(["run", str(good), "--verify"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("forward case 0: pass (") and out[1].startswith(
        "forward case 1: pass ("
    )
    assert out[2] == "2 of 2 test case(s) passed (rtol 1e-05, atol 1e-08)"
    assert main(["run", str(bad), "--verify"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("forward case 1: FAIL: method 'forward' test case 1: output 0 differs")
    assert out[2] == "1 of 2 test case(s) passed (rtol 1e-05, atol 1e-08)"
    r = run_blocked_torch("run", good, "--verify")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "2 of 2 test case(s) passed (rtol 1e-05, atol 1e-08)"
