"""Every operator the official portable runtime registers has a kernel here."""

from __future__ import annotations

import official
from pyexecutorch.kernels import operator_names


def test_covers_every_official_portable_operator():
    theirs = set(official._portable_lib()._get_operator_names())
    ours = set(operator_names())
    # 240 portable operators, 19 more once the official quantized library is loaded
    assert len(theirs) in (240, 259)
    missing = sorted(theirs - ours)
    assert missing == [], f"operators without a kernel: {missing}"


def test_covers_every_official_quantized_operator():
    lib = official._portable_lib()
    import executorch.kernels.quantized  # noqa: F401 - registers the official quantized kernels

    quantized = {n for n in lib._get_operator_names() if n.startswith("quantized_decomposed::")}
    assert len(quantized) == 19
    missing = sorted(quantized - set(operator_names()))
    assert missing == [], f"quantized operators without a kernel: {missing}"
