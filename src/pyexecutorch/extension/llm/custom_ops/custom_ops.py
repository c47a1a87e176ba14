"""The official module path of the ``llama::`` operators' torch side
(``executorch.extension.llm.custom_ops.custom_ops``): importing it defines them, as
importing the official one does. They are defined by the package itself
(:mod:`pyexecutorch.extension.llm.custom_ops`); its names are read here too."""

from pyexecutorch.extension.llm.custom_ops import NAMESPACE, SCHEMAS, define_ops, is_defined

__all__ = ["NAMESPACE", "SCHEMAS", "define_ops", "is_defined"]
