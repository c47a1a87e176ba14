"""``BundledProgram``: a program and its method test suites, checked against the program."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from pyexecutorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
from pyexecutorch.devtools.bundled_program.values import as_array, to_value
from pyexecutorch.schema import bundled_program as schema
from pyexecutorch.schema.program import Bool, Double, Int, Tensor
from pyexecutorch.schema.pte import decode_pte
from pyexecutorch.schema.scalar_type import SCALAR_TYPE_NAME, scalar_type_of


class BundledProgramError(ValueError, AssertionError):
    """A test suite that does not fit the program: an unknown method, a wrong number of
    inputs or outputs. An AssertionError too, as the official BundledProgram raises."""


class BundledValueTypeError(TypeError, AssertionError):
    """A test case value of the wrong type for the method's declared input or output
    (an AssertionError too, as the official BundledProgram raises)."""


# Which Python scalar types a program's non-tensor input accepts.
_SCALAR_INPUTS = {Int: (int,), Bool: (bool,), Double: (float,)}


def _program_bytes(program: Any) -> bytes:
    """The ``.pte`` of an executorch program manager (ours or the official one) or of bytes."""
    if isinstance(program, (bytes, bytearray, memoryview)):
        return bytes(program)
    buffer = getattr(program, "buffer", None)
    if buffer is None:
        raise TypeError(
            f"expected an ExecutorchProgramManager or the bytes of a .pte, got {type(program).__name__}"
        )
    return bytes(buffer)


class BundledProgram:
    """A program with test cases for some of its methods.

    ``executorch_program`` is an ``ExecutorchProgramManager`` (ours or the
    official one) or ``.pte`` bytes; or give ``pte_file_path``. Test cases
    without expected outputs get them from ``eager_model`` when given (its
    method of the suite's name called on the inputs).
    """

    def __init__(
        self,
        executorch_program: Any = None,
        method_test_suites: Sequence[MethodTestSuite] = (),
        pte_file_path: str | os.PathLike | None = None,
        *,
        eager_model: Any = None,
    ) -> None:
        if (executorch_program is None) == (pte_file_path is None):
            raise ValueError("give exactly one of executorch_program and pte_file_path")
        if executorch_program is not None:
            self.program = _program_bytes(executorch_program)
        else:
            with open(pte_file_path, "rb") as f:
                self.program = f.read()
        self.executorch_program = executorch_program
        self.method_test_suites = sorted(method_test_suites, key=lambda s: s.method_name)
        if eager_model is not None:
            self._expected_from_eager(eager_model)
        self._check()

    def _expected_from_eager(self, model: Any) -> None:
        import torch  # noqa: PLC0415 - only for computing expected outputs

        for suite in self.method_test_suites:
            fn = getattr(model, suite.method_name)
            for case in suite.test_cases:
                if case.expected_outputs:
                    continue
                args = [
                    torch.from_numpy(x.copy())
                    if (x := as_array(v)) is not None and not isinstance(v, torch.Tensor)
                    else v
                    for v in case.inputs
                ]
                with torch.no_grad():
                    out = fn(*args)
                case.expected_outputs = MethodTestCase([], out).expected_outputs

    def _check(self) -> None:
        """Every suite names a method, and every case fits its inputs and outputs."""
        plans = {p.name: p for p in decode_pte(self.program).program.execution_plan}
        for suite in self.method_test_suites:
            plan = plans.get(suite.method_name)
            if plan is None:
                raise BundledProgramError(
                    f"test suite for method {suite.method_name!r}: the program has no such method "
                    f"(it has {sorted(plans)})"
                )
            for c, case in enumerate(suite.test_cases):
                where = f"method {suite.method_name!r} test case {c}"
                if len(case.inputs) != len(plan.inputs):
                    raise BundledProgramError(
                        f"{where}: {len(case.inputs)} inputs given, the method takes {len(plan.inputs)}"
                    )
                for i, (x, j) in enumerate(zip(case.inputs, plan.inputs, strict=True)):
                    self._check_value(x, plan.values[j].val, f"{where}: input {i}")
                if case.expected_outputs and len(case.expected_outputs) != len(plan.outputs):
                    raise BundledProgramError(
                        f"{where}: {len(case.expected_outputs)} expected outputs given, the method "
                        f"returns {len(plan.outputs)}"
                    )
                for i, (x, j) in enumerate(zip(case.expected_outputs, plan.outputs, strict=False)):
                    self._check_value(x, plan.values[j].val, f"{where}: expected output {i}")

    @staticmethod
    def _check_value(x: Any, declared: Any, what: str) -> None:
        arr = as_array(x)
        if isinstance(declared, Tensor):
            if arr is None:
                raise BundledValueTypeError(
                    f"{what} is a {type(x).__name__}, the method declares a tensor"
                )
            got = scalar_type_of(arr.dtype)
            if got != declared.scalar_type:
                raise BundledValueTypeError(
                    f"{what} is {SCALAR_TYPE_NAME.get(got, got)}, the method declares "
                    f"{SCALAR_TYPE_NAME.get(declared.scalar_type, declared.scalar_type)}"
                )
            return
        accepted = _SCALAR_INPUTS.get(type(declared))
        if accepted is not None and (arr is not None or type(x) not in accepted):
            raise BundledValueTypeError(
                f"{what} is a {type(x).__name__}, the method declares {type(declared).__name__}"
            )

    def serialize_to_schema(self) -> schema.BundledProgram:
        suites = []
        for suite in self.method_test_suites:
            cases = []
            for c, case in enumerate(suite.test_cases):
                where = f"method {suite.method_name!r} test case {c}"
                cases.append(
                    schema.BundledMethodTestCase(
                        inputs=[
                            to_value(x, f"{where}: input {i}") for i, x in enumerate(case.inputs)
                        ],
                        expected_outputs=[
                            to_value(x, f"{where}: expected output {i}")
                            for i, x in enumerate(case.expected_outputs)
                        ],
                    )
                )
            suites.append(schema.BundledMethodTestSuite(suite.method_name, cases))
        return schema.BundledProgram(
            version=schema.SCHEMA_VERSION, method_test_suites=suites, program=self.program
        )
