"""Test cases of a bundled program: ``MethodTestCase`` and ``MethodTestSuite``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyexecutorch.devtools.bundled_program.values import as_array

# The official type names. A value is a tensor (torch or numpy: ``Any`` keeps this
# module torch-free), an int, a bool or a float; inputs and outputs may nest in
# lists, tuples (named ones too) and dicts.
ConfigValue = Any | int | bool | float
MethodInputType = Sequence[ConfigValue]
MethodOutputType = Sequence[Any]
DataContainer = list | tuple | dict


def _flatten(data: Any) -> list[Any]:
    """Leaves of nested lists, tuples (named ones too) and dicts, in order."""
    if isinstance(data, dict):
        return [leaf for key in data for leaf in _flatten(data[key])]
    if isinstance(data, (list, tuple)):
        return [leaf for item in data for leaf in _flatten(item)]
    return [data]


def _checked(data: Any, what: str) -> list[Any]:
    leaves = _flatten(data)
    for i, x in enumerate(leaves):
        if as_array(x) is None and not isinstance(x, (bool, int, float)):
            raise TypeError(
                f"{what} {i} is a {type(x).__name__}; a test case holds tensors, int, bool and float"
            )
    return leaves


class MethodTestCase:
    """Inputs of one call of a method and, optionally, the outputs it must produce."""

    def __init__(
        self, inputs: Sequence[Any], expected_outputs: Sequence[Any] | None = None
    ) -> None:
        self.inputs: list[Any] = _checked(inputs, "input")
        self.expected_outputs: list[Any] = (
            [] if expected_outputs is None else _checked(expected_outputs, "expected output")
        )

    def __repr__(self) -> str:
        return f"MethodTestCase({len(self.inputs)} inputs, {len(self.expected_outputs)} expected outputs)"


@dataclass
class MethodTestSuite:
    """The test cases of one method."""

    method_name: str
    test_cases: Sequence[MethodTestCase]
