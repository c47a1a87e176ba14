"""The suite's models lowered through the example backend, with
``to_edge_transform_and_lower`` and with ``to_edge(...).to_backend(...)``, run in
pyexecutorch's runtime and compared with torch eager."""

from __future__ import annotations

import pytest

from pyexecutorch.exir import ExecutorchBackendConfig
from pyexecutorch.exir.backend import executorch_call_delegate, get_delegation_info
from pyexecutorch.exir.error import op_name
from pyexecutorch.exir.graph_utils import graph_modules
from pyexecutorch.schema import DelegateCall, decode_pte
from tests import models
from tests.exir._delegation_support import FLOWS, check_runs_like_eager, lower

# Models the example backend takes completely (every operator node delegated).
WHOLE = {"mlp", "dynamic_batch", "multi_method"}
# Models with no float32 operator the example backend supports.
NONE = {"pooling", "norms", "indexing", "reductions", "argmax_topk", "int_arith"}
NONE |= {"int_remainder", "float16", "conv_transpose_upsample"}


@pytest.mark.parametrize("flow", FLOWS)
@pytest.mark.parametrize("case", models.CASES, ids=[c.name for c in models.CASES])
def test_lowered_model_matches_eager(case: models.ModelCase, flow: str):
    edge = lower(case, flow)
    n_calls = 0
    for method in edge.methods:
        gm = edge.exported_program(method).graph_module
        info = get_delegation_info(gm)
        n_calls += info.num_delegated_subgraphs
        if case.name in WHOLE:
            assert info.num_delegated_subgraphs >= 1, method
            assert info.num_non_delegated_nodes == 0, info.summary()
        if case.name in NONE:
            assert info.num_delegated_subgraphs == 0, info.summary()
    if case.name not in NONE:
        assert n_calls > 0
    et = edge.to_executorch(ExecutorchBackendConfig(**case.backend_options))
    pte = decode_pte(et.buffer)
    plans = pte.program.execution_plan
    assert sum(len(p.delegates) for p in plans) == n_calls
    instructions = [i.instr_args for p in plans for c in p.chains for i in c.instructions]
    assert sum(isinstance(a, DelegateCall) for a in instructions) == n_calls
    check_runs_like_eager(case, et.buffer)


@pytest.mark.parametrize("flow", FLOWS)
def test_nested_delegates_inside_cond(flow: str):
    case = models.get_case("cond")
    edge = lower(case, flow)
    gm = edge.exported_program().graph_module

    def calls(g):  # noqa: ANN001, ANN202
        return [op_name(n.target) for n in g.graph.nodes if n.op == "call_function"]

    assert "executorch_call_delegate" not in calls(gm)  # sum and gt stay outside
    true_branch, false_branch = list(graph_modules(gm))[1:]
    # linear (or permute + addmm) and relu: one delegate; x * -2.0 then sin: mul delegated.
    assert calls(true_branch) == ["executorch_call_delegate", "getitem"]
    assert calls(false_branch) == ["executorch_call_delegate", "getitem", "aten.sin.default"]
    for branch in (true_branch, false_branch):
        (call,) = [n for n in branch.graph.nodes if n.target is executorch_call_delegate]
        assert getattr(branch, call.args[0].target).backend_id == "ExampleBackend"
    check_runs_like_eager(case, edge.to_executorch().buffer)
