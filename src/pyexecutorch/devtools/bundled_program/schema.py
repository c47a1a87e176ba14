"""The bundled-program tables under the official
``executorch.devtools.bundled_program.schema`` path; described once in
:mod:`pyexecutorch.schema.bundled_program`."""

from pyexecutorch.schema.bundled_program import (
    Bool,
    BundledMethodTestCase,
    BundledMethodTestSuite,
    BundledProgram,
    Double,
    Int,
    Tensor,
    Value,
)

__all__ = [
    "Bool",
    "BundledMethodTestCase",
    "BundledMethodTestSuite",
    "BundledProgram",
    "Double",
    "Int",
    "Tensor",
    "Value",
]
