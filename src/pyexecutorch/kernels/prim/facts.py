"""What the runtime may rely on about primitive operators (see
:class:`pyexecutorch.kernels.registry.OperatorFacts`)."""

from pyexecutorch.kernels.registry import declare

# Scalars read from tensors: like executorch_prim's operators, their kernels take the
# program's output value as their last argument and return its new value (no separate
# return slot).
declare("aten::sym_size.int", "aten::sym_numel", "aten::_local_scalar_dense", stack_style=True)
