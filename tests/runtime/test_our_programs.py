"""Our compiler's programs run in our runtime with eager's outputs, every suite model."""

from __future__ import annotations

import warnings

import pytest

from pyexecutorch.exir import ExecutorchBackendConfig, to_edge
from pyexecutorch.runtime import Runtime
from tests import models
from tests.runtime._suite import assert_program_matches_eager

CASES = models.CASES


def _compile(case) -> bytes:  # noqa: ANN001
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge = to_edge(models.export(case), constant_methods=case.constant_methods or None)
        return edge.to_executorch(ExecutorchBackendConfig(**case.backend_options)).buffer


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_our_program_matches_eager(case):
    assert_program_matches_eager(Runtime.get().load_program(_compile(case)), case)
