"""Large language models: :mod:`pyexecutorch.extension.llm.runner` generates text
from a ``.pte`` exported by the official tooling (or ours), without torch;
:mod:`pyexecutorch.extension.llm.export` exports Hugging Face causal LMs (with
torch), calling the ``llama::`` operators that :mod:`.custom_ops` defines."""
