"""What the runtime may rely on about primitive operators (see
:class:`pyexecutorch.kernels.registry.OperatorFacts`)."""

from pyexecutorch.kernels.registry import declare

# executorch_prim's scalar arithmetic (kernels in prim.py) on Python ints, floats and bools.
SCALAR_ARITHMETIC = tuple(
    f"executorch_prim::{op}"
    for op in (
        "add.Scalar", "sub.Scalar", "mul.Scalar", "eq.Scalar", "gt.Scalar", "ge.Scalar",
        "lt.Scalar", "le.Scalar", "truediv.Scalar", "floordiv.Scalar", "floordiv.int",
        "mod.Scalar", "mod.int", "neg.Scalar", "ceil.Scalar", "trunc.Scalar", "round.Scalar",
        "sym_int.Scalar", "sym_float.Scalar", "sym_max.Scalar", "sym_min.Scalar",
        "sym_not.Scalar", "sym_ite.Scalar",
    )
)  # fmt: skip
SIZES = ("aten::sym_size.int", "aten::sym_numel")

# Their kernels take the program's output value as their last argument and return its new
# value (no separate return slot), as do those of scalars read from tensors.
declare(*SCALAR_ARITHMETIC, *SIZES, "aten::_local_scalar_dense", stack_style=True)
# What they compute follows from sizes and scalars alone: constants of a static plan.
declare(*SCALAR_ARITHMETIC, *SIZES, computes_sizes=True)
# A scalar read from a tensor's data (an LLM's start position): it stays live in a static plan.
declare("aten::_local_scalar_dense", reads_scalar=True)
