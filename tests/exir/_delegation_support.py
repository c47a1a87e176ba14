"""Helpers of the delegation tests: lowering suite cases through the example
backend and running them in pyexecutorch's runtime."""

from __future__ import annotations

import warnings

import numpy as np

from pyexecutorch.backends.example.aot import ExamplePartitioner
from pyexecutorch.exir import to_edge, to_edge_transform_and_lower
from pyexecutorch.runtime import Runtime
from tests import models, official

FLOWS = ("to_edge_transform_and_lower", "to_edge_to_backend")


def lower(case: models.ModelCase, flow: str, partitioners=None):  # noqa: ANN001
    """The case's ``EdgeProgramManager`` lowered through the example backend."""
    partitioners = partitioners if partitioners is not None else [ExamplePartitioner()]
    constant_methods = case.constant_methods or None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        programs = models.export(case)
        if flow == "to_edge_transform_and_lower":
            return to_edge_transform_and_lower(
                programs, partitioner=partitioners, constant_methods=constant_methods
            )
        edge = to_edge(programs, constant_methods=constant_methods)
        for p in partitioners:
            edge = edge.to_backend(p)
        return edge


def check_runs_like_eager(case: models.ModelCase, pte: bytes) -> None:
    """Every method of ``pte``, on every input of the case, matches torch eager."""
    program = Runtime.get().load_program(pte)
    for method, (_module, inputs, _) in case.programs().items():
        loaded = program.load_method(method)
        if method == "forward" and case.stateful:
            for i, (x, want) in enumerate(
                zip(case.call_sequence(), official.eager_call_outputs(case), strict=True)
            ):
                got = [np.asarray(o) for o in loaded.execute(list(x))]
                official.assert_close(case, got, want, what=f"{method} call {i}")
            continue
        all_inputs = case.all_inputs() if method == "forward" else [inputs]
        for i, x in enumerate(all_inputs):
            want = official.eager_outputs(case, x, method)
            got = [np.asarray(o) for o in loaded.execute(list(x))]
            official.assert_close(case, got, want, what=f"{method} input {i}")
