"""The official exporter's programs run in our runtime with eager's outputs."""

from __future__ import annotations

import pytest

from pyexecutorch.runtime import Runtime
from tests import models, official
from tests.runtime._suite import assert_program_matches_eager

CASES = models.cases(official_exportable=True)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official_program_matches_eager(case):
    assert_program_matches_eager(Runtime.get().load_program(official.official_export(case)), case)
