"""Every suite model through pyexecutorch.exir (to_edge -> to_executorch -> .pte),
run in the OFFICIAL runtime and compared with torch eager."""

from __future__ import annotations

import pytest

from tests import models, official
from tests.exir._compile_support import assert_matches, compile_case

CASES = models.CASES


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_runs_in_official_runtime(case: models.ModelCase):
    _, pte = compile_case(case.name)
    runner = official.OfficialRunner(pte)
    assert runner.method_names() == set(case.programs()) | set(case.constant_methods)
    if case.stateful:
        # One loaded method, several calls: the mutable buffers keep their state.
        expected = official.eager_call_outputs(case)
        for i, inputs in enumerate(case.call_sequence()):
            got = runner.run(inputs)
            official.assert_close(case, got, expected[i], what=f"call {i}")
        return
    for method, (_, inputs, _) in case.programs().items():
        got = runner.run(inputs, method)
        assert_matches(
            case, pte, got, official.eager_outputs(case, inputs, method), inputs, method, method
        )
    # Other sizes (dynamic shapes) and the other branch (cond), on the same loaded method.
    for k, inputs in enumerate(case.all_inputs()[1:]):
        got = runner.run(inputs)
        assert_matches(
            case, pte, got, official.eager_outputs(case, inputs), inputs, "forward", f"alt {k}"
        )


def test_constant_methods_return_their_values():
    case = models.get_case("multi_method")
    _, pte = compile_case(case.name)
    runner = official.OfficialRunner(pte)
    for name, value in case.constant_methods.items():
        out = runner.module.run_method(name, ())
        assert list(out) == [value], name


def test_dynamic_batch_every_size():
    case = models.get_case("dynamic_batch")
    _, pte = compile_case(case.name)
    runner = official.OfficialRunner(pte)
    for batch in range(1, 9):
        x = models.randn(batch, 16, seed=batch)
        official.assert_close(
            case, runner.run((x,)), official.eager_outputs(case, (x,)), what=f"batch {batch}"
        )


def test_mutable_buffer_many_calls():
    case = models.get_case("mutable_buffer")
    _, pte = compile_case(case.name)
    runner = official.OfficialRunner(pte)
    module = case.make()
    for i in range(6):
        inputs = (models.randn(3, 4, seed=100 + i),)
        expected = official.eager_outputs(case, inputs, module=module)
        official.assert_close(case, runner.run(inputs), expected, what=f"call {i}")
