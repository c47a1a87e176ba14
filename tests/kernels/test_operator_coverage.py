"""Every operator the official portable runtime registers has a kernel here."""

from __future__ import annotations

from pyexecutorch.kernels import operator_names
from tests import official

# Namespaces that the official runtime lists only once an optional library is loaded
# (by another test in the same process): the quantized kernels and the LLM custom ops.
_OPTIONAL_LIBRARIES = ("quantized_decomposed::", "llama::", "preprocess::")


def test_covers_every_official_portable_operator():
    theirs = set(official._portable_lib()._get_operator_names())
    portable = {n for n in theirs if not n.startswith(_OPTIONAL_LIBRARIES)}
    assert len(portable) == 240
    missing = sorted(portable - set(operator_names()))
    assert missing == [], f"operators without a kernel: {missing}"


def test_covers_the_official_llm_custom_operators():
    lib = official._portable_lib()
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 - registers them

    llm = {n for n in lib._get_operator_names() if n.startswith(("llama::", "preprocess::"))}
    assert len(llm) == 11
    missing = sorted(llm - set(operator_names()))
    # The mixture-of-experts FFN reads packed 4/8-bit expert weights: not yet supported.
    assert missing == ["llama::quantized_moe_ffn.out"], f"LLM operators without a kernel: {missing}"


def test_covers_every_official_quantized_operator():
    lib = official._portable_lib()
    import executorch.kernels.quantized  # noqa: F401 - registers the official quantized kernels

    quantized = {n for n in lib._get_operator_names() if n.startswith("quantized_decomposed::")}
    assert len(quantized) == 19
    missing = sorted(quantized - set(operator_names()))
    assert missing == [], f"quantized operators without a kernel: {missing}"
