"""Exporting Hugging Face causal LMs to ``.pte`` programs the LLM runners drive.

>>> from pyexecutorch.extension.llm.export import export_llm
>>> et = export_llm("my-llama/", qmode="8da4w", output="llama.pte")  # doctest: +SKIP

Modules, one step each: :mod:`.config` (the options, named as in the official
``export_llm``), :mod:`.source` (loading and checking the model), :mod:`.attention`
(static KV caches through ``transformers.AttentionInterface``), :mod:`.program` (the
exported ``forward`` and the constant methods), :mod:`.quantize` (torchao),
:mod:`.recipe` (the pipeline) and :mod:`.progress` (its log).
"""

from pyexecutorch.extension.llm.export.config import ExportLlmConfig, ExportLlmConfigError
from pyexecutorch.extension.llm.export.recipe import STAGES, export_llm
from pyexecutorch.extension.llm.export.source import (
    SUPPORTED,
    ModelSourceError,
    UnsupportedArchitectureError,
)

__all__ = [
    "STAGES",
    "SUPPORTED",
    "ExportLlmConfig",
    "ExportLlmConfigError",
    "ModelSourceError",
    "UnsupportedArchitectureError",
    "export_llm",
]
