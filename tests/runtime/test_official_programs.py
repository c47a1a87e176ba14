"""The official exporter's programs run in our runtime with eager's outputs."""

from __future__ import annotations

import pytest

import models
import official
from pyexecutorch.runtime import Runtime

CASES = models.cases(official_exportable=True)


def _run(method, inputs):
    return [official.to_numpy(x) for x in method.execute(list(inputs))]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official_program_matches_eager(case):
    pte = official.official_export(case)
    program = Runtime.get().load_program(pte)
    tol = {"rtol": case.rtol, "atol": case.atol}
    if case.stateful:
        method = program.load_method("forward")
        for call, (inputs, expected) in enumerate(
            zip(case.call_sequence(), official.eager_call_outputs(case), strict=True)
        ):
            official.assert_close(case, _run(method, inputs), expected, what=f"call {call}", **tol)
        return
    for name, (_module, inputs, _dyn) in case.programs().items():
        method = program.load_method(name)
        input_sets = case.all_inputs() if name == "forward" else [inputs]
        for k, inp in enumerate(input_sets):
            expected = official.eager_outputs(case, inp, method=name)
            official.assert_close(
                case, _run(method, inp), expected, what=f"{name} inputs {k}", **tol
            )
    for name, value in case.constant_methods.items():
        got = program.load_method(name).execute([])
        assert [official.to_numpy(x).tolist() for x in got] == [
            official.to_numpy(x).tolist() for x in official.flatten_outputs(value)
        ]
