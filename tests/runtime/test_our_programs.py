"""Our compiler's programs run in our runtime with eager's outputs, every suite model."""

from __future__ import annotations

import pytest

import models
import official
from pyexecutorch.runtime import Runtime

CASES = models.CASES


def _compile(case) -> bytes:  # noqa: ANN001
    import warnings

    from pyexecutorch.exir import to_edge

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge = to_edge(models.export(case), constant_methods=case.constant_methods or None)
        return edge.to_executorch().buffer


def _run(method, inputs):  # noqa: ANN001
    return [official.to_numpy(x) for x in method.execute(list(inputs))]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_our_program_matches_eager(case):
    program = Runtime.get().load_program(_compile(case))
    if case.stateful:
        method = program.load_method("forward")
        for call, (inputs, expected) in enumerate(
            zip(case.call_sequence(), official.eager_call_outputs(case), strict=True)
        ):
            official.assert_close(case, _run(method, inputs), expected, what=f"call {call}")
        return
    for name, (_module, inputs, _dyn) in case.programs().items():
        method = program.load_method(name)
        input_sets = case.all_inputs() if name == "forward" else [inputs]
        for k, inp in enumerate(input_sets):
            expected = official.eager_outputs(case, inp, method=name)
            official.assert_close(case, _run(method, inp), expected, what=f"{name} inputs {k}")
    for name, value in case.constant_methods.items():
        got = program.load_method(name).execute([])
        want = official.flatten_outputs(value)
        assert [official.to_numpy(x).tolist() for x in got] == [x.tolist() for x in want]
