"""Every operator the official portable runtime registers has a kernel here."""

from __future__ import annotations

import official
from pyexecutorch.kernels import operator_names


def test_covers_every_official_portable_operator():
    theirs = set(official._portable_lib()._get_operator_names())
    ours = set(operator_names())
    assert len(theirs) == 240
    missing = sorted(theirs - ours)
    assert missing == [], f"operators without a kernel: {missing}"
