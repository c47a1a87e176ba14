"""Text generation with ``.pte`` LLMs, torch-free: the official Python runner's API
(``executorch.extension.llm.runner``) on pyexecutorch's runtime.

>>> from pyexecutorch.extension.llm.runner import TextLLMRunner, GenerationConfig
>>> runner = TextLLMRunner("llama.pte", "tokenizer.json")  # doctest: +SKIP
>>> runner.generate("Hello", GenerationConfig(max_new_tokens=16, temperature=0),
...                 token_callback=print)  # doctest: +SKIP

Tokenizers are read with the ``pytorch-tokenizers`` package (the ``llm`` extra).
"""

from pyexecutorch.extension.llm.runner.config import GenerationConfig, Stats
from pyexecutorch.extension.llm.runner.errors import (
    ContextLengthError,
    TokenizerError,
    UnsupportedProgramError,
)
from pyexecutorch.extension.llm.runner.program import ForwardLayout, ModelMetadata
from pyexecutorch.extension.llm.runner.sampling import Sampler
from pyexecutorch.extension.llm.runner.streaming import TextStreamer
from pyexecutorch.extension.llm.runner.text_runner import TextLLMRunner
from pyexecutorch.extension.llm.runner.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "ContextLengthError",
    "ForwardLayout",
    "GenerationConfig",
    "ModelMetadata",
    "Sampler",
    "Stats",
    "TextLLMRunner",
    "TextStreamer",
    "Tokenizer",
    "TokenizerError",
    "UnsupportedProgramError",
    "load_tokenizer",
]
