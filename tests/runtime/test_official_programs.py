"""The official exporter's programs run in our runtime with eager's outputs."""

from __future__ import annotations

import pytest
from _suite import assert_program_matches_eager

import models
import official
from pyexecutorch.runtime import Runtime

CASES = models.cases(official_exportable=True)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official_program_matches_eager(case):
    assert_program_matches_eager(Runtime.get().load_program(official.official_export(case)), case)
