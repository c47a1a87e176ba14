"""The graph passes XNNPACK's ``preprocess`` runs on a partition before serializing.

Each pass is a function of one :class:`~.common.PassContext` (the partition's
graph module and exported program) that rewrites the graph in place:

0. :func:`convert_to_linear`: ``addmm``/``mm`` on a transposed constant (or
   dequantized constant) weight become ``linear`` (a fully connected node on the
   weight as stored); :func:`fold_linear_reshapes`: the reshapes around a
   decomposed rank > 2 ``nn.Linear`` go (the fully connected node takes any rank).
   First, so that the quantization passes see the linears they know.
1. :func:`fold_quantization`: quantize/dequantize pairs become the quantization
   parameters of values (see :mod:`.quantized`).
   :func:`remove_copies`: clones that keep the dim order are dropped.
2. :func:`fuse_batch_norm`: an eval batch norm after a convolution or linear
   is folded into that node's weight and bias.
3. :func:`fold_constants`: nodes computed from constants only (permutes and
   reshapes of weights) become constants.
4. :func:`fuse_activation`: relu/hardtanh after a convolution, linear, add,
   sub or mul become that node's ``output_min_max``.
5. :func:`plan_layouts`: which values live channels-last (NHWC), so that a run
   of convolutions has no transposes between them.

Every node keeps ``meta["xnn_sources"]``, the debug handles of the edge nodes
folded into it, from which ``debug_handle_map`` is written.
"""

from typing import Any

from pyexecutorch.backends.xnnpack._passes.channels_last import plan_layouts
from pyexecutorch.backends.xnnpack._passes.common import PassContext, sources
from pyexecutorch.backends.xnnpack._passes.fold_constants import fold_constants
from pyexecutorch.backends.xnnpack._passes.fuse_activation import fuse_activation
from pyexecutorch.backends.xnnpack._passes.fuse_batch_norm import fuse_batch_norm
from pyexecutorch.backends.xnnpack._passes.linear import convert_to_linear, fold_linear_reshapes
from pyexecutorch.backends.xnnpack._passes.quantized import fold_quantization
from pyexecutorch.backends.xnnpack._passes.remove_copies import remove_copies

PASSES = (
    convert_to_linear,
    fold_linear_reshapes,
    fold_quantization,
    remove_copies,
    fuse_batch_norm,
    fold_constants,
    fuse_activation,
    plan_layouts,
)


def run_passes(ctx: PassContext) -> None:
    """Every pass of :data:`PASSES`, in order."""
    for p in PASSES:
        p(ctx)
    ctx.gm.graph.eliminate_dead_code()


__all__ = [
    "PASSES",
    "XNNPACKPassManager",
    "PassContext",
    "convert_to_linear",
    "fold_constants",
    "fold_linear_reshapes",
    "fuse_activation",
    "fuse_batch_norm",
    "plan_layouts",
    "remove_copies",
    "run_passes",
    "sources",
]


class XNNPACKPassManager:
    """Runs given passes over a whole exported program (the official pass manager's
    calling convention): ``XNNPACKPassManager(ep, [PassClass, ...]).transform()``.

    The XNNPACK rewrites of :data:`PASSES` work on one partition inside
    ``XnnpackBackend.preprocess`` (their results are XNNPACK's own node forms, not
    an exported program), so this manager has no default list: name the passes."""

    def __init__(self, exported_program: Any, passes: list[Any] | None = None) -> None:
        if not passes:
            raise ValueError(
                "XNNPACKPassManager: name the passes to run; pyexecutorch's XNNPACK graph "
                "passes run on each partition inside XnnpackBackend.preprocess"
            )
        self.exported_program = exported_program
        self.passes = list(passes)

    def transform(self) -> Any:
        """The program after each pass in turn (a pass class is instantiated first)."""
        from pyexecutorch.exir.program._program import _transform  # noqa: PLC0415

        program = self.exported_program
        for p in self.passes:
            program = _transform(program, p() if isinstance(p, type) else p)
        return program
