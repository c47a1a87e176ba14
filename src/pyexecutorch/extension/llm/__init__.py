"""Large language models: :mod:`pyexecutorch.extension.llm.runner` generates text
from a ``.pte`` exported by the official tooling (or ours), without torch."""
