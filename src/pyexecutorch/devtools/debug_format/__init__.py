"""A graph as developer tools show it (``executorch.devtools.debug_format``):
:mod:`.base_schema` holds the generic operator graph, :mod:`.et_schema` builds one
from a torch.fx graph (needs torch)."""
