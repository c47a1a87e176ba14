"""What the runtime may rely on about indexing operators (see
:class:`pyexecutorch.kernels.registry.OperatorFacts`)."""

from pyexecutorch.kernels.registry import declare

# Output sizes that depend on the inputs' values (counts of true or nonzero elements), and
# for index.Tensor when one of its indices is a boolean mask.
declare("aten::nonzero.out", "aten::masked_select.out", shape_from_data="always")
declare("aten::index.Tensor_out", shape_from_data="boolean_mask")
