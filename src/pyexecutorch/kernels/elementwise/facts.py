"""What the runtime's compiled lowering may rely on about elementwise operators (see
:class:`pyexecutorch.kernels.registry.OperatorFacts`)."""

from pyexecutorch.kernels.elementwise.formulas import FORMULAS
from pyexecutorch.kernels.registry import declare

# Every operator with a scalar formula may run on channels-last operands: its output and
# its same-shape operands in one layout.
declare(*FORMULAS, layout="elementwise")
