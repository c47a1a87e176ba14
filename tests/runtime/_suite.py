"""Running a suite case's program in our runtime and comparing with torch eager."""

from __future__ import annotations

from pyexecutorch.runtime import Program
from tests import models, official


def _run(method, inputs):  # noqa: ANN001
    return [official.to_numpy(x) for x in method.execute(list(inputs))]


def assert_program_matches_eager(program: Program, case: models.ModelCase) -> None:
    """Every method of ``case`` (every call of a stateful one, every input set of the
    forward method, every constant method) gives eager's outputs."""
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
        assert [official.to_numpy(x).tolist() for x in got] == [
            official.to_numpy(x).tolist() for x in want
        ]
