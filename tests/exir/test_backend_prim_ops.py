"""The backend dialect's ``executorch_prim`` operators: ``EdgeToBackendOpsPass`` turns a
graph's Python symbolic-int operations into them, as the official pass does, and the
program still runs like eager (ours and the official runtime)."""

from __future__ import annotations

import copy
import operator
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.export import Dim

from pyexecutorch.exir import EdgeCompileConfig, to_edge
from pyexecutorch.exir.dialects._ops import ops as exir_ops
from pyexecutorch.exir.dialects.backend._ops import prim_operator
from pyexecutorch.exir.passes.replace_edge_with_backend_pass import EdgeToBackendOpsPass
from tests import official


class _SizeArithmetic(torch.nn.Module):
    def forward(self, x):
        return torch.add(x, x.shape[0] - 1) * (x.shape[0] * 2 // 3)


def _transformed():
    ep = torch.export.export(
        _SizeArithmetic(),
        (torch.ones(3, 2),),
        dynamic_shapes={"x": {0: Dim("n", max=6)}},
        strict=True,
    )
    edge = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.transform([EdgeToBackendOpsPass()])


def test_symbolic_int_operations_become_executorch_prim_operators():
    gm = _transformed().exported_program().graph_module
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    prims = [t for t in targets if type(t).__name__ == "PrimOperator"]
    assert [p.name() for p in prims] == [
        "executorch_prim::sub.Scalar",
        "executorch_prim::mul.Scalar",
        "executorch_prim::floordiv.Scalar",
    ]
    assert not any(
        t in (operator.sub, operator.mul, operator.floordiv) for t in targets if t not in prims
    )
    assert "pyexecutorch_exir_dialects_backend__ops_executorch_prim_sub_Scalar(sym_size" in gm.code
    assert "operator.sub" not in gm.code
    # the namespace, identity, equality with the Python operation, copies and pickles
    sub = exir_ops.backend.executorch_prim.sub.Scalar
    assert sub is prim_operator("sub") and sub == operator.sub and hash(sub) == hash(operator.sub)
    assert copy.deepcopy(sub) is sub and pickle.loads(pickle.dumps(sub)) is sub
    assert sub(7, 2) == 5
    assert exir_ops.backend.aten.add.Tensor is exir_ops.edge.aten.add.Tensor
    with pytest.raises(AttributeError, match="no operator executorch_prim.frobnicate"):
        exir_ops.backend.executorch_prim.frobnicate  # noqa: B018


def test_export_pass_retraces_backend_operators_keeping_symbolic_sizes():
    from pyexecutorch.exir.pass_base import ExportPass

    retraced = _transformed().transform([ExportPass()]).exported_program().graph_module
    prims = [n for n in retraced.graph.nodes if type(n.target).__name__ == "PrimOperator"]
    assert [n.target.name() for n in prims] == [
        "executorch_prim::sub.Scalar",
        "executorch_prim::mul.Scalar",
        "executorch_prim::floordiv.Scalar",
    ]
    *_, last, _output = retraced.graph.nodes
    size = last.meta["val"].shape[0]
    assert isinstance(size, torch.SymInt) and size.node.expr.free_symbols


def test_program_with_backend_operators_runs_like_eager():
    from pyexecutorch.portable_lib import _load_for_executorch_from_buffer

    program = _transformed().to_executorch()
    ours = _load_for_executorch_from_buffer(program.buffer)
    theirs = official.OfficialRunner(program.buffer)
    for rows in (3, 1, 6, 4):
        x = torch.randn(rows, 2)
        expected = _SizeArithmetic()(x)
        assert torch.equal(ours.forward((x,))[0], expected)
        np.testing.assert_array_equal(theirs.run((x,))[0], expected.numpy())


@pytest.mark.parametrize("first", ["pyexecutorch", "executorch"])
def test_no_operator_library_clash_with_the_official_package(first):
    # The official package defines the executorch_prim torch library (DEF); ours defines
    # none, so either package may be imported first.
    ours = (
        "from pyexecutorch.exir.dialects._ops import ops; "
        "from pyexecutorch.exir.passes.replace_edge_with_backend_pass import EdgeToBackendOpsPass; "
        "assert ops.backend.executorch_prim.sub.Scalar(5, 2) == 3"
    )
    theirs = (
        "import executorch.exir.passes.executorch_prim_ops_registry; import torch; "
        "assert torch.ops.executorch_prim.sub.Scalar(5, 2) == 3"
    )
    code = "; ".join([ours, theirs] if first == "pyexecutorch" else [theirs, ours])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
