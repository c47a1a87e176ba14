"""Edge graphs name their nodes as the official ``to_edge`` does (after their targets,
numbered afresh in graph order): scripts that look nodes up by name
(``buffers_to_mutate["aten_add_tensor_1"]``) port unchanged."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.export import Dim

from pyexecutorch.exir import to_edge
from pyexecutorch.exir.graph_utils import graph_modules


class _State(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(1))

    def forward(self, x):
        y = x + self.state
        self.state.add_(x)
        return y


class _Split(torch.nn.Module):
    def forward(self, x):
        a, b = torch.split(torch.relu(x), 2, dim=1)
        return a * b, b.max(dim=1)


class _Dynamic(torch.nn.Module):
    def forward(self, x):
        return x.view(x.shape[0], -1).sum(0) + x.to(torch.float16).float().mean()


class _Cond(torch.nn.Module):
    def forward(self, x, y):
        return torch.cond(x.sum() > 0, lambda x, y: x + y, lambda x, y: x - y, (x, y))


CASES = {
    "state": (_State(), (torch.zeros(1),), None),
    "split": (_Split(), (torch.randn(2, 4, 3),), None),
    "dynamic": (_Dynamic(), (torch.randn(4, 2, 3),), ({0: Dim("b", max=10)},)),
    "cond": (_Cond(), (torch.randn(3), torch.randn(3)), None),
}


def _names(ep) -> list[list[str]]:
    return [[n.name for n in g.graph.nodes] for g in graph_modules(ep.graph_module)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_node_names_are_the_official_ones(case):
    from executorch import exir as official_exir  # noqa: PLC0415 - the oracle, slow to import

    model, args, dynamic = CASES[case]
    ep = torch.export.export(model, args, dynamic_shapes=dynamic, strict=True)
    ours = to_edge(ep).exported_program()
    theirs = official_exir.to_edge(ep).exported_program()
    ours_names, theirs_names = _names(ours), _names(theirs)
    if case == "cond":  # the official re-trace also renames the branches' get_attr nodes
        ours_names[0] = [n for n in ours_names[0] if not n.endswith("graph_0")]
        theirs_names[0] = [n for n in theirs_names[0] if not n.startswith("submodule_")]
    assert ours_names == theirs_names
    assert ours.graph_signature == theirs.graph_signature
    # Several calls of the renamed graph still compute the model (state included).
    renamed, eager = ours.module(), copy.deepcopy(model)
    for seed in range(2):
        g = torch.Generator().manual_seed(seed)
        inputs = tuple(torch.randn(a.shape, generator=g) for a in args)
        torch.testing.assert_close(renamed(*inputs), eager(*inputs))


def test_mutated_buffer_is_found_by_its_official_name():
    ep = torch.export.export(_State(), (torch.zeros(1),), strict=True)
    signature = to_edge(ep).exported_program().graph_signature
    assert signature.buffers_to_mutate == {"aten_add_tensor_1": "state"}
    assert tuple(signature.user_outputs) == ("aten_add_tensor",)
