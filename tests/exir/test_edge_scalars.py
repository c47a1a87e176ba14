"""A Python scalar where an operator takes a tensor is, in the edge graph, the official
one's form: a lifted constant of the scalar's own dtype (``_lifted_tensor_constant<N>``,
numbered after the method's buffers, before the user inputs or first of all) cast to
the promoted dtype by ``_to_dim_order_copy``; ``to_executorch`` folds the cast."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.exir import EdgeCompileConfig, to_edge
from pyexecutorch.exir.graph_utils import graph_modules
from pyexecutorch.exir.passes.constant_prop_pass import constant_prop_pass
from tests import official


class _AddInt(torch.nn.Module):
    def forward(self, x):
        return x + 3


class _NoUserInputs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("a", torch.ones(2))

    def forward(self):
        return 3 + self.a


class _IntTensor(torch.nn.Module):
    def forward(self, x):
        return x * 2 - 7


class _ScalarInBranch(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, pred, x):
        return torch.cond(
            pred, lambda v: self.linear(v) + (v + 1), lambda v: self.linear(v) - (v - 1), [x]
        )


CASES = {
    "add_int": (_AddInt(), lambda g: (torch.randn(2, 3, generator=g),)),
    "no_user_inputs": (_NoUserInputs(), lambda g: ()),
    "int_tensor": (_IntTensor(), lambda g: (torch.randint(-9, 9, (4,), generator=g).int(),)),
    "branch": (
        _ScalarInBranch(),
        lambda g: (torch.tensor(bool(torch.rand(1, generator=g) < 0.5)), torch.randn(3, 3)),
    ),
}


def _names(ep) -> list[list[str]]:
    return [[n.name for n in g.graph.nodes] for g in graph_modules(ep.graph_module)]


def _edge(case: str):
    model, make = CASES[case]
    args = make(torch.Generator().manual_seed(0))
    ep = torch.export.export(model, args, strict=True)
    config = EdgeCompileConfig(_check_ir_validity=False)
    return model, make, ep, config


@pytest.mark.parametrize("case", sorted(CASES))
def test_scalars_take_the_official_edge_form(case):
    from executorch import exir as official_exir  # noqa: PLC0415 - the oracle, slow to import

    model, make, ep, config = _edge(case)
    ours = to_edge(ep, compile_config=config).exported_program()
    theirs = official_exir.to_edge(ep, compile_config=config).exported_program()
    ours_names, theirs_names = _names(ours), _names(theirs)
    if case == "branch":  # the official re-trace renames the branches' get_attr nodes
        ours_names[0] = [n for n in ours_names[0] if not n.endswith("graph_0")]
        theirs_names[0] = [n for n in theirs_names[0] if not n.startswith("submodule_")]
        # and names a branch's scalar constant _tensor_constant0 (ours: _scalar_...)
        for names in (*ours_names[1:], *theirs_names[1:]):
            names[:] = ["constant" if "tensor_constant" in n else n for n in names]
    assert ours_names == theirs_names
    ours_inputs = [(s.arg.name, s.target) for s in ours.graph_signature.input_specs]
    assert ours_inputs == [(s.arg.name, s.target) for s in theirs.graph_signature.input_specs]
    # the lifted scalar keeps its own dtype and value (official: a state_dict buffer)
    for spec in ours.graph_signature.input_specs:
        if spec.target and spec.target.startswith("_lifted_tensor_constant"):
            value = ours.constants[spec.target]
            expected = theirs.state_dict[spec.target]
            assert value.dtype == expected.dtype and torch.equal(value, expected)
    # the edge graph runs (a branch's scalar too), and the program runs like eager
    program = to_edge(ep, compile_config=config).to_executorch()
    edge_module = ours.module()
    for seed in range(3):
        args = make(torch.Generator().manual_seed(seed))
        expected = model(*args)
        torch.testing.assert_close(edge_module(*args), expected)
        got = official.OfficialRunner(program.buffer).run(args)
        np.testing.assert_allclose(got[0], expected.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_the_cast_is_folded_at_to_executorch():
    _, _, ep, config = _edge("add_int")
    gm = to_edge(ep, compile_config=config).to_executorch().exported_program().graph_module
    assert [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"] == [
        "alloc",
        "add.out",
    ]


def test_constant_prop_names_its_results_as_the_official():
    _, _, ep, config = _edge("add_int")
    prop = constant_prop_pass(to_edge(ep, compile_config=config).exported_program())
    assert [s.target for s in prop.graph_signature.input_specs] == ["_prop_tensor_constant0", None]
    assert torch.equal(prop.constants["_prop_tensor_constant0"], torch.tensor(3.0))
