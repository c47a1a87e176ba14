"""Every suite model, compiled by our exporter, runs with eager's outputs on the compiled tier.

tests/runtime/test_our_programs.py runs the same programs on the numpy tier
(the suite's default, see tests/conftest.py), so together they run the suite
both ways.
"""

from __future__ import annotations

import pytest

from pyexecutorch.runtime import Runtime
from tests import models
from tests.runtime._suite import assert_program_matches_eager
from tests.runtime.test_our_programs import _compile

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

CASES = models.CASES


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_our_program_matches_eager_compiled(case):
    program = Runtime.get().load_program(_compile(case), jit=True)
    assert program.jit
    assert_program_matches_eager(program, case)
