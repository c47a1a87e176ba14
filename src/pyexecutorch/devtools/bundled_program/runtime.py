"""Loading a bundled program and checking its methods against their test cases (no torch).

``BundledModule.verify_result_with_bundled_expected_output`` runs a test
case and compares each output with the expected one as the official
runtime does: same dtype and shape, then ``|got - expected| <= atol + rtol *
|expected|`` element by element (NaN matches NaN; integers and booleans must
be equal).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyexecutorch.devtools.bundled_program.values import as_array, from_value
from pyexecutorch.runtime import Runtime
from pyexecutorch.schema.bundled_program import (
    BundledMethodTestCase,
    decode_bundled_program,
    is_bundled_program,
)
from pyexecutorch.schema.errors import FormatError


class BundledVerificationError(RuntimeError):
    """A method's output differs from its bundled expected output."""


def mismatch(got: Any, expected: Any, rtol: float, atol: float) -> str | None:
    """Why ``got`` is not close to ``expected`` (a sentence), or None when it is."""
    a, b = as_array(got), as_array(expected)
    if (a is None) != (b is None):
        return f"got {'a tensor' if b is None else 'a scalar'}, expected {expected!r}"
    if a is None or b is None:
        return None if got == expected else f"got {got!r}, expected {expected!r}"
    if a.dtype != b.dtype:
        return f"got dtype {a.dtype.name}, expected {b.dtype.name}"
    if a.shape != b.shape:
        return f"got shape {list(a.shape)}, expected {list(b.shape)}"
    if a.size == 0:
        return None
    if a.dtype.kind in "fc":
        x, y = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(invalid="ignore"):
            diff = np.abs(x - y)
            bad = ~((diff <= atol + rtol * np.abs(y)) | (np.isnan(x) & np.isnan(y)) | (x == y))
        score = np.where(bad, np.nan_to_num(diff, nan=np.inf, posinf=np.inf), -1.0)
    else:
        bad = a != b
        score = np.where(bad, 1.0, -1.0)
    if not bad.any():
        return None
    worst = np.unravel_index(int(np.argmax(score)), a.shape)
    index = tuple(int(i) for i in worst)
    return (
        f"{int(bad.sum())} of {a.size} elements differ; the worst at index {index}: "
        f"got {a[worst]!r}, expected {b[worst]!r} (|diff| {abs(float(a[worst]) - float(b[worst])):.6g} "
        f"> atol {atol:g} + rtol {rtol:g} * |expected|)"
    )


class BundledModule:
    """A loaded bundled program: its test cases, and its program to run them on."""

    def __init__(
        self,
        buffer: Any,
        non_const_pool_size: int = 16 * 1024,
        *,
        max_arena_bytes: int | None = None,
        max_instructions: int | None = None,
    ) -> None:
        """``max_arena_bytes`` and ``max_instructions`` bound the embedded program as
        :meth:`Runtime.load_program` does (for bundled programs from untrusted sources)."""
        self._limits = {"max_arena_bytes": max_arena_bytes, "max_instructions": max_instructions}
        data = buffer if isinstance(buffer, bytes) else bytes(memoryview(buffer))
        if not is_bundled_program(data):
            raise FormatError(
                f"not a bundled program: file identifier {bytes(data[4:8])!r}, expected b'BP08'"
            )
        self._data = data
        self.bundled = decode_bundled_program(data)
        self._suites = {s.method_name: s for s in self.bundled.method_test_suites}
        self._program = None

    @property
    def program_bytes(self) -> memoryview:
        """The embedded ``.pte`` (a view into the bundled program)."""
        return self.bundled.program

    @property
    def method_names(self) -> list[str]:
        """Methods that have test cases."""
        return list(self._suites)

    def num_test_cases(self, method_name: str) -> int:
        return len(self._case_list(method_name))

    def _case_list(self, method_name: str) -> list[BundledMethodTestCase]:
        suite = self._suites.get(method_name)
        if suite is None:
            raise KeyError(
                f"bundled program has no test cases for method {method_name!r} "
                f"(it has {sorted(self._suites)})"
            )
        return suite.test_cases

    def _case(self, method_name: str, testset_idx: int) -> BundledMethodTestCase:
        cases = self._case_list(method_name)
        if not 0 <= testset_idx < len(cases):
            raise IndexError(
                f"method {method_name!r} has {len(cases)} bundled test cases; no test case {testset_idx}"
            )
        return cases[testset_idx]

    def inputs(self, method_name: str, testset_idx: int) -> list[Any]:
        case = self._case(method_name, testset_idx)
        where = f"method {method_name!r} test case {testset_idx}: input"
        return [from_value(v, f"{where} {i}") for i, v in enumerate(case.inputs)]

    def expected_outputs(self, method_name: str, testset_idx: int) -> list[Any]:
        case = self._case(method_name, testset_idx)
        where = f"method {method_name!r} test case {testset_idx}: expected output"
        return [from_value(v, f"{where} {i}") for i, v in enumerate(case.expected_outputs)]

    def run_test_case(self, method_name: str, testset_idx: int) -> list[Any]:
        """Run one test case's inputs through the method; its outputs."""
        inputs = self.inputs(method_name, testset_idx)
        if self._program is None:
            self._program = Runtime.get().load_program(self.program_bytes, **self._limits)
        if method_name not in self._program.method_names:
            raise FormatError(
                f"bundled program has test cases for method {method_name!r}, which its program "
                f"does not have (it has {sorted(self._program.method_names)})"
            )
        return self._program.load_method(method_name).execute(inputs)

    def verify_result_with_bundled_expected_output(
        self, method_name: str, testset_idx: int, rtol: float = 1e-5, atol: float = 1e-8
    ) -> list[Any]:
        """Run a test case and check its outputs; the outputs, or :class:`BundledVerificationError`."""
        outputs = self.run_test_case(method_name, testset_idx)
        expected = self.expected_outputs(method_name, testset_idx)
        if expected and len(outputs) != len(expected):
            raise BundledVerificationError(
                f"method {method_name!r} test case {testset_idx}: {len(outputs)} outputs, "
                f"{len(expected)} expected"
            )
        for i, (got, want) in enumerate(zip(outputs, expected, strict=False)):
            why = mismatch(got, want, rtol, atol)
            if why is not None:
                raise BundledVerificationError(
                    f"method {method_name!r} test case {testset_idx}: output {i} differs from the "
                    f"bundled expected output: {why}"
                )
        return outputs
